"""A validated stream as the thunk ``m serve`` reads (``Streamer.as_thunk``), in process."""

from __future__ import annotations

from mellea.core.trace import ProgramTrace, recording
from mellea.serve.program_call import as_thunk
from mellea.stdlib.components import Instruction
from mellea.stdlib.context import SimpleContext
from mellea.stdlib.streaming import CompletedEvent, stream
from tests.programs.validated_stream import CALM, PASSED_IN_STORM, NoStorm, ScriptedBackend


async def _streamer(prompt: str):
    return await stream(
        Instruction(prompt),
        ScriptedBackend(),
        SimpleContext(),
        chunking="sentence",
        requirements=[NoStorm("no storm")],
    )


async def test_the_thunk_holds_what_the_stream_hands_out():
    calm, storm = await _streamer("calm"), await _streamer("storm")
    calm_thunk, storm_thunk = as_thunk(calm), as_thunk(storm)
    assert await calm_thunk.avalue() == CALM == calm.full_text
    assert calm_thunk.finish_reason == "stop" and calm_thunk.usage["completion_tokens"] == 15
    assert await storm_thunk.avalue() == PASSED_IN_STORM == storm.full_text
    assert storm_thunk.finish_reason == "content_filter" and storm.failed_early


async def test_closing_the_thunk_closes_the_stream_and_its_generation():
    streamer = await _streamer("calm")
    thunk = as_thunk(streamer)
    first = await thunk.astream()
    while not first:
        first = await thunk.astream()
    assert first == "The sea is calm."
    await thunk.aclose()
    assert streamer._thunk.is_computed()  # the generation was closed, not left running
    assert not streamer.completed_normally
    completed = [e for e in streamer.events if isinstance(e, CompletedEvent)]
    assert len(completed) == 1 and completed[0].full_text == "The sea is calm."


async def test_chunk_verdicts_go_to_the_trace_current_when_the_stream_started():
    trace = ProgramTrace()
    with recording(trace):
        streamer = await _streamer("storm")
    await as_thunk(streamer).avalue()  # read later, outside the program, as the server does
    assert [(c["chunk"], c["passed"]) for c in trace.chunk_checks] == [
        (0, True),
        (1, True),
        (2, False),
    ]
    assert trace.chunk_checks[2]["requirements"][0]["success"] == "fail"
    assert {c["stream"] for c in trace.chunk_checks} == {streamer.streaming_id}
    untraced = await _streamer("storm")
    await as_thunk(untraced).avalue()  # no trace: nothing recorded, nothing fails
    assert len(trace.chunk_checks) == 3


def test_a_chunk_verdicts_score_is_a_json_number_or_none():
    trace = ProgramTrace()
    for score in (0.5, float("nan"), "high", None):
        trace.chunk_checked(
            {
                "chunk": 0,
                "text": "x",
                "passed": True,
                "requirements": [{"description": "r", "success": "pass", "score": score}],
            }
        )
    assert [c["requirements"][0]["score"] for c in trace.chunk_checks] == [0.5, None, None, None]
