"""LoRA and activated-LoRA adapters, and the adapter functions ("intrinsics") they implement.

Upstream's names: the adapter classes (:mod:`.adapter`), the catalog
(:mod:`.catalog`), :class:`AdapterMixin` and the per-backend functions
(:mod:`.backend`), the io.yaml request builder (:mod:`.io`) and result processor
(:mod:`.results`). Adapter files are found on this machine, under
``$MELLEA_ADAPTERS_DIR`` (:mod:`.locate`).
"""

from mellea.backends.adapters.adapter import (
    Adapter,
    CustomIntrinsicAdapter,
    EmbeddedIntrinsicAdapter,
    IntrinsicAdapter,
    LocalHFAdapter,
    get_adapter_for_intrinsic,
)
from mellea.backends.adapters.backend import AdapterLoadUnsupportedError, AdapterMixin
from mellea.backends.adapters.catalog import (
    AdapterType,
    IntrinsicsCatalogEntry,
    fetch_intrinsic_metadata,
    known_intrinsic_names,
    validate_revision,
)
from mellea.backends.adapters.io import IOConfigError
from mellea.backends.adapters.locate import AdapterNotFoundError
from mellea.backends.adapters.results import AdapterSchemaMismatchError

__all__ = [
    "Adapter",
    "AdapterLoadUnsupportedError",
    "AdapterMixin",
    "AdapterNotFoundError",
    "AdapterSchemaMismatchError",
    "AdapterType",
    "CustomIntrinsicAdapter",
    "EmbeddedIntrinsicAdapter",
    "IOConfigError",
    "IntrinsicAdapter",
    "IntrinsicsCatalogEntry",
    "LocalHFAdapter",
    "fetch_intrinsic_metadata",
    "get_adapter_for_intrinsic",
    "known_intrinsic_names",
    "validate_revision",
]
