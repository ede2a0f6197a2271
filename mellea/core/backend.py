"""Upstream's module path for the backend interface."""

from mellea.backends.base import Backend
from mellea.core.base import BaseModelSubclass

__all__ = ["Backend", "BaseModelSubclass"]
