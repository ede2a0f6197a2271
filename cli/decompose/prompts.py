"""The decompose pipeline's model calls: one prompt and one parser per stage.

Each stage asks for its answer between XML-style tags and parses what is inside;
where a model leaves the tags out, the whole reply is parsed instead. A reply that
still yields nothing usable raises ``DecompParseError`` naming the stage.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from mellea import MelleaSession


class DecompParseError(ValueError):
    """A stage's reply could not be parsed into what the stage needs."""


class SubtaskItem(NamedTuple):
    """One subtask and the tag (a variable name) its result is known by."""

    subtask: str
    tag: str


class SubtaskPromptItem(NamedTuple):
    """A subtask, its tag, and the Jinja prompt template that performs it."""

    subtask: str
    tag: str
    prompt_template: str


class SubtaskPromptConstraintsItem(NamedTuple):
    """A subtask with its prompt template and the task constraints that apply to it."""

    subtask: str
    tag: str
    prompt_template: str
    constraints: list[str]


RE_SUBTASK_LINE = re.compile(r"(.*?\S)\s*[-–:]?\s*Variable\s*:\s*(\w+)", flags=re.IGNORECASE)
RE_CODE_BLOCK = re.compile(r"```(?:python)?\s*\n(.*?)```", flags=re.DOTALL)
RE_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")
NONE_WORDS = {"", "n/a", "na", "none", "no constraints", "-"}


def ask(m_session: MelleaSession, prompt: str) -> str:
    """One model call with ``prompt`` as the instruction; the reply's text."""
    return str(m_session.instruct(prompt, strategy=None).value or "")


def between_tags(text: str, tag: str) -> str:
    """What lies between ``<tag>`` and ``</tag>`` in ``text`` (or, without the tags, all of it)."""
    match = re.search(rf"<{tag}>(.*?)(?:</{tag}>|$)", text, flags=re.IGNORECASE | re.DOTALL)
    return (match.group(1) if match else text).strip()


def list_lines(text: str) -> list[str]:
    """The non-empty lines of ``text`` with any bullet or number mark removed."""
    lines = [RE_LIST_MARK.sub("", line).strip() for line in text.splitlines()]
    return [line for line in lines if line.lower().strip(" .") not in NONE_WORDS]


# -- subtask list ---------------------------------------------------------------


def subtask_list_prompt(task_prompt: str) -> str:
    """The instruction that asks for the ordered subtasks of ``task_prompt``."""
    return (
        "Break the task below into a short ordered list of subtasks that, done in turn, "
        "complete it. Give each subtask a snake_case variable name for its result.\n"
        "Write the list inside <subtask_list></subtask_list> tags, one subtask per line, "
        "as: 1. <what to do> - Variable: <variable_name>\n\n"
        f"Task:\n{task_prompt}"
    )


def parse_subtask_list(reply: str) -> list[SubtaskItem]:
    """The ``SubtaskItem`` s in a subtask-list reply; ``DecompParseError`` when there are none."""
    items = []
    for line in between_tags(reply, "subtask_list").splitlines():
        match = RE_SUBTASK_LINE.match(line.strip())
        if match:
            items.append(SubtaskItem(match.group(1).strip(), match.group(2).strip()))
    if not items:
        raise DecompParseError("subtask_list: no line of the form '<subtask> - Variable: <name>'")
    return items


# -- constraints ----------------------------------------------------------------


def constraint_prompt(task_prompt: str) -> str:
    """The instruction that asks for the constraints and requirements stated in ``task_prompt``."""
    return (
        "List every constraint or requirement that the task below places on its answer "
        "(length, format, content, style). Write them inside "
        "<constraints_and_requirements></constraints_and_requirements> tags, one per line "
        "starting with '- '. Write N/A inside the tags if there are none.\n\n"
        f"Task:\n{task_prompt}"
    )


def parse_constraints(reply: str) -> list[str]:
    """The constraints in a constraint-extraction reply, in order, without duplicates."""
    return list(dict.fromkeys(list_lines(between_tags(reply, "constraints_and_requirements"))))


# -- validation strategy and code -------------------------------------------------


