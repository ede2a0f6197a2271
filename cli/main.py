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

SERVER, MODEL, LIMITS, SECURITY = "Server", "Model", "Limits", "Security"


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
        str,
        typer.Option(
            envvar="M_SERVE_HOST",
            rich_help_panel=SERVER,
            help="Address to listen on. Use 0.0.0.0 to accept remote clients.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(envvar="M_SERVE_PORT", rich_help_panel=SERVER, help="Port to listen on.")
    ] = 8000,
    model_name: Annotated[
        str | None,
        typer.Option(
            envvar="M_SERVE_MODEL_NAME",
            rich_help_panel=SERVER,
            help="Model name reported by /v1/models and responses \\[default: the program's file name].",
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option(
            envvar="M_SERVE_LOG_LEVEL",
            rich_help_panel=SERVER,
            help="Log level: debug, info, warning, error.",
        ),
    ] = "info",
    log_prompts: Annotated[
        bool,
        typer.Option(
            envvar="M_SERVE_LOG_PROMPTS",
            rich_help_panel=SERVER,
            help="Include the last user message in access-log lines.",
        ),
    ] = False,
    reload: Annotated[
        bool,
        typer.Option(
            envvar="M_SERVE_RELOAD",
            rich_help_panel=SERVER,
            help="Re-import the program (in this process, keeping the loaded model) when a .py file in its folder changes.",
        ),
    ] = False,
    playground: Annotated[
        bool,
        typer.Option(
            envvar="M_SERVE_PLAYGROUND",
            rich_help_panel=SERVER,
            help="Serve the chat playground page at /.",
        ),
    ] = True,
    workers: Annotated[
        int,
        typer.Option(
            envvar="M_SERVE_WORKERS",
            min=1,
            rich_help_panel=SERVER,
            help="Server processes; each loads the program (and its own local model).",
        ),
    ] = 1,
    keepalive: Annotated[
        float,
        typer.Option(
            envvar="M_SERVE_KEEPALIVE",
            rich_help_panel=SERVER,
            help="Seconds between SSE keep-alive comments while a stream is idle.",
        ),
    ] = 5.0,
    tool_call_parser: Annotated[
        str,
        typer.Option(
            envvar="M_SERVE_TOOL_CALL_PARSER",
            rich_help_panel=MODEL,
            help="Format of tool calls in the model's text: hermes, llama3_json, mistral, pythonic, json, granite; 'none' to leave the text alone. The local backend reads instruct(tool_calls=True) replies in it too.",
        ),
    ] = "hermes",
    reasoning_parser: Annotated[
        str | None,
        typer.Option(
            envvar="M_SERVE_REASONING_PARSER",
            rich_help_panel=MODEL,
            help="Split reasoning out of the reply: qwen3 (<think>...</think>) or deepseek_r1 \\[default: none].",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            envvar="M_SERVE_MODEL",
            rich_help_panel=MODEL,
            help="Serve this model (a Hugging Face id, a model directory or a .gguf file) to every local and ollama session, whatever model the program names. Loaded at start; a model not here stops the start.",
        ),
    ] = None,
    lora: Annotated[
        list[str] | None,
        typer.Option(
            "--lora",
            envvar="M_SERVE_LORA",
            metavar="NAME=PATH",
            rich_help_panel=MODEL,
            help="Load a LoRA or aLoRA adapter (a PEFT directory: adapter_config.json and adapter_model.safetensors) as NAME=PATH into the local engine, for every session; repeatable. GET /v1/models lists NAME; a request whose model is NAME runs with it (the program's local sessions that pick no adapter themselves generate with it) and its reply's model is NAME. A session started with model_id=NAME generates with it always. See docs/serve.md (requests) and docs/engine.md (adapters).",
        ),
    ] = None,
    kv_cache_memory: Annotated[
        str | None,
        typer.Option(
            envvar="M_SERVE_KV_CACHE_MEMORY",
            rich_help_panel=MODEL,
            help="KV-cache budget of the local engine: bytes (2GiB, 512MiB) or a fraction of memory (0.25) \\[default: 1GiB on CPU, capped by need].",
        ),
    ] = None,
    kv_cache_dtype: Annotated[
        str,
        typer.Option(
            "--kv-cache-dtype",
            envvar="M_SERVE_KV_CACHE_DTYPE",
            rich_help_panel=MODEL,
            help="KV-cache dtype of the local engine: auto, float32, float16 or bfloat16. auto is float16 on CPU (half float32's memory a token, so the budget holds twice the context; greedy text as float32's on the test prompts) and the model's dtype on GPU. bfloat16 drifts further from float32 than float16. See docs/engine.md, KV cache.",
        ),
    ] = "auto",
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype",
            envvar="M_SERVE_DTYPE",
            rich_help_panel=MODEL,
            help="Weight format of the local engine: auto, float32, bfloat16, int8 or int4. auto serves the checkpoint as it is stored, so its answers are its own: int4 for a quantized GGUF (each tensor exactly in its own bits, like the default model's Q4_1) or a checkpoint that is 4-bit already, else its own dtype on CPU (bf16 where the CPU has native bf16, else float32), bfloat16 on GPU. int8 is the faster opt-in for an unquantized checkpoint (about 5x float32's decode speed; greedy text the checkpoint's own on 7 of 12 test prompts). See docs/engine.md, weight formats.",
        ),
    ] = "auto",
    chat_template: Annotated[
        Path | None,
        typer.Option(
            envvar="M_SERVE_CHAT_TEMPLATE",
            dir_okay=False,
            rich_help_panel=MODEL,
            help="Jinja chat template FILE used instead of the local model's own (a GGUF without one gets its family's turn format; needed for a model with neither).",
        ),
    ] = None,
    responses_db: Annotated[
        str | None,
        typer.Option(
            envvar=["M_SERVE_RESPONSES_DB", "DATABASE_URL"],
            rich_help_panel=SERVER,
            help="Where stored /v1/responses live: a SQLite FILE (shared by --workers) or a postgresql://user@host/db URL (shared by replicas on any machine) \\[default: in memory].",
        ),
    ] = None,
    responses_lease: Annotated[
        float,
        typer.Option(
            envvar="M_SERVE_RESPONSES_LEASE",
            min=0.5,
            rich_help_panel=LIMITS,
            help="With a --responses-db FILE or PostgreSQL: seconds after which a response in progress whose server process died (it stops renewing it) is marked failed.",
        ),
    ] = 10.0,
    responses_max_count: Annotated[
        int,
        typer.Option(
            envvar="M_SERVE_RESPONSES_MAX_COUNT",
            min=0,
            rich_help_panel=LIMITS,
            help="Stored responses kept; beyond it the oldest are evicted (0: no limit).",
        ),
    ] = 10_000,
    responses_max_age: Annotated[
        str,
        typer.Option(
            envvar="M_SERVE_RESPONSES_MAX_AGE",
            rich_help_panel=LIMITS,
            help="How long stored responses are kept: seconds, or with s, m, h or d (0: forever).",
        ),
    ] = "30d",
    responses_max_bytes: Annotated[
        str,
        typer.Option(
            envvar="M_SERVE_RESPONSES_MAX_BYTES",
            rich_help_panel=LIMITS,
            help="Bytes of stored responses kept (256MiB, 1GiB); beyond it the oldest are evicted (0: no limit).",
        ),
    ] = "256MiB",
    max_request_bytes: Annotated[
        int,
        typer.Option(
            envvar="M_SERVE_MAX_REQUEST_BYTES",
            rich_help_panel=LIMITS,
            help="Largest request body accepted; larger gets 413.",
        ),
    ] = 16 * 1024 * 1024,
    body_timeout: Annotated[
        float,
        typer.Option(
            envvar="M_SERVE_BODY_TIMEOUT",
            min=0,
            rich_help_panel=LIMITS,
            help="Seconds a client has to send a whole request body (slower gets 408), and to take in each part of its reply (or it is disconnected); 0: no limit.",
        ),
    ] = 30.0,
    max_concurrent_requests: Annotated[
        int | None,
        typer.Option(
            envvar="M_SERVE_MAX_CONCURRENT_REQUESTS",
            min=1,
            rich_help_panel=LIMITS,
            help="Generations served at once (a request asking for n choices of k prompts counts n x k); more wait in the queue \\[default: no limit].",
        ),
    ] = None,
    max_queued_requests: Annotated[
        int,
        typer.Option(
            envvar="M_SERVE_MAX_QUEUED_REQUESTS",
            min=0,
            rich_help_panel=LIMITS,
            help="Requests that may wait for a slot; beyond that they get 429 at once.",
        ),
    ] = 0,
    request_timeout: Annotated[
        float | None,
        typer.Option(
            envvar="M_SERVE_REQUEST_TIMEOUT",
            rich_help_panel=LIMITS,
            help="Cancel a request running longer than this many seconds (504) \\[default: none].",
        ),
    ] = None,
    shutdown_grace: Annotated[
        float,
        typer.Option(
            envvar="M_SERVE_SHUTDOWN_GRACE",
            rich_help_panel=LIMITS,
            help="On SIGTERM, seconds to let in-flight requests finish.",
        ),
    ] = 30.0,
    api_key: Annotated[
        list[str] | None,
        typer.Option(
            envvar="M_SERVE_API_KEY",
            rich_help_panel=SECURITY,
            help="Require 'Authorization: Bearer KEY' (repeatable).",
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="M_SERVE_API_KEY_FILE",
            exists=True,
            dir_okay=False,
            rich_help_panel=SECURITY,
            help="File with one API key per line.",
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            envvar="M_SERVE_ALLOWED_HOST",
            rich_help_panel=SECURITY,
            help="Answer requests whose Host header names HOST (repeatable; *.example.com for subdomains, * for any); others get 400 \\[default: localhost, IP addresses, the --host name].",
        ),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            envvar="M_SERVE_CORS_ORIGIN",
            rich_help_panel=SECURITY,
            help="Allow browser requests from ORIGIN (repeatable; CORS is off otherwise).",
        ),
    ] = None,
) -> None:
    """Serve PROGRAM's serve() function as an OpenAI-compatible API.

    Example: m serve docs/examples/hello.py --port 8000
    """
    from cli.serve.server import run
    from cli.serve.settings import (
        ServeSettings,
        parse_duration,
        read_api_keys,
        responses_location,
    )
    from mellea.backends.runtime import parse_size

    try:
        max_age = parse_duration(responses_max_age)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--responses-max-age") from None
    try:
        max_bytes = int(parse_size(responses_max_bytes))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--responses-max-bytes") from None
    try:
        responses_db = responses_location(responses_db)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--responses-db") from None

    settings = ServeSettings(
        program=str(program),
        host=host,
        port=port,
        model_name=model_name,
        log_level=log_level.lower(),
        reload=reload,
        workers=workers,
        max_request_bytes=max_request_bytes,
        body_timeout=body_timeout or None,
        keepalive_seconds=keepalive,
        api_keys=read_api_keys(api_key or [], api_key_file),
        cors_origins=list(cors_origin or []),
        allowed_hosts=list(allowed_host or []) or None,
        max_concurrent_requests=max_concurrent_requests,
        max_queued_requests=max_queued_requests,
        request_timeout=request_timeout,
        shutdown_grace=shutdown_grace,
        log_prompts=log_prompts,
        playground=playground,
        tool_call_parser=None if tool_call_parser.lower() == "none" else tool_call_parser,
        reasoning_parser=reasoning_parser,
        kv_cache_memory=kv_cache_memory,
        kv_cache_dtype=kv_cache_dtype,
        dtype=dtype,
        model=model,
        lora=list(lora or []),
        chat_template=str(chat_template) if chat_template else None,
        responses_db=responses_db,
        responses_lease=responses_lease,
        responses_max_count=responses_max_count or None,
        responses_max_age=max_age or None,
        responses_max_bytes=max_bytes or None,
    )
    raise typer.Exit(run(settings))


def _add_command_groups() -> None:
    """``m decompose`` and ``m alora`` (upstream's groups; they load mellea only when run)."""
    from cli.alora.commands import alora_app
    from cli.decompose import app as decompose_app

    app.add_typer(decompose_app)
    app.add_typer(alora_app)


_add_command_groups()

if __name__ == "__main__":
    app()
