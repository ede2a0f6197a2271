"""The reply parsers' former path; they live in :mod:`mellea.core.parsers`, below both the
wire layer and the backends that read them."""

from mellea.core.parsers import *  # noqa: F403 (the former path re-exports the whole API)
from mellea.core.parsers import __all__  # noqa: F401
