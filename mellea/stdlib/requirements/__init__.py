"""Requirements helpers (upstream's module path; the code is in the modules beside)."""

from mellea.core.requirement import default_output_to_bool
from mellea.stdlib.requirements.md import as_markdown_list, is_markdown_list, is_markdown_table
from mellea.stdlib.requirements.plotting import (
    MatplotlibHeadlessBackend,
    PlotDependenciesAvailable,
    PlotFileSaved,
    python_plotting_requirements,
)
from mellea.stdlib.requirements.python_reqs import PythonExecutionReq
from mellea.stdlib.requirements.python_tools import (
    ImportRestrictions,
    NoImportRestrictions,
    OutputSizeLimit,
    PythonCodeExtraction,
    PythonSyntaxValid,
    python_code_generation_requirements,
)
from mellea.stdlib.requirements.requirement import (
    ALoraRequirement,
    LLMaJRequirement,
    Requirement,
    ValidationResult,
    as_requirement,
    check,
    req,
    reqify,
    requirement_check_to_bool,
    simple_validate,
)
from mellea.stdlib.requirements.tool_reqs import tool_arg_validator, uses_tool

__all__ = [
    "ALoraRequirement",
    "ImportRestrictions",
    "LLMaJRequirement",
    "MatplotlibHeadlessBackend",
    "NoImportRestrictions",
    "OutputSizeLimit",
    "PlotDependenciesAvailable",
    "PlotFileSaved",
    "PythonCodeExtraction",
    "PythonExecutionReq",
    "PythonSyntaxValid",
    "Requirement",
    "ValidationResult",
    "as_markdown_list",
    "as_requirement",
    "check",
    "default_output_to_bool",
    "is_markdown_list",
    "is_markdown_table",
    "python_code_generation_requirements",
    "python_plotting_requirements",
    "req",
    "reqify",
    "requirement_check_to_bool",
    "simple_validate",
    "tool_arg_validator",
    "uses_tool",
]
