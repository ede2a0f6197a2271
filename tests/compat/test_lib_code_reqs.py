"""Requirements on generated code (python_reqs, python_tools, plotting), Markdown
shapes (md), and the guardian check (safety), over scripted backends."""

from __future__ import annotations

import asyncio

import pytest

from mellea.core import ModelOutputThunk, ModelToolCall
from mellea.stdlib.components import Message
from mellea.stdlib.context import ChatContext
from mellea.stdlib.requirements import (
    ImportRestrictions,
    MatplotlibHeadlessBackend,
    NoImportRestrictions,
    OutputSizeLimit,
    PlotFileSaved,
    PythonCodeExtraction,
    PythonExecutionReq,
    PythonSyntaxValid,
    as_markdown_list,
    is_markdown_list,
    is_markdown_table,
    python_code_generation_requirements,
    python_plotting_requirements,
    requirement_check_to_bool,
)
from mellea.stdlib.requirements.python_reqs import _has_python_code_listing
from mellea.stdlib.requirements.safety import GuardianCheck, GuardianRisk
from mellea.stdlib.session import MelleaSession
from mellea.stdlib.tools.sandbox import network_isolation_available
from tests.compat.lib_scripted import ScriptedBackend


def _ctx(text: str, tool_calls=None) -> ChatContext:
    thunk = ModelOutputThunk(text)
    if tool_calls:
        thunk.tool_calls = tool_calls
    return ChatContext().add(Message("user", "q")).add(thunk)


ANSWER = """Here you go:

```python
import math

def area(r):
    return math.pi * r * r

print(round(area(2), 2))
```

and a shell line:

```
ls
```
"""


def test_code_listing_prefers_the_python_block_then_tool_calls():
    found = _has_python_code_listing(_ctx(ANSWER))
    assert found.as_bool() and found.reason.startswith("import math") and "ls" not in found.reason
    call = ModelToolCall("python", None, {"code": "print(1)\nprint(2)"})
    from_tool = _has_python_code_listing(_ctx("no code here", [call]))
    assert from_tool.as_bool() and from_tool.reason == "print(1)\nprint(2)"
    assert not _has_python_code_listing(_ctx("just words")).as_bool()


def test_syntax_and_imports():
    ctx = _ctx(ANSWER)
    assert PythonCodeExtraction().validation_fn(ctx).as_bool()
    assert PythonSyntaxValid().validation_fn(ctx).as_bool()
    broken = PythonSyntaxValid().validation_fn(_ctx("```python\ndef f(:\n  pass\n```"))
    assert not broken.as_bool() and "line 1" in broken.reason
    assert ImportRestrictions(["math"]).validation_fn(ctx).as_bool()
    refused = ImportRestrictions(["os"]).validation_fn(ctx)
    assert not refused.as_bool() and "math" in refused.reason
    assert NoImportRestrictions().validation_fn(ctx).as_bool()


def test_execution_requirement_runs_the_code():
    ok = PythonExecutionReq("local_unsafe").validation_fn(_ctx(ANSWER))
    assert ok.as_bool() and ok.reason == "12.57"
    failing = PythonExecutionReq("local_unsafe").validation_fn(
        _ctx("```python\nraise RuntimeError('nope')\nprint(1)\n```")
    )
    assert not failing.as_bool() and "nope" in failing.reason
    loud = PythonExecutionReq("local_unsafe", max_output_chars=3).validation_fn(_ctx(ANSWER))
    assert not loud.as_bool() and "exceeds" in loud.reason
    static = PythonExecutionReq().validation_fn(_ctx(ANSWER))
    assert static.as_bool() and "does not run" in static.reason
    assert PythonExecutionReq().check_only


@pytest.mark.skipif(not network_isolation_available(), reason="no network namespaces")
def test_output_size_limit_in_the_sandbox():
    assert OutputSizeLimit(100, execution_tier="local").validation_fn(_ctx(ANSWER)).as_bool()
    assert not OutputSizeLimit(2, execution_tier="local").validation_fn(_ctx(ANSWER)).as_bool()


def test_bundles():
    reqs = python_code_generation_requirements(allowed_imports=["math"])
    assert [type(r).__name__ for r in reqs] == [
        "PythonCodeExtraction",
        "PythonSyntaxValid",
        "PythonExecutionReq",
        "ImportRestrictions",
    ]
    assert len(python_plotting_requirements("/tmp/p.png")) == 7
    with pytest.raises(ValueError):
        python_code_generation_requirements(timeout_seconds=0)


def test_plotting_checks():
    good = _ctx(
        "```python\nimport matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2])\nplt.savefig('/tmp/p.png')\n```"
    )
    assert MatplotlibHeadlessBackend().validation_fn(good).as_bool()
    assert PlotFileSaved("/tmp/p.png").validation_fn(good).as_bool()
    assert not PlotFileSaved("/tmp/other.png").validation_fn(good).as_bool()
    tk = _ctx("```python\nimport matplotlib\nmatplotlib.use('TkAgg')\nplt.show()\nprint(1)\n```")
    assert "not headless" in MatplotlibHeadlessBackend().validation_fn(tk).reason


def test_markdown_list_and_table():
    assert as_markdown_list(_ctx("- one\n- two\n  more")) == ["one", "two\nmore"]
    assert as_markdown_list(_ctx("1. a\n2) b")) == ["a", "b"]
    assert as_markdown_list(_ctx("Intro\n- one")) is None
    assert is_markdown_list.validation_fn(_ctx("* x")).as_bool()
    table = "| a | b |\n|---|:--:|\n| 1 | 2 |"
    assert is_markdown_table.validation_fn(_ctx(table)).as_bool()
    assert not is_markdown_table.validation_fn(_ctx("| a | b |\n| 1 | 2 |")).as_bool()
    assert not is_markdown_table.validation_fn(_ctx("text\n\n" + table)).as_bool()


def test_requirement_check_json():
    assert requirement_check_to_bool('{"requirement_check": {"score": 0.9}}')
    assert not requirement_check_to_bool('{"requirement_check": {"score": 0.1}}')
    with pytest.raises(ValueError):
        requirement_check_to_bool('{"score": 0.9}')


def test_guardian_asks_the_sessions_model_and_reads_the_score():
    with pytest.warns(DeprecationWarning):
        harm = GuardianCheck(GuardianRisk.HARM)
    backend = ScriptedBackend(["<score>no</score>"])
    m = MelleaSession(backend, ctx=ChatContext())
    result = m.instruct("Say hi.", requirements=[harm], return_sampling_results=True)
    assert result.success
    question = backend.calls[-1]["messages"][0]["content"]
    assert "harmful" in question and "Say hi." in question
    risky = ScriptedBackend(["<score>yes</score>"])
    verdict = asyncio.run(harm.validate(risky, _ctx("bad words")))
    assert not verdict.as_bool() and "Yes" in verdict.reason
    unreadable = asyncio.run(harm.validate(ScriptedBackend(["maybe"]), _ctx("x")))
    assert not unreadable.as_bool() and "Failed" in unreadable.reason
    with pytest.raises(ValueError), pytest.warns(DeprecationWarning):
        GuardianCheck()
