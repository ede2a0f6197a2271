"""The runtime: what the sessions of one app (or of one plain script) share.

An ``m serve`` app builds one :class:`Runtime` from its settings and hands it down:
the program is imported, and each request runs, with that runtime *active* (a context
variable), so ``mellea.start_session()`` in the program reaches it without naming it.
Outside any app (plain scripts, tests) a default runtime with default settings is used.

A runtime owns the local engines (one per resolved model: the model's directory,
which for a hub snapshot includes its revision, plus dtype and device), the KV-cache
budget they get, the tool-call format the local backend reads, the ``--model``
override, the ``--lora`` adapters loaded into every engine it builds, how long loading
steps are shown, warm-up and the engines' stats.
The engine package knows nothing of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mellea.core.errors import RequestError
from mellea.plugins.manager import PluginManager

if TYPE_CHECKING:
    from mellea.engine.interface import InferenceEngine
    from mellea.engine.loader import ResolvedModel

log = logging.getLogger("mellea.runtime")

StepHook = Callable[[str], contextlib.AbstractContextManager[None]]
# Builds an InferenceEngine from a ResolvedModel (the runtime resolves each model once,
# here, and hands it down) and the engine's keyword arguments; tests inject fakes.
EngineFactory = Callable[..., "InferenceEngine"]


class ModelUnavailableError(RequestError):
    """The model a session names cannot be loaded on this machine.

    ``str(exc)`` is one line for the operator (the model, and how to provide it);
    ``message`` is what a client sees if this happens during a request.
    """

    status_code = 503
    error_type = "service_unavailable"

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(
            f"the model this program uses ({model}) is not available on this server",
            code="model_unavailable",
        )
        self.model = model
        self.reason = reason
        self.args = (
            f"model {model!r}: {reason}; serve another with `m serve --model ID_OR_PATH`, "
            "name a local model directory, or put it in the Hugging Face cache "
            f"(`hf download {model}`)",
        )

    def __str__(self) -> str:
        return str(self.args[0])


class AdapterUnavailableError(ModelUnavailableError):
    """A runtime adapter (``--lora``) that does not load into its model's engine."""

    def __init__(self, model: str, name: str, path: str, reason: str) -> None:
        super().__init__(model, reason)
        self.args = (f"adapter {name!r} (--lora {name}={path}) does not load: {reason}",)


