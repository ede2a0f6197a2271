"""OpenTelemetry spans of a program request, seen by an in-memory span exporter.

The app runs in this process (so the exporter can be read) on a real loopback socket,
serving the scripted rejection-sampling program.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from cli.serve.app import create_app
from cli.serve.program import Program
from cli.serve.settings import ServeSettings
from tests.programs.events_sampler import JUDGE_PROMPT_TOKENS, PROMPT_TOKENS
from tests.server import PROGRAMS, free_port, sse_events

sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

PROGRAM = PROGRAMS / "events_sampler.py"
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[str, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = ServeSettings(program=str(PROGRAM), model_name="sampler")
    app = create_app(Program.load(PROGRAM), settings, tracer=provider.get_tracer("test"))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    yield base, exporter
    server.should_exit = True
    thread.join(timeout=10)


def _spans_of(exporter: InMemorySpanExporter, trace_id: str) -> list:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        spans = [
            s for s in exporter.get_finished_spans() if f"{s.context.trace_id:032x}" == trace_id
        ]
        if any(s.name.startswith("POST ") for s in spans):
            return spans
        time.sleep(0.02)
    raise AssertionError("the request span never ended")


def test_span_tree_of_a_sampled_chat_request(traced):
    base, exporter = traced
    headers = {"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"}
    reply = httpx.post(
        f"{base}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "sampled spans"}]},
        headers=headers,
        timeout=30,
    )
    assert reply.status_code == 200
    assert reply.headers["x-trace-id"] == PARENT_TRACE  # the caller's trace goes on
    spans = _spans_of(exporter, PARENT_TRACE)
    by_name: dict[str, list] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (request,) = by_name["POST /v1/chat/completions"]
    assert f"{request.parent.span_id:016x}" == PARENT_SPAN
    assert request.attributes["http.response.status_code"] == 200
    (program,) = by_name["invoke_agent sampler"]
    assert program.parent.span_id == request.context.span_id
    assert program.attributes["mellea.attempt_count"] == 2
    assert program.attributes["mellea.requirements_met"] is True
    calls = by_name["chat scripted"]
    assert all(c.parent.span_id == program.context.span_id for c in calls)
    described = sorted(
        (c.attributes["mellea.purpose"], c.attributes["mellea.attempt"]) for c in calls
    )
    assert described == [("attempt", 0), ("attempt", 1), ("requirement", 0), ("requirement", 1)]
    for call in calls:
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.request.model"] == "scripted"
        assert call.attributes["gen_ai.response.time_to_first_token"] > 0
        assert call.end_time > call.start_time
    inputs = sorted(c.attributes["gen_ai.usage.input_tokens"] for c in calls)
    assert inputs == [PROMPT_TOKENS] * 2 + [JUDGE_PROMPT_TOKENS] * 2
    checks = by_name["check_requirement"]
    assert all(c.parent.span_id == program.context.span_id for c in checks)
    verdicts = sorted(
        (
            c.attributes["mellea.attempt"],
            c.attributes["mellea.requirement"],
            c.attributes["mellea.requirement.passed"],
        )
        for c in checks
    )
    assert verdicts == [
        (0, "Be polite", True),
        (0, "Start with 'Hi Bob!'", False),
        (1, "Be polite", True),
        (1, "Start with 'Hi Bob!'", True),
    ]


def test_streamed_responses_request_is_traced_without_a_parent(traced):
    base, exporter = traced
    body = {"model": "sampler", "input": "plain words", "stream": True}
    with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=30) as response:
        trace_id = response.headers["x-trace-id"]
        events = [json.loads(p) for p in sse_events(response.iter_lines())]
    assert events[-1]["type"] == "response.completed"
    spans = _spans_of(exporter, trace_id)
    (request,) = [s for s in spans if s.name == "POST /v1/responses"]
    assert request.parent is None
    (call,) = [s for s in spans if s.name == "chat scripted"]
    assert call.attributes["mellea.purpose"] == "generate"
    assert call.attributes["gen_ai.usage.output_tokens"] == 8


def test_untraced_routes_make_no_spans(traced):
    base, exporter = traced
    exporter.clear()
    assert "x-trace-id" not in httpx.get(f"{base}/v1/models").headers
    assert exporter.get_finished_spans() == ()


@pytest.mark.e2e  # starts `m serve` subprocesses
def test_otlp_variables_turn_tracing_on_in_m_serve():
    from tests.server import serve

    dead_end = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    with serve(PROGRAM, env=dead_end) as server:
        reply = httpx.post(
            f"{server.base_url}/v1/completions", json={"prompt": "plain x"}, timeout=30
        )
        assert reply.status_code == 200
        assert len(reply.headers["x-trace-id"]) == 32
    with serve(PROGRAM) as server:
        reply = httpx.post(
            f"{server.base_url}/v1/completions", json={"prompt": "plain x"}, timeout=30
        )
        assert reply.status_code == 200
        assert "x-trace-id" not in reply.headers
