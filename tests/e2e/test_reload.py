"""--reload re-imports the program in the same process (so a loaded model stays loaded)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests import waiting
from tests.server import serve

pytestmark = pytest.mark.e2e

VERSION = """
import os
from helper_words import WORD

def serve(input):
    return f"{WORD} {VERSION} pid={os.getpid()}"

VERSION = "{version}"
"""


def write_program(folder: Path, version: str, word: str = "hello") -> Path:
    (folder / "helper_words.py").write_text(f"WORD = {word!r}\n")
    program = folder / "prog.py"
    program.write_text(VERSION.replace("{version}", version))
    return program


def ask(server) -> str:
    reply = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    return reply.json()["choices"][0]["message"]["content"]


def wait_for(server, predicate, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = ask(server)
        if predicate(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def test_reload_swaps_the_program_in_process(tmp_path: Path):
    program = write_program(tmp_path, "v1")
    with serve(program, "--reload") as server:
        first = ask(server)
        assert first.startswith("hello v1 pid=")
        pid = first.split("pid=")[1]
        time.sleep(0.5)  # the watcher gives no sign that it has started: time to start
        write_program(tmp_path, "v2", word="howdy")
        second = wait_for(server, lambda t: "v2" in t)
        assert second == f"howdy v2 pid={pid}", "same process, new code and new helper module"
        program.write_text("def serve(input)\n    return 'broken'\n")
        waiting.wait_for(lambda: "reload failed" in server.log, "the broken edit's reload")
        assert ask(server) == second, "a broken edit keeps the previous version serving"
        assert "reload failed" in server.log and "SyntaxError" in server.log
