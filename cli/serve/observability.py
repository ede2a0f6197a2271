"""Request ids, one structured access-log line per request, and Prometheus metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mellea.core.trace import ProgramTrace

access_log = logging.getLogger("mellea.access")

# The current request's record: filled in along the way, logged when the response ends.
current_request: ContextVar[dict[str, Any] | None] = ContextVar("current_request", default=None)

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:/=+-]{1,128}$")
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 8, 10, 16, 32)
MAX_REQUIREMENT_LABELS = 64  # distinct requirement labels; more share OTHER_REQUIREMENT
REQUIREMENT_LABEL_CHARS = 80
OTHER_REQUIREMENT = "(other)"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class RequestIdFilter(logging.Filter):
    """Stamps every log record with the id of the request being served (or ``-``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = current_request.get()
        record.request_id = current["request_id"] if current else "-"
        return True


class ServerMetrics:
    """The server's Prometheus metrics, in a registry of its own (one per app)."""

    def __init__(self, engine_stats: Callable[[], dict[str, dict[str, Any]]] | None = None) -> None:
        """``engine_stats`` reports the app's local engines (its runtime's), by model."""
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "m_serve_requests",
            "Requests served, by route and status.",
            ["route", "status"],
            registry=r,
        )
        self.in_flight = Gauge("m_serve_requests_in_flight", "Requests being served.", registry=r)
        self.queue_depth = Gauge(
            "m_serve_queue_depth", "Requests waiting for a concurrency slot.", registry=r
        )
        self.duration = Histogram(
            "m_serve_request_duration_seconds",
            "End-to-end request latency.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "m_serve_time_to_first_token_seconds",
            "Time from request to the first streamed content.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "m_serve_inter_token_latency_seconds",
            "Time between streamed content deltas.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.prompt_tokens = Counter(
            "m_serve_prompt_tokens", "Prompt tokens processed.", registry=r
        )
        self.completion_tokens = Counter(
            "m_serve_completion_tokens", "Completion tokens generated.", registry=r
        )
        self.attempts = Histogram(
            "m_serve_program_attempts",
            "Attempts a program's sampling strategy made, per sampling run.",
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.requirement_checks = Counter(
            "m_serve_requirement_checks",
            "Requirement verdicts on attempts, by requirement and result.",
            ["requirement", "result"],
            registry=r,
        )
        self.requirement_labels: set[str] = set()
        if engine_stats is not None:
            r.register(_EngineCollector(engine_stats))

    def requirement_label(self, description: str | None) -> str:
        """A bounded label for a requirement: its (shortened) description, the first
        :data:`MAX_REQUIREMENT_LABELS` of them; later new ones share ``(other)``."""
        label = (description or "(unnamed)").strip()[:REQUIREMENT_LABEL_CHARS]
        if label in self.requirement_labels:
            return label
        if len(self.requirement_labels) >= MAX_REQUIREMENT_LABELS:
            return OTHER_REQUIREMENT
        self.requirement_labels.add(label)
        return label


class _EngineCollector:
    """KV-cache and prefix-cache figures of the app's local engines."""

    def __init__(self, engine_stats: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self.engine_stats = engine_stats

    def collect(self) -> Any:
        used = GaugeMetricFamily(
            "m_serve_kv_cache_blocks_used", "KV-cache blocks in use.", labels=["model"]
        )
        free = GaugeMetricFamily(
            "m_serve_kv_cache_blocks_free", "KV-cache blocks free.", labels=["model"]
        )
        hit = GaugeMetricFamily(
            "m_serve_prefix_cache_hit_rate",
            "Share of prompt tokens served from the prefix cache.",
            labels=["model"],
        )
        requests = GaugeMetricFamily(
            "m_serve_engine_requests",
            "Requests inside the local engine, running or waiting for KV blocks.",
            labels=["model", "state"],
        )
        for model, stats in self.engine_stats().items():
            if "kv_blocks_used" in stats:
                used.add_metric([model], stats["kv_blocks_used"])
                free.add_metric([model], stats.get("kv_blocks_free", 0))
            queried = stats.get("prefix_cache_query_tokens", 0)
            if queried:
                hit.add_metric([model], stats.get("prefix_cache_hit_tokens", 0) / queried)
            for state in ("running", "waiting"):
                if state in stats:
                    requests.add_metric([model, state], stats[state])
        yield from (used, free, hit, requests)


class StreamTimer:
    """Observes one streamed reply: time to first token, gaps between deltas, token counts."""

    def __init__(self, metrics: ServerMetrics, started: float) -> None:
        self.metrics = metrics
        self.started = started
        self.last: float | None = None

    def on_content(self) -> None:
        """A content delta went out."""
        now = time.monotonic()
        if self.last is None:
            self.metrics.ttft.observe(now - self.started)
        else:
            self.metrics.itl.observe(now - self.last)
        self.last = now

    def on_finish(self, usage: Any) -> None:
        """The reply is complete; ``usage`` is its wire ``Usage`` (or None)."""
        record_usage(self.metrics, usage)


def record_usage(metrics: ServerMetrics, usage: Any) -> None:
    """Count a reply's tokens and note them in the access-log record."""
    if usage is None:
        return
    metrics.prompt_tokens.inc(usage.prompt_tokens)
    metrics.completion_tokens.inc(usage.completion_tokens)
    record = current_request.get()
    if record is not None:
        record["prompt_tokens"] = usage.prompt_tokens
        record["completion_tokens"] = usage.completion_tokens


def record_program(metrics: ServerMetrics, trace: ProgramTrace) -> None:
    """Count a finished program run's attempts and requirement verdicts."""
    attempts = 0
    for sampling in trace.samplings:
        metrics.attempts.observe(len(sampling.attempts))
        attempts += len(sampling.attempts)
        for attempt in sampling.attempts:
            for verdict in attempt.verdicts:
                label = metrics.requirement_label(verdict.description)
                result = "passed" if verdict.passed else "failed"
                metrics.requirement_checks.labels(label, result).inc()
    record = current_request.get()
    if record is not None and attempts:
        record["attempts"] = record.get("attempts", 0) + attempts


def count_program(metrics: ServerMetrics, task: asyncio.Future[Any], trace: ProgramTrace) -> None:
    """Record ``trace`` in the metrics once the program call ``task`` has returned."""

    def done(finished: asyncio.Future[Any]) -> None:
        if not finished.cancelled() and finished.exception() is None:
            record_program(metrics, trace)

    task.add_done_callback(done)


class RequestContext:
    """Outermost middleware: request id in and out, metrics, and the access-log line."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope.get("headers", [])).get(b"x-request-id", b"").decode("latin-1")
        request_id = sent if _SAFE_ID.match(sent) else f"req_{uuid.uuid4().hex}"
        record: dict[str, Any] = {
            "request_id": request_id,
            "method": scope["method"],
            "route": scope["path"],
            "status": None,
        }
        token = current_request.set(record)
        started = time.monotonic()
        scope.setdefault("state", {})["started"] = started

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                record["status"] = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            duration = time.monotonic() - started
            status = record["status"] or 500
            route = _route_label(scope)
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.duration.labels(route).observe(duration)
            record["duration_ms"] = round(duration * 1000, 1)
            access_log.info(json.dumps(record, ensure_ascii=False))
            current_request.reset(token)


def _route_label(scope: Scope) -> str:
    """The route template, so unknown paths do not explode the label set."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
