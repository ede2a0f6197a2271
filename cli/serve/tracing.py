"""OpenTelemetry spans for the program requests a server answers.

Only when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``)
variable is set, and the ``opentelemetry-sdk`` and OTLP exporter packages are installed
(``pip install 'mellea[otel]'``), does the server trace; otherwise none of this runs.

Each ``POST /v1/...`` request gets a server span (continuing an incoming
``traceparent``; the response's ``X-Trace-Id`` header names the trace). Under it, for
every program run of the request, an ``invoke_agent`` span, and under that one span per
model call (GenAI conventions: operation, model, token usage, time to first token) and
one per requirement check. The model-call and check spans are written from the program
trace when the request ends, with the times the trace noted.
"""

from __future__ import annotations

import logging
import os
import time
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mellea.core.trace import ModelCall, ProgramTrace, Verdict

log = logging.getLogger("mellea.serve")

OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
TRACE_ID_HEADER = "x-trace-id"

# The program traces of the request being traced (None when the request is not traced).
_request_traces: ContextVar[list[tuple[ProgramTrace, str]] | None] = ContextVar(
    "request_program_traces", default=None
)


def tracer_from_env() -> Any | None:
    """A tracer exporting over OTLP when ``OTEL_EXPORTER_OTLP_*`` says where (and
    ``OTEL_SDK_DISABLED`` is not ``true``); else ``None``."""
    if not any(os.environ.get(name) for name in OTLP_VARIABLES):
        return None
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_* is set but opentelemetry-sdk and "
            "opentelemetry-exporter-otlp-proto-http are not installed: no spans"
        )
        return None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "m-serve")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider.get_tracer("mellea.serve")


def new_trace(live: bool, program: str) -> ProgramTrace:
    """The program trace for one program run; a traced request notes it for its spans.

    ``program`` names the served program (the model name) on its span.
    """
    traces = _request_traces.get()
    trace = ProgramTrace(live=live, timed=traces is not None)
    if traces is not None:
        traces.append((trace, program))
    return trace


class Tracing:
    """ASGI middleware: a server span per ``POST /v1/...`` request, and its program spans."""

    def __init__(self, app: ASGIApp, tracer: Any) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not scope["path"].startswith("/v1/")
        ):
            await self.app(scope, receive, send)
            return
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind, Status, StatusCode

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        span = self.tracer.start_span(
            f"POST {scope['path']}",
            context=propagate.extract(headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "url.path": scope["path"]},
        )
        trace_id = format(span.get_span_context().trace_id, "032x")
        traces: list[tuple[ProgramTrace, str]] = []
        token = _request_traces.set(traces)
        status = 500

        async def send_with_trace(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), (b"x-trace-id", trace_id.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_trace)
        finally:
            _request_traces.reset(token)
            for trace, program in traces:
                _program_spans(self.tracer, span, trace, program)
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()


def _program_spans(tracer: Any, parent: Any, trace: ProgramTrace, program: str) -> None:
    """The spans of one program run, from what its trace noted."""
    from opentelemetry.trace import set_span_in_context

    now = time.time_ns()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": program,
    }
    if trace.samplings:
        last = trace.samplings[-1]
        attributes["mellea.attempt_count"] = len(last.attempts)
        if last.success is not None:
            attributes["mellea.requirements_met"] = last.success
    span = tracer.start_span(
        f"invoke_agent {program}",
        context=set_span_in_context(parent),
        start_time=trace.started_ns,
        attributes=attributes,
    )
    inside = set_span_in_context(span)
    for call in trace.calls:
        _call_span(tracer, inside, call, now)
    for sampling in trace.samplings:
        for attempt in sampling.attempts:
            for verdict in attempt.verdicts:
                _check_span(tracer, inside, verdict, attempt.index, now)
    span.end(end_time=trace.returned_ns or now)


def _call_span(tracer: Any, context: Any, call: ModelCall, now: int) -> None:
    usage = call.usage or {}
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "mellea.purpose": call.purpose}
    if call.model:
        attributes["gen_ai.request.model"] = call.model
    if "prompt_tokens" in usage:
        attributes["gen_ai.usage.input_tokens"] = int(usage["prompt_tokens"])
    if "completion_tokens" in usage:
        attributes["gen_ai.usage.output_tokens"] = int(usage["completion_tokens"])
    if call.thunk.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = [call.thunk.finish_reason]
    if call.first_token_ns is not None:
        attributes["gen_ai.response.time_to_first_token"] = (
            call.first_token_ns - call.started_ns
        ) / 1e9
    if call.attempt is not None:
        attributes["mellea.attempt"] = call.attempt
    if call.requirement is not None:
        attributes["mellea.requirement"] = call.requirement
    span = tracer.start_span(
        f"chat {call.model or 'model'}",
        context=context,
        start_time=call.started_ns,
        attributes=attributes,
    )
    span.end(end_time=max(call.ended_ns or now, call.started_ns))


def _check_span(tracer: Any, context: Any, verdict: Verdict, attempt: int, now: int) -> None:
    attributes: dict[str, Any] = {
        "mellea.requirement": verdict.description or "",
        "mellea.requirement.passed": verdict.passed,
        "mellea.attempt": attempt,
    }
    if verdict.reason is not None:
        attributes["mellea.requirement.reason"] = verdict.reason[:500]
    if verdict.score is not None:
        attributes["mellea.requirement.score"] = float(verdict.score)
    ended = verdict.ended_ns or now
    span = tracer.start_span(
        "check_requirement",
        context=context,
        start_time=verdict.started_ns or ended,
        attributes=attributes,
    )
    span.end(end_time=ended)
