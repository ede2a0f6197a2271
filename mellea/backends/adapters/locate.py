"""Where an adapter's files are on this machine.

There is no model hub here. A catalog adapter is looked up under the adapters
directory in the layout of upstream's hub repositories, so one download command
fills it:

    $MELLEA_ADAPTERS_DIR/<repo_id>/<intrinsic>/<base model>/<lora|alora>/
        adapter_config.json, adapter_model.safetensors, io.yaml

(``<repo_id>`` is e.g. ``ibm-granite/granitelib-core-r1.0``; the repository's own
tree below it, unchanged). ``MELLEA_ADAPTERS_DIR`` may list several directories
(``os.pathsep``-separated); unset, it is ``~/.cache/mellea/adapters``. It is read by
:func:`adapters_dirs` alone. A missing adapter is an :class:`AdapterNotFoundError`
that names the repository, the revision, the path inside it and the command that
downloads it.
"""

from __future__ import annotations

import os
from pathlib import Path

from mellea.backends.adapters.catalog import IntrinsicsCatalogEntry

ADAPTERS_DIR_VARIABLE = "MELLEA_ADAPTERS_DIR"
DEFAULT_ADAPTERS_DIR = Path("~/.cache/mellea/adapters")

# Repositories in upstream's older layout: <task>/<lora|alora>/<base model>.
OLD_LAYOUT_REPOS = (
    "ibm-granite/rag-intrinsics-lib",
    "generative-computing/rag-intrinsics-lib",
    "generative-computing/core-intrinsics-lib",
)

# Base model ids -> the directory name their adapters are published under (upstream's).
BASE_MODEL_TO_CANONICAL_NAME = {
    "ibm-granite/granite-3.3-8b-instruct": "granite-3.3-8b-instruct",
    "ibm-granite/granite-3.3-2b-instruct": "granite-3.3-2b-instruct",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "ibm-granite/granite-4.0-micro": "granite-4.0-micro",
    "ibm-granite/granite-4.1-3b": "granite-4.1-3b",
    "ibm-granite/granite-4.1-8b": "granite-4.1-8b",
    "ibm-granite/granite-4.1-30b": "granite-4.1-30b",
    "granite4:micro": "granite4_micro",
    "granite4.1:3b": "granite4.1_3b",
    "granite4.1:8b": "granite4.1_8b",
    "granite4.1:30b": "granite4.1_30b",
}


class AdapterNotFoundError(ValueError):
    """An adapter's files are not on this machine; the message says what to download."""


def adapters_dirs() -> list[Path]:
    """The directories adapters are looked up in (``$MELLEA_ADAPTERS_DIR``, in order)."""
    value = os.environ.get(ADAPTERS_DIR_VARIABLE, "").strip()
    if not value:
        return [DEFAULT_ADAPTERS_DIR.expanduser()]
    return [Path(part).expanduser() for part in value.split(os.pathsep) if part.strip()]


def canonical_base_model(model_name: str) -> str:
    """The directory name adapters for ``model_name`` are published under: upstream's
    table, else the last path component (``org/name`` and local paths -> ``name``)."""
    if model_name in BASE_MODEL_TO_CANONICAL_NAME:
        return BASE_MODEL_TO_CANONICAL_NAME[model_name]
    return Path(model_name.rstrip("/")).name or model_name


def adapter_subpath(
    intrinsic_name: str, target_model_name: str, repo_id: str, /, alora: bool = False
) -> str:
    """The adapter's path inside its hub repository (upstream's layout rule)."""
    model = canonical_base_model(target_model_name)
    kind = "alora" if alora else "lora"
    if repo_id in OLD_LAYOUT_REPOS:
        return f"{intrinsic_name}/{kind}/{model}"
    return f"{intrinsic_name}/{model}/{kind}"


def find_adapter_dir(
    entry: IntrinsicsCatalogEntry,
    base_model_name: str,
    *,
    alora: bool,
    required_file: str = "adapter_config.json",
) -> Path:
    """The local directory holding ``entry``'s adapter for ``base_model_name``.

    Looked up as ``<dir>/<repo_id>/<subpath>``, then ``<dir>/<subpath>``, for each
    adapters directory. ``required_file`` is what must be there (``io.yaml`` when
    only the adapter's input/output description is needed, as for a remote server).
    """
    name = entry.internal_name or entry.name
    subpath = adapter_subpath(name, base_model_name, entry.repo_id, alora=alora)
    tried: list[Path] = []
    for root in adapters_dirs():
        for candidate in (root / entry.repo_id / subpath, root / subpath):
            if (candidate / required_file).is_file():
                return candidate
            tried.append(candidate)
    raise AdapterNotFoundError(missing_adapter_message(entry, subpath, tried, required_file))


def missing_adapter_message(
    entry: IntrinsicsCatalogEntry, subpath: str, tried: list[Path], required_file: str
) -> str:
    """What to download, and where to put it, for a missing catalog adapter."""
    root = adapters_dirs()[0]
    return (
        f"adapter '{entry.name}' ({subpath.rsplit('/', 1)[-1]}) is not on this machine: "
        f"no {required_file} in {', '.join(str(p) for p in tried)}. Download "
        f"'{subpath}/*' from the Hugging Face repository {entry.repo_id} "
        f"(revision {entry.revision}), e.g. `huggingface-cli download {entry.repo_id} "
        f"--revision {entry.revision} --include '{subpath}/*' "
        f"--local-dir {root / entry.repo_id}`, or set {ADAPTERS_DIR_VARIABLE} to the "
        "directory that holds it"
    )


__all__ = [
    "ADAPTERS_DIR_VARIABLE",
    "AdapterNotFoundError",
    "adapter_subpath",
    "adapters_dirs",
    "canonical_base_model",
    "find_adapter_dir",
]
