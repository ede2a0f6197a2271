"""README generation for a trained intrinsic adapter, as upstream's ``m alora`` does it.

A model fills in the README's variables (description, names, the intrinsic's
argument list) from the first samples of the JSONL training data, under rejection
sampling with deterministic checks on the names and argument lists; the README is
then rendered from ``README_TEMPLATE.jinja``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mellea import MelleaSession, start_session
from mellea.stdlib.requirements.requirement import check, req, simple_validate
from mellea.stdlib.sampling import RejectionSamplingStrategy

SAMPLES_READ = 5
LOOP_BUDGET = 10
TEMPLATE = Path(__file__).with_name("README_TEMPLATE.jinja")


class ReadmeTemplateVars(BaseModel):
    """The README variables the model writes."""

    high_level_description: str
    dataset_description: str
    userid: str
    intrinsic_name: str
    intrinsic_name_camelcase: str
    arglist: str
    arglist_without_type_annotations: str


def _parses_as_arglist(code: str) -> bool:
    try:
        ast.parse(f"def f({code}):\n\tpass")
    except SyntaxError:
        return False
    return True


def _field_check(name: str, description: str, ok, why, *, in_prompt: bool = False):
    """A requirement on the parsed reply; ``in_prompt=False`` keeps it out of the prompt (a check)."""

    def validate(output: str) -> tuple[bool, str]:
        try:
            parsed = ReadmeTemplateVars.model_validate_json(output)
        except ValueError:
            return False, "the reply is not the JSON object asked for"
        return bool(ok(parsed)), why(parsed)

    make = req if in_prompt else check
    return make(description, validation_fn=simple_validate(validate))


def _make_requirements(name: str) -> list:
    """The checks upstream applies: names as given by ``name``, argument lists that parse."""
    userid, intrinsic = name.split("/")[0], name.split("/")[1]

    def squash(text: str) -> str:
        return text.replace("_", "").replace("-", "").lower()

    return [
        _field_check(
            "intrinsic_name",
            f"intrinsic_name must be '{intrinsic}'",
            lambda p: p.intrinsic_name == intrinsic,
            lambda p: f"intrinsic_name was '{p.intrinsic_name}', expected '{intrinsic}'",
        ),
        _field_check(
            "arglist",
            "arglist should not be enclosed in parens",
            lambda p: not (p.arglist.startswith("(") and p.arglist.endswith(")")),
            lambda p: "arglist was enclosed in parens.",
            in_prompt=True,
        ),
        _field_check(
            "userid",
            f"userid must be '{userid}'",
            lambda p: p.userid == userid,
            lambda p: f"userid was '{p.userid}', expected '{userid}'",
        ),
        _field_check(
            "camelcase",
            "intrinsic_name_camelcase must match intrinsic_name",
            lambda p: p.intrinsic_name_camelcase.lower() == squash(p.intrinsic_name),
            lambda p: f"'{p.intrinsic_name_camelcase}' doesn't match '{p.intrinsic_name}'",
        ),
        _field_check(
            "arglist_parses",
            "arglist must be a valid Python argument list",
            lambda p: _parses_as_arglist(p.arglist),
            lambda p: f"arglist '{p.arglist}' does not parse as valid Python",
        ),
        _field_check(
            "bare_arglist_parses",
            "arglist_without_type_annotations must be a valid Python argument list",
            lambda p: _parses_as_arglist(p.arglist_without_type_annotations),
            lambda p: f"'{p.arglist_without_type_annotations}' does not parse as valid Python",
        ),
    ]


def _item_as_dict(item: Any) -> dict[str, Any] | None:
    """A sample's ``item`` as a dict when it is one or is JSON text for one."""
    if isinstance(item, dict):
        return item
    if isinstance(item, str):
        try:
            parsed = json.loads(item)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _read_samples(dataset_path: str) -> list[dict[str, Any]]:
    samples = []
    with open(dataset_path) as f:
        for i, line in enumerate(f):
            if i >= SAMPLES_READ:
                break
            if line.strip():
                samples.append(json.loads(line))
    if not samples:
        raise ValueError(f"{dataset_path} holds no samples")
    return samples


