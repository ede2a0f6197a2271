"""The reply parsers' former path; they live in :mod:`mellea.core.parsers`, below both the
wire layer and the backends that read them."""

from mellea.core.parsers import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    ParsedToolCall,
    ReasoningParser,
    ReplyDelta,
    ReplyParser,
    StreamDelta,
    ToolCallDelta,
    ToolCallParser,
    get_reasoning_parser,
    get_tool_parser,
    new_call_id,
)

__all__ = [
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "ParsedToolCall",
    "ReasoningParser",
    "ReplyDelta",
    "ReplyParser",
    "StreamDelta",
    "ToolCallDelta",
    "ToolCallParser",
    "get_reasoning_parser",
    "get_tool_parser",
    "new_call_id",
]
