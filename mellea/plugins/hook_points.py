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
from mellea.plugins.hooks import PAYLOADS
from mellea.plugins.manager import (
    get_plugin_manager,
    has_plugins,
    invoke_hook,
    is_internal_tool,
)
from mellea.plugins.types import HookType

Checks = list[tuple[Any, Any]]


async def _invoke(hook: HookType, backend: Any, **fields: Any) -> Any:
    """Run ``hook``'s handlers on its payload made of ``fields``; the payload as they
    left it. Callers check ``has_plugins(hook)`` first, so that no payload is built
    for a hook nobody handles."""
    _, changed = await invoke_hook(hook, PAYLOADS[hook](**fields), backend=backend)
    return changed


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
    named = "" if model_id is None else str(model_id)
    changed = await _invoke(
        HookType.SESSION_PRE_INIT,
        None,
        session_id=session_id,
        backend_name=backend_name,
        model_id=named,
        model_options=model_options,
        context_type=context_type,
    )
    if changed.model_id != named:
        model_id = changed.model_id
    return model_id, changed.model_options


async def session_post_init(session: Any) -> None:
    """``session_post_init``: the session is ready."""
    if has_plugins(HookType.SESSION_POST_INIT):
        await _invoke(
            HookType.SESSION_POST_INIT,
            session.backend,
            session_id=session.id,
            model_id=_model_of(session.backend) or "",
            context=session.ctx,
        )


async def session_reset(session: Any) -> None:
    """``session_reset``: the context is about to be emptied."""
    if has_plugins(HookType.SESSION_RESET):
        await _invoke(
            HookType.SESSION_RESET,
            session.backend,
            session_id=session.id,
            previous_context=session.ctx,
        )


async def session_cleanup(
    session: Any, interaction_count: int, exception: BaseException | None
) -> None:
    """``session_cleanup``: the session ends."""
    if has_plugins(HookType.SESSION_CLEANUP):
        await _invoke(
            HookType.SESSION_CLEANUP,
            session.backend,
            session_id=session.id,
            context=session.ctx,
            interaction_count=interaction_count,
            exception=exception,
        )


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

    def ids(self) -> dict[str, Any]:
        """The fields every component hook's payload starts with."""
        return {
            "session_id": self.session_id,
            "action_id": self.action_id,
            "component_type": type(self.action).__name__,
            "action": self.action,
        }


async def component_pre_execute(run: ComponentRun, context: Any, backend: Any) -> ComponentRun:
    """``component_pre_execute``: ``run`` with the plugins' changes applied."""
    if not has_plugins(HookType.COMPONENT_PRE_EXECUTE):
        return run
    view = getattr(context, "as_list", None)
    changed = await _invoke(
        HookType.COMPONENT_PRE_EXECUTE,
        backend,
        **run.ids(),
        context_view=view() if callable(view) else None,
        requirements=list(run.requirements),
        model_options=dict(run.model_options),
        format=run.format,
        strategy=run.strategy,
        tool_calls_enabled=run.tool_calls,
    )
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
    await _invoke(
        HookType.COMPONENT_POST_SUCCESS,
        backend,
        **run.ids(),
        result=result,
        context_before=context_before,
        context_after=context_after,
        sampling_results=list(sampling.sample_generations) if sampling is not None else None,
        sampling_success=sampling.success if sampling is not None else None,
        latency_ms=int(_ms_since(run.started)),
    )


