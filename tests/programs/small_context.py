"""Test program: a model with a context of 200 characters, replying with what it was given.

A conversation whose text is longer than that fails as the local backend fails a prompt
too long for its model; otherwise the reply lists the messages and model options.
"""

import json
from typing import Any

from mellea.core.errors import ContextLengthExceededError
from mellea.serve import ChatMessage

CONTEXT = 200


def serve(
    input: list[ChatMessage], requirements: Any = None, model_options: dict | None = None
) -> str:
    """The messages' roles and texts, and the model options; too long: a context error."""
    length = sum(len(m.get_text_content() or "") for m in input)
    if length > CONTEXT:
        raise ContextLengthExceededError(
            f"the prompt is {length} characters; the context {CONTEXT}"
        )
    seen = [[m.role, m.get_text_content()] for m in input]
    return json.dumps({"messages": seen, "model_options": model_options or {}})
