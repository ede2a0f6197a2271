"""``m serve --model``, and programs that name a model this machine does not have."""

from __future__ import annotations

import os
import subprocess
import sys

import openai
import pytest

from tests.server import PROGRAMS, ROOT, serve

pytestmark = pytest.mark.e2e
OFFLINE = {"HF_HUB_OFFLINE": "1"}  # the hub is unreachable: only this machine counts
MISSING = "ibm-granite/granite-4.1-3b-not-on-this-machine"


def m_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", *args, "--port", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **OFFLINE},
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_program_naming_a_missing_model_stops_the_start_in_one_line():
    line = one_error_line(m_serve(str(PROGRAMS / "granite.py")))
    assert MISSING in line
    assert "--model" in line and "Hugging Face cache" in line and "granite.py:" in line


def test_a_missing_model_flag_stops_the_start_in_one_line():
    line = one_error_line(m_serve(str(PROGRAMS / "echo.py"), "--model", "nobody/no-such-model"))
    assert line.startswith("Error: --model nobody/no-such-model:")
    assert "model directory" in line


@pytest.mark.model
@pytest.mark.parametrize("program", ["granite.py", "granite_on_ollama.py"])
def test_model_flag_serves_the_bundled_model_to_a_program_written_for_granite(program):
    asked = MISSING if program == "granite.py" else "granite4:micro"
    flag = ("--model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    with serve(PROGRAMS / program, *flag, "--no-playground", env=OFFLINE) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x")
        for _ in range(2):
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Say hi."}], max_tokens=8
            )
            assert reply.choices[0].message.content
        stream = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Say hi."}],
            max_tokens=8,
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        note = f"program asked for {asked}; serving HuggingFaceTB/SmolLM2-135M-Instruct (--model)"
        assert server.log.count(note) == 1, server.log
