"""``m``: the mellea command line. Heavy libraries load only when a command needs them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="m",
    help="mellea: serve a generative program as an OpenAI-compatible API.",
    no_args_is_help=True,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        from mellea import __version__

        typer.echo(f"m (mellea) {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """mellea: serve a generative program as an OpenAI-compatible API."""


@app.command()
def serve(
    program: Annotated[
        Path,
        typer.Argument(help="Python file that defines serve(input, requirements, model_options)."),
    ],
    host: Annotated[
        str, typer.Option(help="Address to listen on. Use 0.0.0.0 to accept remote clients.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    model_name: Annotated[
        str | None,
        typer.Option(
            help="Model name reported by /v1/models and responses \\[default: the program's file name]."
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option(help="Log level: debug, info, warning, error.")
    ] = "info",
    reload: Annotated[
        bool, typer.Option(help="Restart the server when the program file changes.")
    ] = False,
    max_request_bytes: Annotated[
        int, typer.Option(help="Largest request body accepted; larger gets 413.")
    ] = 16 * 1024 * 1024,
    keepalive: Annotated[
        float, typer.Option(help="Seconds between SSE keep-alive comments while a stream is idle.")
    ] = 5.0,
) -> None:
    """Serve PROGRAM's serve() function at /v1/chat/completions.

    Example: m serve docs/examples/hello.py --port 8000
    """
    from cli.serve.runner import run
    from cli.serve.settings import ServeSettings

    settings = ServeSettings(
        program=str(program),
        host=host,
        port=port,
        model_name=model_name,
        log_level=log_level.lower(),
        reload=reload,
        max_request_bytes=max_request_bytes,
        keepalive_seconds=keepalive,
    )
    raise typer.Exit(run(settings))


if __name__ == "__main__":
    app()
