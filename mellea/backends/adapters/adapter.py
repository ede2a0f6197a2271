"""Adapter classes (upstream's names): what a program adds to a backend.

- :class:`IntrinsicAdapter` is a catalog adapter function (``"requirement-check"``,
  ``"answerability"``, ...) as a LoRA or aLoRA for the backend's base model; its
  files are found on this machine (:mod:`mellea.backends.adapters.locate`).
- :class:`CustomIntrinsicAdapter` is a program's own adapter function, named by a hub
  id ``user/repo``; it joins the catalog so ``Intrinsic(name)`` finds it.
- :class:`EmbeddedIntrinsicAdapter` is an adapter baked into a Granite Switch model
  served elsewhere: only its ``io.yaml`` is read here.

Adding one to a backend (:func:`mellea.backends.adapters.backend.add_adapter`, also
``backend.add_adapter`` on backends with :class:`AdapterMixin`) loads its weights into
the local engine, or, for a remote backend, lets requests name it.
"""

from __future__ import annotations

import abc
import json
import re
from pathlib import Path
from typing import Any, TypeAlias

from mellea.backends.adapters._core import Adapter as _AdapterCore
from mellea.backends.adapters._core import (
    Identity,
    LocalFileBinding,
    WeightsBinding,
    _DictContract,
)
from mellea.backends.adapters.catalog import (
    AdapterType,
    IntrinsicsCatalogEntry,
    add_catalog_entry,
    fetch_intrinsic_metadata,
)
from mellea.backends.adapters.io import read_io_config
from mellea.backends.adapters.locate import AdapterNotFoundError, find_adapter_dir


class NamedAdapter:
    """An adapter that one backend at a time may hold (``Adapter`` in this module,
    upstream's older base class; the package's ``Adapter`` is the composed one).

    ``qualified_name`` (``<name>_<lora|alora>``) names it everywhere: in the backend's
    list, in the engine, and as the request's ``model`` on a remote server.
    """

    def __init__(self, name: str, adapter_type: AdapterType) -> None:
        self.name = name
        self.adapter_type = adapter_type
        self.qualified_name = f"{name}_{adapter_type.value}"
        self.backend: Any = None  # set when added to a backend
        self.path: str | None = None  # set when added to a backend that loads weights
        self.config: dict[str, Any] | None = None  # the io.yaml, for adapter functions

    @property
    def intrinsic_name(self) -> str:
        """The adapter function this adapter implements (its name)."""
        return self.name


Adapter = NamedAdapter  # upstream's name here (one class per name in this project)


class LocalHFAdapter(Adapter):
    """An adapter whose weights are loaded from a local directory."""

    @abc.abstractmethod
    def get_local_hf_path(self, base_model_name: str) -> str:
        """The directory holding this adapter's weights for ``base_model_name``."""


class _BackendVerbsBinding(WeightsBinding):
    """The weights of an adapter added to a backend, driven through the backend's
    adapter verbs (``load/unload/activate/deactivate_peft_adapter``, or
    ``render_controls`` for an adapter embedded in a model)."""

    def __init__(self, adapter: Adapter, binding_type: str, revision: str | None) -> None:
        self._adapter = adapter
        self.binding_type = binding_type  # type: ignore[misc]  # per instance here
        self.revision = revision

    def _backend(self) -> Any:
        backend = self._adapter.backend
        if backend is None:
            raise RuntimeError(
                f"adapter {self._adapter.qualified_name!r} is not added to a backend: "
                "backend.add_adapter(adapter) first"
            )
        return backend

    def prepare(self) -> None:
        """Load the weights (adding the adapter to a local backend already did)."""
        if self.binding_type == "local_file":
            self._backend().load_peft_adapter(self._adapter.qualified_name)

    def activate(self) -> None:
        """Make the backend's generations use this adapter."""
        backend = self._backend()
        if self.binding_type == "embedded":
            backend.render_controls(self._adapter.qualified_name, True)
        else:
            backend.activate_peft_adapter(self._adapter.qualified_name)

    def deactivate(self) -> None:
        """Make the backend's generations use the base model again."""
        backend = self._backend()
        if self.binding_type == "embedded":
            backend.render_controls(self._adapter.qualified_name, False)
        else:
            backend.deactivate_peft_adapter(self._adapter.qualified_name)

    def release(self) -> None:
        """Unload the weights from the backend (an embedded adapter has none to unload)."""
        backend = self._adapter.backend
        if backend is not None and self.binding_type == "local_file":
            backend.unload_peft_adapter(self._adapter.qualified_name)


def _identity(name: str, adapter_type: AdapterType) -> Identity:
    # The capability is the adapter function's name, as upstream's shims set it; no
    # warning for catalog names spelled with dashes (``requirement-check``).
    identity = object.__new__(Identity)
    for key, value in (("name", name), ("adapter_type", adapter_type.value), ("capability", name)):
        object.__setattr__(identity, key, value)
    return identity


