"""A script that used the local engine exits cleanly: code 0, no native abort
("terminate called without an active exception"), no nanobind leak report, and no
engine thread left running while the interpreter finalizes (issue 21)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.engine.conftest import make_tiny_llama
from tests.server import PROGRAMS, ROOT

pytestmark = pytest.mark.e2e
RUNS = 3


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(make_tiny_llama(tmp_path_factory.mktemp("exit-tiny")))


@pytest.mark.parametrize("run", range(RUNS))
def test_a_script_that_generated_exits_cleanly(tiny_model, run):
    result = subprocess.run(
        [sys.executable, str(PROGRAMS / "session_script.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LOCAL_MODEL": tiny_model},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-2000:]
    assert "reply:" in result.stdout
    assert "engine threads at exit: 0" in result.stdout, output[-2000:]
    assert "terminate called" not in output
    assert "nanobind" not in output, output[-2000:]
