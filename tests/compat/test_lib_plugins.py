"""mellea.plugins: hook points fire with their payloads; blocking, modifying, scopes, modes.

Programs here are written the way upstream's docs/examples/plugins/ are (``@hook``,
``register``, ``plugin_scope``, ``Plugin`` classes, ``PluginSet``, the built-in debug
plugins), run in-process against a scripted backend.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import mellea.stdlib.session as session_module
import mellea.stdlib.start_backend as start_backend_module
from mellea import start_session
from mellea.backends.runtime import Runtime
from mellea.core import GenerationChunk, ModelOutputThunk
from mellea.core.tool_call import ModelToolCall
from mellea.plugins import (
    HookType,
    Plugin,
    PluginMode,
    PluginResult,
    PluginSet,
    PluginViolationError,
    block,
    hook,
    modify,
    plugin_scope,
    register,
    unregister,
)
from mellea.plugins.hooks.session import SessionPreInitPayload
from mellea.plugins.manager import PluginManager, drain_background_tasks, invoke_hook
from mellea.stdlib.functional import call_tools
from mellea.stdlib.requirements import req, simple_validate
from mellea.stdlib.session import MelleaSession
from tests.compat.lib_scripted import ScriptedBackend


@pytest.fixture(autouse=True)
def plugins() -> Iterator[PluginManager]:
    """Each test registers into a manager of its own."""
    manager = PluginManager()
    with manager.active():
        yield manager


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> list[ScriptedBackend]:
    """``start_session()`` builds a scripted backend (its replies set per test)."""
    made: list[ScriptedBackend] = []

    def fake(name, model_id, ctx, *, context_type=None, model_options=None, **kw):
        made.append(ScriptedBackend(["yes, Paris"]))
        made[-1].asked = {"name": name, "model_id": model_id, "model_options": model_options}
        return start_backend_module.resolve_context(ctx, context_type), made[-1]

    # where start_session looks it up (session.py imports it at the top)
    monkeypatch.setattr(session_module, "start_backend", fake)
    return made


def recorder(calls: list[tuple[str, Any]], hook_type: HookType, **options: Any) -> Any:
    @hook(hook_type, **options)
    async def record(payload: Any, ctx: Any) -> None:
        calls.append((str(hook_type), payload))

    record.__qualname__ = f"record_{hook_type.value}"
    return record


FIRED_HERE = [
    HookType.SESSION_PRE_INIT,
    HookType.SESSION_POST_INIT,
    HookType.SESSION_RESET,
    HookType.SESSION_CLEANUP,
    HookType.COMPONENT_PRE_EXECUTE,
    HookType.COMPONENT_POST_SUCCESS,
    HookType.COMPONENT_POST_ERROR,
    HookType.GENERATION_PRE_CALL,
    HookType.GENERATION_POST_CALL,
    HookType.GENERATION_ERROR,
    HookType.VALIDATION_PRE_CHECK,
    HookType.VALIDATION_POST_CHECK,
    HookType.SAMPLING_LOOP_START,
    HookType.SAMPLING_ITERATION,
    HookType.SAMPLING_REPAIR,
    HookType.SAMPLING_LOOP_END,
    HookType.TOOL_PRE_INVOKE,
    HookType.TOOL_POST_INVOKE,
]


def says_yes() -> Any:
    return req("must say yes", validation_fn=simple_validate(lambda text: "yes" in text))


# -- each hook fires at its point with its payload ---------------------------


def test_a_session_fires_every_hook_in_order_with_its_payload(scripted) -> None:
    calls: list[tuple[str, Any]] = []
    register([recorder(calls, t) for t in FIRED_HERE])
    with start_session(context_type="chat", model_options={"temperature": 0.1}) as m:
        m.backend.replies = ["no idea", "yes, Paris"]
        result = m.instruct("Name the capital of France.", requirements=[says_yes()])
        assert str(result).strip() == "yes, Paris"
        session_id = m.id
    names = [name for name, _ in calls]
    assert names == [
        "session_pre_init",
        "session_post_init",
        "component_pre_execute",
        "sampling_loop_start",
        "generation_pre_call",
        "generation_post_call",
        "validation_pre_check",
        "validation_post_check",
        "sampling_iteration",
        "sampling_repair",
        "generation_pre_call",
        "generation_post_call",
        "validation_pre_check",
        "validation_post_check",
        "sampling_iteration",
        "sampling_loop_end",
        "component_post_success",
        "session_cleanup",
    ]
    payloads = dict(calls)  # the last payload of each hook
    first = {name: p for name, p in reversed(calls)}  # the first of each
    assert first["session_pre_init"].context_type == "ChatContext"
    assert first["session_pre_init"].model_options == {"temperature": 0.1}
    assert payloads["session_post_init"].session_id == session_id
    pre = first["component_pre_execute"]
    assert pre.component_type == "Instruction" and len(pre.requirements) == 1
    assert pre.strategy is not None and pre.hook == "component_pre_execute"
    start = payloads["sampling_loop_start"]
    assert (start.strategy_name, start.loop_budget) == ("RejectionSamplingStrategy", 2)
    gen = first["generation_pre_call"]
    assert gen.model == "scripted" and gen.model_options["temperature"] == 0.1
    post = first["generation_post_call"]
    assert post.model_output.value.strip() == "no idea"
    assert post.generation_id == gen.generation_id and post.latency_ms >= 0
    assert post.prompt[-1]["content"].startswith("Name the capital")
    assert first["validation_post_check"].all_validations_passed is False
    assert first["validation_post_check"].failed_count == 1
    assert first["sampling_iteration"].iteration == 1
    assert payloads["sampling_iteration"].iteration == 2
    assert payloads["sampling_iteration"].all_validations_passed is True
    assert payloads["sampling_repair"].repair_iteration == 1
    end = payloads["sampling_loop_end"]
    assert (end.success, end.iterations_used, len(end.all_results)) == (True, 2, 2)
    done = payloads["component_post_success"]
    assert done.result.value.strip() == "yes, Paris" and done.action is pre.action
    assert payloads["session_cleanup"].interaction_count == 1
    assert payloads["session_cleanup"].exception is None


def test_reset_fires_session_reset_with_the_context_it_drops(scripted) -> None:
    calls: list[tuple[str, Any]] = []
    register(recorder(calls, HookType.SESSION_RESET))
    m = start_session(context_type="chat")
    m.chat("hello")
    before = m.ctx
    m.reset()
    assert [name for name, _ in calls] == ["session_reset"]
    assert calls[0][1].previous_context is before


def test_errors_fire_generation_error_and_component_post_error() -> None:
    calls: list[tuple[str, Any]] = []
    register([recorder(calls, t) for t in FIRED_HERE])

    class Failing(ScriptedBackend):
        async def generate(self, messages, **kw):
            async def stream():
                yield GenerationChunk(text="half ")
                raise RuntimeError("engine fell over")

            return ModelOutputThunk.from_stream(stream())

    m = MelleaSession(Failing(["x"]))
    with pytest.raises(RuntimeError, match="fell over"):
        m.instruct("Say something.", strategy=None)
    names = [name for name, _ in calls]
    assert names == [
        "component_pre_execute",
        "generation_pre_call",
        "generation_error",
        "component_post_error",
    ]
    assert str(calls[2][1].exception) == "engine fell over"
    assert calls[3][1].error_type == "RuntimeError" and "fell over" in calls[3][1].stack_trace


def test_tool_hooks_fire_around_call_tools_and_may_change_the_output() -> None:
    calls: list[tuple[str, Any]] = []
    register(
        [recorder(calls, HookType.TOOL_PRE_INVOKE), recorder(calls, HookType.TOOL_POST_INVOKE)]
    )

    @hook(HookType.TOOL_POST_INVOKE, priority=90)
    async def shout(payload, ctx):
        return modify(payload, tool_output=str(payload.tool_output).upper())

    register(shout)
    thunk = ModelOutputThunk(
        "", tool_calls=[ModelToolCall("echo", lambda text: text, {"text": "hi"})]
    )
    messages = call_tools(thunk, None)
    assert [m.content for m in messages] == ["HI"]
    assert [name for name, _ in calls] == ["tool_pre_invoke", "tool_post_invoke"]
    post = calls[1][1]
    assert post.success and post.tool_output == "hi" and post.model_tool_call.name == "echo"
    assert post.tool_invocation_id == calls[0][1].tool_invocation_id


# -- blocking and modifying ---------------------------------------------------


def test_a_sequential_block_stops_the_call_with_plugin_violation_error() -> None:
    @hook(HookType.GENERATION_PRE_CALL, priority=10)
    async def no_generation(payload, ctx):
        return block("no model calls today", code="NOPE_001")

    register(no_generation)
    backend = ScriptedBackend(["never"])
    with pytest.raises(PluginViolationError) as caught:
        MelleaSession(backend).instruct("Hello", strategy=None)
    error = caught.value
    assert (error.hook_type, error.reason, error.code) == (
        "generation_pre_call",
        "no model calls today",
        "NOPE_001",
    )
    assert error.plugin_name.endswith("no_generation")
    assert "no model calls today" in str(error) and "generation_pre_call" in str(error)
    assert backend.calls == []


def test_a_blocked_tool_call_is_not_run() -> None:
    ran: list[str] = []

    @hook(HookType.TOOL_PRE_INVOKE, mode=PluginMode.CONCURRENT)
    async def allowlist(payload, _):
        if payload.model_tool_call.name != "safe":
            return block(f"tool {payload.model_tool_call.name!r} is not allowed", code="TOOL")

    register(allowlist)
    thunk = ModelOutputThunk("", tool_calls=[ModelToolCall("rm", lambda: ran.append("rm"), {})])
    with pytest.raises(PluginViolationError, match="not allowed"):
        call_tools(thunk, None)
    assert ran == []


def test_modify_changes_writable_fields_and_drops_the_rest() -> None:
    @hook(HookType.GENERATION_PRE_CALL)
    async def cap(payload, ctx):
        options = {**payload.model_options, "max_tokens": 7}
        return modify(payload, model_options=options, action="something else")

    register(cap)
    backend = ScriptedBackend(["ok"])
    m = MelleaSession(backend)
    m.instruct("Hello", strategy=None, model_options={"temperature": 0.5})
    assert backend.calls[0]["options"]["max_tokens"] == 7
    assert backend.calls[0]["options"]["temperature"] == 0.5
    assert backend.calls[0]["messages"][-1]["content"] == "Hello"


def test_plugin_result_with_a_model_copy_works_as_modify(scripted) -> None:
    @hook(HookType.SESSION_PRE_INIT)
    async def pick_options(payload, ctx):
        changed = payload.model_copy(update={"model_options": {"seed": 3}})
        return PluginResult(continue_processing=True, modified_payload=changed)

    register(pick_options)
    m = start_session()
    assert scripted[-1].asked["model_options"] == {"seed": 3}
    assert m.model_options == {"seed": 3}


def test_component_pre_execute_may_replace_the_requirements() -> None:
    @hook(HookType.COMPONENT_PRE_EXECUTE)
    async def stricter(payload, ctx):
        return modify(payload, requirements=[says_yes()])

    register(stricter)
    backend = ScriptedBackend(["no", "still no", "yes"])
    result = MelleaSession(backend).instruct("Agree.", return_sampling_results=True)
    assert result.success is False and len(backend.calls) == 2  # budget 2, both failed


def test_sampling_loop_start_may_change_the_budget() -> None:
    @hook(HookType.SAMPLING_LOOP_START)
    async def one_try(payload, ctx):
        return modify(payload, loop_budget=1)

    register(one_try)
    backend = ScriptedBackend(["no", "yes"])
    result = MelleaSession(backend).instruct(
        "Agree.", requirements=[says_yes()], return_sampling_results=True
    )
    assert result.success is False and len(backend.calls) == 1


def test_validation_post_check_may_overrule_a_verdict() -> None:
    from mellea.core.requirement import ValidationResult

    @hook(HookType.VALIDATION_POST_CHECK)
    async def lenient(payload, ctx):
        return modify(payload, results=[ValidationResult(True) for _ in payload.results])

    register(lenient)
    backend = ScriptedBackend(["no"])
    result = MelleaSession(backend).instruct(
        "Agree.", requirements=[says_yes()], return_sampling_results=True
    )
    assert result.success is True and len(backend.calls) == 1


# -- registration and scopes --------------------------------------------------


def test_plugin_scope_adds_and_removes_even_on_error(plugins: PluginManager) -> None:
    calls: list[tuple[str, Any]] = []
    log = recorder(calls, HookType.GENERATION_PRE_CALL)
    m = MelleaSession(ScriptedBackend(["ok"]))
    with plugin_scope(log):
        m.instruct("one", strategy=None)
    m.instruct("two", strategy=None)
    assert len(calls) == 1
    with pytest.raises(ValueError), plugin_scope([log]):
        raise ValueError("boom")
    assert plugins.handlers() == []


def test_nested_scopes_each_remove_only_their_own() -> None:
    calls: list[tuple[str, Any]] = []

    class Guard(Plugin, name="guard"):
        @hook(HookType.GENERATION_PRE_CALL)
        async def note(self, payload, ctx):
            calls.append(("guard", payload))

    outer = recorder(calls, HookType.GENERATION_PRE_CALL)
    m = MelleaSession(ScriptedBackend(["ok"]))
    with plugin_scope(outer):
        with Guard():
            m.instruct("both", strategy=None)
        m.instruct("outer only", strategy=None)
    m.instruct("none", strategy=None)
    assert [name for name, _ in calls] == ["generation_pre_call", "guard", "generation_pre_call"]


def test_one_plugin_instance_cannot_be_active_twice() -> None:
    class Guard(Plugin, name="guard"):
        @hook(HookType.GENERATION_PRE_CALL)
        async def note(self, payload, ctx):
            return None

    guard = Guard()
    with guard, pytest.raises(RuntimeError, match="already active"), guard:
        pass
    with guard:  # usable again once its block ended
        pass


def test_session_plugins_go_away_with_the_session(scripted, plugins: PluginManager) -> None:
    calls: list[tuple[str, Any]] = []
    log = recorder(calls, HookType.COMPONENT_PRE_EXECUTE)
    with start_session(plugins=[PluginSet("obs", [log])]) as m:
        m.instruct("one", strategy=None)
        assert len(plugins.handlers()) == 1
    assert plugins.handlers() == []
    start_session().instruct("two", strategy=None)
    assert len(calls) == 1


def test_register_and_unregister_globally(plugins: PluginManager) -> None:
    calls: list[tuple[str, Any]] = []

    class Counter(Plugin, name="counter", priority=5):
        @hook(HookType.GENERATION_PRE_CALL)
        async def before(self, payload, ctx):
            calls.append(("before", payload))

        @hook(HookType.GENERATION_POST_CALL)
        async def after(self, payload, ctx):
            calls.append(("after", payload))

    counter = Counter()
    register(counter)
    assert sorted(h.name for h in plugins.handlers()) == [
        "counter.generation_post_call",
        "counter.generation_pre_call",
    ]
    MelleaSession(ScriptedBackend(["ok"])).instruct("hi", strategy=None)
    unregister(counter)
    MelleaSession(ScriptedBackend(["ok"])).instruct("hi", strategy=None)
    assert [name for name, _ in calls] == ["before", "after"]


def test_each_app_keeps_its_own_plugins() -> None:
    calls: list[str] = []

    @hook(HookType.GENERATION_PRE_CALL)
    async def app_a_only(payload, ctx):
        calls.append("a")

    app_a, app_b = Runtime(), Runtime()
    with app_a.active():
        register(app_a_only)
    with app_b.active():
        MelleaSession(ScriptedBackend(["ok"])).instruct("b", strategy=None)
    with app_a.active():
        MelleaSession(ScriptedBackend(["ok"])).instruct("a", strategy=None)
    assert calls == ["a"]


def test_registering_something_else_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="cannot register"):
        register(object())
    with pytest.raises(TypeError, match="async def"):

        @hook(HookType.GENERATION_PRE_CALL)
        def not_async(payload, ctx):
            return None


# -- modes and priorities -----------------------------------------------------


def pre_init_payload() -> SessionPreInitPayload:
    return SessionPreInitPayload(backend_name="local", model_id="m", model_options={"n": 0})


def run_hook(payload: Any = None) -> tuple[Any, Any]:
    async def go() -> tuple[Any, Any]:
        result = await invoke_hook(HookType.SESSION_PRE_INIT, payload or pre_init_payload())
        await drain_background_tasks()
        return result

    return asyncio.run(go())


def test_modes_run_in_upstreams_order_whatever_the_priority() -> None:
    order: list[str] = []

    def make(mode: PluginMode, priority: int) -> Any:
        @hook(HookType.SESSION_PRE_INIT, mode=mode, priority=priority)
        async def handler(payload, ctx):
            order.append(mode.value)

        handler.__qualname__ = f"handler_{mode.value}"
        return handler

    register([make(PluginMode.FIRE_AND_FORGET, 1), make(PluginMode.CONCURRENT, 2)])
    register([make(PluginMode.AUDIT, 3), make(PluginMode.TRANSFORM, 4)])
    register(make(PluginMode.SEQUENTIAL, 99))
    run_hook()
    assert order == ["sequential", "transform", "audit", "concurrent", "fire_and_forget"]


def test_what_each_mode_may_do() -> None:
    def blocker(mode: PluginMode) -> Any:
        @hook(HookType.SESSION_PRE_INIT, mode=mode)
        async def handler(payload, ctx):
            return block(f"{mode.value} says no")

        handler.__qualname__ = f"blocker_{mode.value}"
        return handler

    def modifier(mode: PluginMode, n: int) -> Any:
        @hook(HookType.SESSION_PRE_INIT, mode=mode)
        async def handler(payload, ctx):
            return modify(payload, model_options={"n": n})

        handler.__qualname__ = f"modifier_{mode.value}"
        return handler

    # blocks that are not enforced
    register([blocker(m) for m in (PluginMode.TRANSFORM, PluginMode.AUDIT)])
    register(blocker(PluginMode.FIRE_AND_FORGET))
    _, payload = run_hook()
    assert payload.model_options == {"n": 0}
    # modifications: sequential and transform apply (chained), the others are dropped
    register([modifier(PluginMode.SEQUENTIAL, 1), modifier(PluginMode.TRANSFORM, 2)])
    register([modifier(PluginMode.AUDIT, 3), modifier(PluginMode.CONCURRENT, 4)])
    register(modifier(PluginMode.FIRE_AND_FORGET, 5))
    result, payload = run_hook()
    assert payload.model_options == {"n": 2}
    assert result.modified_payload.model_options == {"n": 2}
    # blocks that are enforced
    for mode in (PluginMode.CONCURRENT, PluginMode.SEQUENTIAL):
        register(blocker(mode))
        with pytest.raises(PluginViolationError, match=f"{mode.value} says no"):
            run_hook()


def test_a_sequential_block_stops_later_handlers() -> None:
    fired: list[str] = []

    @hook(HookType.SESSION_PRE_INIT, priority=1)
    async def first(payload, ctx):
        return block("stop")

    @hook(HookType.SESSION_PRE_INIT, priority=2)
    async def second(payload, ctx):
        fired.append("second")

    register([second, first])
    with pytest.raises(PluginViolationError):
        run_hook()
    assert fired == []


def test_priorities_hook_over_class_and_set_over_all() -> None:
    order: list[str] = []

    class Ordered(Plugin, name="ordered", priority=30):
        @hook(HookType.SESSION_PRE_INIT)
        async def by_class(self, payload, ctx):
            order.append("class-30")

        @hook(HookType.SESSION_PRE_INIT, priority=10)
        async def by_hook(self, payload, ctx):
            order.append("hook-10")

    @hook(HookType.SESSION_PRE_INIT)
    async def default_50(payload, ctx):
        order.append("default-50")

    @hook(HookType.SESSION_PRE_INIT, priority=90)
    async def pulled_forward(payload, ctx):
        order.append("set-1")

    register(
        [
            default_50,
            Ordered(),
            PluginSet("first", [PluginSet("inner", [pulled_forward])], priority=1),
        ]
    )
    run_hook()
    assert order == ["set-1", "hook-10", "class-30", "default-50"]


def test_a_failing_or_slow_handler_is_ignored(plugins: PluginManager) -> None:
    plugins.timeout = 0.05

    @hook(HookType.SESSION_PRE_INIT, priority=1)
    async def broken(payload, ctx):
        raise KeyError("oops")

    @hook(HookType.SESSION_PRE_INIT, priority=2)
    async def slow(payload, ctx):
        await asyncio.sleep(5)
        return block("too late")

    @hook(HookType.SESSION_PRE_INIT, priority=3)
    async def fine(payload, ctx):
        return modify(payload, model_id="other")

    register([broken, slow, fine])
    _, payload = run_hook()
    assert payload.model_id == "other"


def test_the_handler_context_names_the_backend() -> None:
    seen: list[Any] = []

    @hook(HookType.GENERATION_PRE_CALL)
    async def look(payload, ctx):
        seen.append(ctx.global_context.state["backend_name"])

    register(look)
    MelleaSession(ScriptedBackend(["ok"])).instruct("hi", strategy=None)
    assert seen == ["scripted"]


# -- the built-in debug plugins -------------------------------------------------


def test_builtin_debug_plugins_log_each_stage(caplog: pytest.LogCaptureFixture) -> None:
    from mellea.plugins.builtin_debug import (
        log_generation_post_call,
        log_generation_pre_call,
        log_sampling_iteration,
        log_sampling_loop_end,
        log_sampling_loop_start,
        log_sampling_repair,
        log_validation_post_check,
        log_validation_pre_check,
    )

    caplog.set_level(logging.DEBUG, logger="mellea.plugins.builtin_debug")
    with plugin_scope(
        log_generation_pre_call,
        log_generation_post_call,
        log_validation_pre_check,
        log_validation_post_check,
        log_sampling_loop_start,
        log_sampling_iteration,
        log_sampling_repair,
        log_sampling_loop_end,
    ):
        backend = ScriptedBackend(["no", "yes indeed"])
        MelleaSession(backend).instruct("Agree.", requirements=[says_yes()])
    text = caplog.text
    for marker in (
        "[GEN-PRE-CALL",
        "model=scripted",
        "[GEN-POST-CALL",
        "response=yes indeed",
        "[VALIDATION-PRE-CHECK] 1 requirement(s)",
        "FAIL must say yes",
        "[SAMPLING-START] strategy=RejectionSamplingStrategy | loop_budget=2",
        "[SAMPLING-ITER 1] FAILED: 0/1",
        "[REPAIR] at iteration 1",
        "[SAMPLING-END] SUCCESS in 2 iteration(s)",
    ):
        assert marker in text, marker


def test_only_the_hooks_writable_fields_change() -> None:
    @hook(HookType.SESSION_PRE_INIT)
    async def overreach(payload, ctx):
        return modify(payload, backend_name="openai", context_type="ChatContext", model_id="x")

    register(overreach)
    _, payload = run_hook()
    assert (payload.backend_name, payload.context_type, payload.model_id) == (
        "local",
        "SimpleContext",
        "x",
    )


def test_a_set_priority_also_overrides_plugin_methods() -> None:
    order: list[str] = []

    class Late(Plugin, name="late", priority=80):
        @hook(HookType.SESSION_PRE_INIT, priority=70)
        async def note(self, payload, ctx):
            order.append("late-in-set-5")

    @hook(HookType.SESSION_PRE_INIT, priority=10)
    async def early(payload, ctx):
        order.append("early-10")

    register([early, PluginSet("urgent", [Late()], priority=5)])
    run_hook()
    assert order == ["late-in-set-5", "early-10"]


def test_session_validate_runs_inside_the_validation_hooks() -> None:
    calls: list[tuple[str, Any]] = []
    register([recorder(calls, HookType.VALIDATION_POST_CHECK)])

    @hook(HookType.VALIDATION_PRE_CHECK)
    async def add_one(payload, ctx):
        return modify(payload, requirements=[*payload.requirements, says_yes()])

    register(add_one)
    m = MelleaSession(ScriptedBackend(["unused"]))
    results = m.validate([req("short", validation_fn=lambda ctx: True)], output="no")
    assert [bool(r) for r in results] == [True, False]
    post = calls[0][1]
    assert (post.passed_count, post.failed_count, post.all_validations_passed) == (1, 1, False)
    assert [r.description for r in post.requirements] == ["short", "must say yes"]
