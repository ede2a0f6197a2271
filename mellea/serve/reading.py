"""Reading a program's thunk for the wire, whatever the program already did with it."""

from __future__ import annotations

from mellea.core.thunk import ModelOutputThunk


class ThunkReader:
    """Hands out a thunk's text with a cursor of its own.

    ``astream()`` keeps one cursor per thunk, shared with the program: a program that
    validated, awaited or streamed its thunk before returning it has moved that cursor
    to the end. The server reads with this reader instead, so the client receives the
    whole text exactly once, from its first character.
    """

    def __init__(self, thunk: ModelOutputThunk) -> None:
        """A reader positioned at the start of ``thunk``'s text."""
        self.thunk = thunk
        self._sent = 0

    async def next(self) -> str:
        """Wait for more text and return what this reader has not handed out yet.

        Returns ``""`` once the thunk is computed and all of its text was handed out.
        """
        if not self.thunk.is_computed():
            await self.thunk.astream()  # pulls at least one more chunk from the backend
        text = self.thunk.text_so_far()
        new = text[self._sent :]
        self._sent = len(text)
        return new

    def done(self) -> bool:
        """Whether every character of the finished thunk has been handed out."""
        return self.thunk.is_computed() and self._sent >= len(self.thunk.text_so_far())
