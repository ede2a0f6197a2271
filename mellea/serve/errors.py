"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

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


def server_error_body() -> dict[str, Any]:
    """The body for a failure inside the server or the program: no internals in it."""
    return error_body(GENERIC_SERVER_MESSAGE, "server_error", None, "internal_error")


def param_path(loc: tuple[Any, ...] | list[Any]) -> str | None:
    """``("body", "messages", 0, "role")`` -> ``"messages[0].role"``."""
    parts = [p for p in loc if p != "body"]
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
