"""Contexts: what earlier turns a session shows the model on the next call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mellea.core.thunk import ModelOutputThunk


@dataclass(frozen=True)
class Message:
    """One turn: a role, its text, and for model turns the thunk that produced it."""

    role: str
    content: str | None = None
    thunk: ModelOutputThunk | None = None

    @property
    def text(self) -> str:
        """The turn's text; for a model turn still streaming, what is known once done."""
        if self.content is not None:
            return self.content
        if self.thunk is not None and self.thunk.value is not None:
            return self.thunk.value
        return ""

    def as_dict(self) -> dict[str, Any]:
        """The turn as an OpenAI-style chat message."""
        return {"role": self.role, "content": self.text}


class Context:
    """An immutable sequence of turns; :meth:`add` returns a new context."""

    def __init__(self, turns: tuple[Message, ...] = ()) -> None:
        self._turns = turns

    def add(self, message: Message) -> Context:
        """A new context with ``message`` appended."""
        return type(self)(self._turns + (message,))

    @property
    def turns(self) -> tuple[Message, ...]:
        """Every turn recorded so far."""
        return self._turns

    def view_for_generation(self) -> list[Message]:
        """The earlier turns the model sees before the next instruction."""
        raise NotImplementedError

    def last_output(self) -> ModelOutputThunk | None:
        """The most recent model output, if any."""
        for message in reversed(self._turns):
            if message.thunk is not None:
                return message.thunk
        return None

    def last_turn_text(self) -> str | None:
        """The text of the most recent turn, if any."""
        return self._turns[-1].text if self._turns else None


class SimpleContext(Context):
    """Each call stands alone: the model sees no earlier turns."""

    def view_for_generation(self) -> list[Message]:
        """No history."""
        return []


class ChatContext(Context):
    """A conversation: the model sees earlier turns (the last ``window_size``, if set)."""

    def __init__(self, turns: tuple[Message, ...] = (), *, window_size: int | None = None):
        super().__init__(turns)
        self.window_size = window_size

    def add(self, message: Message) -> ChatContext:
        """A new chat context with ``message`` appended, keeping the window size."""
        return ChatContext(self._turns + (message,), window_size=self.window_size)

    def view_for_generation(self) -> list[Message]:
        """The history, trimmed to the window."""
        turns = list(self._turns)
        return turns[-self.window_size :] if self.window_size else turns
