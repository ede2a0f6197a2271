"""What every responses store keeps and the rules they share: the record of one response,
the default bounds, the lease, and the error of a response whose process died.

The SQLite store (:mod:`mellea.serve.responses.store`) and the PostgreSQL store
(:mod:`mellea.serve.responses.store_postgres`) both build on this module; neither
imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_COUNT = 10_000
DEFAULT_MAX_AGE = 30 * 24 * 3600.0  # seconds
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
LEASE_SECONDS = 10.0
# The error of a response in progress whose process died (its lease ran out).
ORPHAN_ERROR = {
    "code": "server_error",
    "message": "the server generating this response stopped before it finished",
    "type": "server_error",
    "param": None,
}
# What of a response's items a continuing program never reads (see ``chat_messages``).
_UNREAD_ITEM_KEYS = ("id", "status")
_UNREAD_PART_KEYS = ("logprobs", "annotations")


@dataclass
class StoredResponse:
    """One stored response with the conversation that led to it."""

    response: dict[str, Any]
    input: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        """The response id."""
        return self.response["id"]

    @property
    def status(self) -> str:
        """The response status (``in_progress`` until it ends)."""
        return self.response["status"]

    def conversation(self) -> list[dict[str, Any]]:
        """What a response continuing this one sees: history, input, then output.

        Only what a program reads of them is kept: no reasoning items, ids, statuses,
        log-probabilities or annotations.
        """
        items = [*self.history, *self.input, *self.response.get("output", [])]
        return [_readable(item) for item in items if item.get("type") != "reasoning"]


def _readable(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` without what a program never reads of it."""
    kept = {k: v for k, v in item.items() if k not in _UNREAD_ITEM_KEYS}
    if isinstance(kept.get("content"), list):
        kept["content"] = [
            {k: v for k, v in part.items() if k not in _UNREAD_PART_KEYS}
            if isinstance(part, dict)
            else part
            for part in kept["content"]
        ]
    return kept
