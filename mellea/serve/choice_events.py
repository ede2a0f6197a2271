"""What one choice of a reply is made of, in order: the events :class:`ChoiceReader` yields.

A choice is zero or more :class:`ProgramEvent` (a live program's trace events), one
:class:`Role` (the program returned its thunk), one :class:`PromptScores` before the
first text when the reply scores its prompt, text, reasoning and tool-call deltas as
the thunk's text arrives, and one last :class:`Finish` or :class:`Failed`. Every endpoint
renders these, streamed or whole, so both forms of a reply come from the same events.

Log-probability entries ride on the first delta (or the finish) after the tokens that
produced them arrived, so concatenating every event's ``logprobs`` gives all of them.

(:class:`mellea.serve.choice_reader.ChoiceReader` writes these.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mellea.core.logprobs import TokenLogprob
from mellea.serve.protocol import FinishReason, Usage

Logprobs = tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class ProgramEvent:
    """A live program's trace event (an attempt, a verdict, a model call), as traced."""

    event: dict[str, Any]


@dataclass(frozen=True)
class Role:
    """The program returned: the assistant's reply starts."""


@dataclass(frozen=True)
class PromptScores:
    """The prompt's own tokens and log-probabilities (the first token has none), when the
    reply asked for them; empty when the program's reply came from no model call that
    scored a prompt."""

    entries: Logprobs = ()


@dataclass(frozen=True)
class TextDelta:
    """More of the reply's text (its content, outside reasoning and tool calls)."""

    text: str
    logprobs: Logprobs = ()


@dataclass(frozen=True)
class ReasoningDelta:
    """More of the reply's reasoning."""

    text: str
    logprobs: Logprobs = ()


@dataclass(frozen=True)
class ToolCallEvent:
    """One whole tool call, found in the text or returned by the backend.

    ``complete`` is false when generation stopped in the middle of the call.
    """

    call_id: str | None
    name: str
    arguments: str
    complete: bool = True
    logprobs: Logprobs = ()


@dataclass(frozen=True)
class Finish:
    """The choice ended: why, its token counts, and its program's report.

    ``usage`` is the served thunk's own; ``other_calls`` the token counts of the program's
    other model calls; ``report`` what the program did (``None`` without a trace).
    """

    reason: FinishReason
    usage: Usage | None
    report: dict[str, Any] | None = None
    other_calls: tuple[dict[str, Any], ...] = ()
    logprobs: Logprobs = ()


@dataclass(frozen=True)
class Failed:
    """The choice failed (the program raised, the deadline passed, the reply was cancelled)."""

    error: Exception


ChoiceEvent = (
    ProgramEvent
    | Role
    | PromptScores
    | TextDelta
    | ReasoningDelta
    | ToolCallEvent
    | Finish
    | Failed
)
