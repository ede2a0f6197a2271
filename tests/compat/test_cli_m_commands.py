"""``m decompose run`` and ``m alora train/upload/add-readme``, through the real command line (typer's runner)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mellea
from cli.alora import upload
from cli.decompose import pipeline
from cli.main import app
from mellea import MelleaSession
from tests.compat.lib_scripted import ScriptedBackend
from tests.compat.test_lib_cli_decompose import REPLIES, TASK

runner = CliRunner()


def _scripted_pipeline(monkeypatch: pytest.MonkeyPatch, replies: list[str]) -> ScriptedBackend:
    backend = ScriptedBackend(replies)
    monkeypatch.setattr(pipeline, "build_backend_session", lambda *a, **k: MelleaSession(backend))
    return backend


def _decompose(tmp_path: Path, *extra: str) -> object:
    tasks = tmp_path / "tasks.txt"
    if not tasks.exists():
        tasks.write_text(TASK + "\n")
    return runner.invoke(
        app,
        ["decompose", "run", "--out-dir", str(tmp_path), "--input-file", str(tasks), *extra],
    )


def test_m_lists_the_decompose_and_alora_groups() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "decompose" in result.output and "alora" in result.output
    for group, commands in (("decompose", ["run"]), ("alora", ["train", "upload", "add-readme"])):
        shown = runner.invoke(app, [group, "--help"]).output
        assert all(c in shown for c in commands), shown


def test_decompose_run_writes_the_json_the_validations_and_a_program_that_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _scripted_pipeline(monkeypatch, REPLIES)
    result = _decompose(tmp_path, "--input-var", "topic", "--out-name", "blog")
    assert result.exit_code == 0, result.output
    out = tmp_path / "blog"
    data = json.loads((out / "blog.json").read_text())
    assert data["original_task_prompt"] == TASK
    assert [s["tag"] for s in data["subtasks"]] == ["title", "post"]
    assert "def validate_input" in (out / "validations" / "val_fn_1.py").read_text()
    assert not (out / "validations" / "val_fn_2.py").exists()  # judged by the model

    # Run the written program on a scripted model: each subtask's template is filled
    # from the user's input and the earlier subtask's result.
    program_backend = ScriptedBackend(["Sunny Days", "yes", "A short upbeat post.", "yes"])
    monkeypatch.setattr(mellea, "start_session", lambda *a, **k: MelleaSession(program_backend))
    monkeypatch.setenv("TOPIC", "gardening")
    monkeypatch.syspath_prepend(str(out))
    monkeypatch.delitem(sys.modules, "validations", raising=False)
    runpy.run_path(str(out / "blog.py"), run_name="__main__")
    asked = [c["messages"][-1]["content"] for c in program_backend.calls]
    subtasks = [a for a in asked if "satisfy the requirement" not in a]
    assert len(subtasks) == 2  # every requirement passed at once: no retry
    assert "Write a catchy title about gardening." in subtasks[0]
    assert "Write a post about gardening titled Sunny Days" in subtasks[1]  # (the stand-in
    assert "again gardening." in subtasks[1]  # model ends each word with a space)
    judged = [a for a in asked if "satisfy the requirement" in a]
    # the upbeat tone is judged by the model on both; the word count is checked by code
    assert len(judged) == 2 and all("upbeat" in a for a in judged)


# -- m alora -------------------------------------------------------------------


def _adapter_dir(tmp_path: Path, alora: bool = True) -> Path:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    config = {"base_model_name_or_path": "ibm-granite/granite-3.3-2b-instruct"}
    if alora:
        config["alora_invocation_tokens"] = [1, 2]
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    return adapter


def test_alora_train_says_what_is_missing(tmp_path: Path) -> None:
    no_data = runner.invoke(
        app,
        ["alora", "train", str(tmp_path / "x.jsonl"), "--basemodel", "default", "--outfile", "o"],
    )
    assert no_data.exit_code == 1 and "no dataset file" in no_data.output
    data = tmp_path / "data.jsonl"
    data.write_text('{"item": "a", "label": "b"}\n')
    no_model = runner.invoke(
        app, ["alora", "train", str(data), "--basemodel", str(tmp_path / "none"), "--outfile", "o"]
    )
    assert no_model.exit_code == 1 and "no model hub access" in no_model.output
    bad_row = tmp_path / "bad.jsonl"
    bad_row.write_text('{"item": "a"}\n')
    missing_label = runner.invoke(
        app, ["alora", "train", str(bad_row), "--basemodel", "default", "--outfile", "o"]
    )
    assert missing_label.exit_code == 1 and "needs an item and a label" in missing_label.output


def test_alora_upload_without_a_token_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)  # nobody logged in
    adapter = _adapter_dir(tmp_path)
    result = runner.invoke(app, ["alora", "upload", str(adapter), "--name", "acme/check"])
    assert result.exit_code == 1 and "no Hugging Face token" in result.output
    not_adapter = runner.invoke(app, ["alora", "upload", str(tmp_path), "--name", "acme/check"])
    assert not_adapter.exit_code == 1 and "not an adapter directory" in not_adapter.output
    no_yaml = runner.invoke(
        app, ["alora", "upload", str(adapter), "--name", "acme/check", "--intrinsic"]
    )
    assert no_yaml.exit_code == 2 and "--io-yaml" in no_yaml.output


def test_an_intrinsic_goes_under_its_name_base_model_and_type(tmp_path: Path) -> None:
    assert upload.adapter_info(_adapter_dir(tmp_path)) == (
        "ibm-granite/granite-3.3-2b-instruct",
        "alora",
    )
    assert (
        upload.intrinsic_path("acme/carbchecker", "ibm-granite/granite-3.3-2b-instruct", "alora")
        == "carbchecker/granite-3.3-2b-instruct/alora"
    )
    with pytest.raises(upload.UploadError, match="owner"):
        upload.intrinsic_path("carbchecker", "m", "lora")


@pytest.mark.model
def test_alora_train_trains_an_adapter_on_the_bundled_model(tmp_path: Path) -> None:
    pytest.importorskip("peft", reason="m alora train needs peft")
    data = tmp_path / "data.jsonl"
    rows = [("The bolt is rusty.", "fail"), ("The bolt is clean.", "pass")] * 3
    data.write_text("".join(json.dumps({"item": i, "label": lab}) + "\n" for i, lab in rows))
    out = tmp_path / "adapter"
    result = runner.invoke(
        app,
        [
            "alora", "train", str(data), "--basemodel", "default", "--outfile", str(out),
            "--epochs", "1", "--grad-accum", "1", "--device", "cpu",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "validation loss" in result.output
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["alora_invocation_tokens"] and config["r"] == 32
    assert (out / "adapter_model.safetensors").stat().st_size > 0
    assert not (out / "README.md").exists()
