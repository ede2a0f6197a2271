"""The backend interface (from :mod:`mellea.core.backend`) and helpers the backends share."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from mellea.core.backend import Backend

__all__ = ["Backend", "function_tool", "openai_tools", "schema_hint"]


def schema_hint(format: type) -> str:
    """A prompt line asking for JSON that matches a pydantic model's schema."""
    schema = format.model_json_schema()  # type: ignore[attr-defined]
    return "Respond only with JSON matching this schema: " + json.dumps(schema)


def openai_tools(tools: Any) -> list[dict[str, Any]]:
    """Tools in the OpenAI ``{"type": "function", "function": {...}}`` form."""
    if not tools:
        return []
    items = tools.values() if isinstance(tools, dict) else tools
    result = []
    for tool in items:
        if isinstance(tool, dict):
            result.append(tool)
        elif hasattr(tool, "as_json_tool"):
            result.append(tool.as_json_tool)
        elif inspect.isfunction(tool):
            result.append(function_tool(tool))
    return result


def function_tool(func: Callable[..., Any]) -> dict[str, Any]:
    """A Python function as an OpenAI tool, described by its signature and docstring.

    Type hints give the argument types; a Google-style ``Args:`` section, when present,
    gives their descriptions.
    """
    from transformers.utils import get_json_schema

    try:
        schema = get_json_schema(func)
        schema["function"].pop("return", None)  # not part of the OpenAI tool format
        return schema
    except Exception:  # no docstring or hints: name the parameters, leave them untyped
        names = list(inspect.signature(func).parameters)
        return {
            "type": "function",
            "function": {
                "name": func.__name__,
                "description": inspect.getdoc(func) or "",
                "parameters": {
                    "type": "object",
                    "properties": {name: {} for name in names},
                    "required": names,
                },
            },
        }
