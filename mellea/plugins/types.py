"""The hook points a plugin can attach to, and how a handler runs."""

from __future__ import annotations

from enum import StrEnum


class PluginMode(StrEnum):
    """How a hook handler runs; handlers run grouped by mode, in this order.

    ``SEQUENTIAL``: one after another, each seeing the payload the previous left; may
    block and modify. ``TRANSFORM``: the same, but a block is ignored (logged).
    ``AUDIT``: one after another, observe only: a block is logged, a modification
    dropped. ``CONCURRENT``: all at once; may block, modifications are dropped.
    ``FIRE_AND_FORGET``: started in the background on a snapshot of the payload;
    nothing it returns or raises reaches the caller.
    """

    SEQUENTIAL = "sequential"
    TRANSFORM = "transform"
    CONCURRENT = "concurrent"
    AUDIT = "audit"
    FIRE_AND_FORGET = "fire_and_forget"


MODE_ORDER = (
    PluginMode.SEQUENTIAL,
    PluginMode.TRANSFORM,
    PluginMode.AUDIT,
    PluginMode.CONCURRENT,
    PluginMode.FIRE_AND_FORGET,
)


class HookType(StrEnum):
    """Every hook point, grouped by the stage of a program's life it belongs to."""

    # session
    SESSION_PRE_INIT = "session_pre_init"
    SESSION_POST_INIT = "session_post_init"
    SESSION_RESET = "session_reset"
    SESSION_CLEANUP = "session_cleanup"
    # component (one instruct / act / chat)
    COMPONENT_PRE_EXECUTE = "component_pre_execute"
    COMPONENT_POST_SUCCESS = "component_post_success"
    COMPONENT_POST_ERROR = "component_post_error"
    # generation (one backend call)
    GENERATION_PRE_CALL = "generation_pre_call"
    GENERATION_POST_CALL = "generation_post_call"
    GENERATION_ERROR = "generation_error"
    GENERATION_BATCH_PRE_CALL = "generation_batch_pre_call"
    GENERATION_BATCH_POST_CALL = "generation_batch_post_call"
    GENERATION_BATCH_ERROR = "generation_batch_error"
    GENERATION_EVENT = "generation_event"
    # validation
    VALIDATION_PRE_CHECK = "validation_pre_check"
    VALIDATION_POST_CHECK = "validation_post_check"
    # sampling
    SAMPLING_LOOP_START = "sampling_loop_start"
    SAMPLING_ITERATION = "sampling_iteration"
    SAMPLING_REPAIR = "sampling_repair"
    SAMPLING_LOOP_END = "sampling_loop_end"
    # tools
    TOOL_PRE_INVOKE = "tool_pre_invoke"
    TOOL_POST_INVOKE = "tool_post_invoke"
    # adapter functions
    ADAPTER_FUNCTION_INVOCATION_COMPLETE = "adapter_function_invocation_complete"
    ADAPTER_FUNCTION_PHASE_COMPLETE = "adapter_function_phase_complete"
    # validated streaming
    STREAMING_START = "streaming_start"
    STREAMING_EVENT = "streaming_event"
    STREAMING_END = "streaming_end"