class Runtime:
    """Engines and settings shared by every local session of one app.

    ``kv_cache_memory``: each engine's KV-cache budget (bytes, or a fraction of memory).
    ``kv_cache_dtype``: each engine's KV-cache dtype (``auto``, ``float32``, ``float16``,
    ``bfloat16``; ``None``: the engine's default, ``auto``).
    ``dtype``: each engine's weight format (``auto``, ``float32``, ``bfloat16``, ``int8``;
    ``None``: the engine's default, float32 on CPU) unless a session names its own.
    ``tool_call_parser``: the format local sessions read tool calls in (``None``: hermes).
    ``model``: serve this model for every local session, whatever the program names.
    ``chat_template``: a Jinja chat template (text) used instead of the models' own.
    ``progress``: shows long loading steps (a context manager per step); default: logged.
    ``engine_factory``: builds engines (default: :func:`mellea.engine.build_engine`).
    ``adapters``: LoRA/aLoRA adapters (name -> PEFT directory) loaded into every engine
    built (``m serve --lora NAME=PATH``); a session whose model is one of their names
    generates with it (see :meth:`adapter_engine`).
    """

    def __init__(
        self,
        *,
        kv_cache_memory: int | float | None = None,
        dtype: str | None = None,
        kv_cache_dtype: str | None = None,
        tool_call_parser: str | None = None,
        model: str | None = None,
        chat_template: str | None = None,
        progress: StepHook | None = None,
        engine_factory: EngineFactory | None = None,
        adapters: dict[str, str] | None = None,
    ) -> None:
        self.kv_cache_memory = kv_cache_memory
        self.kv_cache_dtype = kv_cache_dtype
        self.dtype = dtype
        self.tool_call_parser = tool_call_parser
        self.model = model
        self.chat_template = chat_template
        self.progress = progress
        self.engine_factory = engine_factory
        self.adapters = dict(adapters or {})
        self._engines: dict[tuple[Any, ...], InferenceEngine] = {}  # by resolved model
        self._spellings: dict[tuple[Any, ...], InferenceEngine] = {}  # by what was asked for
        self._noted: set[str] = set()
        self._lock = threading.Lock()  # guards the dicts above
        self._build_lock = threading.Lock()  # one engine is built at a time
        # The app's plugins: what its program registers stays in this app.
        self.plugins = PluginManager()

    @contextlib.contextmanager
    def active(self) -> Iterator[Runtime]:
        """Make this the runtime ``start_session()`` reaches, within the block."""
        token = _current.set(self)
        try:
            with self.plugins.active():
                yield self
        finally:
            _current.reset(token)

    def engine(self, model_id: Any = None, **engine_kwargs: Any) -> InferenceEngine:
        """The engine for ``model_id`` (a name, a path or a ``ModelIdentifier``), built once.

        Every spelling of one model (``None``, its hub id, its directory) gets the same
        engine. With ``model`` set, that model is served instead, and this is logged once
        per name asked for. Raises :class:`ModelUnavailableError` for a model not here.
        """
        if self.model is not None:
            spec: str | None = self.model
            self.note_once(f"program asked for {_shown(model_id)}; serving {spec} (--model)")
        else:
            spec = model_name(model_id)
        if self.kv_cache_memory is not None:
            engine_kwargs.setdefault("kv_cache_memory", self.kv_cache_memory)
        if self.dtype is not None:
            engine_kwargs.setdefault("dtype", self.dtype)
        if self.kv_cache_dtype not in (None, "auto"):
            engine_kwargs.setdefault("kv_cache_dtype", self.kv_cache_dtype)
        spelling = (spec, _frozen(engine_kwargs))
        with self._lock:
            engine = self._spellings.get(spelling)
        if engine is not None:
            return engine
        # One load at a time; lookups of loaded engines (and stats) do not wait for it.
        with self._build_lock:
            with self._lock:
                engine = self._spellings.get(spelling)
            if engine is not None:
                return engine
            model = self._locate(spec)
            key = (str(model.path.resolve()), *_placement(engine_kwargs, model.path))
            with self._lock:
                engine = self._engines.get(key)
            if engine is None:
                engine = self._build(model, engine_kwargs)
            with self._lock:
                self._engines[key] = engine
                self._spellings[spelling] = engine
            return engine

    def adapter_engine(self, name: str | None) -> InferenceEngine | None:
        """The engine that holds an adapter named ``name``, or None when none does.

        A loaded engine with that adapter (one the runtime loaded, or a program through
        ``LocalBackend.load_adapter``); for a ``--lora`` adapter before any engine is
        loaded, the engine of the served model (``--model``, else the default), built now.
        """
        if not name:
            return None
        for engine in self.engines():
            if name in (getattr(engine, "adapters", None) or {}):
                return engine
        if name in self.adapters:
            return self.engine()
        return None

    def engines(self) -> list[InferenceEngine]:
        """The engines loaded so far."""
        with self._lock:
            return list(self._engines.values())

    def engine_stats(self) -> dict[str, dict[str, Any]]:
        """``stats()`` of every loaded engine, by model name."""
        return {e.model_id: e.stats() for e in self.engines()}

    async def warm_up(self) -> int:
        """Run a one-token generation on every loaded engine, and build its grammar token
        table; returns how many were warmed."""
        engines = self.engines()
        if not engines:  # a program without a local model: no need to import the engine
            return 0
        from mellea.engine.constraints import json_schema_grammar
        from mellea.engine.types import SamplingParams

        for engine in engines:
            # The first grammar builds the tokenizer's table (Python-heavy, ~0.4 s
            # holding the GIL): do it before serving, not during a client's request.
            grammar = json_schema_grammar({"type": "object"})
            await asyncio.to_thread(engine.compile_grammar, grammar)
            # Plain text, not the chat template: a model may have none (chat requests
            # then get a 400), and that must not stop the server from starting.
            prompt = engine.tokenizer.encode("Hi")
            async for _ in engine.add_request(prompt, SamplingParams(max_tokens=1)):
                pass
        return len(engines)

    def shutdown(self) -> None:
        """Stop every engine's thread (the runtime is not used afterwards)."""
        for engine in self.engines():
            engine.shutdown()

    def note_once(self, message: str) -> None:
        """Log ``message`` the first time it comes (e.g. each model ``--model`` replaces)."""
        with self._lock:
            if message in self._noted:
                return
            self._noted.add(message)
        log.info("%s", message)

    def _locate(self, spec: str | None) -> ResolvedModel:
        """The model ``spec`` names, found here once and handed to the engine."""
        from mellea.engine.loader import ModelNotFoundError, locate_model

        try:
            return locate_model(spec, step=self.progress)
        except ModelNotFoundError as exc:
            raise ModelUnavailableError(spec or "default", str(exc)) from None

    def _build(self, model: ResolvedModel, kwargs: dict[str, Any]) -> InferenceEngine:
        from mellea.engine.interface import InferenceEngine, missing_members

        if self.engine_factory is not None:
            engine = self.engine_factory(model, **kwargs)
        else:
            from mellea.engine import build_engine

            # The fast engine, or transformers' own forward pass for what it does not cover.
            engine = build_engine(model, **kwargs)
        if not isinstance(engine, InferenceEngine):
            missing = ", ".join(missing_members(engine))
            raise TypeError(f"{type(engine).__name__} is not an InferenceEngine (no {missing})")
        # Reported in stats and metrics: the name asked for, not the cache directory.
        engine.model_id = model.model_id
        self._load_adapters(engine, model.model_id)
        log.info("model %s: %s weights", engine.model_id, engine.weights)  # what auto chose
        return engine

    def _load_adapters(self, engine: InferenceEngine, spec: str | None) -> None:
        """Load the runtime's adapters into a new engine; one that does not load stops
        it (:class:`ModelUnavailableError` naming the adapter and why)."""
        for name, path in self.adapters.items():
            try:
                engine.load_adapter(name, path)
            except ValueError as exc:  # AdapterLoadError
                engine_shutdown = getattr(engine, "shutdown", None)
                if engine_shutdown is not None:
                    engine_shutdown()
                raise AdapterUnavailableError(spec or "default", name, path, str(exc)) from None