def validation_decision_prompt(constraint: str) -> str:
    """The instruction that asks whether ``constraint`` can be checked by code or needs a model."""
    return (
        "Can the requirement below be checked by a short deterministic Python function "
        "over the answer text (answer code), or does it need judgement (answer llm)? "
        "Answer with one word inside <validation_decision></validation_decision> tags.\n\n"
        f"Requirement: {constraint}"
    )


def parse_validation_decision(reply: str) -> Literal["code", "llm"] | None:
    """``"code"`` or ``"llm"`` from a decision reply, or ``None`` when it names neither."""
    words = re.findall(r"\b(code|llm)\b", between_tags(reply, "validation_decision").lower())
    if not words:
        return None
    return "code" if words[0] == "code" else "llm"


def validation_code_prompt(constraint: str) -> str:
    """The instruction that asks for a Python function that checks ``constraint``."""
    return (
        "Write a Python function `validate_input(answer: str) -> bool` that returns True "
        "when the answer meets the requirement below. Use only the standard library. "
        "Put the code in a ```python block.\n\n"
        f"Requirement: {constraint}"
    )


def parse_validation_code(reply: str) -> str:
    """The function source in a validation-code reply (a fenced block, or the whole reply)."""
    match = RE_CODE_BLOCK.search(reply)
    code = (match.group(1) if match else between_tags(reply, "validation_function")).strip()
    if "def " not in code:
        raise DecompParseError("validation_code: the reply holds no Python function")
    return code


# -- per-subtask prompt templates and constraint assignment -----------------------


def subtask_prompt_prompt(
    task_prompt: str, subtask: SubtaskItem, user_input_var_names: list[str], earlier_tags: list[str]
) -> str:
    """The instruction that asks for the prompt template that performs one subtask."""
    names = [*user_input_var_names, *earlier_tags]
    variables = ", ".join("{{ " + n + " }}" for n in names) or "(none)"
    return (
        "We are completing the overall task below one subtask at a time. Write the prompt "
        "that a language model should be given to perform the current subtask. Where the "
        "prompt needs the user's input or an earlier subtask's result, write its Jinja "
        f"variable; the variables available are: {variables}.\n"
        "Write the prompt inside <prompt_template></prompt_template> tags.\n\n"
        f"Overall task:\n{task_prompt}\n\nCurrent subtask: {subtask.subtask}"
    )


def parse_prompt_template(reply: str) -> str:
    """The prompt template in a subtask-prompt reply."""
    template = between_tags(reply, "prompt_template")
    if not template:
        raise DecompParseError("subtask_prompt: the reply is empty")
    return template


def constraint_assign_prompt(subtask: str, prompt_template: str, constraints: list[str]) -> str:
    """The instruction that asks which of ``constraints`` the subtask must satisfy."""
    listed = "\n".join(f"- {c}" for c in constraints)
    return (
        "Here are the constraints of an overall task:\n"
        f"{listed}\n\n"
        "Copy, word for word, the ones that the subtask below must satisfy, inside "
        "<assigned_constraints></assigned_constraints> tags, one per line starting with "
        "'- '. Write N/A inside the tags if none applies.\n\n"
        f"Subtask: {subtask}\nIts prompt:\n{prompt_template}"
    )


def parse_assigned_constraints(reply: str, constraints: list[str]) -> list[str]:
    """The known ``constraints`` a constraint-assignment reply names (matched without case or end dots)."""

    def key(text: str) -> str:
        return " ".join(text.lower().strip(" .").split())

    known = {key(c): c for c in constraints}
    named = [
        known.get(key(line)) for line in list_lines(between_tags(reply, "assigned_constraints"))
    ]
    return list(dict.fromkeys(c for c in named if c is not None))


# -- general instructions ------------------------------------------------------------


def general_instructions_prompt(prompt_template: str) -> str:
    """The instruction that asks for the general guidance a prompt template implies."""
    return (
        "Read the prompt below and write the general instructions it implies for whoever "
        "answers it (tone, format, what to include or avoid), without repeating its data. "
        "Write them inside <general_instructions></general_instructions> tags.\n\n"
        f"Prompt:\n{prompt_template}"
    )


def parse_general_instructions(reply: str) -> str:
    """The general instructions in a reply."""
    return between_tags(reply, "general_instructions")
