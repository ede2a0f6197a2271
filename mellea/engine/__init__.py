"""Local inference engine: knows nothing of HTTP or mellea types."""

from __future__ import annotations

from typing import Any


def build_engine(model: str | None = None, **kwargs: Any) -> Any:
    """The engine that serves ``model`` (default, directory, ``.gguf`` file or hub id).

    The fast engine (:class:`mellea.engine.engine.Engine`) when it covers the model's
    family and every key of its config; otherwise the transformers fallback
    (:class:`mellea.engine.fallback.FallbackEngine`), announced with one warning log
    line. Raises ``ModelNotSupportedError`` (one line) when neither can run it.
    ``kwargs`` are the fast engine's settings (``dtype``, ``device``, KV and batching).
    """
    from mellea.engine.factory import build_engine as build

    return build(model, **kwargs)
