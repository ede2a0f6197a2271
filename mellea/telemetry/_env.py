"""Reading upstream's telemetry switches."""

from __future__ import annotations

import os


def env_true(name: str) -> bool:
    """Whether the variable is set to a true word (1, true, yes, on)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
