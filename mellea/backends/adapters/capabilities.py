"""The capability tokens adapter functions are known by (advisory).

:data:`KNOWN_CAPABILITIES` is computed from the catalog when this module is first
imported: an :class:`~mellea.backends.adapters.Identity` naming a capability outside
it is warned about, never refused, so a program's own adapter functions still work.
"""

from __future__ import annotations

from mellea.backends.adapters.catalog import _INTRINSICS_CATALOG_ENTRIES

KNOWN_CAPABILITIES: frozenset[str] = frozenset(
    entry.effective_capability for entry in _INTRINSICS_CATALOG_ENTRIES
)

__all__ = ["KNOWN_CAPABILITIES"]
