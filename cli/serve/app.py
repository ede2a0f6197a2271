"""The FastAPI app factory: thin routes over the program and the wire protocol."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from cli.serve.limits import BodySizeLimit
from cli.serve.program import Program
from cli.serve.settings import ServeSettings
from mellea.core.errors import RequestError
from mellea.core.thunk import ModelOutputThunk
from mellea.serve.completion import as_thunk, chat_completion
from mellea.serve.errors import ERROR_TYPES, OpenAIError, error_body, param_path, server_error_body
from mellea.serve.options import serve_arguments
from mellea.serve.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    ModelCard,
    ModelList,
    new_completion_id,
)
from mellea.serve.stream import chat_completion_events, stream_response

log = logging.getLogger("mellea.serve")


def create_app(program: Program, settings: ServeSettings) -> FastAPI:
    """Build the HTTP app serving ``program`` (no global state: call it as often as needed)."""
    app = FastAPI(title="m serve", summary=f"OpenAI-compatible API for {program.path.name}")
    app.state.program = program
    app.state.settings = settings
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes)
    _install_error_handlers(app)
    model_name = settings.served_model_name

    @app.get("/health")
    async def health() -> dict[str, str]:
        """Liveness: the server is up."""
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models() -> ModelList:
        """The one model this server serves: the program."""
        return ModelList(data=[ModelCard(id=model_name)])

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest) -> ChatCompletion | Response:
        """Run the program on a chat request; stream the reply when asked to."""
        args = serve_arguments(body)
        completion_id, created = new_completion_id(), int(time.time())
        running = asyncio.ensure_future(_run_program(program, args))
        if not body.stream:
            thunk = await running
            try:
                return await chat_completion(
                    thunk, completion_id=completion_id, created=created, model=model_name
                )
            except Exception as exc:
                raise _as_openai_error(exc) from None
        # Give the program a moment: if it fails fast, the client gets a real status.
        done, _ = await asyncio.wait({running}, timeout=settings.first_result_wait)
        source: Any = running.result() if done else running
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        events = chat_completion_events(
            source,
            completion_id=completion_id,
            created=created,
            model=model_name,
            include_usage=include_usage,
        )
        return stream_response(events, keepalive_seconds=settings.keepalive_seconds)

    return app


async def _run_program(program: Program, args: Any) -> ModelOutputThunk:
    """Call ``serve()`` and normalise what it returns; failures become OpenAI errors."""
    try:
        return as_thunk(await program.call(args))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise _as_openai_error(exc) from None


def _as_openai_error(exc: Exception) -> OpenAIError:
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, RequestError):
        return OpenAIError(
            exc.status_code, exc.message, param=exc.param, code=exc.code, error_type=exc.error_type
        )
    # The program's own exception text stays in the server log, never in the response.
    log.error("the program failed", exc_info=exc)
    return OpenAIError(500, server_error_body()["error"]["message"], code="internal_error")


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
