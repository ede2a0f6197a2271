"""Optional dependencies: an ImportError that says which package to install."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

_NLTK_HELP = (
    "\ninstall it with `pip install nltk`; the sentence splitter's data may also be "
    "needed: `python -m nltk.downloader punkt_tab`"
)


@contextmanager
def import_optional(extra_name: str) -> Iterator[None]:
    """Around an optional import: an ImportError is logged with the extra to install
    (``pip install mellea[extra_name]``) and raised again."""
    try:
        yield
    except ImportError as err:
        logging.warning(
            "%s; the '%s' extra provides it: pip install mellea[%s]", err, extra_name, extra_name
        )
        raise


@contextmanager
def nltk_check(feature_name: str) -> Iterator[None]:
    """Around code that needs nltk: a missing package or missing nltk data becomes an
    ImportError naming ``feature_name`` and how to install what is missing."""
    try:
        yield
    except ImportError as err:
        raise ImportError(f"{feature_name} needs the 'nltk' package.{_NLTK_HELP}") from err
    except LookupError as err:
        raise ImportError(
            f"{feature_name} needs nltk data that is not installed.{_NLTK_HELP}"
        ) from err


__all__ = ["import_optional", "nltk_check"]
