"""Payloads of the component hooks (one ``instruct``, ``act`` or ``chat``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mellea.plugins.base import MelleaBasePayload


class ComponentPreExecutePayload(MelleaBasePayload):
    """``component_pre_execute``: before a component runs. Writable: ``requirements``,
    ``model_options``, ``format``, ``strategy``, ``tool_calls_enabled``."""

    action_id: str = ""
    component_type: str = ""
    action: Any = None
    context_view: list[Any] | None = None
    requirements: list[Any] = Field(default_factory=list)
    model_options: dict[str, Any] = Field(default_factory=dict)
    format: Any = None
    strategy: Any = None
    tool_calls_enabled: bool = False


class ComponentPostSuccessPayload(MelleaBasePayload):
    """``component_post_success``: the component ran; ``result`` is its output."""

    action_id: str = ""
    component_type: str = ""
    action: Any = None
    result: Any = None
    context_before: Any = None
    context_after: Any = None
    generate_log: Any = None
    sampling_results: list[Any] | None = None
    sampling_success: bool | None = None
    latency_ms: int = 0


class ComponentPostErrorPayload(MelleaBasePayload):
    """``component_post_error``: the component raised ``error``."""

    action_id: str = ""
    component_type: str = ""
    action: Any = None
    error: Any = None
    error_type: str = ""
    stack_trace: str = ""
    context: Any = None
    model_options: dict[str, Any] = Field(default_factory=dict)
