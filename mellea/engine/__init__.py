"""Local inference engine: knows nothing of HTTP or mellea types."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mellea.engine.interface import InferenceEngine
    from mellea.engine.loader import ResolvedModel


def build_engine(model: str | ResolvedModel | None = None, **kwargs: Any) -> InferenceEngine:
    """The engine that serves ``model`` (default, directory, ``.gguf`` file or hub id).

    An :class:`~mellea.engine.interface.InferenceEngine`: the fast engine
    (:class:`mellea.engine.engine.Engine`) when it covers the model's
    family and every key of its config; otherwise the transformers fallback
    (:class:`mellea.engine.fallback.FallbackEngine`), announced with one warning log
    line. Raises ``ModelNotSupportedError`` (one line) when neither can run it.
    ``kwargs`` are the fast engine's settings (``dtype``, ``device``, KV and batching).
    """
    from mellea.engine.factory import build_engine as build

    return build(model, **kwargs)