async def component_post_error(
    run: ComponentRun, backend: Any, error: BaseException, context: Any
) -> None:
    """``component_post_error``: the component raised ``error`` (which then propagates)."""
    if not has_plugins(HookType.COMPONENT_POST_ERROR):
        return
    await _invoke(
        HookType.COMPONENT_POST_ERROR,
        backend,
        **run.ids(),
        error=error,
        error_type=type(error).__name__,
        stack_trace="".join(traceback.format_exception(error)),
        context=context,
        model_options=dict(run.model_options),
    )


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
        changed = await _invoke(
            HookType.GENERATION_PRE_CALL,
            backend,
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
                await _invoke(
                    HookType.GENERATION_POST_CALL,
                    backend,
                    session_id=session_id,
                    prompt=messages,
                    model_output=done,
                    latency_ms=_ms_since(started),
                    generation_id=generation_id,
                )

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
        await _invoke(
            HookType.GENERATION_ERROR,
            backend,
            session_id=session_id,
            exception=exc,
            model_output=thunk,
            generation_id=generation_id,
            latency_ms=_ms_since(started) if thunk is not None else 0.0,
        )


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
    ids = {"session_id": session_id, "validation_id": str(uuid.uuid4())}
    if pre:
        changed = await _invoke(
            HookType.VALIDATION_PRE_CHECK,
            backend,
            **ids,
            requirements=list(requirements),
            target=target,
            context=context,
            model_options=dict(model_options or {}),
        )
        requirements = list(changed.requirements)
    try:
        results = await check(requirements)
    except Exception as exc:
        if post:
            await _invoke(
                HookType.VALIDATION_POST_CHECK,
                backend,
                **ids,
                requirements=list(requirements),
                exception=exc,
            )
        raise
    if post:
        passed = sum(1 for r in results if _passed(r))
        changed_after = await _invoke(
            HookType.VALIDATION_POST_CHECK,
            backend,
            **ids,
            requirements=list(requirements),
            results=list(results),
            all_validations_passed=passed == len(results),
            passed_count=passed,
            failed_count=len(results) - passed,
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
    ids = {"session_id": session_id, "sampling_id": sampling_id, "strategy_name": name}
    active = [*(getattr(strategy, "requirements", None) or requirements)]
    if has_plugins(HookType.SAMPLING_LOOP_START):
        budget = int(getattr(strategy, "loop_budget", 1))
        changed = await _invoke(
            HookType.SAMPLING_LOOP_START,
            backend,
            **ids,
            action=action,
            context=context,
            requirements=active,
            loop_budget=budget,
        )
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
            await _invoke(
                HookType.SAMPLING_ITERATION,
                backend,
                **ids,
                iteration=iteration,
                action=action,
                result=thunk,
                validation_results=list(checks),
                all_validations_passed=passed == len(checks),
                valid_count=passed,
                total_count=len(checks),
            )
        if passed < len(checks) and has_plugins(HookType.SAMPLING_REPAIR):
            await _invoke(
                HookType.SAMPLING_REPAIR,
                backend,
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
        return checks

    try:
        result = await strategy.asample(generate_counted, validate_reported, requirements)
    except Exception as exc:
        if has_plugins(HookType.SAMPLING_LOOP_END):
            await _invoke(HookType.SAMPLING_LOOP_END, backend, **ids, success=False, exception=exc)
        raise
    if has_plugins(HookType.SAMPLING_LOOP_END):
        used = len(result.sample_generations)
        await _invoke(
            HookType.SAMPLING_LOOP_END,
            backend,
            **ids,
            success=result.success,
            iterations_used=used,
            final_result=result.result,
            final_action=action,
            final_context=context,
            failure_reason=None if result.success else f"Budget exhausted after {used} iterations",
            all_results=list(result.sample_generations),
            all_validations=list(result.sample_validations),
        )
    return result


# -- tools -----------------------------------------------------------------


async def tool_pre_invoke(call: Any, invocation_id: str, backend: Any = None) -> Any:
    """``tool_pre_invoke``: the tool call to run (a plugin may replace it)."""
    if not has_plugins(HookType.TOOL_PRE_INVOKE):
        return call
    changed = await _invoke(
        HookType.TOOL_PRE_INVOKE,
        backend,
        tool_invocation_id=invocation_id,
        model_tool_call=call,
        is_control_flow=is_internal_tool(call.name),
    )
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
    changed = await _invoke(
        HookType.TOOL_POST_INVOKE,
        backend,
        tool_invocation_id=invocation_id,
        model_tool_call=call,
        tool_output=output,
        tool_message=message,
        execution_time_ms=elapsed_ms,
        success=error is None,
        error=error,
        is_control_flow=is_internal_tool(call.name),
    )
    return changed.tool_output
