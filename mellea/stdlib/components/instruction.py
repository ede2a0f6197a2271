"""An instruction for the model: a description plus requirements, examples and grounding."""

from __future__ import annotations

from typing import Any

from mellea.core.base import CBlock, Component, Span
from mellea.core.requirement import Requirement, as_requirement
from mellea.core.thunk import ModelOutputThunk


class Instruction(Component[str]):
    """What ``session.instruct`` sends: rendered as one user message.

    Requirements that are not ``check_only`` are listed in the prompt; ``{{name}}``
    placeholders are filled from ``user_variables``.
    """

    def __init__(
        self,
        description: str | CBlock | None = None,
        requirements: list[Requirement | str] | None = None,
        icl_examples: list[str | CBlock] | None = None,
        grounding_context: dict[str, Any] | None = None,
        user_variables: dict[str, str] | None = None,
        prefix: str | CBlock | None = None,
        output_prefix: str | CBlock | None = None,
        images: list[Any] | None = None,
        audio: list[Any] | None = None,
    ) -> None:
        self._description = str(description) if description is not None else ""
        self._requirements = [as_requirement(r) for r in requirements or []]
        self._icl_examples = [str(e) for e in icl_examples or []]
        self._grounding_context = {k: str(v) for k, v in (grounding_context or {}).items()}
        self._user_variables = dict(user_variables or {})
        self._prefix = str(prefix) if prefix is not None else None
        self._output_prefix = str(output_prefix) if output_prefix is not None else None
        self._images = images
        self._audio = audio
        self._text: str | None = None

    @property
    def requirements(self) -> list[Requirement]:
        """The instruction's requirements."""
        return self._requirements

    @property
    def images(self) -> list[Any] | None:
        """Images attached to the instruction."""
        return self._images

    @property
    def audio(self) -> list[Any] | None:
        """Audio attached to the instruction."""
        return self._audio

    @property
    def text(self) -> str:
        """The user message this instruction becomes."""
        if self._text is None:
            self._text = render_instruction(
                self._description,
                self._requirements,
                self._user_variables,
                self._grounding_context,
                self._icl_examples,
                self._prefix,
            )
        return self._text

    def parts(self) -> list[Span]:
        """The description and the requirements' descriptions as blocks."""
        return [CBlock(self._description)] + [
            CBlock(r.description) for r in self._requirements if r.description
        ]

    def format_for_llm(self) -> str:
        """The rendered instruction."""
        return self.text

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""

    def __repr__(self) -> str:
        return f"Instruction({self._description!r})"


def render_instruction(
    description: str,
    requirements: list[Requirement],
    user_variables: dict[str, str] | None = None,
    grounding_context: dict[str, str] | None = None,
    icl_examples: list[str] | None = None,
    prefix: str | None = None,
) -> str:
    """The user message an instruction becomes."""
    parts = [substitute(description, user_variables or {})]
    shown = [t for r in requirements if not r.check_only and (t := _requirement_text(r))]
    if shown:
        parts.append("Requirements:\n" + "\n".join(f"- {d}" for d in shown))
    if grounding_context:
        parts.append("\n".join(f"[{k}]\n{v}" for k, v in grounding_context.items()))
    if icl_examples:
        parts.append("Examples:\n" + "\n".join(f"- {e}" for e in icl_examples))
    if prefix:
        parts.insert(0, prefix)
    return "\n\n".join(parts)


def _requirement_text(requirement: Requirement) -> str | None:
    """What the prompt shows of a requirement: its ``format_for_llm()`` (a subclass may
    override it), else its description."""
    rendered = requirement.format_for_llm() if hasattr(requirement, "format_for_llm") else None
    return rendered if isinstance(rendered, str) and rendered else requirement.description


def substitute(text: str, variables: dict[str, str]) -> str:
    """``text`` with each ``{{name}}`` (or ``{{ name }}``) replaced by its variable."""
    for key, value in variables.items():
        text = text.replace("{{" + key + "}}", str(value)).replace("{{ " + key + " }}", str(value))
    return text
