"""The adapter surface: catalog, finding adapters on disk, adding them to a backend,
the request an io.yaml makes and the result its transformations read."""

from __future__ import annotations

import json
import os

import pytest

from mellea.backends.adapters import (
    AdapterLoadUnsupportedError,
    AdapterNotFoundError,
    AdapterType,
    CustomIntrinsicAdapter,
    EmbeddedIntrinsicAdapter,
    IntrinsicAdapter,
    IOConfigError,
    fetch_intrinsic_metadata,
    known_intrinsic_names,
)
from mellea.backends.adapters import backend as adapter_backend
from mellea.backends.adapters.io import build_request, read_io_config
from mellea.backends.adapters.locate import adapters_dirs, find_adapter_dir
from mellea.backends.adapters.results import parse_with_positions, process_output
from mellea.core.model_options import ModelOption
from tests.adapter_support import (
    ANSWERABILITY_IO,
    CITATIONS_IO,
    CORE_REPO,
    NO_TOKENS,
    REQUIREMENT_CHECK_IO,
    UPSTREAM_NO_SCORE,
    FakeAdapterBackend,
    adapters_tree,
    logprobs_of,
    write_adapter,
)


@pytest.fixture
def adapters_dir(tmp_path, monkeypatch):
    root = adapters_tree(tmp_path / "adapters")
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(root))
    return root


def test_catalog_names_upstreams_adapter_functions():
    names = known_intrinsic_names()
    for name in ("requirement-check", "uncertainty", "answerability", "citations", "guardian-core"):
        assert name in names
    entry = fetch_intrinsic_metadata("requirement-check")
    assert entry.repo_id == CORE_REPO and len(entry.revision) == 40
    assert entry.effective_capability == "requirement_check"
    with pytest.raises(ValueError, match="Valid names are"):
        fetch_intrinsic_metadata("no-such-function")


def test_a_catalog_adapter_is_found_in_the_hub_layout(adapters_dir):
    entry = fetch_intrinsic_metadata("requirement-check")
    found = find_adapter_dir(entry, "ibm-granite/granite-4.1-3b", alora=True)
    assert found == adapters_dir / CORE_REPO / "requirement-check/granite-4.1-3b/alora"


def test_the_dir_may_hold_the_repository_tree_itself_and_list_several_roots(tmp_path, monkeypatch):
    empty, repo_root = tmp_path / "empty", tmp_path / "repo"
    empty.mkdir()
    write_adapter(repo_root, "", "requirement-check", "lora", REQUIREMENT_CHECK_IO)
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", f"{empty}{os.pathsep}{repo_root}")
    assert adapters_dirs() == [empty, repo_root]
    entry = fetch_intrinsic_metadata("requirement-check")
    assert find_adapter_dir(entry, "granite-4.1-3b", alora=False) == (
        repo_root / "requirement-check/granite-4.1-3b/lora"
    )


def test_a_missing_adapter_names_what_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(tmp_path))
    with pytest.raises(AdapterNotFoundError) as caught:
        IntrinsicAdapter("answerability", base_model_name="ibm-granite/granite-4.1-3b")
    message = str(caught.value)
    assert "ibm-granite/granitelib-rag-r1.0" in message
    assert fetch_intrinsic_metadata("answerability").revision in message
    assert "answerability/granite-4.1-3b/alora" in message
    assert "huggingface-cli download" in message and "MELLEA_ADAPTERS_DIR" in message


def test_adding_an_adapter_loads_it_into_the_backend_once(adapters_dir):
    backend = FakeAdapterBackend()
    adapter = IntrinsicAdapter("requirement-check", base_model_name=backend.model_id)
    assert adapter.qualified_name == "requirement-check_alora"
    adapter_backend.add_adapter(backend, adapter)
    adapter_backend.add_adapter(backend, adapter)  # again: nothing new
    path = adapters_dir / CORE_REPO / "requirement-check/granite-4.1-3b/alora"
    assert backend.loaded == {"requirement-check_alora": str(path)}
    assert adapter_backend.list_adapters(backend) == ["requirement-check_alora"]
    assert adapter.backend is backend and adapter.path == str(path)
    with pytest.raises(ValueError, match="another backend"):
        adapter_backend.add_adapter(FakeAdapterBackend(), adapter)


def test_a_backend_that_cannot_load_adapters_says_so(adapters_dir):
    backend = FakeAdapterBackend(can_load=False)
    adapter = IntrinsicAdapter("requirement-check", base_model_name=backend.model_id)
    with pytest.raises(AdapterLoadUnsupportedError, match="cannot load LoRA adapters"):
        adapter_backend.add_adapter(backend, adapter)
    assert adapter_backend.list_adapters(backend) == []


def test_resolve_adds_the_catalog_alora_on_first_use(adapters_dir):
    backend = FakeAdapterBackend()
    adapter = adapter_backend.resolve_adapter(backend, "answerability")
    assert adapter.adapter_type is AdapterType.ALORA
    assert adapter_backend.resolve_adapter(backend, "answerability") is adapter
    assert list(backend.loaded) == ["answerability_alora"]


