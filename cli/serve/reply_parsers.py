"""The reply parsers a request's reply reads its text through (``--reasoning-parser``,
``--tool-call-parser``)."""

from __future__ import annotations

from typing import Any

from cli.serve.settings import ServeSettings
from mellea.core.parsers import ReplyParser, get_reasoning_parser, get_tool_parser


def reply_parser(settings: ServeSettings, body: Any) -> ReplyParser | None:
    """Fresh parsers for one reply to ``body`` (a chat or Responses request): reasoning
    always (if set), tool calls if tools were sent."""
    reasoning = (
        get_reasoning_parser(settings.reasoning_parser) if settings.reasoning_parser else None
    )
    wants_tools = bool(body.tools) and body.tool_choice != "none"
    tools = (
        get_tool_parser(settings.tool_call_parser)
        if wants_tools and settings.tool_call_parser
        else None
    )
    max_calls = 1 if body.parallel_tool_calls is False else None
    return ReplyParser(reasoning, tools, max_calls) if reasoning or tools else None
