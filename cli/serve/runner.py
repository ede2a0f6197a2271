"""Start uvicorn for ``m serve``: load the program, build the app, print where it listens."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer

from cli.serve.settings import ServeSettings

log = logging.getLogger("mellea.serve")


def run(settings: ServeSettings) -> int:
    """Serve until interrupted; returns the process exit code."""
    import uvicorn

    _configure_logging(settings.log_level)
    program_path = Path(settings.program).expanduser().resolve()
    settings.program = str(program_path)
    if settings.reload:
        if not program_path.is_file():
            typer.secho(f"Error: program file not found: {program_path}", fg="red", err=True)
            return 1
        settings.to_env()
        _announce(settings)
        uvicorn.run(
            "cli.serve.runner:app_from_env",
            factory=True,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            reload=True,
            reload_dirs=[str(program_path.parent)],
            reload_includes=["*.py"],
        )
        return 0
    app = _build_or_exit(settings)
    if app is None:
        return 1
    _announce(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level)
    return 0


def app_from_env():
    """The app factory uvicorn's reloader calls in each fresh server process."""
    settings = ServeSettings.from_env()
    _configure_logging(settings.log_level)
    app = _build_or_exit(settings)
    if app is None:
        sys.exit(1)
    return app


def _build_or_exit(settings: ServeSettings):
    from cli.serve.app import create_app
    from cli.serve.program import Program, ProgramLoadError

    log.info("loading program %s", settings.program)
    try:
        program = Program.load(settings.program)
    except ProgramLoadError as exc:
        typer.secho(f"Error: could not load the program: {exc}", fg="red", err=True)
        return None
    return create_app(program, settings)


def _announce(settings: ServeSettings) -> None:
    base = f"http://{settings.host}:{settings.port}"
    typer.echo(f"m serve: {Path(settings.program).name} as model {settings.served_model_name!r}")
    typer.echo(f"  API base:  {base}/v1   (POST /v1/chat/completions, GET /v1/models)")
    typer.echo(f"  Health:    {base}/health")


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
