"""Which payload fields a plugin may change, per hook.

A hook not listed here is observe-only: a modified payload returned for it is
dropped. Only ``SEQUENTIAL`` and ``TRANSFORM`` handlers may modify at all.
"""

from __future__ import annotations

WRITABLE_FIELDS: dict[str, frozenset[str]] = {
    "session_pre_init": frozenset({"model_id", "model_options"}),
    "component_pre_execute": frozenset(
        {"requirements", "model_options", "format", "strategy", "tool_calls_enabled"}
    ),
    "generation_pre_call": frozenset({"model_options", "tool_calls", "format"}),
    "generation_batch_pre_call": frozenset({"model_options", "tool_calls", "format"}),
    "validation_pre_check": frozenset({"requirements", "model_options"}),
    "validation_post_check": frozenset({"results", "all_validations_passed"}),
    "sampling_loop_start": frozenset({"loop_budget"}),
    "tool_pre_invoke": frozenset({"model_tool_call"}),
    "tool_post_invoke": frozenset({"tool_output"}),
}


def writable_fields(hook_type: str) -> frozenset[str]:
    """The fields of ``hook_type``'s payload a plugin may change (empty: none)."""
    return WRITABLE_FIELDS.get(str(hook_type), frozenset())
