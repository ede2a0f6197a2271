"""The new-token limit a session on the local engine applies when a call names none.

Ours, not upstream's (docs/library.md, "A default token limit on the local engine"):
the bundled model, decoding greedily, can repeat itself up to its 8192-token context.
``MELLEA_MAX_NEW_TOKENS`` changes the limit (``0`` lifts it); this module is the one
place the library reads it, so an unchanged upstream program run as a script (the
upstream examples' runner) can be bounded without touching its code.
"""

from __future__ import annotations

import os
from typing import Any

from mellea.backends.base import Backend
from mellea.backends.local import LocalBackend
from mellea.core.model_options import ModelOption

DEFAULT_MAX_NEW_TOKENS = 1024
MAX_NEW_TOKENS_VARIABLE = "MELLEA_MAX_NEW_TOKENS"
# A call or session that names any of these has chosen its own limit.
LIMIT_KEYS = (ModelOption.MAX_NEW_TOKENS, "max_tokens", "max_completion_tokens")


def max_new_tokens_from_environment() -> int | None:
    """The limit ``MELLEA_MAX_NEW_TOKENS`` sets: :data:`DEFAULT_MAX_NEW_TOKENS` when it
    is unset or blank, ``None`` (no limit) for ``0`` or less; not a whole number is a
    ``ValueError``."""
    setting = os.environ.get(MAX_NEW_TOKENS_VARIABLE, "").strip()
    if not setting:
        return DEFAULT_MAX_NEW_TOKENS
    try:
        value = int(setting)
    except ValueError:
        raise ValueError(
            f"{MAX_NEW_TOKENS_VARIABLE} must be a whole number, not {setting!r}"
        ) from None
    return value if value > 0 else None


def default_max_new_tokens(backend: Backend) -> int | None:
    """The new-token limit a session on ``backend`` applies when a call names none.

    The environment's (:func:`max_new_tokens_from_environment`) for the local engine;
    ``None`` for remote backends, whose servers keep their own defaults.
    """
    if not isinstance(backend, LocalBackend):
        return None
    return max_new_tokens_from_environment()


def with_default_limit(options: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """``options`` with ``limit`` as ``MAX_NEW_TOKENS`` when they name no limit of their own."""
    if limit and all(options.get(key) is None for key in LIMIT_KEYS):
        options[ModelOption.MAX_NEW_TOKENS] = limit
    return options


__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "MAX_NEW_TOKENS_VARIABLE",
    "default_max_new_tokens",
    "max_new_tokens_from_environment",
    "with_default_limit",
]