def test_a_custom_adapter_joins_the_catalog(tmp_path, monkeypatch):
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(tmp_path))
    io = dict(ANSWERABILITY_IO)
    directory = tmp_path / "someone/stembolts/stembolts/granite-3.3-2b-instruct/alora"
    directory.mkdir(parents=True)
    import yaml

    (directory / "io.yaml").write_text(yaml.safe_dump(io))
    adapter = CustomIntrinsicAdapter(
        model_id="someone/stembolts", base_model_name="granite-3.3-2b-instruct"
    )
    assert adapter.intrinsic_name == "stembolts" and "stembolts" in known_intrinsic_names()
    assert fetch_intrinsic_metadata("stembolts").repo_id == "someone/stembolts"


def test_embedded_adapters_come_from_a_switch_model_directory(tmp_path):
    import yaml

    (tmp_path / "io_configs/answerability").mkdir(parents=True)
    (tmp_path / "io_configs/answerability/io.yaml").write_text(yaml.safe_dump(ANSWERABILITY_IO))
    index = {"adapters": [{"adapter_name": "answerability", "io_config": "io_configs/answerability/io.yaml", "technology": "alora"}]}  # fmt: skip
    (tmp_path / "adapter_index.json").write_text(json.dumps(index))
    (adapter,) = EmbeddedIntrinsicAdapter.from_model_directory(tmp_path)
    assert adapter.qualified_name == "answerability_alora"
    assert adapter.config["response_format"]["enum"] == ["answerable", "unanswerable"]
    with pytest.raises(ValueError, match="No adapters found"):
        EmbeddedIntrinsicAdapter.from_model_directory(tmp_path, intrinsic_name="citations")
    with pytest.raises(TypeError, match="OpenAIBackend"):
        adapter_backend.add_adapter(FakeAdapterBackend(), adapter)


