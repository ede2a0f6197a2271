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

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from mellea.backends.adapters._core import Adapter as CoreAdapter
from mellea.backends.adapters._core import (
    AdapterSchemaMismatchError,
    LocalFileBinding,
    fire_hook,
    fire_phase_complete,
)
from mellea.backends.adapters.adapter import (
    Adapter,
    EmbeddedIntrinsicAdapter,
    IntrinsicAdapter,
    LocalHFAdapter,
)
from mellea.backends.adapters.catalog import AdapterType
from mellea.backends.adapters.locate import AdapterNotFoundError, canonical_base_model
from mellea.core.model_options import ModelOption

REQUIREMENT_CHECK = "requirement-check"
log = logging.getLogger("mellea.backends.adapters")


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


def qualified_name_of(adapter: Any) -> str:
    """The name an adapter is registered and run under: ``<name>_<lora|alora>``."""
    if isinstance(adapter, (Adapter, LocalFileBinding)):
        return adapter.qualified_name
    return f"{adapter.identity.name}_{adapter.identity.adapter_type}"


def add_adapter(backend: Any, adapter: Any) -> None:
    """Add ``adapter`` to ``backend``; adding the same qualified name again does nothing.

    ``adapter`` is one of the adapter classes, a bare
    :class:`~mellea.backends.adapters.LocalFileBinding`, or a composed
    :class:`~mellea.backends.adapters.Adapter` (upstream's ``AdapterInput``). A local
    adapter's weights are found (:mod:`~mellea.backends.adapters.locate`) and loaded
    into the engine now, so a missing or broken adapter fails here, not in the middle
    of a generation. A remote backend only records it.
    """
    if not isinstance(adapter, (Adapter, LocalFileBinding, CoreAdapter)):
        raise TypeError(f"not an adapter: {adapter!r}")
    if isinstance(adapter, CoreAdapter) and not isinstance(adapter, Adapter):
        _add_composed(backend, adapter)
        return
    if adapter.backend is not None and adapter.backend is not backend:
        raise ValueError(f"adapter {adapter.qualified_name} was already added to another backend")
    adapters = added_adapters(backend)
    if adapter.qualified_name in adapters:
        return
    if isinstance(adapter, (LocalHFAdapter, LocalFileBinding)) and not served_remotely(backend):
        adapter.path = adapter.get_local_hf_path(base_model_name(backend))
        load_adapter_weights(backend, adapter.qualified_name, adapter.path)
    elif isinstance(adapter, EmbeddedIntrinsicAdapter) and not served_remotely(backend):
        raise TypeError(
            "an EmbeddedIntrinsicAdapter runs inside a Granite Switch model on a server: "
            "add it to an OpenAIBackend"
        )
    adapter.backend = backend
    adapters[adapter.qualified_name] = adapter


def _add_composed(backend: Any, adapter: CoreAdapter) -> None:
    """Add a composed adapter: its LocalFileBinding's files are loaded (locally) and
    the binding is marked prepared; a remote backend only records it."""
    name = qualified_name_of(adapter)
    adapters = added_adapters(backend)
    if name in adapters:
        return
    weights = adapter.weights
    if isinstance(weights, LocalFileBinding):
        if weights.backend is not None and weights.backend is not backend:
            raise ValueError(f"adapter {name} was already added to another backend")
        if not served_remotely(backend):
            weights.path = weights.get_local_hf_path(base_model_name(backend))
            load_adapter_weights(backend, name, weights.path)
        weights._loaded = True  # loaded here, or held by the server under its name
        weights.backend = backend
    elif not served_remotely(backend):
        raise TypeError(
            f"{type(backend).__name__} loads adapters from local files: give the adapter a "
            f"LocalFileBinding, not a {type(weights).__name__}"
        )
    adapters[name] = adapter


def list_adapters(backend: Any) -> list[str]:
    """The qualified names of the adapters added to ``backend``."""
    return list(added_adapters(backend))


def find_adapter(
    backend: Any, name: str, adapter_types: tuple[str, ...] | None = ("alora", "lora")
) -> Adapter | None:
    """The added adapter implementing ``name``, preferring types in the order given."""
    adapters = [a for a in added_adapters(backend).values() if isinstance(a, Adapter)]
    kinds = adapter_types or tuple(t.value for t in AdapterType)
    for kind in kinds:
        for adapter in adapters:
            if adapter.intrinsic_name == name and adapter.adapter_type.value == kind:
                return adapter
    return None


def find_by_capability(
    backend: Any, capability: str, adapter_types: tuple[str, ...] | None = None
) -> CoreAdapter | None:
    """The first composed adapter added to ``backend`` whose identity has
    ``capability``, preferring the kinds in ``adapter_types`` in order (``None``: the
    first added of any kind)."""
    adapters = [a for a in added_adapters(backend).values() if isinstance(a, CoreAdapter)]
    adapters = [a for a in adapters if a.identity.capability == capability]
    if adapter_types is None:
        return adapters[0] if adapters else None
    for kind in adapter_types:
        for adapter in adapters:
            if adapter.identity.adapter_type == kind:
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


