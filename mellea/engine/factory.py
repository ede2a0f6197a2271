"""Pick the engine for a model: the fast one where its family is covered, else the fallback."""

from __future__ import annotations

import logging
from typing import Any

from mellea.engine.families import UnsupportedModelError
from mellea.engine.loader import DEFAULT_ALIASES, DEFAULT_MODEL_ID, resolve_model

log = logging.getLogger("mellea.engine")


class ModelNotSupportedError(RuntimeError):
    """Neither the fast engine nor transformers can run this model."""


def build_engine(model: str | None = None, **kwargs: Any) -> Any:
    """An engine for ``model`` (see :func:`mellea.engine.build_engine`)."""
    from mellea.engine.engine import Engine

    try:
        return Engine(model, **kwargs)
    except UnsupportedModelError as exc:
        reason = str(exc)
    from mellea.engine.fallback import FallbackEngine

    path = resolve_model(model, report=lambda _: None)  # the fast engine already said where
    model_id = DEFAULT_MODEL_ID if model in DEFAULT_ALIASES else str(model)
    try:
        engine = FallbackEngine(path, model_id=model_id, **kwargs)
    except (ValueError, KeyError, OSError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelNotSupportedError(
            f"cannot run model {model_id!r}: the fast engine does not cover it ({reason}) "
            f"and transformers cannot load it ({first_line})"
        ) from None
    log.warning(
        "model %s: the fast engine does not cover it (%s); serving it with transformers' "
        "forward pass instead (slower: no batching, no paged KV cache)",
        model_id,
        reason,
    )
    return engine