def test_the_request_follows_the_io_yaml():
    config = read_io_config(config_dict=REQUIREMENT_CHECK_IO)
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    request = build_request(config, messages, [], {"requirement": "Be polite."})
    assert request.messages[:2] == messages
    instruction = request.messages[-1]
    assert instruction["role"] == "user"
    assert instruction["content"].startswith("<requirements>: Be polite.\nPlease verify")
    assert '{"score": "yes"}' in instruction["content"]  # the template's {{ }} unescaped
    options = request.model_options
    assert options[ModelOption.MAX_NEW_TOKENS] == 15
    assert options["logprobs"] is True and options["top_logprobs"] == 10
    schema = options["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["score"]["enum"] == ["yes", "no"]
    with pytest.raises(IOConfigError, match="requirement"):
        build_request(config, messages, [], {})


def test_documents_can_become_a_first_message():
    config = read_io_config(config_dict={**ANSWERABILITY_IO, "docs_as_message": "string"})
    docs = [{"doc_id": "1", "text": "The sky is blue."}]
    request = build_request(config, [{"role": "user", "content": "Sky?"}], docs)
    assert request.messages[0]["content"].endswith("[Document 1]\nThe sky is blue.")
    assert request.documents == [] and request.messages[1]["content"] == "Sky?"


def test_unknown_io_yaml_fields_are_refused():
    with pytest.raises(IOConfigError, match="unknown field"):
        read_io_config(config_dict={**ANSWERABILITY_IO, "surprise": 1})


def test_sentences_are_marked_and_decoded_back_to_offsets():
    pytest.importorskip("nltk")
    config = read_io_config(config_dict=CITATIONS_IO)
    messages = [
        {"role": "user", "content": "Which fish are yellow?"},
        {"role": "assistant", "content": "Bumble fish are yellow. Cod are grey."},
    ]
    docs = [
        {"doc_id": "a", "text": "Cod are grey fish. They swim."},
        {"doc_id": "b", "text": "Bumble fish are yellow."},
    ]
    request = build_request(config, messages, docs)
    assert request.messages[1]["content"] == "<r0> Bumble fish are yellow. <r1> Cod are grey."
    assert [d["text"] for d in request.documents] == [
        "<c0> Cod are grey fish. <c1> They swim.",
        "<c2> Bumble fish are yellow.",
    ]
    assert request.messages[-1]["content"].startswith("Split the last assistant response")
    raw = '[{"r": 0, "c": [2, 2]}, {"r": 1, "c": [0]}, {"r": 1, "c": []}]'
    assert json.loads(process_output(config, raw, None, request)) == [
        {
            "response_begin": 0,
            "response_end": 24,
            "response_text": "Bumble fish are yellow. ",
            "citation_doc_id": "b",
            "citation_begin": 0,
            "citation_end": 23,
            "citation_text": "Bumble fish are yellow.",
        },
        {
            "response_begin": 24,
            "response_end": 37,
            "response_text": "Cod are grey.",
            "citation_doc_id": "a",
            "citation_begin": 0,
            "citation_end": 19,
            "citation_text": "Cod are grey fish. ",
        },
    ]
    with pytest.raises(ValueError, match="no sentence 9"):
        process_output(config, '[{"r": 9, "c": [0]}]', None, request)


def test_history_sentences_share_the_documents_numbering():
    pytest.importorskip("nltk")
    boundaries = {"last_message": "r", "documents": "c", "all_but_last_message": "c"}
    config = read_io_config(
        config_dict={
            "model": None,
            "response_format": None,
            "transformations": None,
            "sentence_boundaries": boundaries,
        }
    )
    messages = [
        {"role": "user", "content": "Hi. Who won?"},
        {"role": "assistant", "content": "Team A won."},
    ]
    request = build_request(config, messages, [{"doc_id": "0", "text": "A won. B lost."}])
    assert request.documents[0]["text"] == "<c0> A won. <c1> B lost."
    assert request.messages[0]["content"] == "<c2> Hi. <c3> Who won?"
    assert request.messages[1]["content"] == "<r0> Team A won."


def test_merge_spans_joins_touching_spans_of_a_group():
    rule = {
        "type": "merge_spans",
        "input_path": [],
        "group_fields": ["doc"],
        "begin_field": "b",
        "end_field": "e",
        "text_field": "t",
    }
    raw = json.dumps(
        [
            {"doc": "x", "b": 5, "e": 9, "t": "cd"},
            {"doc": "x", "b": 0, "e": 5, "t": "ab"},
            {"doc": "y", "b": 9, "e": 12, "t": "z"},
            {"doc": "x", "b": 10, "e": 12, "t": "ef"},
        ]
    )
    assert json.loads(process_output({"transformations": [rule]}, raw)) == [
        {"doc": "x", "b": 0, "e": 9, "t": "abcd"},
        {"doc": "x", "b": 10, "e": 12, "t": "ef"},
        {"doc": "y", "b": 9, "e": 12, "t": "z"},
    ]


def test_likelihood_decodes_upstreams_canned_output_to_its_score():
    config = read_io_config(config_dict=REQUIREMENT_CHECK_IO)
    result = json.loads(process_output(config, '{"score": "no"}', logprobs_of(NO_TOKENS)))
    assert result["requirement_check"]["score"] == pytest.approx(UPSTREAM_NO_SCORE, abs=1e-12)


def test_likelihood_without_logprobs_is_an_error():
    config = read_io_config(config_dict=REQUIREMENT_CHECK_IO)
    with pytest.raises(ValueError, match="log-probabilities"):
        process_output(config, '{"score": "no"}', None)


def test_record_transformations():
    rules = [
        {"type": "explode", "input_path": [], "target_field": "ids"},
        {"type": "drop_duplicates", "input_path": [], "target_fields": ["ids"]},
        {"type": "project", "input_path": [], "retained_fields": {"ids": "id", "text": "text"}},
    ]
    config = {"transformations": rules}
    raw = json.dumps([{"ids": [1, 2], "text": "a", "x": 0}, {"ids": [2], "text": "b", "x": 1}])
    assert json.loads(process_output(config, raw)) == [
        {"id": 1, "text": "a"},
        {"id": 2, "text": "b"},
    ]
    with pytest.raises(IOConfigError, match="'mystery' transformation"):
        process_output({"transformations": [{"type": "mystery"}]}, "[]")


def test_positions_of_literals():
    text = '{"a": [1, {"b": "yes"}], "c" : true}'
    value, literals = parse_with_positions(text)
    assert value == json.loads(text)
    assert literals[("a", 1, "b")] == ("yes", text.index('"yes"'))
    assert literals[("c",)] == (True, text.index("true"))
    with pytest.raises(ValueError):
        parse_with_positions('{"a": 1} extra')


def test_an_explicit_adapter_directory_needs_no_catalog_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(tmp_path / "elsewhere"))
    directory = write_adapter(tmp_path, "mine", "requirement-check", "alora", REQUIREMENT_CHECK_IO)
    backend = FakeAdapterBackend()
    adapter = IntrinsicAdapter("requirement-check", adapter_path=directory)
    adapter_backend.add_adapter(backend, adapter)
    assert backend.loaded == {"requirement-check_alora": str(directory)}
    with pytest.raises(AdapterNotFoundError, match="does not exist"):
        IntrinsicAdapter("requirement-check", adapter_path=tmp_path / "missing")


def test_the_local_backend_has_upstreams_adapter_methods(tmp_path):
    """``start_session()``'s backend takes ``add_adapter`` as upstream's HF backend does,
    and adding one loads it into the engine under its qualified name."""
    from mellea.backends.local import LocalBackend

    class RecordingEngine:
        model_id = "granite-4.1-3b"

        def __init__(self) -> None:
            self.loaded: dict[str, str] = {}

        def load_adapter(self, name: str, path: object) -> None:
            self.loaded[name] = str(path)

    engine = RecordingEngine()
    backend = LocalBackend(engine=engine)  # type: ignore[arg-type]
    directory = write_adapter(tmp_path, CORE_REPO, "answerability", "alora", ANSWERABILITY_IO)
    adapter = IntrinsicAdapter("answerability", adapter_path=directory)
    backend.add_adapter(adapter)
    assert engine.loaded == {adapter.qualified_name: str(directory)}
    assert backend.list_adapters() == [adapter.qualified_name]
