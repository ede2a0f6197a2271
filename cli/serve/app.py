"""The FastAPI app factory: the middlewares, the state the routes share, the routers."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cli.serve import (
    chat_routes,
    completion_routes,
    health_routes,
    model_routes,
    responses_routes,
    tokenizer_routes,
)
from cli.serve.admission import Admission
from cli.serve.auth import ApiKeyAuth
from cli.serve.hooks import ServerHooks
from cli.serve.hosts import AllowedHosts, default_allowed_hosts
from cli.serve.limits import BodyReader, WriteDeadline
from cli.serve.observability import RequestContext, ServerMetrics
from cli.serve.program import Program
from cli.serve.reload import watch_program
from cli.serve.request_adapter import RequestAdapter
from cli.serve.responses_routes import open_responses_store
from cli.serve.settings import ServeSettings
from cli.serve.tenancy import CacheSalt
from cli.serve.tracing import Tracing, tracer_from_env
from mellea.backends.runtime import StepHook, current_runtime
from mellea.serve.bounds import WIRE_PARAM
from mellea.serve.errors import (
    ERROR_TYPES,
    OpenAIError,
    error_body,
    param_path,
    server_error_body,
)
from mellea.serve.request_runner import RequestRunner, RunLimits

# Each endpoint's routes (plain functions; the app's state holds what they share), in
# the order they are matched.
ROUTERS = [
    responses_routes.router,
    health_routes.router,
    model_routes.router,
    chat_routes.router,
    completion_routes.router,
    tokenizer_routes.router,
]

log = logging.getLogger("mellea.serve")


def build_app(
    settings: ServeSettings,
    on_ready: Callable[[], None] | None = None,
    progress: StepHook | None = None,
) -> FastAPI:
    """The app for ``settings``: its runtime, the program loaded under it, the routes.

    With ``--model``, that model loads first, so a model that is not here stops the
    start with :class:`ModelUnavailableError`; a program that cannot be imported (its
    own model missing included) raises :class:`ProgramLoadError`. Both say it in one line.
    """
    runtime = settings.runtime(progress)
    if settings.model is not None:
        runtime.engine()
    program = Program.load(settings.program, runtime)
    return create_app(program, settings, on_ready)


def create_app(
    program: Program,
    settings: ServeSettings,
    on_ready: Callable[[], None] | None = None,
    tracer: Any = None,
) -> FastAPI:
    """Build the HTTP app serving ``program`` (no global state: call it as often as needed).

    The app shares the runtime ``program`` was loaded under (else the process's default
    one). ``on_ready`` runs once the app has started and the local models are warm.
    ``tracer`` (an OpenTelemetry tracer) receives the request and program spans; by
    default one exporting over OTLP when ``OTEL_EXPORTER_OTLP_*`` is set, else none.
    """
    runtime = program.runtime or current_runtime()
    metrics = ServerMetrics(runtime.engine_stats)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warmed = await runtime.warm_up()
        if warmed:
            log.info("warmed up %d local engine(s)", warmed)
        if not settings.reload:
            # What is loaded now (libraries, the program, its models) lives as long as the
            # server: keep it out of the garbage collector's scans, which otherwise walk
            # it again and again as requests allocate.
            gc.collect()
            gc.freeze()
        stop = asyncio.Event()
        watcher = (
            asyncio.create_task(watch_program(app.state, program.path, stop))
            if settings.reload
            else None
        )
        app.state.ready = True
        if on_ready is not None:
            on_ready()
        yield
        app.state.ready = False
        stop.set()
        if watcher is not None:
            await asyncio.gather(watcher, return_exceptions=True)
        # Its pool, lease and probe threads (PostgreSQL) or its connection (SQLite) end
        # with the server; closing waits for store calls still under way.
        await asyncio.to_thread(app.state.responses_store.close)

    app = FastAPI(
        title="m serve",
        summary=f"OpenAI-compatible API for {program.path.name}",
        lifespan=lifespan,
        **_without_native_telemetry(),
    )
    app.state.program = program
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.ready = False
    app.state.draining = False
    # Added innermost first: requests pass RequestContext, the Host check, CORS, auth,
    # the write deadline, the body reader (size and time limits), then admission (so it
    # never waits on a slow upload), the tenant's cache salt, then (with --lora) the
    # adapter a request's model names.
    if settings.adapter_names:
        app.add_middleware(RequestAdapter, adapters=settings.adapter_names)
    app.add_middleware(CacheSalt)
    app.add_middleware(
        Admission,
        metrics=metrics,
        limit=settings.max_concurrent_requests,
        queue=settings.max_queued_requests,
        state=app.state,
    )
    app.add_middleware(
        BodyReader, max_bytes=settings.max_request_bytes, timeout=settings.body_timeout
    )
    app.add_middleware(WriteDeadline, timeout=settings.body_timeout)
    if settings.api_keys:
        app.add_middleware(ApiKeyAuth, keys=settings.api_keys)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["authorization", "content-type", "x-request-id"],
            expose_headers=["x-request-id", "x-trace-id"],
        )
    hosts = settings.allowed_hosts or default_allowed_hosts(settings.host)
    app.add_middleware(AllowedHosts, hosts=hosts)
    app.add_middleware(RequestContext, metrics=metrics)
    tracer = tracer if tracer is not None else tracer_from_env()
    if tracer is not None:
        app.add_middleware(Tracing, tracer=tracer)
    _install_error_handlers(app)
    if settings.playground:
        from cli.serve.playground import mount_playground

        mount_playground(app, model_name=settings.served_model_name)
    app.state.runner = RequestRunner(
        run_limits(settings), ServerHooks(metrics, settings.served_model_name)
    )
    open_responses_store(app.state, settings)
    for router in ROUTERS:
        # The routers' routes join the app's own list: FastAPI's include_router keeps
        # each router as a group matched route by route, which costs every request.
        app.router.routes.extend(router.routes)
    return app


def _without_native_telemetry() -> dict[str, Any]:
    """FastAPI's own OpenTelemetry switched off, where this FastAPI has it: our spans
    come from ``Tracing`` (program attempts and model calls included), and FastAPI's
    would look up the global providers on every request and double the HTTP spans."""
    if "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


def run_limits(settings: ServeSettings) -> RunLimits:
    """The settings the request runner applies to every request."""
    return RunLimits(
        request_timeout=settings.request_timeout,
        first_result_wait=settings.first_result_wait,
        keepalive_seconds=settings.keepalive_seconds,
    )


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(OpenAIError)
    async def openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"msg": "invalid request", "loc": ()}
        if first.get("type") == "json_invalid":
            message = f"malformed JSON body: {first.get('ctx', {}).get('error', first['msg'])}"
            return JSONResponse(error_body(message, code="invalid_json"), status_code=400)
        ctx = first.get("ctx") or {}
        if WIRE_PARAM in ctx:  # a bound of mellea.serve.bounds: message and field are ours
            return JSONResponse(error_body(ctx["message"], param=ctx[WIRE_PARAM]), status_code=400)
        param = param_path(first.get("loc", ()))
        message = f"{param}: {first['msg']}" if param else str(first["msg"])
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        return JSONResponse(error_body(message, param=param), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        error_type = ERROR_TYPES.get(exc.status_code, "invalid_request_error")
        return JSONResponse(
            error_body(message, error_type),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return JSONResponse(server_error_body(), status_code=500)
