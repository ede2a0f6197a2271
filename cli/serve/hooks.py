"""What this server adds around each run of the program: trace spans and metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from cli.serve.observability import ServerMetrics, StreamTimer, count_program, record_usage
from cli.serve.tracing import new_trace
from mellea.core.trace import ProgramTrace
from mellea.serve.choice_reader import StreamObserver


class ServerHooks:
    """The request runner's hooks for one app (``mellea.serve.request_runner.RunHooks``)."""

    def __init__(self, metrics: ServerMetrics, model_name: str) -> None:
        """Hooks counting into ``metrics``; program spans name ``model_name``."""
        self.metrics = metrics
        self.model_name = model_name

    def new_trace(self, live: bool) -> ProgramTrace:
        """A trace the request's spans (when traced) will cover."""
        return new_trace(live, self.model_name)

    def program_started(self, task: asyncio.Future[Any], trace: ProgramTrace) -> None:
        """Count the program's attempts and verdicts once it returns."""
        count_program(self.metrics, task, trace)

    def observer(self, started: float, streamed: bool) -> StreamObserver:
        """A stream's latency and tokens; a whole reply's tokens."""
        return StreamTimer(self.metrics, started) if streamed else UsageRecorder(self.metrics)


class UsageRecorder:
    """The observer of a non-streamed reply: only the token counts matter."""

    def __init__(self, metrics: ServerMetrics) -> None:
        """A recorder counting into ``metrics``."""
        self.metrics = metrics

    def on_content(self) -> None:
        """Nothing to time without a stream."""

    def on_finish(self, usage: Any) -> None:
        """Count the reply's tokens."""
        record_usage(self.metrics, usage)
