"""Both parsers chained over one reply: reasoning first, then tool calls in the content."""

from __future__ import annotations

from dataclasses import dataclass, field

from mellea.core.parsers.reasoning import ReasoningParser
from mellea.core.parsers.tool_calls import (
    ParsedToolCall,
    StreamDelta,
    ToolCallDelta,
    ToolCallParser,
)


@dataclass
class ReplyDelta:
    """What a piece of streamed text adds: reasoning, content and tool-call deltas."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)


class ReplyParser:
    """Runs the reasoning parser on the raw text and the tool parser on its content deltas.

    Either parser may be None (that stage is skipped). The same streaming guarantee holds:
    deltas joined equal :meth:`parse` of the whole text.
    """

    def __init__(
        self,
        reasoning: ReasoningParser | None,
        tools: ToolCallParser | None,
        max_calls: int | None = None,
    ) -> None:
        """Chain fresh parsers for one reply; ``max_calls`` drops calls beyond it
        (1 for ``parallel_tool_calls: false``)."""
        self.reasoning = reasoning
        self.tools = tools
        self.max_calls = max_calls

    def parse(self, text: str) -> tuple[str | None, str | None, list[ParsedToolCall]]:
        """Split a whole reply into (reasoning or None, content or None, calls)."""
        reasoning, content = None, text
        if self.reasoning is not None:
            reasoning, content = self.reasoning.parse(text)
        if self.tools is None:
            return reasoning, content or None, []
        content_or_none, calls = self.tools.parse(content)
        return reasoning, content_or_none, calls[: self.max_calls]

    def feed(self, piece: str) -> ReplyDelta:
        """Add the next piece of the reply."""
        reasoning, content = ("", piece) if self.reasoning is None else self.reasoning.feed(piece)
        return self._tools(reasoning, content, final=False)

    def finish(self) -> ReplyDelta:
        """End of the reply."""
        reasoning, content = ("", "") if self.reasoning is None else self.reasoning.finish()
        return self._tools(reasoning, content, final=True)

    def _tools(self, reasoning: str, content: str, final: bool) -> ReplyDelta:
        if self.tools is None:
            return ReplyDelta(reasoning=reasoning, content=content)
        delta = self.tools.feed(content) if content else StreamDelta()
        if final:
            last = self.tools.finish()
            delta.content += last.content
            delta.tool_calls += last.tool_calls
        calls = [c for c in delta.tool_calls if self.max_calls is None or c.index < self.max_calls]
        return ReplyDelta(reasoning=reasoning, content=delta.content, tool_calls=calls)
