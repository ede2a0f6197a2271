"""Types of the decompose pipeline that need no ``mellea`` import (``m decompose --help`` stays light)."""

from __future__ import annotations

from enum import StrEnum


class DecompBackend(StrEnum):
    """Where the decompose pipeline's model calls go.

    ``ollama`` and ``openai`` are upstream's members; ``local`` (our addition, and our
    default) is the bundled model on our own engine, so decompose runs offline.
    """

    ollama = "ollama"
    openai = "openai"
    local = "local"


class LogMode(StrEnum):
    """How much the pipeline logs: ``demo`` (each stage's outcome) or ``debug`` (and its inputs)."""

    demo = "demo"
    debug = "debug"
