"""Logging for the decompose pipeline, under the ``m_decompose`` logger."""

from __future__ import annotations

import logging
import sys

from ._types import LogMode

__all__ = ["LogMode", "configure_logging", "get_logger", "log_section"]

ROOT_LOGGER = "m_decompose"


def configure_logging(log_mode: LogMode = LogMode.demo) -> None:
    """Send ``m_decompose`` records to stdout at the level ``log_mode`` names; safe to call again.

    Unlike upstream, the root logger's handlers are left alone: a program that imports
    the pipeline keeps its own logging set-up.
    """
    logger = logging.getLogger(ROOT_LOGGER)
    logger.setLevel(logging.DEBUG if log_mode == LogMode.debug else logging.INFO)
    if not any(getattr(h, "_m_decompose", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s | %(message)s"))
        handler._m_decompose = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False


def get_logger(name: str) -> logging.Logger:
    """The logger called ``name`` (pipeline stages use ``m_decompose.<stage>``)."""
    return logging.getLogger(name)


def log_section(logger: logging.Logger, title: str) -> None:
    """Log a banner line that starts a pipeline stage."""
    logger.info("== %s ==", title)
