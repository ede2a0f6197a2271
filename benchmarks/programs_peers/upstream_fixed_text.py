"""Peer benchmark program for upstream mellea 0.8.0's `m serve`: a fixed reply, no model.

Upstream's server streams `output.value` of a `ModelOutputThunk` and does not accept
a plain `str`, so the reply is a thunk built already computed. Same text as
`fixed_text.py`, the program for our server.
"""

from typing import Any

from mellea.core import ModelOutputThunk

REPLY = (
    "A fixed reply from a program that runs no model, so that the benchmark measures "
    "the server: parsing the request, calling serve(), and streaming the answer back."
)


async def serve(
    input: list[Any],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Return the fixed reply as a computed thunk, whatever was asked."""
    return ModelOutputThunk(REPLY)
