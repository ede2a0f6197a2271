"""The sampling strategies and presets upstream ships, and SamplingResult's contexts
and last_prompt, over scripted backends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mellea.backends.base import Backend
from mellea.core import GenerationChunk, ModelOutputThunk
from mellea.core.model_options import ModelOption
from mellea.stdlib.context import ChatContext
from mellea.stdlib.requirements import req, simple_validate
from mellea.stdlib.sampling import (
    BudgetForcingSamplingStrategy,
    MajorityVotingStrategyForMath,
    MBRDRougeLStrategy,
    ModelFriendlyRepairStrategy,
    SOFAISamplingStrategy,
    python_code_generation_sampling,
    python_plotting_sampling,
)
from mellea.stdlib.sampling.majority_voting import final_answer, rouge_l
from mellea.stdlib.session import MelleaSession
from tests.compat.lib_scripted import ScriptedBackend


class Barrier(Backend):
    """Each reply streams only once ``n`` requests are open at the same time, so
    samples made one after another would never finish (the test times out)."""

    model_id = "barrier"

    def __init__(self, replies: list[str], n: int) -> None:
        super().__init__()
        self.replies = list(replies)
        self.n = n
        self.open = 0
        self.all_open = asyncio.Event()
        self.options: list[dict[str, Any]] = []

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        self.options.append(dict(model_options or {}))
        text = self.replies.pop(0)
        self.open += 1
        if self.open >= self.n:
            self.all_open.set()

        async def stream():
            await self.all_open.wait()
            yield GenerationChunk(text=text)
            yield GenerationChunk(finish_reason="stop")

        return ModelOutputThunk.from_stream(stream())


async def _instruct(m: MelleaSession, strategy, **kw):
    return await asyncio.wait_for(
        m.ainstruct("q", strategy=strategy, return_sampling_results=True, **kw), timeout=20
    )


def test_mbrd_samples_run_concurrently_and_the_consensus_wins():
    replies = [
        "the cat sat on the mat",
        "dogs bark at night",
        "the cat sat on a mat",
        "a cat sat on the mat",
    ]
    backend = Barrier(replies, n=4)
    result = asyncio.run(_instruct(MelleaSession(backend), MBRDRougeLStrategy(number_of_samples=4)))
    assert len(result.sample_generations) == 4
    assert "cat" in result.result.value and result.success
    seeds = [o.get(ModelOption.TEMPERATURE) for o in backend.options]
    assert (
        seeds.count(None) == 1 and seeds.count(0.7) == 3
    )  # only the first is the request as given


def test_majority_vote_for_math():
    replies = ["so \\boxed{4}", "the answer is 5", "2+2 = \\boxed{4}", "It is 4."]
    backend = Barrier(replies, n=4)
    result = asyncio.run(
        _instruct(MelleaSession(backend), MajorityVotingStrategyForMath(number_of_samples=4))
    )
    assert final_answer(result.result.value) == "4"
    assert final_answer("x \\boxed{\\frac{1}{2}} y") == "\\frac{1}{2}"
    strategy = MajorityVotingStrategyForMath()
    assert strategy.compare_strings("\\boxed{0.5}", "\\boxed{\\frac{1}{2}}") == 1.0


def test_rouge_l():
    assert rouge_l("a b c d", "a b c d") == 1.0
    assert rouge_l("a b c d", "x y") == 0.0
    assert 0 < rouge_l("the cat sat", "the cat ran") < 1


def test_voting_with_requirements_keeps_each_samples_checks():
    backend = ScriptedBackend(["short", "a much longer answer here", "short"])
    strategy = MBRDRougeLStrategy(number_of_samples=3)
    is_short = req("short", validation_fn=simple_validate(lambda s: len(s.split()) < 3))
    result = MelleaSession(backend).instruct(
        "q", requirements=[is_short], strategy=strategy, return_sampling_results=True
    )
    assert len(result.sample_validations) == 3 and result.result.value.strip() == "short"


class Named(ScriptedBackend):
    def __init__(self, name: str, replies: list[str]) -> None:
        super().__init__(replies)
        self.model_id = name


def _digits_only():
    return req(
        "Only digits.",
        validation_fn=simple_validate(
            lambda s: (s.strip().isdigit(), f"{s.strip()!r} has non-digits")
        ),
    )


@pytest.mark.parametrize("mode", ["fresh_start", "continue_chat", "best_attempt"])
def test_sofai_escalates_to_the_slow_solver(mode):
    s1 = Named("fast", ["abc", "ab1", "a12"])
    s2 = Named("slow", ["123"])
    strategy = SOFAISamplingStrategy(s1, s2, mode, loop_budget=3, feedback_strategy="all_errors")
    m = MelleaSession(ScriptedBackend(["unused"]), ctx=ChatContext())
    result = m.instruct(
        "Give digits.",
        requirements=[_digits_only()],
        strategy=strategy,
        return_sampling_results=True,
    )
    assert result.success and result.result.value.strip() == "123"
    assert len(s1.calls) == 3 and len(s2.calls) == 1
    s2_messages = s2.calls[0]["messages"]
    if mode == "fresh_start":
        assert s2_messages[-1]["content"].startswith("Give digits.")
    elif mode == "continue_chat":
        assert len(s2_messages) == 7 and "non-digits" in s2_messages[-1]["content"]
    else:
        assert s2_messages[-2]["content"].strip() == "a12"
    # feedback reached the fast solver's second attempt
    assert "fix the following" in s1.calls[1]["messages"][-1]["content"]


def test_sofai_stops_s1_early_without_progress_and_checks_types():
    s1 = Named("fast", ["abc", "abc", "xyz"])
    s2 = Named("slow", ["9"])
    strategy = SOFAISamplingStrategy(s1, s2, loop_budget=5)
    MelleaSession(ScriptedBackend(["unused"])).instruct(
        "q", requirements=[_digits_only()], strategy=strategy
    )
    assert len(s1.calls) == 2  # the second attempt failed just as the first
    with pytest.raises(TypeError):
        SOFAISamplingStrategy("not a backend", s2)  # type: ignore[arg-type]


def test_budget_forcing_thinks_within_budget_then_answers():
    backend = ScriptedBackend(["step one is long enough", "step two also long", "42"])
    strategy = BudgetForcingSamplingStrategy(
        think_max_tokens=100,
        think_more_suffix="Wait",
        answer_suffix="The answer is",
        requirements=None,
    )
    result = MelleaSession(backend).instruct("q", strategy=strategy, return_sampling_results=True)
    text = result.result.value
    assert text.startswith("<think>step one") and "Wait" in text and text.endswith("42 ")
    first = backend.calls[0]["options"]
    assert (
        first[ModelOption.STOP_SEQUENCES] == ["</think>"]
        and first[ModelOption.MAX_NEW_TOKENS] == 100
    )
    answer_call = backend.calls[-1]["messages"]
    assert answer_call[-1]["role"] == "assistant" and "</think>" in answer_call[-1]["content"]
    assert result.result.usage["completion_tokens"] > 0


def test_model_friendly_repair_and_the_code_preset():
    preset = python_code_generation_sampling()
    assert (
        isinstance(preset.strategy, ModelFriendlyRepairStrategy) and len(preset.requirements) == 4
    )
    backend = ScriptedBackend(
        ["```python\ndef f(:\n    pass\n```", "```python\nx = 1\nprint(x + 1)\n```"]
    )
    result = MelleaSession(backend).instruct(
        "Write code.",
        requirements=preset.requirements,
        strategy=preset.strategy,
        return_sampling_results=True,
    )
    assert result.success and result.result_index == 1
    retry = backend.calls[1]["messages"][-1]["content"]
    assert "does not parse" in retry and "line 1" in retry
    plot = python_plotting_sampling(output_path="/tmp/p.png")
    assert len(plot.requirements) == 7


def test_sample_contexts_and_last_prompt():
    backend = ScriptedBackend(["bad", "good"])
    m = MelleaSession(backend, ctx=ChatContext())
    ok = req("good", validation_fn=simple_validate(lambda s: "good" in s))
    result = m.instruct("Say good.", requirements=[ok], return_sampling_results=True)
    assert len(result.sample_contexts) == 2
    assert result.result_ctx.last_output() is result.result
    assert result.sample_contexts[0].last_output().value.strip() == "bad"
    assert m.last_prompt()[-1]["content"].startswith("Say good.")
    m.chat("hello")
    assert m.last_prompt()[-1] == {"role": "user", "content": "hello"}


def test_a_model_judged_check_keeps_its_context():
    backend = ScriptedBackend(["an answer", "yes"])
    m = MelleaSession(backend)
    result = m.instruct("q", requirements=["Be brief."], return_sampling_results=True)
    _, verdict = result.sample_validations[0][0]
    assert verdict.as_bool() and verdict.context.node_data is verdict.thunk
    assert verdict.context.previous_node.node_data.description == "Be brief."
