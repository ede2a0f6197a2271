"""Errors a program or backend raises that are the client's doing (served as HTTP 4xx)."""

from __future__ import annotations


class RequestError(Exception):
    """A request the model cannot serve as asked; the server answers with ``status_code``.

    The message is shown to the client, so it must not carry secrets or internals.
    """

    status_code = 400
    error_type = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class ContextLengthExceededError(RequestError):
    """The prompt does not fit the model's context window."""

    def __init__(self, message: str) -> None:
        super().__init__(message, param="messages", code="context_length_exceeded")


class ModelServerUnavailableError(RequestError):
    """The model server a remote backend talks to could not be reached or failed.

    The client gets a 503 (the ``openai`` client retries it); the details of the
    failure, which name the operator's own hosts, stay in the server log.
    """

    status_code = 503
    error_type = "service_unavailable"

    def __init__(self) -> None:
        super().__init__(
            "the model server this program uses could not be reached or failed; try again later",
            code="model_server_unavailable",
        )
