"""The ReACT components and loop, the compactors and as_generic_chat_history."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mellea.backends.base import Backend
from mellea.backends.tools import MelleaTool
from mellea.core import CBlock, ModelOutputThunk, ModelToolCall
from mellea.core.model_options import ModelOption
from mellea.stdlib.components import Message, as_generic_chat_history
from mellea.stdlib.components.react import (
    MELLEA_FINALIZER_TOOL,
    ReactInitiator,
    pin_react_initiator,
    react_summary_prompt,
)
from mellea.stdlib.context import (
    ChatContext,
    LLMSummarizeCompactor,
    ThresholdCompactor,
    WindowCompactor,
)
from mellea.stdlib.context.chat import _rebuild_chat_context
from mellea.stdlib.frameworks.react import react
from tests.compat.lib_scripted import ScriptedBackend


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return f"rain in {city}"


class Planner(Backend):
    """Calls ``plan`` tools in turn: (name, args) pairs; records every request."""

    model_id = "planner"

    def __init__(self, plan: list[tuple[str, dict[str, Any]]]) -> None:
        super().__init__()
        self.plan = list(plan)
        self.requests: list[dict[str, Any]] = []

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        self.requests.append({"messages": messages, "options": model_options})
        tools = {t.name: t for t in (model_options or {}).get(ModelOption.TOOLS) or []}
        name, args = self.plan.pop(0)
        thunk = ModelOutputThunk("")
        thunk.usage = {"total_tokens": 100 * len(self.requests)}
        thunk.tool_calls = [ModelToolCall(name, tools[name].run, args)]
        return thunk


def test_react_calls_tools_until_the_final_answer():
    backend = Planner(
        [("weather", {"city": "Oslo"}), (MELLEA_FINALIZER_TOOL, {"answer": "It rains."})]
    )
    result, ctx = asyncio.run(
        react("Weather in Oslo?", ChatContext(), backend, tools=[MelleaTool.from_callable(weather)])
    )
    assert result.value == "It rains."
    offered = [t.name for t in backend.requests[0]["options"][ModelOption.TOOLS]]
    assert offered == ["weather", MELLEA_FINALIZER_TOOL]
    second = backend.requests[1]["messages"]
    assert "Weather in Oslo?" in second[0]["content"]  # the initiator leads
    assert "final_answer" in second[1]["content"]  # the thought prompt
    call = second[2]["tool_calls"][0]
    assert second[2]["role"] == "assistant" and call["function"]["name"] == "weather"
    assert second[3] == {"role": "tool", "content": "rain in Oslo", "tool_call_id": call["id"]}
    assert isinstance(ctx.as_list()[0], ReactInitiator)


def test_react_budget_runs_out():
    backend = Planner([("weather", {"city": "x"})] * 3)
    with pytest.raises(RuntimeError, match="2 iterations"):
        asyncio.run(
            react(
                "loop",
                ChatContext(),
                backend,
                tools=[MelleaTool.from_callable(weather)],
                loop_budget=2,
            )
        )


def test_react_refuses_a_simple_context():
    from mellea.stdlib.context import SimpleContext

    with pytest.raises(TypeError):
        asyncio.run(react("g", SimpleContext(), Planner([]), tools=None))


def _thunk(tokens: int) -> ModelOutputThunk:
    thunk = ModelOutputThunk("")
    thunk.generation.usage = {"total_tokens": tokens}
    return thunk


def test_threshold_compactor_gates_on_usage():
    gated = ThresholdCompactor(WindowCompactor(size=2), threshold=1000)
    ctx = ChatContext()
    for i in range(5):
        ctx = ctx.add(Message("user", f"m{i}"))
    assert len(gated.compact(ctx.add(_thunk(50))).as_list()) == 6
    assert len(gated.compact(ctx.add(_thunk(5000))).as_list()) == 2
    assert ThresholdCompactor(WindowCompactor(size=1), threshold=0).compact(ctx) is ctx


def test_summarize_compactor_keeps_the_pin_and_the_newest():
    backend = ScriptedBackend(["they talked about cats"])
    compactor = LLMSummarizeCompactor(
        default_backend=backend, keep_n=1, pin_predicate=pin_react_initiator
    )
    ctx = ChatContext().add(ReactInitiator("goal", None))
    for text in ("cats are nice", "dogs too", "newest"):
        ctx = ctx.add(Message("user", text))
    out = compactor.compact(ctx)
    items = out.as_list()
    assert isinstance(items[0], ReactInitiator)
    assert items[1].content.startswith("[CONTEXT SUMMARY]") and "cats" in items[1].content
    assert items[2].content == "newest" and len(items) == 3
    prompt = backend.calls[0]["messages"][0]["content"]
    assert "user: cats are nice" in prompt and "newest" not in prompt
    with pytest.raises(ValueError):
        LLMSummarizeCompactor(default_backend=backend, prompt_template="no placeholder")


def test_react_summary_prompt_escapes_the_goal():
    prompt = react_summary_prompt(goal="find {x}", max_tokens_hint=100)
    assert prompt.format(conversation="C").count("find {x}") == 1 and "100" in prompt


def test_rebuild_keeps_the_compactor_without_running_it():
    ctx = _rebuild_chat_context(
        [Message("user", str(i)) for i in range(4)], compactor=WindowCompactor(size=1)
    )
    assert len(ctx.as_list()) == 4 and len(ctx.add(Message("user", "x")).as_list()) == 1


def test_generic_chat_history():
    mot = ModelOutputThunk("raw")
    mot.parsed_repr = {"k": 1}
    ctx = ChatContext().add(Message("user", "q")).add(CBlock("block")).add(mot)
    history = as_generic_chat_history(ctx, formatter=lambda o: f"<{type(o).__name__}>")
    assert [(m.role, m.content) for m in history] == [
        ("user", "q"),
        ("user", "block"),
        ("assistant", "<dict>"),
    ]
    ctx2 = ChatContext().add(ReactInitiator("g", None))
    assert as_generic_chat_history(ctx2)[0].role == "user"
