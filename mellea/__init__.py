"""mellea: write generative programs, and serve them as an OpenAI-compatible API.

``import mellea`` stays light: torch and transformers load only when a local
model is first used.
"""

from __future__ import annotations

from typing import Any

from mellea.core import ModelOutputThunk, Requirement, SamplingResult
from mellea.stdlib.context import ChatContext, Context, SimpleContext
from mellea.stdlib.session import MelleaSession

__version__ = "0.1.0"


def start_session(
    backend_name: str = "local",
    model_id: Any = None,
    ctx: Context | None = None,
    *,
    model_options: dict[str, Any] | None = None,
    **backend_kwargs: Any,
) -> MelleaSession:
    """Start a session on a backend: ``local`` (default; also ``hf``), ``openai`` or ``ollama``.

    With no arguments the session runs the bundled SmolLM2-135M-Instruct on the
    local engine, offline. The local model is loaded once per process and shared by
    every session that names it.
    """
    from mellea.backends.registry import create_backend

    backend = create_backend(backend_name, model_id, model_options=model_options, **backend_kwargs)
    return MelleaSession(backend, ctx=ctx, model_options=model_options)


__all__ = [
    "ChatContext",
    "MelleaSession",
    "ModelOutputThunk",
    "Requirement",
    "SamplingResult",
    "SimpleContext",
    "__version__",
    "start_session",
]
