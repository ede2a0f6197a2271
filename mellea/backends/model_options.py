"""Upstream's public path for :class:`ModelOption`; the keys live in :mod:`mellea.core.model_options`.

Both the wire layer and the backends read them, so they sit below both.
"""

from mellea.core.model_options import ModelOption

__all__ = ["ModelOption"]