def _instruction(
    samples: list[dict[str, Any]], base_model: str, prompt: str, name: str, hints: str | None
) -> str:
    keys = next(
        (list(d) for d in map(_item_as_dict, (s.get("item", "") for s in samples)) if d), None
    )
    if keys:
        arg_hint = (
            f"Each input item is a JSON object with the keys {keys}; make them the argument "
            f"list with str type hints, e.g. '{', '.join(f'{k}: str' for k in keys)}'."
        )
    else:
        arg_hint = (
            "Each input item is plain text; choose one descriptive argument name with a str "
            "type hint that says what the input is, e.g. 'description: str'."
        )
    userid, intrinsic = name.split("/")[0], name.split("/")[1]
    return "\n".join(
        [
            "Write the metadata for the README of an intrinsic adapter trained on the data below.",
            *([f"\nAbout the domain:\n{hints}"] if hints else []),
            "\nFirst samples of the training data (JSONL):",
            *(json.dumps(s) for s in samples),
            f"\nBase model: {base_model}",
            *([f"Prompt configuration: {prompt}"] if prompt else []),
            "",
            arg_hint,
            "",
            "The fields:",
            "- high_level_description: two or three sentences on what the adapter does",
            "- dataset_description: a short account of the training data and its format",
            f"- userid: exactly {userid}",
            f"- intrinsic_name: exactly {intrinsic}",
            "- intrinsic_name_camelcase: intrinsic_name in CamelCase, without underscores",
            "- arglist: the Python argument list, with type hints, of a function taking one input",
            "- arglist_without_type_annotations: the same list without type hints",
        ]
    )


def make_readme_jinja_dict(
    m: MelleaSession,
    dataset_path: str,
    base_model: str,
    prompt_file: str,
    name: str,
    hints: str | None,
) -> dict[str, Any]:
    """The README template's variables for the adapter ``name`` (``user/intrinsic``), written by ``m``.

    The model's fields (``ReadmeTemplateVars``) come from one ``instruct`` with
    rejection sampling (budget 10); ``adapter_name``, ``samples``,
    ``arglist_as_kwargs``, ``example_call_kwargs`` and ``base_model`` are computed.
    """
    samples = _read_samples(dataset_path)
    prompt = Path(prompt_file).read_text() if prompt_file else ""
    result = m.instruct(
        _instruction(samples, base_model, prompt, name, hints),
        requirements=_make_requirements(name),
        format=ReadmeTemplateVars,
        strategy=RejectionSamplingStrategy(loop_budget=LOOP_BUDGET),
    )
    values = ReadmeTemplateVars.model_validate_json(str(result)).model_dump()
    values["adapter_name"] = name.split("/")[-1]
    values["samples"] = [
        {
            "input": json.dumps(s["item"])
            if isinstance(s.get("item"), dict)
            else str(s.get("item", "")),
            "output": str(s.get("label", "")),
        }
        for s in samples
    ]
    tree = ast.parse(f"def f({values['arglist_without_type_annotations']}): pass")
    arg_names = [a.arg for a in tree.body[0].args.args]  # type: ignore[attr-defined]
    values["arglist_as_kwargs"] = ", ".join(f"{n}={n}" for n in arg_names)
    first = samples[0].get("item", "")
    first_dict = _item_as_dict(first)
    if first_dict is not None:
        values["example_call_kwargs"] = ", ".join(
            f"{n}={str(first_dict.get(n, ''))!r}" for n in arg_names
        )
    else:
        values["example_call_kwargs"] = f"{arg_names[0]}={str(first)!r}"
    values["base_model"] = base_model
    return values


def render_readme(template_vars: dict[str, Any]) -> str:
    """The README text for ``template_vars`` (as ``make_readme_jinja_dict`` returns them)."""
    from jinja2 import Environment, FileSystemLoader

    env = Environment(loader=FileSystemLoader(TEMPLATE.parent), autoescape=False)
    return env.get_template(TEMPLATE.name).render(**template_vars)


def generate_readme(
    dataset_path: str,
    base_model: str,
    prompt_file: str | None,
    output_path: str,
    name: str,
    hints: str | None,
) -> str:
    """Write the adapter's README to ``output_path`` and return that path.

    The variables are written by a model in a new ``start_session()``: upstream's
    default session is Ollama's, ours is the bundled local model.
    """
    m = start_session()
    try:
        values = make_readme_jinja_dict(m, dataset_path, base_model, prompt_file or "", name, hints)
        Path(output_path).write_text(render_readme(values))
        print(f"Generated INTRINSIC_README.md at {output_path}")
        return output_path
    finally:
        m.cleanup()
