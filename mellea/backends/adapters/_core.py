"""The adapter as three parts (upstream's composable form): who it is, how it reads and
writes, and where its weights are.

- :class:`Identity`: name, ``"lora"``/``"alora"`` and an advisory capability;
- :class:`IOContract`: builds the prompt and parses the output;
- :class:`WeightsBinding`: the weights' life: ``prepare`` (find and load), ``activate``
  and ``deactivate`` (around one call), ``release`` (final).

:class:`Adapter` puts the three together. :class:`LocalFileBinding` is the binding for
PEFT files on this machine, loaded into a backend's engine; :class:`EmbeddedBinding`
and :class:`ServerMediatedBinding` are placeholders, as upstream's are.

The lifecycle hooks (``adapter_function_phase_complete``,
``adapter_function_invocation_complete``) fire where upstream fires them: ``prepare``
here, ``activate``/``deactivate`` and the whole call in ``AdapterMixin.adapter_scope``.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from mellea.backends.adapters.capabilities import KNOWN_CAPABILITIES
from mellea.backends.adapters.catalog import AdapterType, fetch_intrinsic_metadata
from mellea.backends.adapters.results import AdapterSchemaMismatchError
from mellea.core.base import Component
from mellea.plugins.manager import has_plugins, invoke_hook
from mellea.plugins.types import HookType

log = logging.getLogger("mellea.backends.adapters")

_PLACEHOLDER = "{cls} is a placeholder binding upstream too: it has no lifecycle to run yet"


def fire_hook(hook_type: HookType, payload: Any) -> None:
    """Run ``hook_type``'s handlers on ``payload`` from synchronous code.

    Inside a running event loop (this thread's) the handlers run on a fresh thread's
    loop, so the caller's loop is neither blocked on itself nor re-entered.
    """
    from mellea.core._sync import run_sync

    coro = invoke_hook(hook_type, payload)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        run_sync(coro)
        return
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:  # handed back to the caller's thread
            errors.append(exc)

    worker = threading.Thread(target=run, name="mellea-adapter-hook")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]


def fire_phase_complete(name: str, phase: str, duration_ms: float) -> None:
    """Fire ``adapter_function_phase_complete`` for a phase that finished; a failing
    handler is logged and ignored (a finished phase stays finished)."""
    if not has_plugins(HookType.ADAPTER_FUNCTION_PHASE_COMPLETE):
        return
    from mellea.plugins.hooks.adapter_function import AdapterFunctionPhaseCompletePayload

    try:
        payload = AdapterFunctionPhaseCompletePayload(
            name=name, phase=phase, duration_ms=duration_ms
        )
        fire_hook(HookType.ADAPTER_FUNCTION_PHASE_COMPLETE, payload)
    except Exception:
        log.warning(
            "the phase hook for adapter %r (%s) failed; ignored", name, phase, exc_info=True
        )


@dataclass(frozen=True)
class Identity:
    """An adapter's name, kind (``"lora"`` or ``"alora"``) and capability.

    A capability outside :data:`KNOWN_CAPABILITIES` draws a ``UserWarning`` (a typo,
    or a program's own adapter function); an unknown kind is a ``ValueError``.
    """

    name: str
    adapter_type: Literal["lora", "alora"]
    capability: str | None = None

    def __post_init__(self) -> None:
        if self.adapter_type not in ("lora", "alora"):
            raise ValueError(f"adapter_type must be 'lora' or 'alora', not {self.adapter_type!r}")
        if self.capability is not None and self.capability not in KNOWN_CAPABILITIES:
            warnings.warn(
                f"capability {self.capability!r} is not a known adapter capability "
                f"({sorted(KNOWN_CAPABILITIES)}); check its spelling",
                UserWarning,
                stacklevel=3,
            )


class IOContract(abc.ABC):
    """How an adapter is asked (:meth:`build_prompt`) and how its answer is read
    (:meth:`parse`)."""

    @abc.abstractmethod
    def build_prompt(self, **kwargs: object) -> Component:
        """The component to generate through the adapter, from the adapter's arguments."""

    @abc.abstractmethod
    def parse(self, raw: str) -> dict[str, object]:
        """The structured result of raw output; :class:`AdapterSchemaMismatchError`
        only when the output breaks the contract (extra fields do not)."""


class _DictContract(IOContract):
    """A JSON object that must hold ``required_keys`` (more keys are fine)."""

    def __init__(self, name: str, required_keys: frozenset[str]) -> None:
        self._name = name
        self._required_keys = frozenset(required_keys)

    def build_prompt(self, **_kwargs: object) -> Component:
        raise NotImplementedError(
            f"adapter '{self._name}' builds its prompt from its io.yaml: call it through "
            "Intrinsic(...) or the intrinsic helpers"
        )

    def parse(self, raw: str) -> dict[str, object]:
        """The parsed object; ValueError when it is not a JSON object."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(
                f"adapter '{self._name}' must answer with a JSON object, not {type(data).__name__}"
            )
        if not self._required_keys <= set(data):
            raise AdapterSchemaMismatchError(self._name, frozenset(data), self._required_keys)
        return data


class WeightsBinding(abc.ABC):
    """Where an adapter's weights are and how a backend takes them up.

    ``prepare`` stages and loads them (repeatable), ``activate``/``deactivate`` switch
    them on and off around one call, ``release`` ends the binding for good.
    ``binding_type`` labels the adapter-function hooks.
    """

    binding_type: ClassVar[str] = "unknown"

    @abc.abstractmethod
    def prepare(self) -> None:
        """Find and load the weights."""

    @abc.abstractmethod
    def activate(self) -> None:
        """Switch the weights on for the next generations."""

    @abc.abstractmethod
    def deactivate(self) -> None:
        """Switch them off (the base model generates again)."""

    @abc.abstractmethod
    def release(self) -> None:
        """Give the weights up; the binding cannot be used after this."""


class LocalFileBinding(WeightsBinding):
    """PEFT files on this machine, loaded into a backend's engine.

    Call :meth:`bind_backend` once, then :meth:`prepare`: the files are found under
    ``$MELLEA_ADAPTERS_DIR`` in the layout of ``repo_id`` (no hub here: a missing
    adapter is an ``AdapterNotFoundError`` naming what to download) and loaded.
    ``revision=None`` means the catalog's pinned revision for ``name``.
    """

    binding_type: ClassVar[str] = "local_file"

    def __init__(
        self,
        name: str = "",
        adapter_type: AdapterType = AdapterType.LORA,
        repo_id: str = "",
        revision: str | None = None,
    ) -> None:
        self.name = name
        self.adapter_type = adapter_type
        self.repo_id = repo_id
        self.revision = revision
        self.backend: Any = None
        self.path: str | None = None
        self._staged_backend: Any = None
        self._loaded = False
        self._active = False
        self._released = False
        self._lifecycle_lock = threading.Lock()

    @property
    def qualified_name(self) -> str:
        """The name the backend knows the weights by: ``<name>_<lora|alora>``."""
        return f"{self.name}_{self.adapter_type.value}"

    def resolved_revision(self) -> str:
        """``revision``, or the catalog's pinned one for ``name`` when it is ``None``."""
        if self.revision is not None:
            return self.revision
        return fetch_intrinsic_metadata(self.name).revision

    def get_local_hf_path(self, base_model_name: str) -> str:
        """The local directory of the weights for ``base_model_name``."""
        from mellea.backends.adapters.catalog import IntrinsicsCatalogEntry
        from mellea.backends.adapters.locate import find_adapter_dir

        entry = IntrinsicsCatalogEntry(
            name=self.name, repo_id=self.repo_id, revision=self.resolved_revision()
        )
        found = find_adapter_dir(
            entry, base_model_name, alora=self.adapter_type is AdapterType.ALORA
        )
        return str(found)

    @classmethod
    def from_catalog(cls, name: str) -> LocalFileBinding:
        """The binding the catalog describes for ``name`` (its repository, pinned
        revision and first adapter kind)."""
        entry = fetch_intrinsic_metadata(name)
        return cls(
            name=name,
            adapter_type=entry.adapter_types[0],
            repo_id=entry.repo_id,
            revision=entry.revision,
        )

    def bind_backend(self, backend: Any) -> None:
        """Name the backend the next :meth:`prepare` loads into."""
        with self._lifecycle_lock:
            if self._released:
                raise RuntimeError(
                    "this LocalFileBinding was released; release is final, make a new one"
                )
            if self.backend is not None and backend is not self.backend:
                raise RuntimeError(
                    "this LocalFileBinding is registered with another backend; release it "
                    "and make a new one"
                )
            self._staged_backend = backend

    def prepare(self) -> None:
        """Register with the bound backend and load the weights (a no-op once done;
        after a failed load, only the load is tried again)."""
        started = time.monotonic()
        with self._lifecycle_lock:
            if self._released:
                raise RuntimeError(
                    "this LocalFileBinding was released; release is final, make a new one"
                )
            if self.backend is not None and self._loaded:
                return
            if self.backend is None:
                if self._staged_backend is None:
                    raise RuntimeError("call bind_backend(backend) before prepare()")
                if not self.name:
                    raise RuntimeError(
                        "this LocalFileBinding has no name: make one with "
                        "LocalFileBinding.from_catalog(name)"
                    )
                self._staged_backend.add_adapter(self)
                if self.backend is None:
                    raise RuntimeError(
                        f"the backend did not register adapter {self.qualified_name!r}: "
                        "another adapter holds that name"
                    )
            with self.backend._adapter_activation_lock():
                self.backend.load_peft_adapter(self.qualified_name)
            self._loaded = True
        fire_phase_complete(self.name, "prepare", (time.monotonic() - started) * 1000.0)

    def _loaded_backend(self, verb: str) -> Any:
        backend = self.backend
        if backend is None or not self._loaded:
            raise RuntimeError(f"LocalFileBinding.{verb}() needs prepare() first")
        return backend

    def activate(self) -> None:
        """Make the backend generate with these weights."""
        backend = self._loaded_backend("activate")
        with backend._adapter_activation_lock():
            backend.activate_peft_adapter(self.qualified_name)
            self._active = True

    def deactivate(self) -> None:
        """Make the backend generate with the base model again."""
        backend = self._loaded_backend("deactivate")
        with backend._adapter_activation_lock():
            backend.deactivate_peft_adapter(self.qualified_name)
            self._active = False

    def release(self) -> None:
        """Unload the weights and end the binding (repeatable; refused while active).
        As upstream, the backend keeps the name registered."""
        with self._lifecycle_lock:
            if self._released:
                return
            backend = self.backend
            if backend is not None:
                if self._active:
                    raise RuntimeError("deactivate() the adapter before release()")
                with backend._adapter_activation_lock():
                    backend.unload_peft_adapter(self.qualified_name)
            self.backend = None
            self.path = None
            self._staged_backend = None
            self._loaded = False
            self._released = True


class EmbeddedBinding(WeightsBinding):
    """Weights inside a model (Granite Switch); no lifecycle yet, as upstream."""

    binding_type: ClassVar[str] = "embedded"

    def prepare(self) -> None:
        """Not implemented (upstream's placeholder)."""
        raise NotImplementedError(_PLACEHOLDER.format(cls="EmbeddedBinding"))

    def activate(self) -> None:
        """Not implemented (upstream's placeholder)."""
        raise NotImplementedError(_PLACEHOLDER.format(cls="EmbeddedBinding"))

    def deactivate(self) -> None:
        """Not implemented (upstream's placeholder)."""
        raise NotImplementedError(_PLACEHOLDER.format(cls="EmbeddedBinding"))

    def release(self) -> None:
        """Not implemented (upstream's placeholder)."""
        raise NotImplementedError(_PLACEHOLDER.format(cls="EmbeddedBinding"))


class ServerMediatedBinding(WeightsBinding):
    """Weights a server holds and picks per request; no lifecycle yet, as upstream."""

    binding_type: ClassVar[str] = "server_mediated"

    def prepare(self) -> None:
        """Not implemented (upstream's placeholder)."""
        raise NotImplementedError(_PLACEHOLDER.format(cls="ServerMediatedBinding"))

    def activate(self) -> None:
        """Not implemented (upstream's placeholder)."""
        raise NotImplementedError(_PLACEHOLDER.format(cls="ServerMediatedBinding"))

    def deactivate(self) -> None:
        """Not implemented (upstream's placeholder)."""
        raise NotImplementedError(_PLACEHOLDER.format(cls="ServerMediatedBinding"))

    def release(self) -> None:
        """Not implemented (upstream's placeholder)."""
        raise NotImplementedError(_PLACEHOLDER.format(cls="ServerMediatedBinding"))


@dataclass(frozen=True)
class Adapter:
    """An adapter as its identity, its input/output contract and its weights."""

    identity: Identity
    io_contract: IOContract
    weights: WeightsBinding


__all__ = [
    "Adapter",
    "AdapterSchemaMismatchError",
    "EmbeddedBinding",
    "IOContract",
    "Identity",
    "LocalFileBinding",
    "ServerMediatedBinding",
    "WeightsBinding",
]
