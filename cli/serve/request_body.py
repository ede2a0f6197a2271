"""A generating request's body, parsed once into its endpoint's typed request.

The first middleware that asks (admission, for the generations a request counts;
tenancy, for its ``cache_salt``) parses the read body into the typed request; the route
then receives that same object (:class:`cli.serve.json_body.BoundedJsonRequest` hands it
to FastAPI, which does not validate an instance again). A body that does not validate
counts as one generation without a salt, and the route answers it with its 400.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from starlette.types import Scope

from cli.serve.limits import read_body
from mellea.serve.bounds import too_many_values
from mellea.serve.completions.request import CompletionRequest
from mellea.serve.protocol import ChatCompletionRequest
from mellea.serve.responses.request import ResponsesRequest

# The routes that generate, and the request each one reads. The others (models, health,
# stored responses, cancelling one) never wait in the admission queue.
TYPED_REQUESTS: dict[str, type[BaseModel]] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/responses": ResponsesRequest,
}
GENERATING = frozenset(TYPED_REQUESTS)
_TYPED = "typed_body"  # the typed request (or None) in the request's ``scope["state"]``
_JSON = "body_json"  # the body's JSON when it did not validate, for the route's 400


def is_generating(scope: Scope) -> bool:
    """Whether ``scope`` is a request to one of the generating routes."""
    return (
        scope["type"] == "http"
        and scope["method"] == "POST"
        and scope["path"].rstrip("/") in GENERATING
    )


def typed_body(scope: Scope) -> Any:
    """The request's typed body (e.g. a :class:`ChatCompletionRequest`), parsed on the first
    call; ``None`` for a body that does not validate (or a route that takes none)."""
    state = scope.setdefault("state", {})
    if _TYPED not in state:
        state[_TYPED] = _parse(scope["path"].rstrip("/"), read_body(scope), state)
    return state[_TYPED]


def parsed_body(scope: Scope) -> Any:
    """What the route reads instead of parsing the body again: the typed request, else
    the body's JSON, else ``None`` (the route parses and refuses it itself)."""
    state = scope.get("state") or {}
    typed = state.get(_TYPED)
    return typed if typed is not None else state.get(_JSON)


def generations(scope: Scope) -> int:
    """How many replies the request asks for (``n`` choices, times the prompts of a
    completions request); 1 for a body that does not validate."""
    body = typed_body(scope)
    return body.generations() if body is not None else 1


def _parse(path: str, body: bytes, state: dict[str, Any]) -> Any:
    model = TYPED_REQUESTS.get(path)
    # A body the route refuses unparsed (far too many values) is not parsed here either:
    # parsing 16 MiB of tiny values holds the event loop for most of a second.
    if model is None or not body.lstrip().startswith(b"{") or too_many_values(body):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    try:
        return model.model_validate(data, from_attributes=True)
    except Exception:  # the route validates it again and answers with the error
        state[_JSON] = data
        return None