_current: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "mellea_runtime", default=None
)
_default: Runtime | None = None
_default_lock = threading.Lock()


def current_runtime() -> Runtime:
    """The active runtime (the serving app's), else the process's default one."""
    active = _current.get()
    if active is not None:
        return active
    global _default
    with _default_lock:
        if _default is None:
            _default = Runtime()
        return _default


def model_name(model_id: Any) -> str | None:
    """A model spelling as a string: a name or path, or a ``ModelIdentifier``'s HF name."""
    if model_id is None or isinstance(model_id, str):
        return model_id
    if isinstance(model_id, Path):
        return str(model_id)
    name = getattr(model_id, "hf_model_name", None)
    if isinstance(name, str) and name:
        return name
    raise ModelUnavailableError(
        repr(model_id), "it names no Hugging Face model (no hf_model_name) for the local backend"
    )


def _shown(model_id: Any) -> str:
    """How a log line names the model a session asked for."""
    if model_id is None:
        return "the default model"
    for attr in ("hf_model_name", "ollama_name"):
        name = getattr(model_id, attr, None)
        if isinstance(name, str) and name:
            return name
    return str(model_id)


_BYTE_UNITS = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text: str, *, fraction: bool = False) -> int | float:
    """Bytes of ``"256MiB"``, ``"1GB"``, ``"1G"`` or ``"4096"``; with ``fraction``, a
    plain decimal such as ``"0.25"`` is returned as that float (a fraction of memory).

    ``ValueError`` with a one-line message for anything else.
    """
    stripped = text.strip()
    if fraction and "." in stripped and stripped.replace(".", "", 1).isdigit():
        return float(stripped)
    cleaned = stripped.upper().removesuffix("B") + "B"
    factor, number = 1, stripped
    for unit, size in _BYTE_UNITS.items():
        if cleaned.endswith(unit):
            factor, number = size, cleaned[: -len(unit)]
            break
    try:
        value = float(number) * factor
    except ValueError:
        raise ValueError(f"{text!r} is not a size; try 256MiB, 1GiB or 1000000") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r}: give a finite, non-negative size")
    return int(value)


def _placement(kwargs: dict[str, Any], path: Path) -> tuple[str, str, Any]:
    """The resolved device and weight format (``auto`` resolved), and the rest of the
    engine's arguments."""
    from mellea.engine.config import resolve_device
    from mellea.engine.formats.resolve import resolve_format

    device = resolve_device(kwargs.get("device"))
    fmt = resolve_format(kwargs.get("dtype"), device, path)
    rest = {k: v for k, v in kwargs.items() if k not in ("device", "dtype")}
    return str(device), fmt, _frozen(rest)


def _frozen(kwargs: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
