"""MelleaSession over a scripted backend: instruct, requirements, rejection sampling, chat."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import mellea
from mellea.backends.base import Backend
from mellea.backends.model_options import ModelOption
from mellea.core import GenerationChunk, ModelOutputThunk, Requirement, SamplingResult
from mellea.stdlib.context import ChatContext, SimpleContext
from mellea.stdlib.requirements import check, req, simple_validate
from mellea.stdlib.sampling import RejectionSamplingStrategy


class ScriptedBackend(Backend):
    """Replies with a fixed script, one reply per generate call, and records the calls."""

    model_id = "scripted"

    def __init__(self, replies: list[str]) -> None:
        super().__init__()
        self.replies = list(replies)
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        self.calls.append((messages, dict(model_options or {})))
        text = self.replies.pop(0)

        async def stream():
            for word in text.split(" "):
                yield GenerationChunk(text=word + " ")
            yield GenerationChunk(finish_reason="stop")

        return ModelOutputThunk.from_stream(stream())


def session(replies: list[str], ctx=None) -> mellea.MelleaSession:
    return mellea.MelleaSession(ScriptedBackend(replies), ctx=ctx)


def test_instruct_returns_a_computed_thunk():
    s = session(["hello there"])
    result = s.instruct("Greet me.")
    assert isinstance(result, ModelOutputThunk) and result.is_computed()
    assert result.value == "hello there "
    messages, _ = s.backend.calls[0]
    assert messages == [{"role": "user", "content": "Greet me."}]


def test_requirements_are_rendered_and_checked_with_retries():
    s = session(["too long reply here", "short"])
    short = Requirement("At most two words.", simple_validate(lambda t: len(t.split()) <= 2))
    result = s.instruct(
        "Say something.",
        requirements=[short, check("hidden check", simple_validate(lambda t: True))],
        strategy=RejectionSamplingStrategy(loop_budget=3),
        return_sampling_results=True,
    )
    assert isinstance(result, SamplingResult)
    assert result.success and result.result_index == 1
    assert result.result.value == "short "
    assert len(result.sample_generations) == 2
    prompt = s.backend.calls[0][0][-1]["content"]
    assert "At most two words." in prompt and "hidden check" not in prompt


def test_failed_sampling_returns_first_attempt():
    s = session(["one two three", "four five six"])
    result = s.instruct(
        "x",
        requirements=[req("one word", simple_validate(lambda t: len(t.split()) == 1))],
        strategy=RejectionSamplingStrategy(loop_budget=2),
        return_sampling_results=True,
        model_options={ModelOption.SEED: 10},
    )
    assert not result.success and result.result.value == "one two three "
    seeds = [call[1][ModelOption.SEED] for call in s.backend.calls]
    assert seeds == [10, 11]
    assert s.backend.calls[1][1][ModelOption.TEMPERATURE] == 0.7


def test_string_requirement_is_judged_by_the_model():
    s = session(["an answer", "Yes, it does.", "another", "No."])
    result = s.instruct("q", requirements=["be nice"], return_sampling_results=True)
    assert result.success
    judge_prompt = s.backend.calls[1][0][-1]["content"]
    assert "be nice" in judge_prompt and "an answer" in judge_prompt
    failing = session(["x", "No.", "y", "no"])
    assert not failing.instruct("q", requirements=["be nice"], return_sampling_results=True).success


async def test_ainstruct_without_awaiting_streams():
    s = session(["a b c"])
    thunk = await s.ainstruct("q", strategy=None, await_result=False)
    assert not thunk.is_computed()
    assert await thunk.astream() == "a "
    assert await thunk.avalue() == "a b c "


def test_chat_context_keeps_history_and_simple_does_not():
    chat = session(["first", "second"], ctx=ChatContext())
    chat.chat("hi")
    reply = chat.chat("again")
    assert reply.content == "second "
    roles = [m["role"] for m in chat.backend.calls[1][0]]
    assert roles == ["user", "assistant", "user"]
    simple = session(["first", "second"], ctx=SimpleContext())
    simple.instruct("a")
    simple.instruct("b")
    assert len(simple.backend.calls[1][0]) == 1


def test_system_prompt_and_validate():
    s = session(["ok"], ctx=ChatContext())
    s.instruct("q", model_options={ModelOption.SYSTEM_PROMPT: "be terse"})
    assert s.backend.calls[0][0][0] == {"role": "system", "content": "be terse"}
    results = s.validate([req("has ok", simple_validate(lambda t: "ok" in t))])
    assert [r.as_bool() for r in results] == [True]
    results = s.validate(
        req("short", simple_validate(lambda t: (len(t) < 3, "length"))), output="long text"
    )
    assert not results[0] and results[0].reason == "length"


def test_sync_instruct_works_inside_a_running_loop():
    async def main():
        return session(["inside"]).instruct("q").value

    assert asyncio.run(main()) == "inside "


def test_unknown_backend_lists_known_ones():
    with pytest.raises(
        ValueError, match="local, hf, huggingface, openai, ollama, litellm, watsonx"
    ):
        mellea.start_session("bedrock-direct")


def test_replace_keys():
    options = {"k1": "v1", "k2": "v2", "M1": "m1"}
    assert ModelOption.replace_keys(options, {"k1": "M1", "k2": "M2"}) == {"M1": "m1", "M2": "v2"}
    assert ModelOption.remove_special_keys({ModelOption.SEED: 1, "temperature": 0}) == {
        "temperature": 0
    }
