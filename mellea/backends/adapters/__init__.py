"""LoRA and activated-LoRA adapters, and the adapter functions ("intrinsics") they implement.

Upstream's names: the composed adapter (:class:`Adapter`: :class:`Identity`,
:class:`IOContract`, :class:`WeightsBinding`; :mod:`._core`), the adapter classes
(:mod:`.adapter`; there, ``Adapter`` is the older base class), the catalog
(:mod:`.catalog`), :class:`AdapterMixin` and the per-backend functions
(:mod:`.backend`), the io.yaml request builder (:mod:`.io`) and result processor
(:mod:`.results`). Adapter files are found on this machine, under
``$MELLEA_ADAPTERS_DIR`` (:mod:`.locate`).
"""

from mellea.backends.adapters._core import (
    Adapter,
    EmbeddedBinding,
    Identity,
    IOContract,
    LocalFileBinding,
    ServerMediatedBinding,
    WeightsBinding,
)
from mellea.backends.adapters.adapter import (
    AdapterInput,
    CustomIntrinsicAdapter,
    EmbeddedIntrinsicAdapter,
    IntrinsicAdapter,
    LocalHFAdapter,
    get_adapter_for_intrinsic,
)
from mellea.backends.adapters.backend import AdapterLoadUnsupportedError, AdapterMixin
from mellea.backends.adapters.capabilities import KNOWN_CAPABILITIES
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
    "KNOWN_CAPABILITIES",
    "Adapter",
    "AdapterInput",
    "AdapterLoadUnsupportedError",
    "AdapterMixin",
    "AdapterNotFoundError",
    "AdapterSchemaMismatchError",
    "AdapterType",
    "CustomIntrinsicAdapter",
    "EmbeddedBinding",
    "EmbeddedIntrinsicAdapter",
    "IOConfigError",
    "IOContract",
    "Identity",
    "IntrinsicAdapter",
    "IntrinsicsCatalogEntry",
    "LocalFileBinding",
    "LocalHFAdapter",
    "ServerMediatedBinding",
    "WeightsBinding",
    "fetch_intrinsic_metadata",
    "get_adapter_for_intrinsic",
    "known_intrinsic_names",
    "validate_revision",
]
