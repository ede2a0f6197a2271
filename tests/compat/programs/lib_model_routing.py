"""Upstream's model-routing example, adapted: the client's ``model`` picks a Granite id.

The chosen ``ModelIdentifier`` goes to the ollama backend, which sends its
``ollama_name`` to the server at ``UPSTREAM_HOST`` (an OpenAI-compatible stand-in).
"""

import os
from typing import Any

import mellea
from mellea.backends.model_ids import IBM_GRANITE_4_1_3B, IBM_GRANITE_4_1_8B
from mellea.core import ModelOutputThunk
from mellea.serve import ChatMessage

_DEFAULT_MODEL = IBM_GRANITE_4_1_3B
_ALLOWED_MODELS: dict[str, Any] = {
    IBM_GRANITE_4_1_3B.ollama_name: IBM_GRANITE_4_1_3B,
    IBM_GRANITE_4_1_8B.ollama_name: IBM_GRANITE_4_1_8B,
}


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
    client_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Route on the client's model name; unknown names get the default."""
    model_name = (client_options or {}).get("model")
    chosen_model = _ALLOWED_MODELS.get(model_name, _DEFAULT_MODEL)
    message = input[-1].get_text_content() or "No message provided"
    session = mellea.start_session(
        "ollama", model_id=chosen_model, base_url=os.environ["UPSTREAM_HOST"]
    )
    return session.instruct(
        description=message, requirements=requirements, model_options=model_options
    )