def _state(backend: Any) -> dict[str, Any]:
    """The backend's adapter switching state (kept on the backend, like its adapters)."""
    found = backend.__dict__.get("_adapter_state")
    if found is None:
        found = backend.__dict__["_adapter_state"] = {
            "lock": threading.RLock(),
            "unloaded": set(),
            "saved": {},
        }
    return found


def _added(backend: Any, name: str, verb: str) -> Any:
    adapter = added_adapters(backend).get(name)
    if adapter is None:
        raise ValueError(f"{verb}: no adapter named {name!r} was added to this backend")
    return adapter


def unload_adapter(backend: Any, name: str) -> None:
    """Take an added adapter out of use (upstream's ``unload_peft_adapter``).

    Our engine cannot free an adapter's weights while it runs: they stay in memory
    until the engine ends, but the adapter can no longer be activated until it is
    loaded again. Unloading one that is not loaded is logged and ignored.
    """
    state = _state(backend)
    adapter = added_adapters(backend).get(name)
    if adapter is None or name in state["unloaded"]:
        log.info("adapter %r is not loaded; nothing to unload", name)
        return
    if backend.model_options.get(ModelOption.ADAPTER) == name:
        deactivate_adapter(backend, name)
    state["unloaded"].add(name)


def activate_adapter(backend: Any, name: str) -> None:
    """Make the backend's generations run ``name`` until :func:`deactivate_adapter`
    (a request naming ``ModelOption.ADAPTER`` still picks its own)."""
    _added(backend, name, "activate_peft_adapter")
    state = _state(backend)
    if name in state["unloaded"]:
        raise ValueError(f"adapter {name!r} was unloaded: load_peft_adapter({name!r}) first")
    options = backend.model_options
    state["saved"].setdefault("adapter", options.get(ModelOption.ADAPTER))
    options[ModelOption.ADAPTER] = name


def deactivate_adapter(backend: Any, name: str | None = None) -> None:
    """Make the backend's generations run the model it had before activation
    (``name`` is accepted for symmetry; whichever adapter is active is switched off)."""
    del name
    saved = _state(backend)["saved"]
    if "adapter" not in saved:
        return
    before = saved.pop("adapter")
    if before is None:
        backend.model_options.pop(ModelOption.ADAPTER, None)
    else:
        backend.model_options[ModelOption.ADAPTER] = before


def render_controls(backend: Any, name: str, active: bool) -> None:
    """Turn an embedded adapter on (``active``) or off for the backend's requests: its
    function name goes in ``chat_template_kwargs.adapter_name``, which a Granite
    Switch model's chat template reads."""
    adapter = _added(backend, name, "render_controls")
    if not isinstance(adapter, EmbeddedIntrinsicAdapter):
        raise TypeError(f"adapter {name!r} is not embedded in the model; activate it instead")
    kwargs = dict(backend.model_options.get("chat_template_kwargs") or {})
    if active:
        kwargs["adapter_name"] = adapter.intrinsic_name
    elif kwargs.get("adapter_name") == adapter.intrinsic_name:
        del kwargs["adapter_name"]
    if kwargs:
        backend.model_options["chat_template_kwargs"] = kwargs
    else:
        backend.model_options.pop("chat_template_kwargs", None)


def _revision_of(adapter: CoreAdapter) -> str | None:
    weights = adapter.weights
    if isinstance(weights, LocalFileBinding):
        try:
            return weights.resolved_revision()
        except ValueError:
            return weights.revision
    return getattr(weights, "revision", None)


def _fire_invocation_complete(
    adapter: CoreAdapter,
    revision: str | None,
    outcome: Literal["success", "schema_error", "error"],
    error: BaseException | None,
) -> None:
    from mellea.plugins.hooks.adapter_function import AdapterFunctionInvocationCompletePayload
    from mellea.plugins.manager import has_plugins
    from mellea.plugins.types import HookType

    if not has_plugins(HookType.ADAPTER_FUNCTION_INVOCATION_COMPLETE):
        return
    payload = AdapterFunctionInvocationCompletePayload(
        name=adapter.identity.name,
        revision=revision,
        binding_type=adapter.weights.binding_type,
        adapter_type=adapter.identity.adapter_type,
        outcome=outcome,
        error=error,
    )
    fire_hook(HookType.ADAPTER_FUNCTION_INVOCATION_COMPLETE, payload)


