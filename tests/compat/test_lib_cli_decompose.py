"""``cli.decompose.pipeline`` and ``cli.alora.readme_generator`` run their stages through a session.

A scripted backend stands in for the model, so each test knows every reply and can
check what the pipeline made of it and what it asked.
"""

from __future__ import annotations

import inspect
import json

import pytest

import mellea
from cli.alora import readme_generator
from cli.decompose import pipeline
from cli.decompose.pipeline import DecompBackend, decompose
from cli.decompose.prompts import DecompParseError
from mellea import MelleaSession
from tests.compat.lib_scripted import ScriptedBackend

TASK = "Write an upbeat blog post about {{ topic }} with a title, under 200 words."

REPLIES = [
    "<subtask_list>\n1. Write a title - Variable: title\n2. Write the post - Variable: post\n</subtask_list>",
    "<constraints_and_requirements>\n- The post must be under 200 words\n- The tone must be upbeat\n"
    "</constraints_and_requirements>",
    "<validation_decision>code</validation_decision>",
    "```python\ndef validate_input(answer: str) -> bool:\n    return len(answer.split()) < 200\n```",
    "I would say <validation_decision>llm</validation_decision>",
    "<prompt_template>Write a catchy title about {{ topic }}.</prompt_template>",
    "<prompt_template>Write a post about {{ topic }} titled {{ title }}, "
    "again {{ topic }}.</prompt_template>",
    "<assigned_constraints>\n- The tone must be upbeat\n</assigned_constraints>",
    "<assigned_constraints>\n- the post must be under 200 words.\n- The tone must be upbeat\n"
    "- Something the model invented\n</assigned_constraints>",
    "<general_instructions>Be catchy.</general_instructions>",
    "<general_instructions>Keep it upbeat.</general_instructions>",
]


def _scripted(monkeypatch, replies: list[str]) -> tuple[ScriptedBackend, list]:
    backend = ScriptedBackend(replies)
    asked: list = []

    def session(*args, **kwargs):
        asked.append((args, kwargs))
        return MelleaSession(backend)

    monkeypatch.setattr(pipeline, "build_backend_session", session)
    return backend, asked


def _prompt(call: dict) -> str:
    return " ".join(
        str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in call["messages"]
    )


def test_decompose_builds_subtasks_constraints_and_dependencies(monkeypatch):
    backend, _ = _scripted(monkeypatch, REPLIES)
    result = decompose(TASK, user_input_variable=["topic"])

    assert result["original_task_prompt"] == TASK
    assert result["subtask_list"] == ["1. Write a title", "2. Write the post"]
    assert [c["constraint"] for c in result["identified_constraints"]] == [
        "The post must be under 200 words",
        "The tone must be upbeat",
    ]
    first, second = result["identified_constraints"]
    assert (first["val_strategy"], first["val_fn_name"]) == ("code", "val_fn_1")
    assert (
        "def validate_input" in first["val_fn"]
        and "return len(answer.split()) < 200" in first["val_fn"]
    )
    assert (second["val_strategy"], second["val_fn"], second["val_fn_name"]) == (
        "llm",
        None,
        "val_fn_2",
    )

    title, post = result["subtasks"]
    assert (title["tag"], title["input_vars_required"], title["depends_on"]) == (
        "title",
        ["topic"],
        [],
    )
    assert (post["input_vars_required"], post["depends_on"]) == (["topic"], ["title"])
    assert [c["val_fn_name"] for c in title["constraints"]] == ["val_fn_2"]
    # matched without case or end dot; the invented one is dropped
    assert [c["constraint"] for c in post["constraints"]] == [
        c["constraint"] for c in (first, second)
    ]
    assert post["general_instructions"] == "Keep it upbeat."
    assert "{{ title }}" in post["prompt_template"]
    assert len(backend.calls) == len(REPLIES)
    json.dumps(result)  # the result is plain data, as upstream's example saves it


def test_decompose_asks_with_the_task_and_the_variables_available(monkeypatch):
    backend, asked = _scripted(monkeypatch, REPLIES)
    decompose(TASK, user_input_variable=["topic"], model_id="m1", backend=DecompBackend.ollama)
    assert asked[0][0][:2] == ("m1", DecompBackend.ollama)
    assert TASK in _prompt(backend.calls[0])
    # the second subtask's template prompt offers the first subtask's tag
    assert "{{ topic }}, {{ title }}" in _prompt(backend.calls[6])
    assert "- The tone must be upbeat" in _prompt(backend.calls[7])


