"""Tool calls a model writes into its text, lifted onto the thunk (``tool_calls=True``).

The local model writes calls as text in its own format (``<tool_call>{...}</tool_call>``
for hermes); the parsers that read them are the ones the wire protocol uses for replies,
in ``mellea.core.parsers``, below both.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from mellea.core.parsers import get_tool_parser
from mellea.core.thunk import GenerationChunk
from mellea.core.tool_call import ModelToolCall

DEFAULT_PARSER = "hermes"  # the format the local backend describes tools in


def tool_parser_name(chosen: str | None = None) -> str:
    """The parser to read calls with: the one chosen (backend or runtime), else hermes."""
    return chosen or DEFAULT_PARSER


def tool_functions(tools: Any) -> dict[str, Callable[..., Any]]:
    """The Python functions among a ``ModelOption.TOOLS`` value, by tool name."""
    items = tools.values() if isinstance(tools, dict) else tools or []
    functions: dict[str, Callable[..., Any]] = {}
    for tool in items:
        if inspect.isfunction(tool):
            functions[tool.__name__] = tool
        elif callable(getattr(tool, "run", None)) and isinstance(getattr(tool, "name", None), str):
            functions[tool.name] = tool.run  # a MelleaTool
    return functions


async def lift_tool_calls(
    chunks: AsyncIterator[GenerationChunk],
    parser_name: str,
    functions: dict[str, Callable[..., Any]] | None = None,
    max_calls: int | None = None,
) -> AsyncIterator[GenerationChunk]:
    """``chunks`` with the tool-call markup taken out of the text and the calls it held
    put on the last chunk as :class:`ModelToolCall` s (with their Python function when
    ``functions`` has it); calls beyond ``max_calls`` are dropped.

    Content streams as it arrives; only text that might still become a call is held back.
    """
    parser = get_tool_parser(parser_name)
    found = []  # each delta the parser gives holds one complete call
    async for chunk in chunks:
        delta = parser.feed(chunk.text)
        chunk.text = delta.content
        found += delta.tool_calls
        yield chunk
    tail = parser.finish()
    calls = []
    for call in [*found, *tail.tool_calls][:max_calls]:
        name = call.name or ""
        model_call = ModelToolCall(name, (functions or {}).get(name), _args(call.arguments))
        model_call.id = call.id or model_call.id
        calls.append(model_call)
    if tail.content or calls:
        yield GenerationChunk(text=tail.content, tool_calls=calls or None)


def _args(arguments: str | None) -> dict[str, Any]:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {"_raw": arguments}
    return args if isinstance(args, dict) else {"_value": args}
