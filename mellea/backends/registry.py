"""Backend names a program may pass to ``start_session``."""

from __future__ import annotations

from typing import Any

from mellea.backends.base import Backend
from mellea.backends.runtime import current_runtime

LOCAL_NAMES = ("local", "hf", "huggingface")
OPENAI_NAMES = ("openai",)
OLLAMA_NAMES = ("ollama",)
KNOWN_BACKENDS = LOCAL_NAMES + OPENAI_NAMES + OLLAMA_NAMES


def create_backend(
    name: str,
    model_id: Any = None,
    *,
    model_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Backend:
    """Build the backend called ``name``; an unknown name lists the known ones.

    Under ``m serve --model``, ``ollama`` sessions run on the local engine with that
    model too (a program written for Granite on Ollama can be tried on the bundled
    model); ``openai`` sessions keep the server they name.
    """
    key = (name or "local").lower()
    model = _model_name(model_id)
    runtime = current_runtime()
    if key in OLLAMA_NAMES and runtime.model is not None:
        runtime.note_once("program asked for the ollama backend; serving it locally (--model)")
        key, kwargs = "local", {}  # ollama's connection arguments mean nothing here
    if key in LOCAL_NAMES:
        from mellea.backends.local import LocalBackend

        return LocalBackend(model_id, model_options=model_options, **kwargs)
    if key in OPENAI_NAMES + OLLAMA_NAMES:
        from mellea.backends.openai import OpenAIBackend

        if key in OLLAMA_NAMES:
            kwargs.setdefault("base_url", "http://localhost:11434/v1")
            kwargs.setdefault("api_key", "ollama")
        return OpenAIBackend(model, model_options=model_options, **kwargs)
    raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(KNOWN_BACKENDS)}")


def _model_name(model_id: Any) -> str | None:
    """Accept a plain string or an upstream-style model identifier object."""
    if model_id is None or isinstance(model_id, str):
        return model_id
    for attr in ("hf_model_name", "openai_name", "ollama_name", "name"):
        value = getattr(model_id, attr, None)
        if isinstance(value, str) and value:
            return value
    return str(model_id)
