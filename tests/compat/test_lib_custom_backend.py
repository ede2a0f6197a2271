"""Custom backends written the upstream way (``_generate_from_context``) work with our session.

The backends below are written as upstream's docs teach: subclass
``mellea.core.backend.Backend``, implement ``_generate_from_context`` and
``_generate_from_raw``, and (as upstream's own examples do) skip ``super().__init__``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from mellea import MelleaSession
from mellea.core.backend import Backend, BaseModelSubclass
from mellea.core.base import C, CBlock, Component, Context, GenerateLog, ModelOutputThunk
from mellea.stdlib.components.chat import Message
from mellea.stdlib.context import ChatContext
from mellea.stdlib.requirements import Requirement, req
from mellea.stdlib.sampling import RejectionSamplingStrategy
from tests.compat.lib_scripted import ScriptedBackend


class UpstreamStyleBackend(Backend):
    """Answers each call from ``replies`` (the last repeats) and records what it was given."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[Any, Context, dict | None]] = []

    def _next(self) -> str:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    async def _generate_from_context(
        self,
        action: Component[C] | CBlock | ModelOutputThunk,
        ctx: Context,
        *,
        format: type[BaseModelSubclass] | None = None,
        model_options: dict | None = None,
        tool_calls: bool = False,
    ) -> tuple[ModelOutputThunk[C], Context]:
        self.calls.append((action, ctx, model_options))
        mot: ModelOutputThunk = ModelOutputThunk(value=self._next())
        mot._generate_log = GenerateLog(is_final_result=True)
        return mot, ctx.add(action).add(mot)

    async def _generate_from_raw(
        self,
        actions: Sequence[Component[C] | CBlock],
        ctx: Context,
        *,
        format: type[BaseModelSubclass] | None = None,
        model_options: dict | None = None,
        tool_calls: bool = False,
    ) -> tuple[list[ModelOutputThunk], dict[str, Any] | None]:
        return [ModelOutputThunk(value=f"raw {i}") for i, _ in enumerate(actions)], None


def _text(action: Any) -> str:
    return action.content if isinstance(action, Message) else str(action)


def test_instruct_reaches_generate_from_context_with_the_instruction_as_a_message() -> None:
    backend = UpstreamStyleBackend(["Dear interns, lunch is on Friday."])
    m = MelleaSession(backend=backend)
    result = m.instruct("Write an email inviting the interns to lunch.", strategy=None)
    assert result.value == "Dear interns, lunch is on Friday."
    (action, ctx, _options) = backend.calls[0]
    assert isinstance(action, Message) and action.role == "user"
    assert "Write an email inviting the interns to lunch." in _text(action)
    assert isinstance(ctx, ChatContext) and ctx.as_list() == []
    assert m.last_prompt()[-1]["content"] == action.content


def test_chat_history_reaches_the_backend_as_a_chat_context_of_messages() -> None:
    backend = UpstreamStyleBackend(["Hi Ada.", "Your name is Ada."])
    m = MelleaSession(backend=backend, ctx=ChatContext(), model_options={"seed": 3})
    assert m.chat("My name is Ada.").content == "Hi Ada."
    assert m.chat("What is my name?").content == "Your name is Ada."
    action, ctx, options = backend.calls[1]
    assert action == Message("user", "What is my name?")
    assert ctx.as_list() == [Message("user", "My name is Ada."), Message("assistant", "Hi Ada.")]
    assert options["seed"] == 3


def test_validate_asks_the_custom_backend_to_judge() -> None:
    backend = UpstreamStyleBackend(["yes"])
    m = MelleaSession(backend=backend)
    [verdict] = m.validate([req("Mentions lunch.")], output=ModelOutputThunk("Lunch at noon."))
    assert verdict.as_bool() is True
    judged = _text(backend.calls[0][0])
    assert "Mentions lunch." in judged and "Lunch at noon." in judged


def test_rejection_sampling_retries_on_the_custom_backend() -> None:
    backend = UpstreamStyleBackend(["too short", "a long enough answer"])
    m = MelleaSession(backend=backend)
    long_enough = Requirement(
        "At least 3 words.", validation_fn=lambda c: len(c.last_output().value.split()) >= 3
    )
    result = m.instruct(
        "Answer.",
        requirements=[long_enough],
        strategy=RejectionSamplingStrategy(loop_budget=3),
        return_sampling_results=True,
    )
    assert result.success and result.result.value == "a long enough answer"
    assert len(backend.calls) == 2


def test_generate_from_raw_uses_the_backends_own_batch() -> None:
    backend = UpstreamStyleBackend(["unused"])
    thunks = asyncio.run(backend.generate_from_raw([CBlock("a"), CBlock("b")], ChatContext()))
    assert [t.value for t in thunks] == ["raw 0", "raw 1"]


def test_a_backend_written_our_way_answers_upstream_style_callers() -> None:
    backend = ScriptedBackend(["hello there"])
    ctx = ChatContext().add(Message("user", "earlier")).add(Message("assistant", "reply"))
    action = Message("user", "now")
    thunk, new_ctx = asyncio.run(backend.generate_from_context(action, ctx))
    assert asyncio.run(thunk.avalue()).strip() == "hello there"
    assert backend.calls[0]["messages"] == [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "now"},
    ]
    assert new_ctx.as_list()[-2:] == [action, thunk] and len(ctx.as_list()) == 2
    raw = asyncio.run(backend.generate_from_raw([CBlock("x"), CBlock("y")], ctx))
    assert [t.is_computed() for t in raw] == [True, True]
    assert [c["messages"] for c in backend.calls[1:]] == [
        [{"role": "user", "content": "x"}],
        [{"role": "user", "content": "y"}],
    ]


def test_a_backend_that_implements_neither_way_is_refused() -> None:
    class Nothing(Backend):
        pass

    with pytest.raises(TypeError, match="_generate_from_context"):
        Nothing()


def test_a_lazily_composed_action_is_rendered_once_its_inputs_are_done() -> None:
    # upstream's melp examples: x and y are outputs still streaming when fib's call starts
    from mellea.core import GenerationChunk
    from mellea.stdlib.components import SimpleComponent
    from mellea.stdlib.context import SimpleContext

    async def later(text: str):
        await asyncio.sleep(0.01)
        yield GenerationChunk(text=text)
        yield GenerationChunk(finish_reason="stop")

    async def run() -> list:
        backend = ScriptedBackend(["5"])
        x = ModelOutputThunk.from_stream(later("2"))
        y = ModelOutputThunk.from_stream(later("3"))
        action = SimpleComponent(instruction="What is x+y?", x=x, y=y)
        thunk, _ = await backend.generate_from_context(action=action, ctx=SimpleContext())
        await thunk.avalue()
        return backend.calls

    [call] = asyncio.run(run())
    sent = call["messages"][-1]["content"]
    assert "What is x+y?" in sent and "2" in sent and "3" in sent
