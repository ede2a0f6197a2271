"""Logging for mellea programs, under upstream's name."""

from __future__ import annotations

import logging


class MelleaLogger:
    """Upstream's logger accessor: ``MelleaLogger.get_logger()`` is the ``mellea`` logger."""

    @staticmethod
    def get_logger() -> logging.Logger:
        """The ``mellea`` logger (configured by ``m serve``'s log settings)."""
        return logging.getLogger("mellea")
