"""Start uvicorn for ``m serve``: load the program, build the app, print where it listens."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import Any

import typer
import uvicorn

from cli.serve.settings import ServeSettings, SettingsError, check_settings

log = logging.getLogger("mellea.serve")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


def run(settings: ServeSettings) -> int:
    """Serve until interrupted or terminated; returns the process exit code."""
    _configure_logging(settings.log_level)
    try:
        check_settings(settings)
    except SettingsError as exc:
        typer.secho(f"Error: {exc}", fg="red", err=True)
        return 1
    program_path = Path(settings.program).expanduser().resolve()
    settings.program = str(program_path)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "access_log": False,  # our own access-log line carries the request id and tokens
        "timeout_graceful_shutdown": settings.shutdown_grace,
        "log_config": None,
    }
    if settings.workers > 1:
        # uvicorn starts fresh server processes; they rebuild the app from the environment.
        if not program_path.is_file():
            typer.secho(f"Error: program file not found: {program_path}", fg="red", err=True)
            return 1
        settings.to_env()
        _announce(settings)
        uvicorn.run(
            "cli.serve.server:app_from_env", factory=True, workers=settings.workers, **common
        )
        return 0
    app = _build_or_exit(settings, on_ready=lambda: _announce(settings))
    if app is None:
        return 1
    server = DrainingServer(uvicorn.Config(app, **common), app)
    server.run()
    return 0


class DrainingServer(uvicorn.Server):
    """A uvicorn server that marks the app as draining as soon as it is told to stop."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig: int, frame: Any) -> None:
        """Flip ``/ready`` to 503 and refuse new work, then let uvicorn drain.

        uvicorn re-raises a captured signal once it has stopped, which would end the
        process with -SIGTERM; a drained SIGTERM shutdown is a clean exit (0).
        """
        self.app.state.draining = True
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM and sig in self._captured_signals:
            self._captured_signals.remove(sig)


def app_from_env() -> Any:
    """The app factory uvicorn calls in each server process it starts (reload, workers)."""
    settings = ServeSettings.from_env()
    _configure_logging(settings.log_level)
    app = _build_or_exit(settings)
    if app is None:
        sys.exit(1)
    return app


def _build_or_exit(settings: ServeSettings, on_ready: Any = None) -> Any:
    from cli.serve.app import build_app
    from cli.serve.program import ProgramLoadError
    from cli.serve.progress import progress_display
    from mellea.backends.runtime import ModelUnavailableError
    from mellea.engine.formats.detect import UnservableTypeError

    log.info("loading program %s", settings.program)
    try:
        return build_app(settings, on_ready=on_ready, progress=progress_display())
    except UnservableTypeError as exc:  # a GGUF of a quant type the engine cannot serve
        typer.secho(f"Error: --model {settings.model}: {exc}", fg="red", err=True)
        return None
    except ModelUnavailableError as exc:  # only --model's own model fails here
        typer.secho(
            f"Error: --model {settings.model}: {exc.reason}; give a model directory, "
            "a .gguf file, or a Hugging Face id that is in the local cache",
            fg="red",
            err=True,
        )
        return None
    except ProgramLoadError as exc:
        typer.secho(f"Error: could not load the program: {exc}", fg="red", err=True)
        return None


def _announce(settings: ServeSettings) -> None:
    base = f"http://{settings.host}:{settings.port}"
    typer.echo(
        f"m serve: {Path(settings.program).name} is ready, as model {settings.served_model_name!r}"
    )
    if settings.playground:
        typer.echo(f"  Playground:  {base}/")
    typer.echo(f"  API base:    {base}/v1   (chat/completions, completions, responses, models)")
    typer.echo(f"  Health:      {base}/health   Ready: {base}/ready   Metrics: {base}/metrics")
    if settings.reload:
        typer.echo(
            f"  Reloading the program when .py files in {Path(settings.program).parent} change"
        )


def _configure_logging(level: str) -> None:
    from cli.serve.observability import RequestIdFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
