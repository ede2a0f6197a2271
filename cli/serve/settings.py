"""Settings of one ``m serve`` run, passable through the environment (for ``--reload``/``--workers``)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mellea.backends.runtime import Runtime, StepHook

SETTINGS_ENV = "M_SERVE_SETTINGS_JSON"
# The weight formats --dtype takes (mellea.engine.formats.resolve.FORMATS, without importing torch).
DTYPES = ("auto", "float32", "bfloat16", "int8", "int4")
# The KV-cache dtypes --kv-cache-dtype takes (mellea.engine.config.KV_CACHE_DTYPES).
KV_CACHE_DTYPES = ("auto", "float32", "float16", "bfloat16")


@dataclass
class ServeSettings:
    """Everything ``create_app`` and the server need to know."""

    program: str
    host: str = "127.0.0.1"
    port: int = 8000
    model_name: str | None = None
    log_level: str = "info"
    reload: bool = False
    workers: int = 1
    max_request_bytes: int = 16 * 1024 * 1024
    body_timeout: float | None = 30.0  # seconds to receive a whole request body; None: no limit
    keepalive_seconds: float = 5.0
    # How long a streaming request waits for serve() before committing to a 200:
    # failures within this window get a real HTTP status instead of an error frame.
    first_result_wait: float = 1.0
    api_keys: list[str] = field(default_factory=list)
    cors_origins: list[str] = field(default_factory=list)
    # Host header names served (None: localhost, IP addresses and the bound name).
    allowed_hosts: list[str] | None = None
    max_concurrent_requests: int | None = None
    max_queued_requests: int = 0
    request_timeout: float | None = None
    shutdown_grace: float = 30.0
    log_prompts: bool = False
    playground: bool = True
    tool_call_parser: str | None = "hermes"
    reasoning_parser: str | None = None
    responses_db: str | None = None  # a SQLite file, a postgresql:// URL, or None (memory)
    responses_lease: float = 10.0  # seconds an orphaned response stays in progress
    responses_max_count: int | None = 10_000  # None: no bound
    responses_max_age: float | None = 30 * 24 * 3600.0  # seconds; None: kept forever
    responses_max_bytes: int | None = 256 * 1024 * 1024  # records' JSON; None: no bound
    kv_cache_memory: str | None = None
    kv_cache_dtype: str = "auto"  # --kv-cache-dtype (mellea.engine.config.KV_CACHE_DTYPES)
    dtype: str = "auto"  # --dtype: the local engines' weight format (mellea.engine.formats)
    model: str | None = None  # --model: every local session serves this model
    chat_template: str | None = None  # a Jinja file used instead of the model's template
    lora: list[str] = field(default_factory=list)  # --lora NAME=PATH: adapters for every engine

    @property
    def served_model_name(self) -> str:
        """What ``/v1/models`` and every response report as the model."""
        return self.model_name or _stem(self.program)

    def runtime(self, progress: StepHook | None = None) -> Runtime:
        """The runtime an app built from these settings shares among its sessions."""
        from mellea.backends.runtime import Runtime, parse_size

        memory = parse_size(self.kv_cache_memory, fraction=True) if self.kv_cache_memory else None
        return Runtime(
            kv_cache_memory=memory,
            kv_cache_dtype=self.kv_cache_dtype,
            dtype=self.dtype,
            tool_call_parser=self.tool_call_parser,
            model=self.model,
            chat_template=Path(self.chat_template).expanduser().read_text()
            if self.chat_template
            else None,
            progress=progress,
            adapters=parse_lora(self.lora),
        )

    @property
    def adapter_names(self) -> list[str]:
        """The ``--lora`` adapters' names (also listed by ``/v1/models``)."""
        return list(parse_lora(self.lora))

    def to_env(self) -> None:
        """Store these settings for server processes started by uvicorn (reload, workers)."""
        os.environ[SETTINGS_ENV] = json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ServeSettings:
        """Settings stored by :meth:`to_env`."""
        return cls(**json.loads(os.environ[SETTINGS_ENV]))


def read_api_keys(keys: list[str], key_file: Path | None) -> list[str]:
    """Keys given on the command line plus one key per non-empty line of ``key_file``."""
    found = [k.strip() for k in keys if k.strip()]
    if key_file is not None:
        found += [line.strip() for line in key_file.read_text().splitlines() if line.strip()]
    return found


class SettingsError(ValueError):
    """A setting that cannot work; the message is one line meant for the user."""