class _MutableCore(_AdapterCore):
    """The composable adapter's three parts on a class whose other attributes change
    (backend, path) as it is added to a backend."""

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def _compose(self, binding_type: str, revision: str | None) -> None:
        assert isinstance(self, Adapter)
        self.identity = _identity(self.name, self.adapter_type)
        self.io_contract = _DictContract(self.name, frozenset())
        self.weights = _BackendVerbsBinding(self, binding_type, revision)


class IntrinsicAdapter(LocalHFAdapter, _MutableCore):
    """A catalog adapter function as a LoRA or aLoRA (default: aLoRA) for a base model.

    Its files are in ``adapter_path`` (ours: an explicit directory) or else in the
    adapters directory, by catalog name and ``base_model_name`` (an
    :class:`AdapterNotFoundError` names what to download when they are not here).
    Its ``io.yaml`` comes from ``config_file`` or ``config_dict`` when given.
    """

    def __init__(
        self,
        intrinsic_name: str,
        adapter_type: AdapterType = AdapterType.ALORA,
        config_file: str | Path | None = None,
        config_dict: dict | None = None,
        base_model_name: str | None = None,
        *,
        adapter_path: str | Path | None = None,
    ) -> None:
        super().__init__(intrinsic_name, adapter_type)
        self.intrinsic_metadata: IntrinsicsCatalogEntry = fetch_intrinsic_metadata(intrinsic_name)
        self.base_model_name = base_model_name
        self.adapter_path = Path(adapter_path) if adapter_path is not None else None
        if self.adapter_path is not None and not self.adapter_path.is_dir():
            raise AdapterNotFoundError(f"adapter directory {self.adapter_path} does not exist")
        if adapter_type not in self.intrinsic_metadata.adapter_types:
            raise ValueError(
                f"adapter function '{intrinsic_name}' is not available as {adapter_type.value}; "
                f"available: {[t.value for t in self.intrinsic_metadata.adapter_types]}"
            )
        if config_file is not None and config_dict is not None:
            raise ValueError("give config_file or config_dict, not both")
        if config_file is None and config_dict is None and self.adapter_path is not None:
            config_file = self.adapter_path / "io.yaml"
            if not config_file.is_file():
                raise AdapterNotFoundError(f"no io.yaml in adapter directory {self.adapter_path}")
        if config_file is None and config_dict is None:
            if base_model_name is None:
                raise ValueError(
                    "IntrinsicAdapter needs one of config_file, config_dict or base_model_name"
                )
            config_file = self._directory(base_model_name, "io.yaml") / "io.yaml"
        self.config = read_io_config(config_file, config_dict)
        self._compose("local_file", self.intrinsic_metadata.revision)

    def _directory(self, base_model_name: str, required_file: str) -> Path:
        if self.adapter_path is not None:
            return self.adapter_path
        return find_adapter_dir(
            self.intrinsic_metadata,
            base_model_name,
            alora=self.adapter_type == AdapterType.ALORA,
            required_file=required_file,
        )

    def get_local_hf_path(self, base_model_name: str) -> str:
        """The adapter's directory for ``base_model_name`` (under ``MELLEA_ADAPTERS_DIR``)."""
        return str(self._directory(base_model_name, "adapter_config.json"))

    def download_and_get_path(self, base_model_name: str) -> str:
        """Upstream's name for :meth:`get_local_hf_path` (nothing is downloaded here)."""
        return self.get_local_hf_path(base_model_name)


class CustomIntrinsicAdapter(IntrinsicAdapter):
    """A program's own adapter function, published upstream-style as ``user/repo``.

    The catalog learns ``intrinsic_name`` (default: the repository's name), so
    ``Intrinsic(intrinsic_name)`` and ``ALoraRequirement(..., intrinsic_name=...)``
    can name it; its files are looked up like a catalog adapter's, with ``model_id``
    as the repository.
    """

    def __init__(
        self, *, model_id: str, intrinsic_name: str | None = None, base_model_name: str
    ) -> None:
        if not re.match(r"^[^/]+/[^/]+$", model_id):
            raise ValueError(f"model_id must be a hub id <user>/<repo>, not {model_id!r}")
        name = intrinsic_name if intrinsic_name is not None else model_id.split("/")[1]
        add_catalog_entry(IntrinsicsCatalogEntry(name=name, repo_id=model_id, revision="main"))
        super().__init__(name, base_model_name=base_model_name)


