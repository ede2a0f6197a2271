"""Tracing switches and tracers (upstream's names)."""

from __future__ import annotations

from typing import Any

from mellea.telemetry._env import env_true


def is_tracing_enabled() -> bool:
    """``MELLEA_TRACES_ENABLED`` is true."""
    return env_true("MELLEA_TRACES_ENABLED")


def is_content_tracing_enabled() -> bool:
    """Tracing is on and ``MELLEA_TRACES_CONTENT`` is true (prompts and replies on spans)."""
    return is_tracing_enabled() and env_true("MELLEA_TRACES_CONTENT")


def _tracer(scope: str) -> Any:
    if not is_tracing_enabled():
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer(scope)


def get_application_tracer() -> Any:
    """The ``mellea.application`` tracer when tracing is on (and OpenTelemetry installed)."""
    return _tracer("mellea.application")


def get_backend_tracer() -> Any:
    """The ``mellea.backend`` tracer when tracing is on (and OpenTelemetry installed)."""
    return _tracer("mellea.backend")
