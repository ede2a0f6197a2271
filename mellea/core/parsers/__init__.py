"""Turn model text into OpenAI ``tool_calls`` and ``reasoning_content``, whole or streamed.

Pick parsers by name with :func:`get_tool_parser` / :func:`get_reasoning_parser` (one fresh
instance per reply). A reply with both: run the reasoning parser on the model text and feed
its content deltas to the tool-call parser, which :class:`ReplyParser` does::

    reply = ReplyParser(get_reasoning_parser("qwen3"), get_tool_parser("hermes"))
    for piece in pieces:
        delta = reply.feed(piece)  # .reasoning, .content, .tool_calls
    delta = reply.finish()
"""

from mellea.core.parsers.reasoning import ReasoningParser
from mellea.core.parsers.registry import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    get_reasoning_parser,
    get_tool_parser,
)
from mellea.core.parsers.reply import ReplyDelta, ReplyParser
from mellea.core.parsers.tool_calls import (
    ParsedToolCall,
    StreamDelta,
    ToolCallDelta,
    ToolCallParser,
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
