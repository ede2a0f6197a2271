"""A generating body is validated once, in the middleware, and the route gets that object."""

from __future__ import annotations

import pytest

from cli.serve import chat_routes
from tests.inprocess import app_for, client_for
from tests.server import PROGRAMS

USER = [{"role": "user", "content": "one two"}]


@pytest.fixture(scope="module")
def app():
    return app_for(PROGRAMS / "echo.py")


async def test_the_route_gets_the_request_the_middleware_parsed(app, monkeypatch):
    seen = []
    route = chat_routes.serve_arguments

    def noting(body):
        seen.append(body)
        return route(body)

    monkeypatch.setattr(chat_routes, "serve_arguments", noting)
    async with client_for(app) as client:
        response = await client.post("/v1/chat/completions", json={"messages": USER, "n": 2})
    assert response.status_code == 200, response.text
    assert [body.generations() for body in seen] == [2]


async def test_a_functions_request_is_not_refused_when_validated_again(app):
    """``functions`` become ``tools`` when the body is parsed; FastAPI validating the parsed
    request once more must not take those tools for the client's own."""
    body = {
        "messages": USER,
        "functions": [{"name": "get_weather", "parameters": {"type": "object"}}],
        "function_call": "auto",
    }
    async with client_for(app) as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "one two"
