"""The sync helper's former path; it lives in :mod:`mellea.core._sync` (the backends use it too)."""

from mellea.core._sync import run_sync

__all__ = ["run_sync"]
