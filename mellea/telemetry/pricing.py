"""Model pricing switch (upstream's name)."""

from __future__ import annotations

import os


def is_pricing_enabled() -> bool:
    """Whether a pricing file is named (``MELLEA_PRICING_FILE``) and exists."""
    path = os.environ.get("MELLEA_PRICING_FILE")
    return bool(path) and os.path.isfile(path)  # type: ignore[arg-type]
