"""``m decompose run``: decompose task prompts and write each as JSON and a runnable program.

For each task (each non-empty line of ``--input-file``, or one typed at the prompt)
the decomposition pipeline (:mod:`cli.decompose.pipeline`) runs on the chosen
backend, and ``<out-dir>/<out-name>/`` receives ``<out-name>.json`` (the pipeline's
result), ``<out-name>.py`` (a mellea program that performs the subtasks in order,
:mod:`cli.decompose.program`) and ``validations/`` (one module per constraint
checked by code). A failure removes the directories this run created.
"""

from __future__ import annotations

import json
import keyword
import re
import shutil
from enum import StrEnum
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Annotated, Any

import typer

from ._types import DecompBackend, LogMode
from .utils import validate_filename


class DecompVersion(StrEnum):
    """Upstream's program-template versions; ``latest`` is the newest.

    Ours writes one program layout for every version (the choice is accepted and
    logged), since the generated program is ours, not upstream's template.
    """

    latest = "latest"
    v1 = "v1"
    v2 = "v2"
    v3 = "v3"


_NUMBERING = re.compile(r"^\d+\.\s+")


def reorder_subtasks(subtasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``subtasks`` in an order where each comes after those it ``depends_on``, renumbered.

    Tags compare without case; a dependency on an unknown tag is ignored here.
    Raises ``ValueError`` on a duplicate tag or a dependency cycle.
    """
    by_tag: dict[str, dict[str, Any]] = {}
    for subtask in subtasks:
        tag = subtask["tag"].lower()
        if tag in by_tag:
            raise ValueError(f'duplicate subtask tag "{tag}" (tags are compared without case)')
        by_tag[tag] = subtask
    graph = {
        tag: {d.lower() for d in s.get("depends_on") or [] if d.lower() in by_tag}
        for tag, s in by_tag.items()
    }
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        raise ValueError(f"the subtasks depend on each other in a cycle: {cycle.args[1]}") from None
    ordered = [by_tag[tag] for tag in order]
    for number, subtask in enumerate(ordered, start=1):
        subtask["subtask"] = _NUMBERING.sub(f"{number}. ", subtask["subtask"])
    return ordered


def verify_user_variables(
    decomp_data: dict[str, Any], input_var: list[str] | None
) -> dict[str, Any]:
    """Check every subtask's inputs were declared and its dependencies exist; reorder if needed.

    Raises ``ValueError`` naming the subtask and the missing input or tag.
    """
    inputs = {v.lower() for v in input_var or []}
    tags = {s["tag"].lower() for s in decomp_data["subtasks"]}
    for subtask in decomp_data["subtasks"]:
        for name in subtask.get("input_vars_required") or []:
            if name.lower() not in inputs:
                raise ValueError(
                    f'subtask "{subtask["tag"]}" needs the input variable "{name}", which '
                    f"--input-var did not declare (declared: {sorted(inputs) or 'none'})"
                )
        for dep in subtask.get("depends_on") or []:
            if dep.lower() not in tags:
                raise ValueError(
                    f'subtask "{subtask["tag"]}" depends on "{dep}", which is no subtask\'s tag '
                    f"(tags: {sorted(tags)})"
                )
    seen: set[str] = set()
    for subtask in decomp_data["subtasks"]:
        if any(d.lower() not in seen for d in subtask.get("depends_on") or []):
            decomp_data["subtasks"] = reorder_subtasks(decomp_data["subtasks"])
            break
        seen.add(subtask["tag"].lower())
    return decomp_data


def _task_jobs(input_file: str | None) -> list[str]:
    if input_file is None:
        typed = typer.prompt(
            "Task prompt to decompose (one line; write \\n for a line break)", type=str
        )
        return [typed.replace("\\n", "\n")]
    path = Path(input_file)
    if not path.is_file():
        raise typer.BadParameter(f"not a file: {path}", param_hint="--input-file")
    jobs = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not jobs:
        raise typer.BadParameter(
            f"{path} holds no task (every line is empty)", param_hint="--input-file"
        )
    return jobs


def run(
    out_dir: Annotated[
        Path, typer.Option(help="An existing directory to write each task's directory into.")
    ],
    out_name: Annotated[
        str, typer.Option(help="Name of the output directory and files (numbered per task).")
    ] = "m_decomp_result",
    input_file: Annotated[
        str | None,
        typer.Option(help="Text file of task prompts, one per line [default: ask for one]."),
    ] = None,
    model_id: Annotated[
        str | None,
        typer.Option(
            help="Model for every pipeline call [default: the bundled model for local, "
            "mistral-small3.2:latest for ollama/openai]."
        ),
    ] = None,
    backend: Annotated[
        DecompBackend,
        typer.Option(
            help="Where the model calls go: local, ollama or openai.", case_sensitive=False
        ),
    ] = DecompBackend.local,
    backend_req_timeout: Annotated[
        int, typer.Option(help="Timeout in seconds of each remote backend request.")
    ] = 300,
    backend_endpoint: Annotated[
        str | None, typer.Option(help="Base URL of the server (needed for openai).")
    ] = None,
    backend_api_key: Annotated[
        str | None, typer.Option(help="API key of the server (needed for openai).")
    ] = None,
    version: Annotated[
        DecompVersion,
        typer.Option(
            help="Upstream's program-template version (ours writes one layout).",
            case_sensitive=False,
        ),
    ] = DecompVersion.latest,
    input_var: Annotated[
        list[str] | None,
        typer.Option(help="A user input the task needs (a Python identifier); repeat for more."),
    ] = None,
    log_mode: Annotated[
        LogMode, typer.Option(help="Logging: demo or debug.", case_sensitive=False)
    ] = LogMode.demo,
    enable_script_run: Annotated[
        bool,
        typer.Option(
            help="Give the written program options to pick its backend, model and endpoint."
        ),
    ] = False,
) -> None:
    """Decompose task prompts into ordered subtasks and write each as JSON and a mellea program."""
    out_name = out_name.strip()
    if not validate_filename(out_name):
        raise typer.BadParameter(
            "use letters, digits, underscores, hyphens, periods and spaces", param_hint="--out-name"
        )
    if not out_dir.is_dir():
        raise typer.BadParameter(f"not an existing directory: {out_dir}", param_hint="--out-dir")
    for name in input_var or []:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise typer.BadParameter(
                f"{name!r} is not a Python identifier", param_hint="--input-var"
            )
    jobs = _task_jobs(input_file)
    inputs = list(input_var or []) if input_file is not None else []

    from .logging import configure_logging, get_logger, log_section
    from .pipeline import UPSTREAM_MODEL_ID, decompose

    configure_logging(log_mode)
    logger = get_logger("m_decompose.cli")
    if model_id is None and backend != DecompBackend.local:
        model_id = UPSTREAM_MODEL_ID
    log_section(logger, "m decompose run")
    logger.info(
        "backend %s, model %s, version %s", backend.value, model_id or "(bundled)", version.value
    )

    created: list[Path] = []
    try:
        for number, task_prompt in enumerate(jobs, start=1):
            name = out_name if len(jobs) == 1 else f"{out_name}_{number}"
            log_section(logger, f"task {number} of {len(jobs)}")
            result = decompose(
                task_prompt=task_prompt,
                user_input_variable=inputs,
                model_id=model_id,
                backend=backend,
                backend_req_timeout=backend_req_timeout,
                backend_endpoint=backend_endpoint,
                backend_api_key=backend_api_key,
                log_mode=log_mode,
            )
            target = out_dir / name
            target.mkdir(parents=True, exist_ok=False)
            created.append(target)
            _write_outputs(
                target, name, result, inputs, backend, model_id, backend_endpoint, enable_script_run
            )
            logger.info("written: %s", target / f"{name}.py")
    except BaseException:
        for target in reversed(created):
            shutil.rmtree(target, ignore_errors=True)
        raise


def _write_outputs(
    target: Path,
    name: str,
    result: dict[str, Any],
    inputs: list[str],
    backend: DecompBackend,
    model_id: str | None,
    endpoint: str | None,
    script_options: bool,
) -> None:
    from .program import render_program

    validations = target / "validations"
    validations.mkdir()
    (validations / "__init__.py").touch()
    for constraint in result["identified_constraints"]:
        if constraint.get("val_fn"):
            (validations / f"{constraint['val_fn_name']}.py").write_text(
                constraint["val_fn"] + "\n"
            )
    (target / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    program = render_program(
        result["original_task_prompt"],
        result["subtasks"],
        result["identified_constraints"],
        inputs,
        backend=backend.value,
        model_id=model_id,
        backend_endpoint=endpoint,
        enable_script_run=script_options,
    )
    (target / f"{name}.py").write_text(program)
