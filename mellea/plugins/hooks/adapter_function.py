"""Payloads of the adapter-function hooks."""

from __future__ import annotations

from typing import Any, Literal

from mellea.plugins.base import MelleaBasePayload


class AdapterFunctionInvocationCompletePayload(MelleaBasePayload):
    """``adapter_function_invocation_complete``: an adapter function finished."""

    name: str
    revision: str | None = None
    binding_type: str = "unknown"
    adapter_type: str = "unknown"
    outcome: Literal["success", "schema_error", "error"]
    error: Any = None


class AdapterFunctionPhaseCompletePayload(MelleaBasePayload):
    """``adapter_function_phase_complete``: one phase of an adapter function finished."""

    name: str
    phase: Literal["prepare", "activate", "generate", "parse", "deactivate"]
    duration_ms: float
