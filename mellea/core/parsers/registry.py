"""Parsers by name, as chosen on the command line or in the model's configuration."""

from __future__ import annotations

from mellea.core.parsers.hermes import HermesToolParser
from mellea.core.parsers.json_calls import (
    GraniteToolParser,
    JsonToolParser,
    Llama3JsonToolParser,
)
from mellea.core.parsers.mistral import MistralToolParser
from mellea.core.parsers.pythonic import PythonicToolParser
from mellea.core.parsers.reasoning import (
    DeepSeekR1ReasoningParser,
    Qwen3ReasoningParser,
    ReasoningParser,
)
from mellea.core.parsers.tool_calls import ToolCallParser

TOOL_PARSERS: dict[str, type[ToolCallParser]] = {
    cls.name: cls
    for cls in (
        HermesToolParser,
        Llama3JsonToolParser,
        MistralToolParser,
        PythonicToolParser,
        GraniteToolParser,
        JsonToolParser,
    )
}

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    cls.name: cls for cls in (Qwen3ReasoningParser, DeepSeekR1ReasoningParser)
}


def get_tool_parser(name: str) -> ToolCallParser:
    """A fresh tool-call parser of format ``name``; ``ValueError`` names the valid ones."""
    try:
        return TOOL_PARSERS[name]()
    except KeyError:
        valid = ", ".join(sorted(TOOL_PARSERS))
        raise ValueError(f"unknown tool call parser {name!r}; valid: {valid}") from None


def get_reasoning_parser(name: str) -> ReasoningParser:
    """A fresh reasoning parser of format ``name``; ``ValueError`` names the valid ones."""
    try:
        return REASONING_PARSERS[name]()
    except KeyError:
        valid = ", ".join(sorted(REASONING_PARSERS))
        raise ValueError(f"unknown reasoning parser {name!r}; valid: {valid}") from None
