"""Routes whose JSON bodies are sized up before they are parsed."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from cli.serve.request_body import parsed_body
from mellea.serve.bounds import MAX_BODY_VALUES, too_many_values


class BoundedJsonRequest(Request):
    """A request whose ``json()`` refuses, before parsing, a body of far too many values.

    Parsing holds the event loop; a 16 MiB body of tiny values would hold it for
    half a second or more. The exact bound is checked after parsing (``check_body``).
    """

    async def json(self) -> Any:
        """The parsed body; 400 when a scan of the bytes shows too many values."""
        if not hasattr(self, "_json"):
            parsed = parsed_body(self.scope)
            if parsed is not None:  # the middleware parsed it already (typed, if it is valid)
                self._json = parsed
                return parsed
            body = await self.body()
            if too_many_values(body):
                raise HTTPException(
                    400, f"the request body holds more than {MAX_BODY_VALUES} JSON values"
                )
            self._json = json.loads(body)
        return self._json


class BoundedJsonRoute(APIRoute):
    """An ``APIRoute`` whose endpoints read their body through :class:`BoundedJsonRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The usual handler, given a :class:`BoundedJsonRequest`."""
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            return await handler(BoundedJsonRequest(request.scope, request.receive))

        return bounded