class EmbeddedIntrinsicAdapter(Adapter, _MutableCore):
    """An adapter function baked into a Granite Switch model that a server runs.

    No weights are loaded here: a request names the function in
    ``chat_template_kwargs.adapter_name`` and the model's chat template activates it.
    ``technology`` is ``"lora"`` or ``"alora"``.
    """

    def __init__(self, intrinsic_name: str, config: dict, technology: str = "lora") -> None:
        if technology not in ("lora", "alora"):
            raise ValueError(f"technology must be 'lora' or 'alora', got {technology!r}")
        kind = AdapterType.ALORA if technology == "alora" else AdapterType.LORA
        super().__init__(intrinsic_name, kind)
        self.technology = technology
        self.config = read_io_config(config_dict=config)
        self._compose("embedded", None)

    @staticmethod
    def from_model_directory(
        model_path: str | Path, intrinsic_name: str | None = None
    ) -> list[EmbeddedIntrinsicAdapter]:
        """The adapters a Granite Switch model directory lists in ``adapter_index.json``
        (only ``intrinsic_name``'s when given), with their ``io_configs/*/io.yaml``."""
        import yaml

        root = Path(model_path)
        index_path = root / "adapter_index.json"
        if not index_path.is_file():
            raise FileNotFoundError(f"No adapter_index.json found at {index_path}")
        index = json.loads(index_path.read_text(encoding="utf-8"))
        adapters = []
        for entry in index.get("adapters", []):
            name, relative = entry.get("adapter_name"), entry.get("io_config")
            if name is None or relative is None:
                continue
            if intrinsic_name is not None and name != intrinsic_name:
                continue
            io_path = (root / relative).resolve()
            if not io_path.is_relative_to(root.resolve()):
                raise ValueError(f"io_config of '{name}' escapes the model directory: {io_path}")
            if not io_path.is_file():
                raise ValueError(f"io.yaml for adapter function '{name}' not found at {io_path}")
            config = yaml.safe_load(io_path.read_text(encoding="utf-8"))
            adapters.append(EmbeddedIntrinsicAdapter(name, config, entry.get("technology", "lora")))
        if not adapters:
            which = f"for adapter function '{intrinsic_name}' " if intrinsic_name else ""
            raise ValueError(f"No adapters found {which}in {root}")
        return adapters

    @staticmethod
    def from_hub(
        repo_id: str,
        revision: str = "main",
        cache_dir: str | None = None,
        intrinsic_name: str | None = None,
    ) -> list[EmbeddedIntrinsicAdapter]:
        """There is no hub here: ``repo_id`` is read from the adapters directory
        (``$MELLEA_ADAPTERS_DIR/<repo_id>``); a missing one names what to download."""
        del cache_dir
        from mellea.backends.adapters.locate import ADAPTERS_DIR_VARIABLE, adapters_dirs

        for root in adapters_dirs():
            if (root / repo_id / "adapter_index.json").is_file():
                return EmbeddedIntrinsicAdapter.from_model_directory(root / repo_id, intrinsic_name)
        raise AdapterNotFoundError(
            f"the Granite Switch model {repo_id} is not on this machine: download its "
            f"adapter_index.json and io_configs/ (revision {revision}), e.g. "
            f"`huggingface-cli download {repo_id} --revision {revision} --include "
            f"'adapter_index.json' 'io_configs/*' --local-dir {adapters_dirs()[0] / repo_id}`, "
            f"or set {ADAPTERS_DIR_VARIABLE} to the directory that holds it"
        )

    @staticmethod
    def from_source(
        source: str,
        revision: str = "main",
        cache_dir: str | None = None,
        intrinsic_name: str | None = None,
    ) -> list[EmbeddedIntrinsicAdapter]:
        """A local model directory when ``source`` is one, else :meth:`from_hub`."""
        if Path(source).is_dir():
            return EmbeddedIntrinsicAdapter.from_model_directory(source, intrinsic_name)
        return EmbeddedIntrinsicAdapter.from_hub(source, revision, cache_dir, intrinsic_name)


def get_adapter_for_intrinsic(
    intrinsic_name: str,
    intrinsic_adapter_types: list[AdapterType] | tuple[AdapterType, ...],
    available_adapters: dict[str, Any],
) -> Any:
    """The first of ``available_adapters`` (by qualified name) implementing
    ``intrinsic_name`` with one of the allowed types, in their order; else ``None``."""
    for adapter_type in intrinsic_adapter_types:
        found = available_adapters.get(f"{intrinsic_name}_{adapter_type.value}")
        if found is not None:
            return found
    return None


# What ``add_adapter`` takes: an adapter class above, a composed adapter, or a bare
# LocalFileBinding (upstream's union).
AdapterInput: TypeAlias = Adapter | _AdapterCore | LocalFileBinding


__all__ = [
    "Adapter",
    "AdapterInput",
    "AdapterType",
    "CustomIntrinsicAdapter",
    "EmbeddedIntrinsicAdapter",
    "IntrinsicAdapter",
    "LocalHFAdapter",
    "NamedAdapter",
    "get_adapter_for_intrinsic",
]


def __getattr__(name: str) -> Any:
    # Upstream defines AdapterMixin in this module; ours lives beside the backend functions.
    if name == "AdapterMixin":
        from mellea.backends.adapters.backend import AdapterMixin

        return AdapterMixin
    raise AttributeError(name)
