"""mellea.stdlib.tools: the sandbox's guarantees, python_tool's tiers, bash_executor's
rules and the MCP helpers."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mellea.backends.tools import MelleaTool
from mellea.stdlib.tools import (
    CapabilityPolicy,
    make_execution_environment,
    python_tool,
)
from mellea.stdlib.tools import mcp as mcp_tools
from mellea.stdlib.tools.sandbox import network_isolation_available, run_sandboxed
from mellea.stdlib.tools.shell import bash_executor

needs_netns = pytest.mark.skipif(
    not network_isolation_available(), reason="no user/network namespaces here"
)


@needs_netns
def test_sandbox_has_no_network():
    code = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)"
    run = run_sandboxed([sys.executable, "-c", code])
    assert run.returncode != 0 and "unreachable" in run.stderr.lower()


@needs_netns
def test_sandbox_caps_memory_and_time_and_uses_its_own_directory():
    run = run_sandboxed([sys.executable, "-c", "b = bytearray(3 * 2**30)"], memory_mb=512)
    assert run.returncode != 0 and "MemoryError" in run.stderr
    run = run_sandboxed([sys.executable, "-c", "while True: pass"], timeout=1)
    assert run.timed_out
    run = run_sandboxed(["pwd"])
    assert "mellea-sandbox-" in run.stdout and not Path(run.stdout.strip()).exists()


@needs_netns
def test_python_tool_local_tier_runs_in_the_sandbox(tmp_path):
    tool = python_tool(tier="local", artifact_dir=tmp_path)
    assert isinstance(tool, MelleaTool) and tool.name == "python"
    assert "code" in tool.as_json_tool["function"]["parameters"]["properties"]
    result = tool.run(code="open('out.csv', 'w').write('a,b\\n'); print(2 ** 10)")
    assert result.success and result.stdout == "1024" and result.execution_mode == "local"
    assert [(a.path.name, a.content_type) for a in result.artifacts] == [("out.csv", "text/csv")]
    blocked = tool.run(
        code="import urllib.request; urllib.request.urlopen('http://1.1.1.1', timeout=3)"
    )
    assert not blocked.success and blocked.stderr


def test_unsafe_tier_reports_errors_and_timeouts():
    tool = python_tool(tier="local_unsafe")
    failed = tool.run(code="raise ValueError('boom')")
    assert not failed.success and failed.exit_code == 1 and "boom" in failed.stderr
    env = make_execution_environment("local_unsafe", policy=CapabilityPolicy(timeout=1))
    slow = env.execute("import time; time.sleep(30)")
    assert slow.timed_out and not slow.success


def test_tier_none_warns_and_static_tier_never_runs():
    with pytest.warns(UserWarning, match="local_unsafe"):
        python_tool()
    static = python_tool(tier="static").run(code="open('/tmp/never', 'w')")
    assert static.success and static.skipped and static.stdout is None
    bad = make_execution_environment("static").execute("def (:")
    assert not bad.success and bad.skipped and isinstance(bad.analysis_result, SyntaxError)


def test_allowed_imports_are_checked_before_running():
    env = make_execution_environment("local_unsafe", allowed_imports=["math"])
    refused = env.execute("import os\nimport math\nprint(1)")
    assert refused.skipped and "os" in refused.skip_message and "math" not in refused.skip_message
    assert env.execute("import math\nprint(math.pi > 3)").stdout == "True"


def test_docker_tier_names_what_it_needs():
    if importlib.util.find_spec("llm_sandbox") is not None:
        pytest.skip("llm-sandbox is installed")
    result = python_tool(tier="docker_unsafe").run(code="print(1)")
    assert result.skipped and "llm-sandbox" in result.skip_message


def test_unknown_tier_is_refused():
    with pytest.raises(ValueError, match="local_unsafe"):
        python_tool(tier="vm")  # type: ignore[arg-type]


def test_policy_says_what_is_enforced():
    policy = CapabilityPolicy()
    assert {"timeout", "network_access", "memory_mb"} <= set(policy.enforced_capabilities())
    assert "filesystem_read_roots" in policy.unenforced_capabilities()
    with pytest.warns(UserWarning, match="not enforced"):
        CapabilityPolicy(filesystem_write_roots=[Path("/tmp")])


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("ls -la | wc -l", "shell operators"),
        ("echo hi > f", "shell operators"),
        ("sudo whoami", "privilege"),
        ("rm -rf /home", "rm -rf"),
        ("rm -r -f x", "rm -rf"),
        ("rm -R dir", "rm -r"),
        ("git push --force", "push --force"),
        ("git reset --hard", "reset --hard"),
        ("bash -i", "shells"),
        ("touch /etc/config", "system path"),
    ],
)
def test_bash_executor_refuses(command, reason):
    result = bash_executor(command)
    assert result.skipped and not result.success and reason in result.skip_message


@needs_netns
def test_bash_executor_runs_allowed_commands(tmp_path):
    assert bash_executor("echo 'Hello from Bash'").stdout == "Hello from Bash"
    made = bash_executor("touch myfile.txt", working_dir=str(tmp_path))
    assert made.success and (tmp_path / "myfile.txt").exists()
    outside = bash_executor("touch /home/elsewhere.txt", working_dir=str(tmp_path))
    assert outside.skipped and "outside" in outside.skip_message
    assert not bash_executor("false").success
    missing = bash_executor("nonexistent_command_xyz")
    assert not missing.success and not missing.skipped
    tool = MelleaTool.from_callable(bash_executor)
    assert tool.run("pwd").success


def test_mcp_connections_and_missing_package():
    http = mcp_tools.http_connection("https://h/mcp", api_key="k", headers={"X": "1"})
    assert http["transport"] == "streamable_http"
    assert http["headers"] == {"Authorization": "Bearer k", "X": "1"}
    assert mcp_tools.sse_connection("https://h/sse")["transport"] == "sse"
    stdio = mcp_tools.stdio_connection("gh", args=["mcp", "serve"])
    assert stdio == {
        "transport": "stdio",
        "command": "gh",
        "read_timeout": 300.0,
        "args": ["mcp", "serve"],
    }
    if importlib.util.find_spec("mcp") is None:
        with pytest.raises(ImportError, match="'mcp'"):
            asyncio.run(mcp_tools.discover_mcp_tools(stdio))


def test_mcp_tool_calls_the_server_and_flattens_the_result(monkeypatch):
    seen = {}

    async def fake_call(connection, name, arguments):
        seen.update(connection=connection, name=name, arguments=arguments)
        result = SimpleNamespace(
            isError=False,
            content=[SimpleNamespace(text="line 1"), SimpleNamespace(mimeType="image/png")],
        )
        return mcp_tools.flatten_content(result)

    monkeypatch.setattr(mcp_tools, "_call", fake_call)
    conn = mcp_tools.http_connection("https://h/mcp")
    spec = mcp_tools.MCPToolSpec("search", "Search.", {"type": "object"}, conn)
    tool = spec.as_mellea_tool()
    assert tool.as_json_tool["function"]["description"] == "Search."
    assert tool.run(q="x", page=None) == "line 1\n[binary: image/png]"
    assert seen == {"connection": conn, "name": "search", "arguments": {"q": "x"}}
    error = SimpleNamespace(isError=True, content=[SimpleNamespace(text="denied")])
    assert mcp_tools.flatten_content(error) == "[tool error] denied"
