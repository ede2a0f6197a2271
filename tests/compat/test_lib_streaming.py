"""Validated streaming (upstream's mellea.stdlib.streaming / chunking), over a scripted backend."""

from __future__ import annotations

import asyncio

import pytest

from mellea import plugins
from mellea.core.requirement import PartialValidationResult, Requirement, ValidationResult
from mellea.stdlib.chunking import (
    Chunker,
    ParagraphChunking,
    SentenceChunking,
    WordChunking,
    resolve_chunking_strategy,
)
from mellea.stdlib.components import Instruction
from mellea.stdlib.context import SimpleContext
from mellea.stdlib.session import MelleaSession
from mellea.stdlib.streaming import (
    ChunkEvent,
    CompletedEvent,
    FullValidationEvent,
    QuickCheckEvent,
    StreamingDoneEvent,
    stream,
)
from tests.compat.lib_scripted import ScriptedBackend


def test_sentence_chunks_withhold_the_tail_until_flush():
    s = SentenceChunking()
    assert s.split('  One. "Two!" Three? four') == ["One.", '"Two!"', "Three?"]
    assert s.flush("One. Two") == ["Two"]
    assert s.flush("One. ") == []


def test_word_and_paragraph_chunks():
    assert WordChunking().split(" a  b c") == ["a", "b"]
    assert WordChunking().flush("a b c") == ["c"] and WordChunking().flush("a ") == []
    p = ParagraphChunking()
    assert p.split("one\n\ntwo\n\nthr") == ["one", "two"]
    assert p.flush("one\n\nthree\n") == ["three\n"]


@pytest.mark.parametrize("cut", [1, 2, 3, 7])
def test_chunker_gives_the_same_chunks_however_the_deltas_are_cut(cut):
    text = "Alpha beta. Gamma!  Delta? Epsilon"
    chunker = Chunker(SentenceChunking())
    out = []
    for i in range(0, len(text), cut):
        out += chunker.feed(text[i : i + cut])
    out += chunker.flush()
    assert out == ["Alpha beta.", "Gamma!", "Delta?", "Epsilon"]


def test_chunker_refuses_a_strategy_that_rewrites_text():
    class Upper(WordChunking):
        def split(self, text):
            return [w.upper() for w in super().split(text)]

    with pytest.raises(ValueError, match="verbatim"):
        Chunker(Upper()).feed("abc def ")


def test_unknown_alias_is_named():
    with pytest.raises(ValueError, match="sentence"):
        resolve_chunking_strategy("lines")


def test_partial_result_is_three_way():
    assert PartialValidationResult("pass") and not PartialValidationResult("unknown")
    assert PartialValidationResult("fail", reason="r").reason == "r"
    with pytest.raises(ValueError):
        PartialValidationResult("maybe")  # type: ignore[arg-type]


class MaxSentences(Requirement):
    """Upstream's example requirement: fails once the stream passes ``limit`` sentences."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.count = 0

    def format_for_llm(self) -> str:
        return f"At most {self.limit} sentences."

    async def stream_validate(self, chunk, *, backend, ctx):
        self.count += sum(chunk.count(p) for p in ".!?")
        if self.count > self.limit:
            return PartialValidationResult("fail", reason="too many sentences")
        return PartialValidationResult("unknown")

    async def validate(self, backend, ctx, *, format=None, model_options=None):
        return ValidationResult(result=self.count <= self.limit)


async def _run(backend, **kwargs):
    chunks = []
    async with await stream(Instruction("Write."), backend, SimpleContext(), **kwargs) as s:
        async for chunk in s:
            chunks.append(chunk)
    return s, chunks


def test_stream_yields_checked_chunks_and_validates_the_whole_output():
    backend = ScriptedBackend(["One here. Two here. Three"])
    req = MaxSentences(3)
    s, chunks = asyncio.run(_run(backend, chunking="sentence", requirements=[req]))
    assert chunks == ["One here.", "Two here.", "Three"]
    assert s.completed_normally and not s.failed_early
    assert [v.as_bool() for v in s.final_validations] == [True]
    assert s.mot is not None and s.mot.value.startswith("One here.")
    assert req.count == 0  # the stream worked on a copy
    kinds = [type(e) for e in s.events]
    assert kinds.count(ChunkEvent) == 3 and kinds.count(QuickCheckEvent) == 3
    assert kinds[-3:] == [StreamingDoneEvent, FullValidationEvent, CompletedEvent]
    assert s.events[-1].success
    # the instruction went to the backend
    assert "Write." in backend.calls[0]["messages"][-1]["content"]


def test_a_failing_chunk_stops_the_stream_before_the_caller_sees_it():
    backend = ScriptedBackend(["A. B. C. D. E."])
    s, chunks = asyncio.run(_run(backend, chunking="sentence", requirements=[MaxSentences(2)]))
    assert chunks == ["A.", "B."]
    assert s.failed_early and not s.completed_normally
    assert "too many sentences" in s.failure_reason
    assert s.full_text == "A. B."
    assert s.final_validations == [] and s.mot is None
    assert not s.events[-1].success and s.events[-1].full_text == "A. B."


def test_raw_deltas_without_chunking_and_early_break_closes_the_generation():
    backend = ScriptedBackend(["w1 w2 w3 w4"])

    async def go():
        got = []
        async with await stream(Instruction("x"), backend, SimpleContext()) as s:
            async for delta in s:
                got.append(delta)
                if len(got) == 2:
                    break
        return s, got

    s, got = asyncio.run(go())
    assert got == ["w1 ", "w2 "]
    assert not s.completed_normally and isinstance(s.events[-1], CompletedEvent)


def test_session_uses_an_overridden_validate():
    class AlwaysNo(Requirement):
        async def validate(self, backend, ctx, *, format=None, model_options=None):
            return ValidationResult(False, reason="never")

    m = MelleaSession(ScriptedBackend(["answer"]))
    result = m.instruct("q", requirements=[AlwaysNo("x")], return_sampling_results=True)
    assert not result.success
    assert result.sample_validations[0][0][1].reason == "never"


def test_instruction_shows_a_requirements_own_format_for_llm():
    backend = ScriptedBackend(["ok"])
    req = MaxSentences(2)  # no description, only format_for_llm
    MelleaSession(backend).instruct("Write.", requirements=[req], strategy=None)
    assert "At most 2 sentences." in backend.calls[0]["messages"][-1]["content"]


def test_stream_events_reach_streaming_plugins():
    """With the plugin system present, ``streaming_event`` / ``streaming_end`` handlers
    see every event, in order."""
    seen: list[str] = []
    ends: list[bool] = []

    @plugins.hook("streaming_event")
    async def on_event(payload, ctx):
        seen.append(type(payload.event).__name__)

    @plugins.hook("streaming_end")
    async def on_end(payload, ctx):
        ends.append(payload.success)

    async def go():
        with plugins.plugin_scope(on_event, on_end):
            return await _run(ScriptedBackend(["One. Two."]), chunking="sentence")

    asyncio.run(go())
    assert seen == ["ChunkEvent", "ChunkEvent", "StreamingDoneEvent", "CompletedEvent"]
    assert ends == [True]
