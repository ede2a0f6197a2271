"""Document components (upstream's package path): ``Document`` here; ``RichDocument``
and ``Table`` in :mod:`.richdocument`."""

from mellea.stdlib.components.docs.document import Document

__all__ = ["Document"]
