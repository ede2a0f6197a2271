"""Older upstream path of ``@generative`` (now :mod:`mellea.stdlib.components.genstub`)."""

from mellea.stdlib.components.genslot import *  # noqa: F403
from mellea.stdlib.components.genslot import __all__  # noqa: F401
