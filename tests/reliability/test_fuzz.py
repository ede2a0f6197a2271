"""Fuzz the API over a real socket: generated and hostile requests never get a 5xx or hang.

Schemathesis generates requests (valid and invalid) from the app's own OpenAPI
schema; hand-written cases cover what a schema cannot express (broken JSON,
invalid UTF-8, deep nesting, huge numbers, wrong content types).
"""

from __future__ import annotations

import json

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from cli.serve.app import create_app
from cli.serve.program import Program
from cli.serve.settings import ServeSettings
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e

PROGRAM = PROGRAMS / "echo.py"
FUZZED_ROUTES = ("/v1/chat/completions", "/v1/completions")
EXAMPLES_PER_MODE = 150  # x2 modes x2 routes = 600 generated requests

_openapi = create_app(Program.load(PROGRAM), ServeSettings(program=str(PROGRAM))).openapi()
schema = schemathesis.openapi.from_dict(_openapi)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=EXAMPLES_PER_MODE
)
seen: list[int] = []


@pytest.fixture(scope="module")
def server():
    with serve(PROGRAM, "--max-request-bytes", "1048576", env={"ECHO_DELAY": "0"}) as running:
        yield running


@pytest.fixture(scope="module")
def session(server):
    import requests

    with requests.Session() as http:
        yield http


@schema.include(path_regex="^/v1/(chat/)?completions$").parametrize()
@settings(
    max_examples=EXAMPLES_PER_MODE * 2,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_generated_requests_never_get_a_5xx(case, server, session):
    response = case.call(base_url=server.base_url, session=session, timeout=30)
    seen.append(response.status_code)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}


def test_enough_requests_were_generated():
    assert len(seen) >= 500, f"only {len(seen)} generated requests were sent"
    assert any(code == 200 for code in seen) and any(400 <= code < 500 for code in seen)


HOSTILE_BODIES = [
    b"",
    b"{",
    b"null",
    b"[]",
    b'"just a string"',
    b'{"messages": "not a list"}',
    b'{"messages": [{"role": "user", "content": "\xff\xfe\xfd"}]}',
    b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e309}',
    b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999999999999999999}',
    b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
    b'{"messages": [{"role": "user", "content": "x"}], "seed": -1.5}',
    b'{"messages": [{"role": "user", "content": {"nested": [[[[]]]]}}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "nope"}]}]}',
    ("[" * 5000 + "]" * 5000).encode(),
    ('{"messages": ' + "[" * 3000 + "]" * 3000 + "}").encode(),
    json.dumps({"messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 10000}).encode()[
        :100
    ],
]


@pytest.mark.parametrize("route", FUZZED_ROUTES)
@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=range(len(HOSTILE_BODIES)))
def test_hostile_bodies_get_a_4xx(server, route, body):
    response = httpx.post(
        server.base_url + route,
        content=body,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert 400 <= response.status_code < 500, response.text
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_non_json_content_types_get_a_4xx(server, content_type):
    response = httpx.post(
        server.base_url + "/v1/chat/completions",
        content=b"messages=hello",
        headers={"content-type": content_type},
        timeout=30,
    )
    assert 400 <= response.status_code < 500, response.text
    assert "error" in response.json()
