"""The payload each hook type passes to its handlers."""

from __future__ import annotations

from mellea.plugins.hooks.adapter_function import (
    AdapterFunctionInvocationCompletePayload,
    AdapterFunctionPhaseCompletePayload,
)
from mellea.plugins.hooks.component import (
    ComponentPostErrorPayload,
    ComponentPostSuccessPayload,
    ComponentPreExecutePayload,
)
from mellea.plugins.hooks.generation import (
    GenerationBatchErrorPayload,
    GenerationBatchPostCallPayload,
    GenerationBatchPreCallPayload,
    GenerationErrorPayload,
    GenerationEventPayload,
    GenerationPostCallPayload,
    GenerationPreCallPayload,
)
from mellea.plugins.hooks.sampling import (
    SamplingIterationPayload,
    SamplingLoopEndPayload,
    SamplingLoopStartPayload,
    SamplingRepairPayload,
)
from mellea.plugins.hooks.session import (
    SessionCleanupPayload,
    SessionPostInitPayload,
    SessionPreInitPayload,
    SessionResetPayload,
)
from mellea.plugins.hooks.streaming import (
    StreamingEndPayload,
    StreamingEventPayload,
    StreamingStartPayload,
)
from mellea.plugins.hooks.tool import ToolPostInvokePayload, ToolPreInvokePayload
from mellea.plugins.hooks.validation import ValidationPostCheckPayload, ValidationPreCheckPayload
from mellea.plugins.types import HookType

PAYLOADS: dict[HookType, type] = {
    HookType.SESSION_PRE_INIT: SessionPreInitPayload,
    HookType.SESSION_POST_INIT: SessionPostInitPayload,
    HookType.SESSION_RESET: SessionResetPayload,
    HookType.SESSION_CLEANUP: SessionCleanupPayload,
    HookType.COMPONENT_PRE_EXECUTE: ComponentPreExecutePayload,
    HookType.COMPONENT_POST_SUCCESS: ComponentPostSuccessPayload,
    HookType.COMPONENT_POST_ERROR: ComponentPostErrorPayload,
    HookType.GENERATION_PRE_CALL: GenerationPreCallPayload,
    HookType.GENERATION_POST_CALL: GenerationPostCallPayload,
    HookType.GENERATION_ERROR: GenerationErrorPayload,
    HookType.GENERATION_BATCH_PRE_CALL: GenerationBatchPreCallPayload,
    HookType.GENERATION_BATCH_POST_CALL: GenerationBatchPostCallPayload,
    HookType.GENERATION_BATCH_ERROR: GenerationBatchErrorPayload,
    HookType.GENERATION_EVENT: GenerationEventPayload,
    HookType.VALIDATION_PRE_CHECK: ValidationPreCheckPayload,
    HookType.VALIDATION_POST_CHECK: ValidationPostCheckPayload,
    HookType.SAMPLING_LOOP_START: SamplingLoopStartPayload,
    HookType.SAMPLING_ITERATION: SamplingIterationPayload,
    HookType.SAMPLING_REPAIR: SamplingRepairPayload,
    HookType.SAMPLING_LOOP_END: SamplingLoopEndPayload,
    HookType.TOOL_PRE_INVOKE: ToolPreInvokePayload,
    HookType.TOOL_POST_INVOKE: ToolPostInvokePayload,
    HookType.ADAPTER_FUNCTION_INVOCATION_COMPLETE: AdapterFunctionInvocationCompletePayload,
    HookType.ADAPTER_FUNCTION_PHASE_COMPLETE: AdapterFunctionPhaseCompletePayload,
    HookType.STREAMING_START: StreamingStartPayload,
    HookType.STREAMING_EVENT: StreamingEventPayload,
    HookType.STREAMING_END: StreamingEndPayload,
}

__all__ = ["PAYLOADS", *sorted(cls.__name__ for cls in PAYLOADS.values())]
