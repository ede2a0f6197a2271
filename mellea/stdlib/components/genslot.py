"""Upstream's former path of :mod:`mellea.stdlib.components.genstub` (``GenerativeSlot``...)."""

from mellea.stdlib.components.genstub import *  # noqa: F403
