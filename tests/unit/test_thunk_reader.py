"""ThunkReader: the server's own cursor over a thunk's text."""

from __future__ import annotations

from mellea.core import GenerationChunk, ModelOutputThunk
from mellea.serve.choice_reader import ThunkReader


async def _pieces(*texts: str):
    for text in texts:
        yield GenerationChunk(text=text)
    yield GenerationChunk(finish_reason="stop")


async def read_all(reader: ThunkReader) -> list[str]:
    out = []
    while True:
        text = await reader.next()
        if text:
            out.append(text)
        elif reader.done():
            return out


async def test_reader_serves_text_the_program_already_streamed():
    thunk = ModelOutputThunk.from_stream(_pieces("a", "b", "c"))
    assert await thunk.astream() == "a"  # the program read the first piece itself
    assert "".join(await read_all(ThunkReader(thunk))) == "abc"


async def test_reader_serves_an_awaited_thunk_whole():
    thunk = ModelOutputThunk.from_stream(_pieces("one ", "two"))
    await thunk.avalue()
    assert await thunk.astream() == ""  # the program's own cursor is at the end
    assert await read_all(ThunkReader(thunk)) == ["one two"]


async def test_reader_streams_piece_by_piece_and_leaves_program_cursor_consistent():
    thunk = ModelOutputThunk.from_stream(_pieces("x", "y"))
    assert await read_all(ThunkReader(thunk)) == ["x", "y"]
    assert thunk.value == "xy"


async def test_computed_value_thunk():
    assert await read_all(ThunkReader(ModelOutputThunk(value="done"))) == ["done"]
