"""Finding an adapter function's files and reading its io.yaml.

There is no model hub here: ``obtain_lora`` and ``obtain_io_yaml`` find the files a
hub download would have fetched under ``$MELLEA_ADAPTERS_DIR`` (or ``cache_dir``), in
the repository's own layout, and raise ``AdapterNotFoundError`` (a ValueError) naming
what to download when they are missing.
"""

from __future__ import annotations

import pathlib

from mellea.backends.adapters import locate
from mellea.backends.adapters.catalog import IntrinsicsCatalogEntry
from mellea.backends.adapters.io import read_io_config


def make_config_dict(
    config_file: str | pathlib.Path | None = None, config_dict: dict | None = None
) -> dict | None:
    """The checked io.yaml configuration, from a file or a parsed dict (exactly one):
    optional fields filled with ``None`` and JSON fields parsed; a ValueError says what
    is wrong."""
    return read_io_config(config_file, config_dict)


def adapter_subpath(
    intrinsic_name: str, target_model_name: str, repo_id: str, /, alora: bool = False
) -> str:
    """The adapter's directory inside ``repo_id`` (the layout rule of its repository)."""
    return locate.adapter_subpath(intrinsic_name, target_model_name, repo_id, alora=alora)


def _find(
    intrinsic_name: str,
    target_model_name: str,
    repo_id: str,
    revision: str,
    alora: bool,
    cache_dir: str | None,
    required_file: str,
) -> pathlib.Path:
    if cache_dir is not None:
        subpath = adapter_subpath(intrinsic_name, target_model_name, repo_id, alora=alora)
        root = pathlib.Path(cache_dir).expanduser()
        for candidate in (root / repo_id / subpath, root / subpath):
            if (candidate / required_file).is_file():
                return candidate
    entry = IntrinsicsCatalogEntry(name=intrinsic_name, repo_id=repo_id, revision=revision)
    return locate.find_adapter_dir(
        entry, target_model_name, alora=alora, required_file=required_file
    )


def obtain_lora(
    intrinsic_name: str,
    target_model_name: str,
    repo_id: str,
    /,
    revision: str = "main",
    alora: bool = False,
    cache_dir: str | None = None,
    file_glob: str = "*",
) -> pathlib.Path:
    """The local directory of ``intrinsic_name``'s LoRA (or aLoRA) for
    ``target_model_name`` from ``repo_id`` (``cache_dir`` is looked in first).
    ``file_glob`` is accepted for upstream's signature: the whole directory is used."""
    del file_glob
    return _find(
        intrinsic_name,
        target_model_name,
        repo_id,
        revision,
        alora,
        cache_dir,
        "adapter_config.json",
    )


def obtain_io_yaml(
    intrinsic_name: str,
    target_model_name: str,
    repo_id: str,
    /,
    revision: str = "main",
    alora: bool = False,
    cache_dir: str | None = None,
) -> pathlib.Path:
    """The local path of ``intrinsic_name``'s io.yaml for ``target_model_name``."""
    found = _find(intrinsic_name, target_model_name, repo_id, revision, alora, cache_dir, "io.yaml")
    return found / "io.yaml"


__all__ = ["adapter_subpath", "make_config_dict", "obtain_io_yaml", "obtain_lora"]
