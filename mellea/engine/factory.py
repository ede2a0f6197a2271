"""Pick the engine for a model: the fast one where its family is covered, else the fallback."""

from __future__ import annotations

import logging
from typing import Any

from mellea.engine.families import UnsupportedModelError
from mellea.engine.interface import InferenceEngine
from mellea.engine.loader import ResolvedModel, locate_model

log = logging.getLogger("mellea.engine")


class ModelNotSupportedError(RuntimeError):
    """Neither the fast engine nor transformers can run this model."""


def build_engine(model: str | ResolvedModel | None = None, **kwargs: Any) -> InferenceEngine:
    """An engine for ``model`` (see :func:`mellea.engine.build_engine`); a name is
    resolved here, once, for whichever engine runs it."""
    from mellea.engine.engine import Engine

    resolved = locate_model(model)
    try:
        return Engine(resolved, **kwargs)
    except UnsupportedModelError as exc:
        reason = str(exc)
    from mellea.engine.fallback import FallbackEngine

    try:
        engine = FallbackEngine(resolved, **kwargs)
    except (ValueError, KeyError, OSError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelNotSupportedError(
            f"cannot run model {resolved.model_id!r}: the fast engine does not cover it "
            f"({reason}) and transformers cannot load it ({first_line})"
        ) from None
    log.warning(
        "model %s: the fast engine does not cover it (%s); serving it with transformers' "
        "forward pass instead (slower: no batching, no paged KV cache)",
        resolved.model_id,
        reason,
    )
    return engine
