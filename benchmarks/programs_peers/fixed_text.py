"""Peer benchmark program for our `m serve`: a fixed reply, no model at all.

Measures the server's own cost per request (parsing, the program call, streaming).
The same reply as `upstream_fixed_text.py`, the program for upstream mellea.
"""

from typing import Any

from mellea.serve import ChatMessage

REPLY = (
    "A fixed reply from a program that runs no model, so that the benchmark measures "
    "the server: parsing the request, calling serve(), and streaming the answer back."
)


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> str:
    """Return the fixed reply, whatever was asked."""
    return REPLY
