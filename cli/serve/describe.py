"""What a program says about itself, for ``GET /v1/models`` and the playground."""

from __future__ import annotations

import inspect
from typing import Any

from cli.serve.program import OPTIONAL_PARAMETERS, Program


def describe_program(program: Program) -> dict[str, Any]:
    """The program's file name, docstrings, and the parameters its ``serve()`` declares.

    ``parameters`` lists which of the optional request values (``requirements``,
    ``model_options``, ``format``, ``client_options``) the server passes to it.
    """
    return {
        "program": program.path.name,
        "description": _doc(program.module),
        "serve": {
            "description": _doc(program.serve),
            "parameters": [name for name in OPTIONAL_PARAMETERS if name in program.accepts],
            "async": program.is_async,
        },
        "serve_completion": program.serve_completion is not None,
    }


def _doc(thing: Any) -> str | None:
    doc = inspect.getdoc(thing) if thing is not None else None
    return doc.strip() if doc else None
