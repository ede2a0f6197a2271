"""Upstream's telemetry API: request context for logs, OpenTelemetry metric
instruments, and the switches upstream reads from the environment.

Switches (read when asked, as upstream): ``MELLEA_TRACES_ENABLED``,
``MELLEA_TRACES_CONTENT``, ``MELLEA_METRICS_ENABLED``, ``MELLEA_PRICING_FILE``.
Instruments come from the OpenTelemetry API's global meter provider when metrics are
enabled and ``opentelemetry-api`` is installed (configure an SDK provider to export
them), and are no-ops otherwise. Ours differs in that the library does not record
spans or metrics on its own calls (``m serve`` has its request metrics and OTLP
spans); a program can record them with the ``record_*`` functions.
"""

from mellea.telemetry.context import (
    MelleaContextFilter,
    async_with_context,
    generate_request_id,
    get_current_context,
    get_model_id,
    get_request_id,
    get_sampling_iteration,
    get_session_id,
    with_context,
)
from mellea.telemetry.logging import get_otlp_log_handler
from mellea.telemetry.metrics import (
    create_counter,
    create_histogram,
    create_up_down_counter,
    is_metrics_enabled,
    record_adapter_function_invocation,
    record_adapter_function_parse_failure,
    record_adapter_function_phase_duration,
    record_cost,
    record_error,
    record_request_duration,
    record_requirement_check,
    record_requirement_failure,
    record_sampling_attempt,
    record_sampling_outcome,
    record_time_per_output_chunk,
    record_token_usage_metrics,
    record_tool_call,
    record_ttfb,
)
from mellea.telemetry.pricing import is_pricing_enabled
from mellea.telemetry.tracing import is_content_tracing_enabled, is_tracing_enabled

__all__ = [
    "MelleaContextFilter",
    "async_with_context",
    "create_counter",
    "create_histogram",
    "create_up_down_counter",
    "generate_request_id",
    "get_current_context",
    "get_model_id",
    "get_otlp_log_handler",
    "get_request_id",
    "get_sampling_iteration",
    "get_session_id",
    "is_content_tracing_enabled",
    "is_metrics_enabled",
    "is_pricing_enabled",
    "is_tracing_enabled",
    "record_adapter_function_invocation",
    "record_adapter_function_parse_failure",
    "record_adapter_function_phase_duration",
    "record_cost",
    "record_error",
    "record_request_duration",
    "record_requirement_check",
    "record_requirement_failure",
    "record_sampling_attempt",
    "record_sampling_outcome",
    "record_time_per_output_chunk",
    "record_token_usage_metrics",
    "record_tool_call",
    "record_ttfb",
    "with_context",
]
