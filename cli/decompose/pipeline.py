"""``decompose``: turn a task prompt into subtasks, prompt templates and checked constraints.

Upstream's staged pipeline, with our own prompts (see ``prompts``): list the subtasks,
extract the task's constraints, choose for each constraint a check by code or by
model (writing the code where it is code), write a prompt template per subtask,
assign the constraints to the subtasks, and derive each subtask's general
instructions. Every call goes through one ``MelleaSession`` on the backend named.
"""

from __future__ import annotations

import re
from typing import Literal, NotRequired, TypedDict

from mellea import MelleaSession

from . import prompts
from ._types import DecompBackend as DecompBackend
from .logging import LogMode, configure_logging, get_logger, log_section
from .prompts import SubtaskItem, SubtaskPromptConstraintsItem, SubtaskPromptItem

UPSTREAM_MODEL_ID = "mistral-small3.2:latest"


class ConstraintValData(TypedDict):
    """How one constraint is checked: ``"code"`` (with ``val_fn`` source) or ``"llm"``."""

    val_strategy: Literal["code", "llm"]
    val_fn: str | None


class ConstraintResult(TypedDict):
    """A constraint, how it is checked, and the name its check function gets."""

    constraint: str
    val_strategy: Literal["code", "llm"]
    val_fn: str | None
    val_fn_name: str


class DecompSubtasksResult(TypedDict):
    """One subtask: its tag, constraints, prompt template, instructions and what it needs."""

    subtask: str
    tag: str
    constraints: list[ConstraintResult]
    prompt_template: str
    general_instructions: str
    input_vars_required: list[str]
    depends_on: list[str]
    generated_response: NotRequired[str]


class DecompPipelineResult(TypedDict):
    """What one decomposition run yields (``final_response`` is set only once run)."""

    original_task_prompt: str
    subtask_list: list[str]
    identified_constraints: list[ConstraintResult]
    subtasks: list[DecompSubtasksResult]
    final_response: NotRequired[str]


