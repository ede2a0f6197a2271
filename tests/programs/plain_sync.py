"""Test program: a synchronous serve() that returns a plain string."""

from mellea.serve import ChatMessage


def serve(input: list[ChatMessage]) -> str:
    """Upper-case the last message."""
    return input[-1].get_text_content().upper()
