"""Metric instruments (OpenTelemetry API) and upstream's ``record_*`` helpers.

With metrics off (``MELLEA_METRICS_ENABLED`` not true) or without
``opentelemetry-api``, instruments are no-ops and recording costs nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from mellea.telemetry._env import env_true


def is_metrics_enabled() -> bool:
    """``MELLEA_METRICS_ENABLED`` is true."""
    return env_true("MELLEA_METRICS_ENABLED")


class _NoOp:
    """Stands in for a counter, up-down counter or histogram."""

    def add(self, amount: float, attributes: dict[str, Any] | None = None) -> None:
        """Ignore ``amount``."""

    def record(self, amount: float, attributes: dict[str, Any] | None = None) -> None:
        """Ignore ``amount``."""


def _meter() -> Any:
    if not is_metrics_enabled():
        return None
    try:
        from opentelemetry import metrics
    except ImportError:
        return None
    return metrics.get_meter("mellea")


def create_counter(name: str, description: str = "", unit: str = "1") -> Any:
    """A counter (only goes up), or a no-op."""
    meter = _meter()
    return meter.create_counter(name, unit=unit, description=description) if meter else _NoOp()


def create_histogram(name: str, description: str = "", unit: str = "1") -> Any:
    """A histogram, or a no-op."""
    meter = _meter()
    return meter.create_histogram(name, unit=unit, description=description) if meter else _NoOp()


def create_up_down_counter(name: str, description: str = "", unit: str = "1") -> Any:
    """An up-down counter, or a no-op."""
    meter = _meter()
    return (
        meter.create_up_down_counter(name, unit=unit, description=description) if meter else _NoOp()
    )


@functools.cache
def _instrument(kind: str, name: str, description: str, unit: str = "1") -> Any:
    make = {"counter": create_counter, "histogram": create_histogram}[kind]
    return make(name, description, unit)


def _count(name: str, description: str, attributes: dict[str, Any], amount: float = 1) -> None:
    if is_metrics_enabled():
        _instrument("counter", name, description).add(amount, attributes)


def _observe(
    name: str, description: str, value: float, attributes: dict[str, Any], unit: str = "s"
) -> None:
    if is_metrics_enabled():
        _instrument("histogram", name, description, unit).record(value, attributes)


def _genai(model: str, provider: str, operation: str) -> dict[str, Any]:
    return {
        "gen_ai.request.model": model,
        "gen_ai.provider.name": provider,
        "gen_ai.operation.name": operation,
    }


def record_token_usage_metrics(
    input_tokens: int | None, output_tokens: int | None, model: str, provider: str, operation: str
) -> None:
    """Input and output token counts of one request."""
    for kind, count in (("input", input_tokens), ("output", output_tokens)):
        if count is not None:
            attrs = {**_genai(model, provider, operation), "gen_ai.token.type": kind}
            _observe(
                "gen_ai.client.token.usage",
                "Number of input and output tokens used",
                count,
                attrs,
                "{token}",
            )


def record_request_duration(
    duration_s: float,
    model: str,
    provider: str,
    operation: str,
    streaming: bool = False,
    exception_class: str | None = None,
) -> None:
    """How long a request took."""
    attrs = {**_genai(model, provider, operation), "mellea.streaming": streaming}
    if exception_class:
        attrs["error.type"] = exception_class
    _observe("gen_ai.client.operation.duration", "GenAI operation duration", duration_s, attrs)


def record_ttfb(ttfb_s: float, model: str, provider: str, operation: str) -> None:
    """Time to the first chunk of a streamed reply."""
    _observe(
        "gen_ai.client.operation.time_to_first_chunk",
        "Time to first chunk",
        ttfb_s,
        _genai(model, provider, operation),
    )


def record_time_per_output_chunk(time_s: float, model: str, provider: str, operation: str) -> None:
    """Time between two chunks of a streamed reply."""
    _observe(
        "gen_ai.client.operation.time_per_output_chunk",
        "Time per output chunk",
        time_s,
        _genai(model, provider, operation),
    )


def record_error(
    error_type: str, model: str, provider: str, exception_class: str, operation: str
) -> None:
    """A failed request, by kind."""
    attrs = {
        **_genai(model, provider, operation),
        "error.type": error_type,
        "exception.type": exception_class,
    }
    _count("mellea.llm.errors", "Total number of LLM errors categorized by semantic type", attrs)


def record_cost(cost: float, model: str, provider: str, operation: str) -> None:
    """The estimated cost of a request in US dollars."""
    _count(
        "mellea.llm.cost.usd",
        "Estimated LLM request cost in USD",
        _genai(model, provider, operation),
        cost,
    )


def record_sampling_attempt(strategy: str) -> None:
    """One attempt of a sampling strategy."""
    _count(
        "mellea.sampling.attempts",
        "Total number of sampling attempts per strategy",
        {"strategy": strategy},
    )


def record_sampling_outcome(strategy: str, success: bool) -> None:
    """How a sampling loop ended."""
    name = "mellea.sampling.successes" if success else "mellea.sampling.failures"
    _count(name, "Sampling loops that ended this way, per strategy", {"strategy": strategy})


def record_requirement_check(requirement: str) -> None:
    """One requirement check."""
    _count(
        "mellea.requirement.checks",
        "Total number of requirement validation checks",
        {"requirement": requirement},
    )


def record_requirement_failure(requirement: str, reason: str) -> None:
    """One failed requirement check."""
    attrs = {"requirement": requirement, "reason": reason[:200]}
    _count("mellea.requirement.failures", "Total number of requirement validation failures", attrs)


def record_tool_call(tool: str, status: str) -> None:
    """One tool call and whether it succeeded."""
    _count(
        "mellea.tool.calls",
        "Total number of tool invocations by name and status",
        {"tool": tool, "status": status},
    )


def record_adapter_function_invocation(
    name: str, revision: str | None, binding_type: str, adapter_type: str, outcome: str
) -> None:
    """One adapter-function call (adapters are another issue's; recorded all the same)."""
    attrs = {
        "name": name,
        "revision": revision or "unpinned",
        "binding_type": binding_type,
        "adapter_type": adapter_type,
        "outcome": outcome,
    }
    _count(
        "mellea.adapter_function.invocations", "Total number of adapter function invocations", attrs
    )


def record_adapter_function_phase_duration(name: str, phase: str, duration_s: float) -> None:
    """How long one phase of an adapter-function call took."""
    _observe(
        "mellea.adapter_function.phase.duration",
        "Adapter function phase duration",
        duration_s,
        {"name": name, "phase": phase},
    )


def record_adapter_function_parse_failure(name: str, revision: str | None) -> None:
    """An adapter function whose output could not be parsed."""
    attrs = {"name": name, "revision": revision or "unpinned"}
    _count("mellea.adapter_function.parse_failures", "Adapter function parse failures", attrs)
