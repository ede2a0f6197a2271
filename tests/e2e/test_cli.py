"""`m` as a user runs it: help, version, and one-line errors for broken programs."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from tests.server import PROGRAMS, ROOT, serve

pytestmark = pytest.mark.e2e


def m(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_is_fast_and_imports_no_torch():
    code = (
        "import sys, cli.main\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(cli.main.app, ['serve', '--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "False False", result.stderr


def test_serve_help_lists_the_flags():
    result = m("serve", "--help")
    assert result.returncode == 0
    for flag in (
        "--host",
        "--port",
        "--model-name",
        "--log-level",
        "--reload",
        "--max-request-bytes",
    ):
        assert flag in result.stdout
    assert "127.0.0.1" in result.stdout


def test_version():
    result = m("--version")
    assert result.returncode == 0 and result.stdout.startswith("m (mellea) ")


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        ("missing.py", "program file not found"),
        ("no_serve.py", "defines no serve() function"),
        ("serve_not_callable.py", "serve is a int, not a function"),
        ("import_error.py", "import_error.py:5: ModuleNotFoundError"),
        ("syntax_error.py", "syntax_error.py:3: SyntaxError"),
    ],
)
def test_broken_programs_fail_with_one_line(program, expected):
    result = m("serve", str(PROGRAMS / program), "--port", "1")
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1


def test_import_error_shows_the_programs_own_line():
    result = m("serve", str(PROGRAMS / "import_error.py"), "--port", "1")
    assert "import a_module_that_does_not_exist" in result.stderr


def test_sync_program_and_its_sibling_modules():
    with serve(PROGRAMS / "uses_helper.py", "--model-name", "shouter") as server:
        reply = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hey"}]},
            timeout=30,
        ).json()
        assert reply["model"] == "shouter"
        assert reply["choices"][0]["message"]["content"] == "HEY!"
    with serve(PROGRAMS / "plain_sync.py") as server:
        reply = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "quiet"}], "stream": True},
            timeout=30,
        )
        assert '"content":"QUIET"' in reply.text and reply.text.rstrip().endswith("data: [DONE]")