@contextlib.contextmanager
def adapter_scope(adapter: CoreAdapter | None) -> Iterator[None]:
    """Run the ``with`` body with ``adapter`` active (nothing when it is ``None``).

    The adapter's weights are activated, the body runs, and they are deactivated even
    when the body raises. ``adapter_function_phase_complete`` fires after each phase
    that succeeded and ``adapter_function_invocation_complete`` on the way out, with
    ``success``, ``schema_error`` (an :class:`AdapterSchemaMismatchError`) or
    ``error``; a failing hook handler is logged, never raised over the real outcome.
    Two scopes on one backend at once are not serialized (as upstream).
    """
    if adapter is None:
        yield
        return
    name = adapter.identity.name
    revision = _revision_of(adapter)
    outcome: Literal["success", "schema_error", "error"] = "success"
    error: BaseException | None = None
    try:
        started = time.monotonic()
        adapter.weights.activate()
        fire_phase_complete(name, "activate", (time.monotonic() - started) * 1000.0)
        body_error: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            body_error = exc
            raise
        finally:
            started = time.monotonic()
            try:
                adapter.weights.deactivate()
            except BaseException as exc:
                if body_error is None:
                    raise
                body_error.add_note(f"deactivating the adapter failed too: {exc!r}")
            else:
                fire_phase_complete(name, "deactivate", (time.monotonic() - started) * 1000.0)
    except AdapterSchemaMismatchError as exc:
        outcome, error = "schema_error", exc
        raise
    except BaseException as exc:
        outcome, error = "error", exc
        raise
    finally:
        try:
            _fire_invocation_complete(adapter, revision, outcome, error)
        except Exception:
            log.warning("the invocation hook for adapter %r failed; ignored", name, exc_info=True)


class AdapterMixin:
    """Upstream's adapter methods on a backend, through the functions above.

    Universal: :attr:`base_model_name`, :meth:`add_adapter`, :meth:`list_adapters`.
    Local weights: :meth:`load_peft_adapter`, :meth:`unload_peft_adapter`,
    :meth:`activate_peft_adapter`, :meth:`deactivate_peft_adapter`. Embedded in a
    model: :meth:`render_controls`. Both our backends run an activated adapter by
    naming it in their requests (the local engine's per-request adapter; the
    OpenAI-compatible server's ``model``), so activation holds no model lock.
    """

    default_to_constraint_checking_alora: bool = True

    @property
    def base_model_name(self) -> str:
        """The base model's short name adapters are published under."""
        return base_model_name(self)

    def add_adapter(self, adapter: Any) -> None:
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
    ) -> CoreAdapter | None:
        return find_by_capability(self, capability, adapter_types)

    def load_peft_adapter(self, adapter_qualified_name: str) -> None:
        """Load an added adapter's weights (adding it already did, locally)."""
        adapter = added_adapters(self).get(adapter_qualified_name)
        path = getattr(adapter, "path", None)
        if isinstance(adapter, CoreAdapter) and not isinstance(adapter, Adapter):
            path = getattr(adapter.weights, "path", None)
        if adapter is None or (path is None and not served_remotely(self)):
            raise ValueError(f"no added local adapter named {adapter_qualified_name!r}")
        if path is not None:
            load_adapter_weights(self, adapter_qualified_name, path)
        _state(self)["unloaded"].discard(adapter_qualified_name)

    def unload_peft_adapter(self, adapter_qualified_name: str) -> None:
        """Take a loaded adapter out of use; see :func:`unload_adapter`."""
        unload_adapter(self, adapter_qualified_name)

    def activate_peft_adapter(self, adapter_qualified_name: str) -> None:
        """Make generations run this adapter; see :func:`activate_adapter`."""
        activate_adapter(self, adapter_qualified_name)

    def deactivate_peft_adapter(self, adapter_qualified_name: str) -> None:
        """Make generations run the base model again; see :func:`deactivate_adapter`."""
        deactivate_adapter(self, adapter_qualified_name)

    def _adapter_activation_lock(self) -> contextlib.AbstractContextManager[Any]:
        """The lock held around the activation verbs."""
        return _state(self)["lock"]

    def render_controls(self, adapter_qualified_name: str, active: bool) -> None:
        """Turn an embedded adapter on or off; see :func:`render_controls`."""
        render_controls(self, adapter_qualified_name, active)

    def set_request_adapter(self, adapter_qualified_name: str) -> None:
        """Upstream's verb for servers that pick adapters per request; no backend has it."""
        raise NotImplementedError(
            f"{type(self).__name__} has no set_request_adapter(): name the adapter in a "
            "request's model options (ModelOption.ADAPTER), or activate it"
        )

    def adapter_scope(self, adapter: CoreAdapter | None) -> contextlib.AbstractContextManager[None]:
        """Activate ``adapter`` for a ``with`` body; see :func:`adapter_scope`."""
        return adapter_scope(adapter)


__all__ = [
    "AdapterLoadUnsupportedError",
    "AdapterMixin",
    "activate_adapter",
    "adapter_scope",
    "add_adapter",
    "added_adapters",
    "base_model_name",
    "deactivate_adapter",
    "find_adapter",
    "find_by_capability",
    "list_adapters",
    "load_adapter_weights",
    "qualified_name_of",
    "render_controls",
    "requirement_adapter",
    "resolve_adapter",
    "routes_requirement_checks",
    "unload_adapter",
]
