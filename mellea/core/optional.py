"""Importing an optional dependency with a message that says how to install it."""

from __future__ import annotations

import importlib
from types import ModuleType


def import_optional(module: str, missing: str) -> ModuleType:
    """``module``, imported; ``ImportError(missing)`` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(missing) from exc
