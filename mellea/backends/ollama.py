"""The ollama backend: an Ollama server, reached through its OpenAI-compatible API."""

from __future__ import annotations

import os
from typing import Any

from mellea.backends.model_ids import IBM_GRANITE_4_1_3B, backend_model_name
from mellea.backends.openai import OpenAIBackend

DEFAULT_OLLAMA_HOST = "http://localhost:11434"


def ollama_base_url(base_url: str | None = None) -> str:
    """The ``/v1`` URL of the Ollama server at ``base_url`` (default ``$OLLAMA_HOST``)."""
    host = base_url or os.environ.get("OLLAMA_HOST") or DEFAULT_OLLAMA_HOST
    if not host.startswith(("http://", "https://")):
        host = f"http://{host}"
    host = host.rstrip("/")
    return host if host.endswith("/v1") else f"{host}/v1"


class OllamaModelBackend(OpenAIBackend):
    """Generate with a model served by Ollama; upstream mellea's constructor arguments.

    ``model_id`` is an Ollama tag or a
    :class:`~mellea.backends.model_ids.ModelIdentifier` (its ``ollama_name``). Unlike
    upstream, the model is not pulled on start: a missing model fails the first call
    with Ollama's own message.
    """

    def __init__(
        self,
        model_id: Any = IBM_GRANITE_4_1_3B,
        formatter: Any = None,
        base_url: str | None = None,
        model_options: dict[str, Any] | None = None,
        timeout: float | None = 300.0,
        **client_kwargs: Any,
    ) -> None:
        """Connect to Ollama at ``base_url`` (default ``$OLLAMA_HOST``, else localhost)."""
        client_kwargs.setdefault("api_key", "ollama")
        super().__init__(
            backend_model_name(model_id, "ollama"),
            formatter,
            ollama_base_url(base_url),
            model_options,
            timeout=timeout,
            **client_kwargs,
        )
