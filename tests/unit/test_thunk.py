"""ModelOutputThunk: computed values, streaming deltas, completion hooks, closing."""

from __future__ import annotations

import pytest

from mellea.core import ComputedModelOutputThunk, GenerationChunk, ModelOutputThunk


async def chunks(*texts: str, finish: str = "stop", closed: list | None = None):
    try:
        for text in texts:
            yield GenerationChunk(text=text)
        yield GenerationChunk(finish_reason=finish, usage={"prompt_tokens": 1})
    finally:
        if closed is not None:
            closed.append(True)


async def test_computed_value():
    thunk = ModelOutputThunk(value="done")
    assert thunk.is_computed() and thunk.value == "done"
    assert await thunk.astream() == "done"
    assert await thunk.astream() == ""
    assert await thunk.avalue() == "done"


async def test_astream_returns_only_new_text():
    thunk = ModelOutputThunk.from_stream(chunks("Hel", "lo", " world"))
    assert not thunk.is_computed() and thunk.value is None
    parts = []
    while not thunk.is_computed():
        parts.append(await thunk.astream())
    assert "".join(parts) == "Hello world"
    assert parts[:3] == ["Hel", "lo", " world"]
    assert thunk.value == "Hello world"
    assert thunk.usage == {"prompt_tokens": 1}
    assert thunk.finish_reason == "stop"


async def test_avalue_after_partial_stream_and_hook():
    seen = []
    thunk = ModelOutputThunk.from_stream(
        chunks("a", "b", finish="length"), on_done=lambda t: seen.append(t.value)
    )
    assert await thunk.astream() == "a"
    assert await thunk.avalue() == "ab"
    assert seen == ["ab"]
    assert thunk.finish_reason == "length"


async def test_aclose_closes_the_source():
    closed: list = []
    thunk = ModelOutputThunk.from_stream(chunks("x", "y", "z", closed=closed))
    await thunk.astream()
    await thunk.aclose()
    assert closed == [True]
    assert thunk.is_computed() and thunk.value == "x"


async def test_computed_wrapper():
    assert ComputedModelOutputThunk("v").value == "v"
    thunk = ModelOutputThunk.from_stream(chunks("q"))
    with pytest.raises(ValueError):
        ComputedModelOutputThunk(thunk)
    await thunk.avalue()
    assert ComputedModelOutputThunk(thunk).usage == {"prompt_tokens": 1}


async def test_thunk_without_source_refuses_to_stream():
    with pytest.raises(RuntimeError):
        await ModelOutputThunk().astream()
