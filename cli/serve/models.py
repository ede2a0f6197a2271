"""Upstream mellea programs import ``ChatMessage`` from here; it lives in ``mellea.serve``."""

from mellea.serve import *  # noqa: F403 (this path re-exports the message models)
from mellea.serve import __all__  # noqa: F401
