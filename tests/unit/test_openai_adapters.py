"""Intrinsics against a remote OpenAI-compatible server: what reaches the wire.

A fake server on a loopback port records each request body and streams back the
adapter's answer (with token logprobs), so the test sees the body the ``openai``
client really sent: the adapter's name as ``model`` (how vLLM and ``m serve`` pick a
LoRA module), ``chat_template_kwargs`` with the documents, the io.yaml's schema,
token budget and logprobs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mellea.backends.adapters import EmbeddedIntrinsicAdapter, IntrinsicAdapter
from mellea.backends.openai import OpenAIBackend, request_body, request_model
from mellea.core.model_options import ModelOption
from mellea.stdlib.components import Message
from mellea.stdlib.components.intrinsic import core, rag
from mellea.stdlib.context import ChatContext
from mellea.stdlib.requirements import req
from mellea.stdlib.session import MelleaSession
from tests.adapter_support import (
    ANSWERABILITY_IO,
    NO_TOKENS,
    UPSTREAM_NO_SCORE,
    adapters_tree,
)


class _Server:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.answers: dict[str, tuple[str, list]] = {}  # model -> (text, tokens)


def _handler(state: _Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.bodies.append(body)
            text, tokens = state.answers.get(body["model"], ("yes", []))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            logprobs = {
                "content": [
                    {
                        "token": t,
                        "logprob": lp,
                        "bytes": list(t.encode()),
                        "top_logprobs": [
                            {"token": a, "logprob": v, "bytes": list(a.encode())} for a, v in top
                        ],
                    }
                    for t, lp, top in tokens
                ]
            }
            delta = {"role": "assistant", "content": text}
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            if tokens:
                choice["logprobs"] = logprobs
            self._event([choice])
            self._event([{"index": 0, "delta": {}, "finish_reason": "stop"}])
            usage = {"prompt_tokens": 30, "completion_tokens": 6, "total_tokens": 36}
            self._event([], usage)
            self.wfile.write(b"data: [DONE]\n\n")

        def _event(self, choices: list, usage: dict | None = None) -> None:
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": choices,
                "usage": usage,
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[_Server, str]]:
    state = _Server()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def adapters_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(adapters_tree(tmp_path / "adapters")))


def test_the_adapter_name_is_the_requests_model():
    assert request_model({ModelOption.ADAPTER: "answerability_alora"}, "granite") == (
        "answerability_alora"
    )
    assert request_model({}, "granite") == "granite"
    body = request_body({"chat_template_kwargs": {"documents": []}}, None)
    assert body["extra_body"] == {"chat_template_kwargs": {"documents": []}}


def test_an_intrinsic_reaches_the_server_with_its_adapter_and_documents(server):
    state, url = server
    state.answers["answerability_alora"] = ('"unanswerable"', [])
    backend = OpenAIBackend("ibm-granite/granite-4.1-3b", base_url=url)
    ctx = ChatContext().add(Message("assistant", "Hello, how can I help?"))
    result = rag.check_answerability("Square root of 4?", ["The square root of 8."], ctx, backend)
    assert result == "unanswerable"
    (body,) = state.bodies
    assert body["model"] == "answerability_alora"
    assert body["chat_template_kwargs"] == {
        "documents": [{"doc_id": "0", "text": "The square root of 8."}]
    }
    assert body["messages"][-1] == {"role": "user", "content": "Square root of 4?"}
    assert body["max_tokens"] == 6 and body["temperature"] == 0.0
    assert body["response_format"]["json_schema"]["schema"]["enum"] == [
        "answerable",
        "unanswerable",
    ]
    assert backend.list_adapters() == ["answerability_alora"]  # added, no weights loaded


def test_requirement_checks_use_the_servers_adapter_and_its_logprobs(server):
    state, url = server
    state.answers["requirement-check_alora"] = ('{"score": "no"}', NO_TOKENS)
    backend = OpenAIBackend("ibm-granite/granite-4.1-3b", base_url=url)
    backend.add_adapter(IntrinsicAdapter("requirement-check", base_model_name=backend.model_id))
    ctx = ChatContext().add(Message("user", "Invite the team.")).add(Message("assistant", "Yo."))
    assert core.requirement_check(ctx, backend, "Professional tone.") == pytest.approx(
        UPSTREAM_NO_SCORE
    )
    m = MelleaSession(backend, ctx)
    (verdict,) = m.validate([req("Professional tone.")])
    assert not verdict.as_bool()
    assert [b["model"] for b in state.bodies] == ["requirement-check_alora"] * 2
    assert state.bodies[-1]["logprobs"] is True and state.bodies[-1]["top_logprobs"] == 10


def test_an_embedded_adapter_is_named_in_the_chat_template(server):
    state, url = server
    state.answers["granite-switch"] = ('"answerable"', [])
    backend = OpenAIBackend("granite-switch", base_url=url)
    backend.add_adapter(EmbeddedIntrinsicAdapter("answerability", ANSWERABILITY_IO, "alora"))
    ctx = ChatContext().add(Message("assistant", "Hi."))
    assert rag.check_answerability("Q?", ["D."], ctx, backend) == "answerable"
    (body,) = state.bodies
    assert body["model"] == "granite-switch"
    assert body["chat_template_kwargs"]["adapter_name"] == "answerability"
