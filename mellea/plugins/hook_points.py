"""The hook points: what sessions, sampling and tool calls run around their work.

Each function here builds a hook's payload only when a handler is registered for it,
so a program without plugins pays one lookup per point. The library objects
(backends, contexts, strategies, thunks) are passed in; nothing is imported from
the library layers above.
"""

from __future__ import annotations

import copy
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mellea.core.thunk import GenerationChunk, ModelOutputThunk
from mellea.plugins.hooks.component import (
    ComponentPostErrorPayload,
    ComponentPostSuccessPayload,
    ComponentPreExecutePayload,
)
from mellea.plugins.hooks.generation import (
    GenerationErrorPayload,
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
from mellea.plugins.hooks.tool import ToolPostInvokePayload, ToolPreInvokePayload
from mellea.plugins.hooks.validation import ValidationPostCheckPayload, ValidationPreCheckPayload
from mellea.plugins.manager import (
    get_plugin_manager,
    has_plugins,
    invoke_hook,
    is_internal_tool,
)
from mellea.plugins.types import HookType

Checks = list[tuple[Any, Any]]


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _passed(result: Any) -> bool:
    return bool(result.as_bool()) if hasattr(result, "as_bool") else bool(result)


def _model_of(backend: Any) -> str | None:
    model = getattr(backend, "model_id", None)
    return None if model is None else str(model)


def _provider_of(backend: Any) -> str | None:
    if backend is None:
        return None
    name = getattr(backend, "provider", None) or type(backend).__name__
    return str(name).removesuffix("Backend").removesuffix("Model").lower() or None


# -- session ---------------------------------------------------------------


async def session_pre_init(
    session_id: str,
    backend_name: str,
    model_id: Any,
    model_options: dict[str, Any] | None,
    context_type: str,
) -> tuple[Any, dict[str, Any] | None]:
    """``session_pre_init``: the model id and options to build the backend with."""
    if not has_plugins(HookType.SESSION_PRE_INIT):
        return model_id, model_options
    payload = SessionPreInitPayload(
        session_id=session_id,
        backend_name=backend_name,
        model_id="" if model_id is None else str(model_id),
        model_options=model_options,
        context_type=context_type,
    )
    _, changed = await invoke_hook(HookType.SESSION_PRE_INIT, payload)
    if changed.model_id != payload.model_id:
        model_id = changed.model_id
    return model_id, changed.model_options


async def session_post_init(session: Any) -> None:
    """``session_post_init``: the session is ready."""
    if has_plugins(HookType.SESSION_POST_INIT):
        payload = SessionPostInitPayload(
            session_id=session.id, model_id=_model_of(session.backend) or "", context=session.ctx
        )
        await invoke_hook(HookType.SESSION_POST_INIT, payload, backend=session.backend)


async def session_reset(session: Any) -> None:
    """``session_reset``: the context is about to be emptied."""
    if has_plugins(HookType.SESSION_RESET):
        payload = SessionResetPayload(session_id=session.id, previous_context=session.ctx)
        await invoke_hook(HookType.SESSION_RESET, payload, backend=session.backend)


async def session_cleanup(
    session: Any, interaction_count: int, exception: BaseException | None
) -> None:
    """``session_cleanup``: the session ends."""
    if has_plugins(HookType.SESSION_CLEANUP):
        payload = SessionCleanupPayload(
            session_id=session.id,
            context=session.ctx,
            interaction_count=interaction_count,
            exception=exception,
        )
        await invoke_hook(HookType.SESSION_CLEANUP, payload, backend=session.backend)


# -- component -------------------------------------------------------------


@dataclass
class ComponentRun:
    """One component's execution as the plugins left it: the (maybe changed)
    settings, and what the post hooks need."""

    action: Any
    requirements: list[Any]
    model_options: dict[str, Any]
    format: Any
    strategy: Any
    tool_calls: bool
    session_id: str | None = None
    action_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: float = field(default_factory=time.perf_counter)


async def component_pre_execute(run: ComponentRun, context: Any, backend: Any) -> ComponentRun:
    """``component_pre_execute``: ``run`` with the plugins' changes applied."""
    if not has_plugins(HookType.COMPONENT_PRE_EXECUTE):
        return run
    view = getattr(context, "as_list", None)
    payload = ComponentPreExecutePayload(
        session_id=run.session_id,
        action_id=run.action_id,
        component_type=type(run.action).__name__,
        action=run.action,
        context_view=view() if callable(view) else None,
        requirements=list(run.requirements),
        model_options=dict(run.model_options),
        format=run.format,
        strategy=run.strategy,
        tool_calls_enabled=run.tool_calls,
    )
    _, changed = await invoke_hook(HookType.COMPONENT_PRE_EXECUTE, payload, backend=backend)
    run.requirements = list(changed.requirements)
    run.model_options = dict(changed.model_options)
    run.format = changed.format
    run.strategy = changed.strategy
    run.tool_calls = changed.tool_calls_enabled
    return run


async def component_post_success(
    run: ComponentRun,
    backend: Any,
    result: Any,
    context_before: Any,
    context_after: Any,
    sampling: Any = None,
) -> None:
    """``component_post_success``: ``result`` is the component's output."""
    if not has_plugins(HookType.COMPONENT_POST_SUCCESS):
        return
    payload = ComponentPostSuccessPayload(
        session_id=run.session_id,
        action_id=run.action_id,
        component_type=type(run.action).__name__,
        action=run.action,
        result=result,
        context_before=context_before,
        context_after=context_after,
        sampling_results=list(sampling.sample_generations) if sampling is not None else None,
        sampling_success=sampling.success if sampling is not None else None,
        latency_ms=int(_ms_since(run.started)),
    )
    await invoke_hook(HookType.COMPONENT_POST_SUCCESS, payload, backend=backend)


async def component_post_error(
    run: ComponentRun, backend: Any, error: BaseException, context: Any
) -> None:
    """``component_post_error``: the component raised ``error`` (which then propagates)."""
    if not has_plugins(HookType.COMPONENT_POST_ERROR):
        return
    payload = ComponentPostErrorPayload(
        session_id=run.session_id,
        action_id=run.action_id,
        component_type=type(run.action).__name__,
        action=run.action,
        error=error,
        error_type=type(error).__name__,
        stack_trace="".join(traceback.format_exception(error)),
        context=context,
        model_options=dict(run.model_options),
    )
    await invoke_hook(HookType.COMPONENT_POST_ERROR, payload, backend=backend)


# -- generation ------------------------------------------------------------

_GENERATION_HOOKS = (
    HookType.GENERATION_PRE_CALL,
    HookType.GENERATION_POST_CALL,
    HookType.GENERATION_ERROR,
)


async def generate(
    backend: Any,
    messages: list[dict[str, Any]],
    *,
    action: Any = None,
    context: Any = None,
    model_options: dict[str, Any] | None = None,
    format: Any = None,
    tool_calls: bool = False,
    session_id: str | None = None,
) -> ModelOutputThunk:
    """One backend call inside the generation hooks.

    ``generation_pre_call`` may change the options, format and tool switch;
    ``generation_post_call`` fires once the thunk is complete (whoever consumes it),
    ``generation_error`` when the backend raises, at the call or while streaming.
    Those two run with the plugins of the app that made the call, also when the
    server reads the thunk after the program returned it.
    """
    if not has_plugins() or not any(has_plugins(t) for t in _GENERATION_HOOKS):
        return await backend.generate(
            messages, model_options=model_options, format=format, tool_calls=tool_calls
        )
    generation_id = str(uuid.uuid4())
    if has_plugins(HookType.GENERATION_PRE_CALL):
        payload = GenerationPreCallPayload(
            session_id=session_id,
            action=action,
            context=context,
            model_options=dict(model_options or {}),
            format=format,
            tool_calls=tool_calls,
            generation_id=generation_id,
            model=_model_of(backend),
            provider=_provider_of(backend),
        )
        _, changed = await invoke_hook(HookType.GENERATION_PRE_CALL, payload, backend=backend)
        model_options, format, tool_calls = (
            changed.model_options,
            changed.format,
            changed.tool_calls,
        )
    started = time.perf_counter()
    try:
        thunk = await backend.generate(
            messages, model_options=model_options, format=format, tool_calls=tool_calls
        )
    except Exception as exc:
        await _generation_error(backend, exc, None, generation_id, started, session_id)
        raise

    manager = get_plugin_manager()

    async def post_call(done: ModelOutputThunk) -> None:
        with manager.active():
            if has_plugins(HookType.GENERATION_POST_CALL):
                payload = GenerationPostCallPayload(
                    session_id=session_id,
                    prompt=messages,
                    model_output=done,
                    latency_ms=_ms_since(started),
                    generation_id=generation_id,
                )
                await invoke_hook(HookType.GENERATION_POST_CALL, payload, backend=backend)

    async def watched(source: AsyncIterator[GenerationChunk]) -> AsyncIterator[GenerationChunk]:
        try:
            async for chunk in source:
                yield chunk
        except Exception as exc:
            with manager.active():
                await _generation_error(backend, exc, thunk, generation_id, started, session_id)
            raise

    if thunk.is_computed():
        await post_call(thunk)
    else:
        thunk.wrap_source(watched)
        thunk.add_done_hook(post_call)
    return thunk


async def _generation_error(
    backend: Any,
    exc: BaseException,
    thunk: Any,
    generation_id: str,
    started: float,
    session_id: str | None,
) -> None:
    if has_plugins(HookType.GENERATION_ERROR):
        payload = GenerationErrorPayload(
            session_id=session_id,
            exception=exc,
            model_output=thunk,
            generation_id=generation_id,
            latency_ms=_ms_since(started) if thunk is not None else 0.0,
        )
        await invoke_hook(HookType.GENERATION_ERROR, payload, backend=backend)


# -- validation ------------------------------------------------------------


async def validate(
    requirements: list[Any],
    check: Callable[[list[Any]], Awaitable[list[Any]]],
    *,
    target: Any = None,
    context: Any = None,
    backend: Any = None,
    model_options: dict[str, Any] | None = None,
    session_id: str | None = None,
) -> tuple[list[Any], list[Any]]:
    """``check(requirements)`` inside the validation hooks: ``(requirements, results)``
    as the plugins left them (pre-check may change the requirements, post-check the
    results)."""
    if not has_plugins():
        return requirements, await check(requirements)
    pre = has_plugins(HookType.VALIDATION_PRE_CHECK)
    post = has_plugins(HookType.VALIDATION_POST_CHECK)
    if not (pre or post):
        return requirements, await check(requirements)
    validation_id = str(uuid.uuid4())
    if pre:
        payload = ValidationPreCheckPayload(
            session_id=session_id,
            validation_id=validation_id,
            requirements=list(requirements),
            target=target,
            context=context,
            model_options=dict(model_options or {}),
        )
        _, changed = await invoke_hook(HookType.VALIDATION_PRE_CHECK, payload, backend=backend)
        requirements = list(changed.requirements)
    try:
        results = await check(requirements)
    except Exception as exc:
        if post:
            failed = ValidationPostCheckPayload(
                session_id=session_id,
                validation_id=validation_id,
                requirements=list(requirements),
                exception=exc,
            )
            await invoke_hook(HookType.VALIDATION_POST_CHECK, failed, backend=backend)
        raise
    if post:
        passed = sum(1 for r in results if _passed(r))
        payload_after = ValidationPostCheckPayload(
            session_id=session_id,
            validation_id=validation_id,
            requirements=list(requirements),
            results=list(results),
            all_validations_passed=passed == len(results),
            passed_count=passed,
            failed_count=len(results) - passed,
        )
        _, changed_after = await invoke_hook(
            HookType.VALIDATION_POST_CHECK, payload_after, backend=backend
        )
        results = list(changed_after.results)
    return requirements, results


# -- sampling --------------------------------------------------------------

_SAMPLING_HOOKS = (
    HookType.SAMPLING_LOOP_START,
    HookType.SAMPLING_ITERATION,
    HookType.SAMPLING_REPAIR,
    HookType.SAMPLING_LOOP_END,
)


async def sample(
    strategy: Any,
    generate: Callable[..., Awaitable[ModelOutputThunk]],
    validate: Callable[[ModelOutputThunk, list[Any]], Awaitable[Checks]],
    requirements: list[Any],
    *,
    action: Any = None,
    context: Any = None,
    backend: Any = None,
    session_id: str | None = None,
) -> Any:
    """``strategy.asample(generate, validate, requirements)`` inside the sampling hooks.

    ``sampling_loop_start`` may change the loop budget (on a copy of the strategy);
    ``sampling_iteration`` fires after each attempt is checked, ``sampling_repair``
    after each failed one, ``sampling_loop_end`` on every way out.
    """
    if not has_plugins() or not any(has_plugins(t) for t in _SAMPLING_HOOKS):
        return await strategy.asample(generate, validate, requirements)
    sampling_id = str(uuid.uuid4())
    name = type(strategy).__name__
    active = [*(getattr(strategy, "requirements", None) or requirements)]
    if has_plugins(HookType.SAMPLING_LOOP_START):
        budget = int(getattr(strategy, "loop_budget", 1))
        start = SamplingLoopStartPayload(
            session_id=session_id,
            sampling_id=sampling_id,
            strategy_name=name,
            action=action,
            context=context,
            requirements=active,
            loop_budget=budget,
        )
        _, changed = await invoke_hook(HookType.SAMPLING_LOOP_START, start, backend=backend)
        if changed.loop_budget != budget:
            strategy = copy.copy(strategy)
            strategy.loop_budget = changed.loop_budget
    attempts: dict[int, int] = {}  # id(thunk) -> 1-based iteration

    async def generate_counted(attempt: int, *args: Any, **kwargs: Any) -> ModelOutputThunk:
        thunk = await generate(attempt, *args, **kwargs)
        attempts[id(thunk)] = attempt + 1
        return thunk

    async def validate_reported(thunk: ModelOutputThunk, reqs: list[Any]) -> Checks:
        checks = await validate(thunk, reqs)
        iteration = attempts.get(id(thunk), len(attempts))
        passed = sum(1 for _, r in checks if _passed(r))
        if has_plugins(HookType.SAMPLING_ITERATION):
            payload = SamplingIterationPayload(
                session_id=session_id,
                sampling_id=sampling_id,
                strategy_name=name,
                iteration=iteration,
                action=action,
                result=thunk,
                validation_results=list(checks),
                all_validations_passed=passed == len(checks),
                valid_count=passed,
                total_count=len(checks),
            )
            await invoke_hook(HookType.SAMPLING_ITERATION, payload, backend=backend)
        if passed < len(checks) and has_plugins(HookType.SAMPLING_REPAIR):
            repair = SamplingRepairPayload(
                session_id=session_id,
                sampling_id=sampling_id,
                repair_type=getattr(strategy, "_get_repair_type", lambda: "unknown")(),
                failed_action=action,
                failed_result=thunk,
                failed_validations=list(checks),
                repair_action=action,
                repair_context=context,
                repair_iteration=iteration,
            )
            await invoke_hook(HookType.SAMPLING_REPAIR, repair, backend=backend)
        return checks

    try:
        result = await strategy.asample(generate_counted, validate_reported, requirements)
    except Exception as exc:
        if has_plugins(HookType.SAMPLING_LOOP_END):
            failed = SamplingLoopEndPayload(
                session_id=session_id,
                sampling_id=sampling_id,
                strategy_name=name,
                success=False,
                exception=exc,
            )
            await invoke_hook(HookType.SAMPLING_LOOP_END, failed, backend=backend)
        raise
    if has_plugins(HookType.SAMPLING_LOOP_END):
        used = len(result.sample_generations)
        end = SamplingLoopEndPayload(
            session_id=session_id,
            sampling_id=sampling_id,
            strategy_name=name,
            success=result.success,
            iterations_used=used,
            final_result=result.result,
            final_action=action,
            final_context=context,
            failure_reason=None if result.success else f"Budget exhausted after {used} iterations",
            all_results=list(result.sample_generations),
            all_validations=list(result.sample_validations),
        )
        await invoke_hook(HookType.SAMPLING_LOOP_END, end, backend=backend)
    return result


# -- tools -----------------------------------------------------------------


async def tool_pre_invoke(call: Any, invocation_id: str, backend: Any = None) -> Any:
    """``tool_pre_invoke``: the tool call to run (a plugin may replace it)."""
    if not has_plugins(HookType.TOOL_PRE_INVOKE):
        return call
    payload = ToolPreInvokePayload(
        tool_invocation_id=invocation_id,
        model_tool_call=call,
        is_control_flow=is_internal_tool(call.name),
    )
    _, changed = await invoke_hook(HookType.TOOL_PRE_INVOKE, payload, backend=backend)
    return changed.model_tool_call if changed.model_tool_call is not None else call


async def tool_post_invoke(
    call: Any,
    invocation_id: str,
    output: Any,
    message: Any,
    elapsed_ms: int,
    error: BaseException | None,
    backend: Any = None,
) -> Any:
    """``tool_post_invoke``: the tool's output as the plugins left it."""
    if not has_plugins(HookType.TOOL_POST_INVOKE):
        return output
    payload = ToolPostInvokePayload(
        tool_invocation_id=invocation_id,
        model_tool_call=call,
        tool_output=output,
        tool_message=message,
        execution_time_ms=elapsed_ms,
        success=error is None,
        error=error,
        is_control_flow=is_internal_tool(call.name),
    )
    _, changed = await invoke_hook(HookType.TOOL_POST_INVOKE, payload, backend=backend)
    return changed.tool_output
