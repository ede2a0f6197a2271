"""What a reply needs to know of its request, fixed when the request arrives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReplyContext:
    """The request's side of one reply, shared by every endpoint's renderers.

    ``live``: the client follows the programs' events; ``include_usage``: a streamed
    reply ends with a usage chunk; ``logprobs``: the client asked for token
    log-probabilities.
    """

    id: str
    created: int
    model: str
    stream: bool = False
    live: bool = False
    include_usage: bool = False
    logprobs: bool = False


def wants_events(body: Any) -> bool:
    """Whether a streamed chat or text completion request asked for the program's live events."""
    options = body.stream_options
    return bool(body.stream and options and options.include_program_events)


def wants_usage(body: Any) -> bool:
    """Whether a streamed chat or text completion request asked for a last chunk with the usage."""
    return bool(body.stream_options and body.stream_options.include_usage)
