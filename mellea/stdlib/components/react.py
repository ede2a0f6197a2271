"""Components of the ReACT loop (:func:`mellea.stdlib.frameworks.react.react`): the
goal and tools that start it, and the prompt for each thinking step."""

from __future__ import annotations

import logging

from mellea.core.base import (
    AbstractMelleaTool,
    CBlock,
    Component,
    Span,
    TemplateRepresentation,
)
from mellea.core.thunk import ModelOutputThunk

MELLEA_FINALIZER_TOOL = "final_answer"
"""The tool the model calls with its final answer; calling it ends the loop."""

log = logging.getLogger("mellea")

INITIATOR_TEMPLATE = (
    "Work towards the goal below with the tools you have, step by step:\n"
    "- Thought: decide what to do next\n"
    "- Action: call a tool\n"
    "- Observation: read what the tool returned\n"
    "Repeat these as often as needed. When you know the final answer, call the "
    "`{{ finalizer_tool_name }}` tool with it: the last step is always a tool call. "
    "If you find yourself repeating a step, call `{{ finalizer_tool_name }}`.\n\n"
    "Goal: {{ goal }}"
)
THOUGHT_TEXT = (
    "Think about the next step and take it. Call a tool if you need more "
    f"information; if you have the final answer, call the `{MELLEA_FINALIZER_TOOL}` tool."
)


def _mellea_finalize_tool(answer: str) -> str:
    """Give the final answer and end the task.

    Args:
        answer: The final answer.
    """
    return answer


def pin_react_initiator(components: list[Span]) -> int:
    """A pin predicate keeping everything up to the first :class:`ReactInitiator`
    (0 when there is none), so compaction keeps the goal and the tools."""
    for i, item in enumerate(components):
        if isinstance(item, ReactInitiator):
            return i + 1
    return 0


def react_summary_prompt(goal: str | None = None, max_tokens_hint: int | None = None) -> str:
    """A summary prompt for :class:`~mellea.stdlib.context.LLMSummarizeCompactor` in a
    ReACT loop: it names the ``goal`` and, with ``max_tokens_hint``, asks for a
    summary of about that length. Holds the ``{conversation}`` placeholder."""
    lines = ["You are summarizing the progress of a task so that it can go on from the summary."]
    if goal is not None:
        lines.append("GOAL: " + goal.replace("{", "{{").replace("}", "}}"))
    lines.append(
        "Keep every specific fact, number, name, URL and search query; say which tools were "
        "called and what they returned; note findings and dead ends."
    )
    if max_tokens_hint is not None and max_tokens_hint > 0:
        lines.append(
            f"Use at most about {max_tokens_hint} tokens "
            f"(about {int(max_tokens_hint * 0.75)} words)."
        )
    lines.append("Context to summarize:\n{conversation}")
    return "\n\n".join(lines)


class ReactInitiator(Component[str]):
    """Starts a ReACT loop: the goal, and the tools (plus the finalizer tool)."""

    def __init__(self, goal: str, tools: list[AbstractMelleaTool] | None) -> None:
        self.goal = CBlock(goal)
        self.tools = list(tools or [])

    def parts(self) -> list[Span]:
        """The goal."""
        return [self.goal]

    def all_tools(self) -> dict[str, AbstractMelleaTool]:
        """The tools by name, with the finalizer tool (which replaces a user tool of its name)."""
        from mellea.backends.tools import MelleaTool

        tools = {tool.name: tool for tool in self.tools}
        if MELLEA_FINALIZER_TOOL in tools:
            log.warning(
                "react: the tool name %r is reserved; yours is replaced", MELLEA_FINALIZER_TOOL
            )
        tools[MELLEA_FINALIZER_TOOL] = MelleaTool.from_callable(
            _mellea_finalize_tool, MELLEA_FINALIZER_TOOL
        )
        return tools

    def format_for_llm(self) -> TemplateRepresentation:
        """The instructions and goal, with the tools."""
        return TemplateRepresentation(
            obj=self,
            args={"goal": self.goal, "finalizer_tool_name": MELLEA_FINALIZER_TOOL},
            tools=self.all_tools(),
            template=INITIATOR_TEMPLATE,
            template_order=["*", "ReactInitiator"],
        )

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""


class ReactThought(Component[str]):
    """Asks the model for its next step."""

    def parts(self) -> list[Span]:
        """No parts."""
        return []

    def format_for_llm(self) -> TemplateRepresentation:
        """The request for the next step."""
        return TemplateRepresentation(
            obj=self, args={}, template=THOUGHT_TEXT, template_order=["*", "ReactThought"]
        )

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""


__all__ = [
    "MELLEA_FINALIZER_TOOL",
    "ReactInitiator",
    "ReactThought",
    "pin_react_initiator",
    "react_summary_prompt",
]
