"""Payloads of the tool hooks (``call_tools`` running one tool call)."""

from __future__ import annotations

from typing import Any

from mellea.plugins.base import MelleaBasePayload


class ToolPreInvokePayload(MelleaBasePayload):
    """``tool_pre_invoke``: before a tool runs. Writable: ``model_tool_call``."""

    tool_invocation_id: str = ""
    model_tool_call: Any = None
    is_control_flow: bool = False


class ToolPostInvokePayload(MelleaBasePayload):
    """``tool_post_invoke``: the tool ran (``success``, or ``error``). Writable:
    ``tool_output``."""

    tool_invocation_id: str = ""
    model_tool_call: Any = None
    tool_output: Any = None
    tool_message: Any = None
    execution_time_ms: int = 0
    success: bool = True
    error: Any = None
    is_control_flow: bool = False