RE_JINJA_VAR = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def _dedupe_keep_order(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def build_backend_session(
    model_id: str | None = None,
    backend: DecompBackend = DecompBackend.local,
    backend_req_timeout: int = 300,
    backend_endpoint: str | None = None,
    backend_api_key: str | None = None,
    log_mode: LogMode = LogMode.demo,
) -> MelleaSession:
    """A session on ``backend``; ``model_id=None`` means the bundled model locally, upstream's default otherwise.

    ``openai`` needs ``backend_endpoint`` and ``backend_api_key`` (an ``AssertionError``
    otherwise, as upstream).
    """
    from mellea import start_session

    logger = get_logger("m_decompose.backend")
    log_section(logger, "backend")
    backend = DecompBackend(backend)
    if model_id is None and backend != DecompBackend.local:
        model_id = UPSTREAM_MODEL_ID
    logger.info("backend      : %s", backend.value)
    logger.info("model_id     : %s", model_id or "(bundled)")
    match backend:
        case DecompBackend.local:
            session = start_session("local", model_id)
        case DecompBackend.ollama:
            kwargs = {"base_url": backend_endpoint} if backend_endpoint else {}
            session = start_session("ollama", model_id, **kwargs)
        case DecompBackend.openai:
            assert backend_endpoint is not None, (
                'Required to provide "backend_endpoint" for this configuration'
            )
            assert backend_api_key is not None, (
                'Required to provide "backend_api_key" for this configuration'
            )
            session = start_session(
                "openai",
                model_id,
                base_url=backend_endpoint,
                api_key=backend_api_key,
                model_options={"timeout": backend_req_timeout},
            )
    logger.info("backend session ready")
    return session


def task_decompose(
    m_session: MelleaSession, task_prompt: str, log_mode: LogMode = LogMode.demo
) -> tuple[list[SubtaskItem], list[str]]:
    """The task's ordered subtasks and its constraints (two model calls)."""
    logger = get_logger("m_decompose.task_decompose")
    log_section(logger, "task_decompose")
    subtasks = prompts.parse_subtask_list(
        prompts.ask(m_session, prompts.subtask_list_prompt(task_prompt))
    )
    for i, item in enumerate(subtasks, start=1):
        logger.info("  [%02d] tag=%s | subtask=%s", i, item.tag, item.subtask)
    constraints = prompts.parse_constraints(
        prompts.ask(m_session, prompts.constraint_prompt(task_prompt))
    )
    logger.info("constraints found: %d", len(constraints))
    return subtasks, constraints


def constraint_validate(
    m_session: MelleaSession, task_constraints: list[str], log_mode: LogMode = LogMode.demo
) -> dict[str, ConstraintValData]:
    """For each constraint, ``"code"`` with a generated check function, or ``"llm"`` (the fallback)."""
    logger = get_logger("m_decompose.constraint_validate")
    log_section(logger, "constraint_validate")
    data: dict[str, ConstraintValData] = {}
    for constraint in task_constraints:
        decision = prompts.parse_validation_decision(
            prompts.ask(m_session, prompts.validation_decision_prompt(constraint))
        )
        strategy: Literal["code", "llm"] = decision or "llm"
        val_fn = None
        if strategy == "code":
            val_fn = prompts.parse_validation_code(
                prompts.ask(m_session, prompts.validation_code_prompt(constraint))
            )
        logger.info("  %s: %s", strategy, constraint)
        data[constraint] = {"val_strategy": strategy, "val_fn": val_fn}
    return data


def task_execute(
    m_session: MelleaSession,
    task_prompt: str,
    user_input_variable: list[str],
    subtasks: list[SubtaskItem],
    task_constraints: list[str],
    log_mode: LogMode = LogMode.demo,
) -> list[SubtaskPromptConstraintsItem]:
    """A prompt template per subtask, then the constraints each must meet (assignment tried twice)."""
    logger = get_logger("m_decompose.task_execute")
    log_section(logger, "task_execute")
    templated: list[SubtaskPromptItem] = []
    for item in subtasks:
        earlier = [t.tag for t in templated]
        prompt = prompts.subtask_prompt_prompt(task_prompt, item, user_input_variable, earlier)
        template = prompts.parse_prompt_template(prompts.ask(m_session, prompt))
        templated.append(SubtaskPromptItem(item.subtask, item.tag, template))
        logger.info("  template for %s", item.tag)
    result = []
    for item in templated:
        assigned: list[str] = []
        if task_constraints:
            last_exc: Exception | None = None
            for attempt in range(2):
                try:
                    prompt = prompts.constraint_assign_prompt(
                        item.subtask, item.prompt_template, task_constraints
                    )
                    assigned = prompts.parse_assigned_constraints(
                        prompts.ask(m_session, prompt), task_constraints
                    )
                    break
                except Exception as exc:  # a backend error gets one more try, as upstream's
                    last_exc = exc
                    logger.warning("constraint assignment attempt %d failed: %s", attempt + 1, exc)
            else:
                raise last_exc or RuntimeError("constraint assignment failed")
        result.append(
            SubtaskPromptConstraintsItem(item.subtask, item.tag, item.prompt_template, assigned)
        )
        logger.info("  [%s] constraints=%d", item.tag, len(assigned))
    return result


def finalize_result(
    m_session: MelleaSession,
    task_prompt: str,
    user_input_variable: list[str],
    subtasks: list[SubtaskItem],
    task_constraints: list[str],
    constraint_val_data: dict[str, ConstraintValData],
    subtask_prompts_with_constraints: list[SubtaskPromptConstraintsItem],
    log_mode: LogMode = LogMode.demo,
) -> DecompPipelineResult:
    """The ``DecompPipelineResult``: dependencies from each template's Jinja variables, check names, instructions."""
    logger = get_logger("m_decompose.finalize_result")
    log_section(logger, "finalize_result")

    def constraint_result(constraint: str) -> ConstraintResult:
        data = constraint_val_data[constraint]
        return {
            "constraint": constraint,
            "val_strategy": data["val_strategy"],
            "val_fn": data["val_fn"],
            "val_fn_name": f"val_fn_{task_constraints.index(constraint) + 1}",
        }

    subtask_results: list[DecompSubtasksResult] = []
    for item in subtask_prompts_with_constraints:
        names = RE_JINJA_VAR.findall(item.prompt_template)
        instructions = prompts.parse_general_instructions(
            prompts.ask(m_session, prompts.general_instructions_prompt(item.prompt_template))
        )
        subtask_results.append(
            DecompSubtasksResult(
                subtask=item.subtask,
                tag=item.tag,
                constraints=[constraint_result(c) for c in item.constraints],
                prompt_template=item.prompt_template,
                general_instructions=instructions,
                input_vars_required=_dedupe_keep_order(
                    [n for n in names if n in user_input_variable]
                ),
                depends_on=_dedupe_keep_order([n for n in names if n not in user_input_variable]),
            )
        )
    logger.info("subtasks: %d, constraints: %d", len(subtask_results), len(task_constraints))
    return DecompPipelineResult(
        original_task_prompt=task_prompt,
        subtask_list=[item.subtask for item in subtasks],
        identified_constraints=[constraint_result(c) for c in task_constraints],
        subtasks=subtask_results,
    )


def decompose(
    task_prompt: str,
    user_input_variable: list[str] | None = None,
    model_id: str | None = None,
    backend: DecompBackend = DecompBackend.local,
    backend_req_timeout: int = 300,
    backend_endpoint: str | None = None,
    backend_api_key: str | None = None,
    log_mode: LogMode = LogMode.demo,
) -> DecompPipelineResult:
    """Break ``task_prompt`` into subtasks with prompt templates and constraints, as upstream's ``decompose``.

    Upstream defaults to ``backend=ollama`` and ``model_id="mistral-small3.2:latest"``;
    ours defaults to the bundled local model (``backend=local``, ``model_id=None``).
    ``user_input_variable`` names the user inputs that templates may reference; every
    other Jinja variable in a template is taken as an earlier subtask's tag.
    """
    configure_logging(log_mode)
    log_section(get_logger("m_decompose.pipeline"), "m_decompose pipeline")
    inputs = list(user_input_variable or [])
    m_session = build_backend_session(
        model_id, backend, backend_req_timeout, backend_endpoint, backend_api_key, log_mode
    )
    subtasks, constraints = task_decompose(m_session, task_prompt, log_mode)
    val_data = constraint_validate(m_session, constraints, log_mode)
    assigned = task_execute(m_session, task_prompt, inputs, subtasks, constraints, log_mode)
    return finalize_result(
        m_session, task_prompt, inputs, subtasks, constraints, val_data, assigned, log_mode
    )