def test_a_constraint_neither_code_nor_llm_falls_back_to_llm(monkeypatch):
    replies = [
        REPLIES[0],
        "<constraints_and_requirements>\n- Mention the weather\n</constraints_and_requirements>",
        "<validation_decision>maybe</validation_decision>",
        "<prompt_template>A</prompt_template>",
        "<prompt_template>B</prompt_template>",
        "<assigned_constraints>N/A</assigned_constraints>",
        "<assigned_constraints>N/A</assigned_constraints>",
        "<general_instructions>x</general_instructions>",
    ]
    backend, _ = _scripted(monkeypatch, replies)
    result = decompose(TASK)
    assert result["identified_constraints"][0]["val_strategy"] == "llm"
    assert result["identified_constraints"][0]["val_fn"] is None
    assert [s["constraints"] for s in result["subtasks"]] == [[], []]
    assert len(backend.calls) == len(replies) + 1  # the last reply served both instructions


def test_a_reply_without_subtasks_raises_a_parse_error(monkeypatch):
    _scripted(monkeypatch, ["I cannot split this task."])
    with pytest.raises(DecompParseError, match="subtask_list"):
        decompose(TASK)


def test_defaults_are_upstreams_but_the_backend_is_our_bundled_model():
    assert {"ollama", "openai"} <= {b.value for b in DecompBackend}
    params = inspect.signature(decompose).parameters
    assert params["backend"].default is DecompBackend.local
    assert params["model_id"].default is None
    assert params["backend_req_timeout"].default == 300
    assert params["user_input_variable"].default is None


def test_build_backend_session_names_the_backend_and_model(monkeypatch):
    started: list = []
    monkeypatch.setattr(
        mellea, "start_session", lambda *a, **k: started.append((a, k)) or "session"
    )
    assert pipeline.build_backend_session() == "session"
    pipeline.build_backend_session(backend=DecompBackend.ollama)
    pipeline.build_backend_session(
        "gpt", DecompBackend.openai, 30, backend_endpoint="http://h/v1", backend_api_key="k"
    )
    assert started[0][0] == ("local", None)
    assert started[1][0] == ("ollama", pipeline.UPSTREAM_MODEL_ID)
    assert started[2] == (
        ("openai", "gpt"),
        {"base_url": "http://h/v1", "api_key": "k", "model_options": {"timeout": 30}},
    )
    with pytest.raises(AssertionError, match="backend_endpoint"):
        pipeline.build_backend_session(backend=DecompBackend.openai)


# -- README generation ---------------------------------------------------------------


def _readme_fields(**overrides) -> str:
    fields = {
        "high_level_description": "Flags stembolts likely to fail.",
        "dataset_description": "Inspection notes with a failure label.",
        "userid": "acme",
        "intrinsic_name": "stembolts",
        "intrinsic_name_camelcase": "Stembolts",
        "arglist": "part: str, notes: str",
        "arglist_without_type_annotations": "part, notes",
    }
    return json.dumps({**fields, **overrides})


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [
        {"item": {"part": f"bolt-{i}", "notes": "rusty"}, "label": "fail" if i % 2 else "ok"}
        for i in range(7)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_readme_vars_come_from_the_model_and_the_data(dataset):
    # the first reply names the wrong user: rejection sampling asks again
    backend = ScriptedBackend([_readme_fields(userid="someone"), _readme_fields()])
    values = readme_generator.make_readme_jinja_dict(
        MelleaSession(backend), str(dataset), "granite-4.1-3b", "", "acme/stembolts", "hints here"
    )
    assert len(backend.calls) == 2
    assert "hints here" in _prompt(backend.calls[0])
    assert "['part', 'notes']" in _prompt(backend.calls[0])
    assert values["userid"] == "acme" and values["adapter_name"] == "stembolts"
    assert len(values["samples"]) == 5
    assert values["samples"][1] == {
        "input": json.dumps({"part": "bolt-1", "notes": "rusty"}),
        "output": "fail",
    }
    assert values["arglist_as_kwargs"] == "part=part, notes=notes"
    assert values["example_call_kwargs"] == "part='bolt-0', notes='rusty'"
    assert values["base_model"] == "granite-4.1-3b"


def test_generate_readme_writes_the_rendered_readme(dataset, tmp_path, monkeypatch):
    backend = ScriptedBackend([_readme_fields()])
    monkeypatch.setattr(readme_generator, "start_session", lambda: MelleaSession(backend))
    out = tmp_path / "README.md"
    assert readme_generator.generate_readme(
        str(dataset), "granite-4.1-3b", None, str(out), "acme/stembolts", None
    ) == str(out)
    text = out.read_text()
    assert "base_model: granite-4.1-3b" in text
    assert "# stembolts: an intrinsic adapter" in text
    assert "class StemboltsAdapter(CustomIntrinsicAdapter):" in text
    assert "def stembolts(part: str, notes: str, ctx: Context" in text
    assert "stembolts(part='bolt-0', notes='rusty', ctx=ChatContext()" in text
    assert "- fail" in text and "Flags stembolts likely to fail." in text
