"""A forced tool call cut short by ``max_tokens``: still a call, named and with its
arguments as far as the model wrote them, wherever the cut falls."""

from __future__ import annotations

import asyncio

import pytest

from mellea.backends.local import _partial_call, _tool_call_chunks
from mellea.core.thunk import GenerationChunk

NAMES = ["get_weather", "get_time"]
FULL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        (0, ("get_weather", "")),  # nothing written: the first forced tool
        (len('{"name": "get_t'), ("get_time", "")),  # the name so far picks the tool
        (len('{"name": "get_weather", "argu'), ("get_weather", "")),
        (len('{"name": "get_weather", "arguments": '), ("get_weather", "")),
        (len('{"name": "get_weather", "arguments": {"ci'), ("get_weather", '{"ci')),
        (len(FULL) - 1, ("get_weather", '{"city": "Paris"}')),
    ],
)
def test_the_name_and_the_arguments_so_far(cut, expected):
    text = FULL.replace("get_weather", "get_time") if expected[0] == "get_time" else FULL
    assert _partial_call(text[:cut], NAMES) == expected


def test_compact_json_as_the_grammar_writes_it():
    assert _partial_call('{"name":"get_weather","arguments":{"city":"Os', NAMES) == (
        "get_weather",
        '{"city":"Os',
    )


def test_a_cut_call_is_a_tool_call_not_text():
    async def chunks():
        yield GenerationChunk(text='{"name": "get_weather", "arguments": {"ci')
        yield GenerationChunk(text="", finish_reason="length", usage={"completion_tokens": 9})

    async def collect():
        return [c async for c in _tool_call_chunks(chunks(), {}, NAMES)]

    (chunk,) = asyncio.run(collect())
    assert chunk.text == "" and chunk.finish_reason == "length"
    (call,) = chunk.tool_calls
    assert (call.name, call.arguments_json, call.args) == ("get_weather", '{"ci', {})
