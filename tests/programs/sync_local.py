"""Test program: a synchronous serve() on the bundled local model (sync ``instruct``)."""

from typing import Any

import mellea
from mellea.serve import ChatMessage

session = mellea.start_session()


def serve(input: list[ChatMessage], model_options: dict[str, Any] | None = None) -> Any:
    """Answer the last message; ``instruct`` runs on mellea's background loop."""
    return session.instruct(
        input[-1].get_text_content(), strategy=None, model_options=model_options
    )
