"""Upstream's older path of :mod:`mellea.stdlib.components.genstub` (``@generative``)."""

from mellea.stdlib.components.genstub import *  # noqa: F403
