"""A recording OpenAI-compatible chat server on a loopback port, for the media tests.

It keeps every request body it receives and answers with a canned completion that
names the content part types of the last message (``saw text,image_url``), streamed
or not as asked, so a test can check both what was sent and that the answer came back.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def canned_answer(body: dict[str, Any]) -> str:
    """``saw `` and the part types of the last message's content (``text`` for a string)."""
    content = body["messages"][-1].get("content")
    kinds = ["text"] if isinstance(content, str) else [part["type"] for part in content]
    return "saw " + ",".join(kinds)


class Recorder:
    """The running server: its ``base_url`` (ending in ``/v1``) and the bodies it got."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def last(self) -> dict[str, Any]:
        """The most recent request body."""
        with self.lock:
            return self.bodies[-1]


class _Handler(BaseHTTPRequestHandler):
    recorder: Recorder

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        with self.recorder.lock:
            self.recorder.bodies.append(body)
        answer = canned_answer(body)
        usage = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
        if body.get("stream"):
            self._stream(answer, usage)
        else:
            message = {"role": "assistant", "content": answer}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            self._json(200, _completion("chat.completion", [choice], usage))

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, answer: str, usage: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        words = answer.split(" ")
        deltas = [{"role": "assistant", "content": ""}]
        deltas += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
        for delta in deltas:
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            self._event(_completion("chat.completion.chunk", [choice]))
        finish = {"index": 0, "delta": {}, "finish_reason": "stop"}
        self._event(_completion("chat.completion.chunk", [finish]))
        self._event(_completion("chat.completion.chunk", [], usage))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, payload: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()


def _completion(
    kind: str, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-recorded",
        "object": kind,
        "created": 0,
        "model": "recorded",
        "choices": choices,
        "usage": usage,
    }


@contextmanager
def recording_server() -> Iterator[Recorder]:
    """Run the recorder on a free loopback port until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    recorder = Recorder(server)
    server.RequestHandlerClass = type("Handler", (_Handler,), {"recorder": recorder})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
