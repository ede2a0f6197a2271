"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from pydantic import BaseModel

from mellea.core.errors import RequestError
from mellea.plugins.base import PluginViolationError

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "service_unavailable",
    504: "timeout_error",
}

GENERIC_SERVER_MESSAGE = "The server had an error while processing your request."
T = TypeVar("T")
TIMEOUT_MESSAGE = "the request took longer than the server's request timeout"

log = logging.getLogger("mellea.serve")


class StreamTimeoutError(Exception):
    """The request ran past its deadline."""


class ErrorDetail(BaseModel):
    """The inner error object."""

    message: str
    type: str
    param: str | None = None
    code: str | int | None = None


class ErrorResponse(BaseModel):
    """The error body every failing route returns."""

    error: ErrorDetail


class OpenAIError(Exception):
    """An error to send to the client as-is, with its HTTP status."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        param: str | None = None,
        code: str | int | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.code = code
        self.error_type = error_type or ERROR_TYPES.get(status_code, "invalid_request_error")

    def body(self) -> dict[str, Any]:
        """The JSON body for this error."""
        return error_body(self.message, self.error_type, self.param, self.code)


def error_body(
    message: str,
    error_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | int | None = None,
) -> dict[str, Any]:
    """``{"error": {...}}`` as a plain dict."""
    detail = ErrorDetail(message=message, type=error_type, param=param, code=code)
    return ErrorResponse(error=detail).model_dump()


def as_openai_error(exc: Exception) -> OpenAIError:
    """The error to send for ``exc``: a client mistake keeps its message and status, a
    plugin's block is a 400 with the plugin's reason and code, a timeout is a 504,
    anything else is logged here and becomes a generic 500."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, StreamTimeoutError):
        return OpenAIError(504, TIMEOUT_MESSAGE, code="timeout")
    if isinstance(exc, RequestError):
        return OpenAIError(
            exc.status_code, exc.message, param=exc.param, code=exc.code, error_type=exc.error_type
        )
    if isinstance(exc, PluginViolationError):
        # A plugin of the program refused the request: its reason was written for the
        # caller to read; which plugin it was stays in the log.
        log.info("plugin %s blocked %s: %s", exc.plugin_name, exc.hook_type, exc.reason)
        message = f"the program's plugins blocked this request ({exc.hook_type}): {exc.reason}"
        return OpenAIError(400, message, code=exc.code or "plugin_blocked")
    # The program's own exception text stays in the server log, never in the response.
    log.error("the program failed", exc_info=exc)
    return OpenAIError(500, GENERIC_SERVER_MESSAGE, code="internal_error")


def server_error_body() -> dict[str, Any]:
    """The body for a failure inside the server or the program: no internals in it."""
    return error_body(GENERIC_SERVER_MESSAGE, "server_error", None, "internal_error")


def param_path(loc: tuple[Any, ...] | list[Any]) -> str | None:
    """``("body", "messages", 0, "role")`` -> ``"messages[0].role"``; ``("query", "limit")`` -> ``"limit"``."""
    parts = list(loc[1:]) if loc and loc[0] in ("body", "query", "path", "header") else list(loc)
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(part, str) and _is_type_tag(part):
            continue  # pydantic names the union member it tried; clients care about the field
        else:
            path += f".{part}" if path else str(part)
    return path or None


def _is_type_tag(part: str) -> bool:
    return (
        part[:1].isupper()
        or part in {"str", "int", "float", "bool", "list", "dict"}
        or (part.startswith(("list[", "dict[", "function-", "literal[")))
    )


async def naming_field(call: Awaitable[T], field: str) -> T:
    """Await a program call; a client error that names the chat ``messages`` the program
    saw (a prompt too long, media the model cannot read) names ``field`` instead, the
    request's own field (``input`` of a Responses request, ``prompt`` of a completion)."""
    try:
        return await call
    except OpenAIError as exc:
        if exc.param is not None and exc.param.startswith("messages"):
            exc.param = field
        raise
