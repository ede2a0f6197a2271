"""Checks on what ``m decompose run`` is given."""

from __future__ import annotations

import re

# A letter, digit, underscore or period first; then those, hyphens and spaces.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\- ]+")


def validate_filename(candidate_str: str) -> bool:
    """Whether ``candidate_str`` is safe as an output name (no path separators, 2-250 chars)."""
    return bool(_SAFE_NAME.fullmatch(candidate_str)) and len(candidate_str) <= 250