def parse_lora(entries: list[str]) -> dict[str, str]:
    """``--lora NAME=PATH`` entries as name -> path (``SettingsError`` for a bad one)."""
    adapters: dict[str, str] = {}
    for entry in entries:
        name, sep, path = entry.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise SettingsError(f"--lora {entry!r}: give NAME=PATH (a PEFT adapter directory)")
        if name in adapters:
            raise SettingsError(f"--lora {entry!r}: the name {name!r} is given twice")
        adapters[name] = str(Path(path).expanduser())
    return adapters


def check_settings(settings: ServeSettings) -> None:
    """Fail at start-up, not on the first request, for settings that cannot work."""
    from mellea.core.parsers import get_reasoning_parser, get_tool_parser

    if settings.kv_cache_memory:
        from mellea.backends.runtime import parse_size

        try:
            parse_size(settings.kv_cache_memory, fraction=True)
        except ValueError:
            raise SettingsError(
                f"--kv-cache-memory {settings.kv_cache_memory!r}: give bytes (e.g. 2GiB) "
                "or a fraction of memory (e.g. 0.25)"
            ) from None
    if settings.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise SettingsError(
            f"--kv-cache-dtype {settings.kv_cache_dtype!r}: use one of {', '.join(KV_CACHE_DTYPES)}"
        )
    if settings.dtype not in DTYPES:
        raise SettingsError(f"--dtype {settings.dtype!r}: use one of {', '.join(DTYPES)}")
    if settings.chat_template:
        path = Path(settings.chat_template).expanduser().resolve()
        try:
            import jinja2

            jinja2.Environment().parse(path.read_text())
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"--chat-template {settings.chat_template}: {exc}") from None
        except jinja2.TemplateSyntaxError as exc:
            raise SettingsError(
                f"--chat-template {settings.chat_template}: not a Jinja template "
                f"(line {exc.lineno}: {exc.message})"
            ) from None
    if _is_database_url(settings.responses_db):
        check_responses_db(settings)
    for name, path in parse_lora(settings.lora).items():
        if name == settings.served_model_name:
            raise SettingsError(
                f"--lora {name}={path}: {name!r} is the program's own name, which a request's "
                "model selects the program by; give the adapter another name (or the program "
                "one with --model-name)"
            )
        for needed in ("adapter_config.json", "adapter_model.safetensors"):
            if not (Path(path) / needed).is_file():
                raise SettingsError(
                    f"--lora {name}={path}: no {needed} there (a PEFT adapter directory holds "
                    "adapter_config.json and adapter_model.safetensors)"
                )
    try:
        if settings.tool_call_parser:
            get_tool_parser(settings.tool_call_parser)
        if settings.reasoning_parser:
            get_reasoning_parser(settings.reasoning_parser)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def check_responses_db(settings: ServeSettings) -> None:
    """Open the PostgreSQL store once: it is reachable, and its schema is made or migrated."""
    from mellea.serve.responses.store_api import open_store
    from mellea.serve.responses.store_errors import StoreError

    try:
        open_store(settings.responses_db, lease=settings.responses_lease).close()
    except StoreError as exc:
        raise SettingsError(f"--responses-db: {exc}") from None


def responses_location(value: str | None) -> str | None:
    """Where stored responses live, from ``--responses-db`` (or ``M_SERVE_RESPONSES_DB``,
    else ``DATABASE_URL``): a ``postgresql://`` URL as it is, a SQLite file made absolute
    (worker processes may start elsewhere), or None for memory."""
    if not value:
        return None
    if _is_database_url(value):
        return value
    if "://" in value:
        raise ValueError(
            f"{value.split('://')[0]}:// databases are not supported; give a "
            "postgresql:// URL or a SQLite file"
        )
    return str(Path(value).expanduser().resolve())


def _is_database_url(location: str | None) -> bool:
    # mellea.serve.responses.store_api.is_database_url, without importing the wire layer
    return location is not None and location.startswith(("postgresql://", "postgres://"))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``"30d"``, ``"12h"``, ``"90m"``, ``"45s"`` or plain seconds, in seconds."""
    cleaned = text.strip().lower()
    factor = _UNITS.get(cleaned[-1:])
    number = cleaned[:-1] if factor else cleaned
    try:
        value = float(number) * (factor or 1)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration; try 30d, 12h, 90m or 3600") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r}: give a finite, non-negative duration")
    return value


@lru_cache(maxsize=8)
def _stem(program: str) -> str:
    # Every reply names its model: a Path per request costs more than the rest of its setup.
    return Path(program).stem
