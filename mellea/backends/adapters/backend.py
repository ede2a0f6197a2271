"""A backend's adapters: adding, listing, finding and loading them.

These are functions of the backend so that every backend gets them (the local one
included); :class:`AdapterMixin` offers them as upstream's methods. What a backend
has added lives on the backend object itself (``_added_adapters``, upstream's name),
so two backends never share it.

The backend contract: a backend that runs adapters in-process has
``load_adapter(name, path)`` and ``adapters`` (the names its engine has loaded); a
backend that talks to a server sets ``adapters_served_remotely = True`` and names
the adapter per request (the server must serve it under its qualified name). A
generation names its adapter with ``ModelOption.ADAPTER``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mellea.backends.adapters.adapter import (
    Adapter,
    EmbeddedIntrinsicAdapter,
    IntrinsicAdapter,
    LocalHFAdapter,
)
from mellea.backends.adapters.catalog import AdapterType
from mellea.backends.adapters.locate import AdapterNotFoundError, canonical_base_model

REQUIREMENT_CHECK = "requirement-check"


class AdapterLoadUnsupportedError(ValueError):
    """The backend can neither load adapter weights nor name adapters on a server."""


def added_adapters(backend: Any) -> dict[str, Adapter]:
    """The adapters added to ``backend``, by qualified name (kept on the backend)."""
    found = backend.__dict__.get("_added_adapters")
    if found is None:
        found = backend.__dict__["_added_adapters"] = {}
    return found


def base_model_name(backend: Any) -> str:
    """The base model's short name adapters are published under (``granite-4.1-3b``)."""
    model = getattr(backend, "model_id", None)
    model = getattr(model, "hf_model_name", None) or model
    if not model:
        raise ValueError(f"backend {type(backend).__name__} has no model id to pick adapters by")
    return canonical_base_model(str(model))


def served_remotely(backend: Any) -> bool:
    """Whether ``backend`` names adapters on a server instead of loading them."""
    return bool(getattr(backend, "adapters_served_remotely", False))


def loaded_adapter_names(backend: Any) -> set[str]:
    """The names the backend's engine has loaded (none when it cannot load any)."""
    loaded = getattr(backend, "adapters", None)
    return set(loaded) if loaded else set()


def load_adapter_weights(backend: Any, name: str, path: str | Path) -> None:
    """Load the PEFT directory ``path`` as ``name`` into the backend's engine.

    A backend without ``load_adapter`` (an engine built without adapter support, a
    client of a service that takes no adapters) is an
    :class:`AdapterLoadUnsupportedError` that says so.
    """
    if name in loaded_adapter_names(backend):
        return
    load = getattr(backend, "load_adapter", None)
    if load is None:
        raise AdapterLoadUnsupportedError(
            f"backend {type(backend).__name__} cannot load LoRA adapters (adapter "
            f"'{name}' from {path}): use the local backend on an engine with adapter "
            "support, or an OpenAI-compatible server that serves the adapter"
        )
    load(name, str(path))


def add_adapter(backend: Any, adapter: Adapter) -> None:
    """Add ``adapter`` to ``backend``; adding the same qualified name again does nothing.

    A local adapter's weights are found (:mod:`~mellea.backends.adapters.locate`) and
    loaded into the engine now, so a missing or broken adapter fails here, not in the
    middle of a generation. A remote backend only records it.
    """
    if not isinstance(adapter, Adapter):
        raise TypeError(f"not an adapter: {adapter!r}")
    if adapter.backend is not None and adapter.backend is not backend:
        raise ValueError(f"adapter {adapter.qualified_name} was already added to another backend")
    adapters = added_adapters(backend)
    if adapter.qualified_name in adapters:
        return
    if isinstance(adapter, LocalHFAdapter) and not served_remotely(backend):
        adapter.path = adapter.get_local_hf_path(base_model_name(backend))
        load_adapter_weights(backend, adapter.qualified_name, adapter.path)
    elif isinstance(adapter, EmbeddedIntrinsicAdapter) and not served_remotely(backend):
        raise TypeError(
            "an EmbeddedIntrinsicAdapter runs inside a Granite Switch model on a server: "
            "add it to an OpenAIBackend"
        )
    adapter.backend = backend
    adapters[adapter.qualified_name] = adapter


