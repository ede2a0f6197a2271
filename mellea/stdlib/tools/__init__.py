"""Tools a model can call: a Python interpreter and a shell, in our sandbox
(:mod:`.sandbox`), and MCP servers' tools (:mod:`.mcp`, with the ``mcp`` package)."""

from mellea.stdlib.tools.execution_policy import (
    COMPATIBILITY_MATRIX,
    DOCKER_POLICY,
    LOCAL_POLICY,
    Artifact,
    CapabilityPolicy,
    ExecutionTier,
)
from mellea.stdlib.tools.interpreter import (
    ExecutionEnvironment,
    ExecutionResult,
    LLMSandboxEnvironment,
    StaticAnalysisEnvironment,
    UnsafeEnvironment,
    code_interpreter,
    local_code_interpreter,
    make_execution_environment,
    python_tool,
)
from mellea.stdlib.tools.shell import BashEnvironment, StaticBashEnvironment, bash_executor

__all__ = [
    "COMPATIBILITY_MATRIX",
    "DOCKER_POLICY",
    "LOCAL_POLICY",
    "Artifact",
    "BashEnvironment",
    "CapabilityPolicy",
    "ExecutionEnvironment",
    "ExecutionResult",
    "ExecutionTier",
    "LLMSandboxEnvironment",
    "StaticAnalysisEnvironment",
    "StaticBashEnvironment",
    "UnsafeEnvironment",
    "bash_executor",
    "code_interpreter",
    "local_code_interpreter",
    "make_execution_environment",
    "python_tool",
]
