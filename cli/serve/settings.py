"""Settings of one ``m serve`` run, passable through the environment (for ``--reload``)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

SETTINGS_ENV = "M_SERVE_SETTINGS_JSON"


@dataclass
class ServeSettings:
    """Everything ``create_app`` and the server need to know."""

    program: str
    host: str = "127.0.0.1"
    port: int = 8000
    model_name: str | None = None
    log_level: str = "info"
    reload: bool = False
    max_request_bytes: int = 16 * 1024 * 1024
    keepalive_seconds: float = 5.0
    # How long a streaming request waits for serve() before committing to a 200:
    # failures within this window get a real HTTP status instead of an error frame.
    first_result_wait: float = 1.0

    @property
    def served_model_name(self) -> str:
        """What ``/v1/models`` and every response report as the model."""
        return self.model_name or Path(self.program).stem

    def to_env(self) -> None:
        """Store these settings for a server process started by uvicorn's reloader."""
        os.environ[SETTINGS_ENV] = json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ServeSettings:
        """Settings stored by :meth:`to_env`."""
        return cls(**json.loads(os.environ[SETTINGS_ENV]))