def list_adapters(backend: Any) -> list[str]:
    """The qualified names of the adapters added to ``backend``."""
    return list(added_adapters(backend))


def find_adapter(
    backend: Any, name: str, adapter_types: tuple[str, ...] | None = ("alora", "lora")
) -> Adapter | None:
    """The added adapter implementing ``name``, preferring types in the order given."""
    adapters = list(added_adapters(backend).values())
    kinds = adapter_types or tuple(t.value for t in AdapterType)
    for kind in kinds:
        for adapter in adapters:
            if adapter.intrinsic_name == name and adapter.adapter_type.value == kind:
                return adapter
    return None


def resolve_adapter(
    backend: Any,
    name: str,
    adapter_types: tuple[AdapterType, ...] = (AdapterType.ALORA, AdapterType.LORA),
) -> Adapter:
    """The adapter for adapter function ``name``: an added one, else the catalog's,
    added now (the first of ``adapter_types`` whose files are on this machine)."""
    found = find_adapter(backend, name, tuple(t.value for t in adapter_types))
    if found is not None:
        return found
    base = base_model_name(backend)
    errors: list[AdapterNotFoundError] = []
    for kind in adapter_types:
        try:
            adapter = IntrinsicAdapter(name, adapter_type=kind, base_model_name=base)
        except AdapterNotFoundError as exc:
            errors.append(exc)
            continue
        add_adapter(backend, adapter)
        return adapter
    if len(errors) == 1:
        raise errors[0]
    raise AdapterNotFoundError(f"{errors[0]} (its LoRA is not here either)")


def requirement_adapter(backend: Any, name: str = REQUIREMENT_CHECK) -> Adapter | None:
    """The aLoRA that checks requirements on ``backend``, when one was added (upstream's
    rule: only an activated LoRA is used to route plain requirement checks)."""
    return find_adapter(backend, name, ("alora",))


def routes_requirement_checks(backend: Any) -> bool:
    """Whether ``backend`` sends plain requirement checks to an adapter by default
    (upstream's ``default_to_constraint_checking_alora``, default on)."""
    return bool(getattr(backend, "default_to_constraint_checking_alora", True))


class AdapterMixin:
    """Upstream's adapter methods on a backend, through the functions above."""

    default_to_constraint_checking_alora: bool = True

    @property
    def base_model_name(self) -> str:
        """The base model's short name adapters are published under."""
        return base_model_name(self)

    def add_adapter(self, adapter: Adapter) -> None:
        """Add (and, locally, load) an adapter; see :func:`add_adapter`."""
        add_adapter(self, adapter)

    def list_adapters(self) -> list[str]:
        """The qualified names of the added adapters."""
        return list_adapters(self)

    def resolve_adapter(self, name: str) -> Adapter:
        """The adapter for adapter function ``name``, added on first use."""
        return resolve_adapter(self, name)

    def _find_adapter(
        self, capability: str, adapter_types: tuple[str, ...] | None = None
    ) -> Adapter | None:
        return find_adapter(self, capability, adapter_types)

    def load_peft_adapter(self, adapter_qualified_name: str) -> None:
        """Load an added adapter's weights (adding it already did, locally)."""
        adapter = added_adapters(self).get(adapter_qualified_name)
        if adapter is None or adapter.path is None:
            raise ValueError(f"no added local adapter named {adapter_qualified_name!r}")
        load_adapter_weights(self, adapter_qualified_name, adapter.path)


__all__ = [
    "AdapterLoadUnsupportedError",
    "AdapterMixin",
    "add_adapter",
    "added_adapters",
    "base_model_name",
    "find_adapter",
    "list_adapters",
    "load_adapter_weights",
    "requirement_adapter",
    "resolve_adapter",
    "routes_requirement_checks",
]
