"""Backend names a program may pass to ``start_session``."""

from __future__ import annotations

from typing import Any

from mellea.backends.base import Backend
from mellea.backends.model_ids import backend_model_name
from mellea.backends.runtime import current_runtime

LOCAL_NAMES = ("local", "hf", "huggingface")
HF_NAMES = ("hf", "huggingface")
OPENAI_NAMES = ("openai",)
OLLAMA_NAMES = ("ollama",)
LITELLM_NAMES = ("litellm",)
WATSONX_NAMES = ("watsonx",)
KNOWN_BACKENDS = LOCAL_NAMES + OPENAI_NAMES + OLLAMA_NAMES + LITELLM_NAMES + WATSONX_NAMES


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
    runtime = current_runtime()
    if key in OLLAMA_NAMES and runtime.model is not None:
        runtime.note_once("program asked for the ollama backend; serving it locally (--model)")
        key, kwargs = "local", {}  # ollama's connection arguments mean nothing here
    if key in HF_NAMES:  # upstream's Hugging Face backend: ours, with its adapter methods
        from mellea.backends.huggingface import LocalHFBackend

        return LocalHFBackend(model_id, model_options=model_options, **kwargs)
    if key in LOCAL_NAMES:
        from mellea.backends.local import LocalBackend

        return LocalBackend(model_id, model_options=model_options, **kwargs)
    if key in OLLAMA_NAMES:
        from mellea.backends.ollama import OllamaModelBackend

        if model_id is None:
            return OllamaModelBackend(model_options=model_options, **kwargs)
        return OllamaModelBackend(model_id, model_options=model_options, **kwargs)
    if key in OPENAI_NAMES:
        from mellea.backends.openai import OpenAIBackend

        return OpenAIBackend(model_id, model_options=model_options, **kwargs)
    if key in LITELLM_NAMES:
        from mellea.backends.litellm import LiteLLMBackend

        args = {"model_id": model_id} if model_id is not None else {}
        return LiteLLMBackend(**args, model_options=model_options, **kwargs)
    if key in WATSONX_NAMES:
        from mellea.backends.watsonx import WatsonxAIBackend

        args = {"model_id": model_id} if model_id is not None else {}
        return WatsonxAIBackend(**args, model_options=model_options, **kwargs)
    raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(KNOWN_BACKENDS)}")


__all__ = ["KNOWN_BACKENDS", "backend_model_name", "create_backend"]
