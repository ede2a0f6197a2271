"""Upstream's newer adapter surface: the composed ``Adapter`` and its bindings, the
backend verbs and ``adapter_scope`` with the adapter-function hooks, and the Granite
intrinsic formatters (``mellea.formatters.granite``), checked against the library's own
adapter-call path and upstream's canned numbers."""

from __future__ import annotations

import importlib
import json
import pickle
import warnings
from typing import Any

import pytest

from mellea.backends.adapters import (
    KNOWN_CAPABILITIES,
    Adapter,
    AdapterNotFoundError,
    AdapterSchemaMismatchError,
    AdapterType,
    EmbeddedBinding,
    EmbeddedIntrinsicAdapter,
    Identity,
    IntrinsicAdapter,
    LocalFileBinding,
    ServerMediatedBinding,
    fetch_intrinsic_metadata,
)
from mellea.backends.adapters import backend as adapter_backend
from mellea.backends.adapters._core import _DictContract
from mellea.backends.adapters.io import build_request
from mellea.backends.adapters.results import process_output
from mellea.core.model_options import ModelOption
from mellea.formatters.granite import (
    ChatCompletion,
    ChatCompletionResponse,
    GraniteChatCompletion,
    IntrinsicsResultProcessor,
    IntrinsicsRewriter,
)
from mellea.formatters.granite.intrinsics import input as intrinsics_input
from mellea.formatters.granite.intrinsics import obtain_io_yaml, obtain_lora
from mellea.formatters.granite.intrinsics.output import NAME_TO_RULE, TokenToFloat
from mellea.plugins import HookType, hook, register, unregister
from tests.adapter_support import (
    CITATIONS_IO,
    CORE_REPO,
    NO_TOKENS,
    RAG_REPO,
    REQUIREMENT_CHECK_IO,
    UPSTREAM_NO_SCORE,
    FakeAdapterBackend,
    adapters_tree,
    logprobs_of,
)

# Every public name this work adds, at upstream's module path.
UPSTREAM_NAMES = {
    "mellea.backends.adapters": [
        "KNOWN_CAPABILITIES", "Adapter", "AdapterInput", "AdapterMixin",
        "AdapterSchemaMismatchError", "AdapterType", "EmbeddedBinding",
        "EmbeddedIntrinsicAdapter", "IOContract", "Identity", "IntrinsicAdapter",
        "LocalFileBinding", "LocalHFAdapter", "ServerMediatedBinding", "WeightsBinding",
        "fetch_intrinsic_metadata", "get_adapter_for_intrinsic", "validate_revision",
    ],
    "mellea.backends.adapters._core": [
        "Adapter", "AdapterSchemaMismatchError", "Identity", "IOContract", "WeightsBinding",
        "LocalFileBinding", "EmbeddedBinding", "ServerMediatedBinding",
    ],
    "mellea.backends.adapters.adapter": [
        "Adapter", "LocalHFAdapter", "IntrinsicAdapter", "EmbeddedIntrinsicAdapter",
        "CustomIntrinsicAdapter", "AdapterMixin", "AdapterInput", "get_adapter_for_intrinsic",
    ],
    "mellea.backends.adapters.capabilities": ["KNOWN_CAPABILITIES"],
    "mellea.stdlib.components.adapter_based_component": ["AdapterBasedComponent"],
    "mellea.formatters.chat_formatter": ["ChatFormatter"],
    "mellea.formatters.template_formatter": ["TemplateFormatter"],
    "mellea.formatters.granite": [
        "AssistantMessage", "ChatCompletion", "ChatCompletionResponse", "DocumentMessage",
        "GraniteChatCompletion", "IntrinsicsResultProcessor", "IntrinsicsRewriter",
        "UserMessage", "VLLMExtraBody",
    ],
    "mellea.formatters.granite.base.types": [
        "NoDefaultsMixin", "UserMessage", "DocumentMessage", "ToolCall", "AssistantMessage",
        "ToolResultMessage", "SystemMessage", "DeveloperMessage", "ChatMessage",
        "ToolDefinition", "Document", "ChatTemplateKwargs", "VLLMExtraBody", "ChatCompletion",
        "GraniteChatCompletion", "Logprob", "ChatCompletionLogProb",
        "ChatCompletionLogProbsContent", "ChatCompletionLogProbs",
        "ChatCompletionResponseChoice", "ChatCompletionResponse",
    ],
    "mellea.formatters.granite.base.io": [
        "InputProcessor", "OutputProcessor", "ChatCompletionRewriter",
        "ChatCompletionResultProcessor", "Retriever",
    ],
    "mellea.formatters.granite.base.optional": ["import_optional", "nltk_check"],
    "mellea.formatters.granite.base.util": [
        "import_optional", "random_uuid", "load_transformers_lora",
    ],
    "mellea.formatters.granite.intrinsics": [
        "IntrinsicsResultProcessor", "IntrinsicsRewriter", "obtain_io_yaml", "obtain_lora",
    ],
    "mellea.formatters.granite.intrinsics.constants": [
        "YAML_REQUIRED_FIELDS", "YAML_OPTIONAL_FIELDS", "YAML_JSON_FIELDS", "OLD_LAYOUT_REPOS",
        "BASE_MODEL_TO_CANONICAL_NAME", "TOP_LOGPROBS",
    ],
    "mellea.formatters.granite.intrinsics.input": [
        "sentence_delimiter", "mark_sentence_boundaries", "move_documents_to_message",
        "IntrinsicsRewriter",
    ],
    "mellea.formatters.granite.intrinsics.output": [
        "TransformationRule", "InPlaceTransformation", "AddFieldsTransformation",
        "TokenToFloat", "DecodeSentences", "Explode", "DropDuplicates", "Project", "Nest",
        "MergeSpans", "ALL_RULES", "NAME_TO_RULE", "IntrinsicsResultProcessor",
    ],
    "mellea.formatters.granite.intrinsics.util": [
        "make_config_dict", "adapter_subpath", "obtain_lora", "obtain_io_yaml",
    ],
    "mellea.formatters.granite.intrinsics.types": [],
    "mellea.plugins.hooks.adapter_function": [
        "AdapterFunctionInvocationCompletePayload", "AdapterFunctionPhaseCompletePayload",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(UPSTREAM_NAMES))
def test_upstreams_names_resolve_at_upstreams_paths(module):
    loaded = importlib.import_module(module)
    missing = [name for name in UPSTREAM_NAMES[module] if not hasattr(loaded, name)]
    assert missing == []


@pytest.fixture
def adapters_dir(tmp_path, monkeypatch):
    root = adapters_tree(tmp_path / "adapters")
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(root))
    return root


@pytest.fixture
def hook_calls():
    calls: list[tuple[str, Any]] = []
    handlers = []
    for kind in (
        HookType.ADAPTER_FUNCTION_PHASE_COMPLETE,
        HookType.ADAPTER_FUNCTION_INVOCATION_COMPLETE,
    ):

        @hook(kind)
        async def record(payload: Any, ctx: Any, kind: HookType = kind) -> None:
            calls.append((kind.value, payload))

        record.__qualname__ = f"record_{kind.value}"
        handlers.append(record)
    register(handlers)
    yield calls
    for handler in handlers:
        unregister(handler)


class VerbBackend(adapter_backend.AdapterMixin, FakeAdapterBackend):
    """The fake backend with upstream's adapter verbs (as our backends have them)."""


def phases(calls: list[tuple[str, Any]]) -> list[str]:
    return [p.phase for kind, p in calls if kind == "adapter_function_phase_complete"]


def outcomes(calls: list[tuple[str, Any]]) -> list[str]:
    return [p.outcome for kind, p in calls if kind == "adapter_function_invocation_complete"]


# -- the composed adapter ----------------------------------------------------


def test_identity_checks_its_kind_and_warns_on_an_unknown_capability():
    assert "requirement_check" in KNOWN_CAPABILITIES and "answerability" in KNOWN_CAPABILITIES
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Identity("answerability", "alora", capability="answerability")
    with pytest.warns(UserWarning, match="not a known adapter capability"):
        Identity("mine", "lora", capability="answerabilty")
    with pytest.raises(ValueError, match="'lora' or 'alora'"):
        Identity("mine", "dora")  # type: ignore[arg-type]


def test_the_dict_contract_and_the_schema_error_that_survives_pickling():
    contract = _DictContract("guardian-core", frozenset({"score"}))
    assert contract.parse('{"score": 0.8, "extra": 1}') == {"score": 0.8, "extra": 1}
    with pytest.raises(AdapterSchemaMismatchError) as caught:
        contract.parse('{"label": "yes"}')
    copy = pickle.loads(pickle.dumps(caught.value))
    assert copy.expected_keys == frozenset({"score"}) and "missing ['score']" in str(copy)
    with pytest.raises(ValueError, match="JSON object"):
        contract.parse("[1]")


def test_the_adapter_classes_are_composed_adapters(adapters_dir):
    adapter = IntrinsicAdapter("requirement-check", base_model_name="granite-4.1-3b")
    assert isinstance(adapter, Adapter)
    assert (adapter.identity.name, adapter.identity.adapter_type) == ("requirement-check", "alora")
    assert adapter.identity.capability == "requirement-check"  # upstream's shims: the name
    assert adapter.weights.binding_type == "local_file"
    embedded = EmbeddedIntrinsicAdapter("answerability", REQUIREMENT_CHECK_IO, "alora")
    assert isinstance(embedded, Adapter) and embedded.weights.binding_type == "embedded"
    for placeholder in (EmbeddedBinding(), ServerMediatedBinding()):
        with pytest.raises(NotImplementedError):
            placeholder.prepare()


def test_a_local_file_binding_runs_its_lifecycle_on_a_backend(adapters_dir, hook_calls):
    backend = VerbBackend()
    pinned = fetch_intrinsic_metadata("requirement-check").revision
    binding = LocalFileBinding.from_catalog("requirement-check")
    assert binding.qualified_name == "requirement-check_lora"  # the catalog's first kind
    assert binding.revision == pinned
    binding = LocalFileBinding("requirement-check", AdapterType.ALORA, CORE_REPO)
    assert binding.revision is None and binding.resolved_revision() == pinned
    with pytest.raises(RuntimeError, match="bind_backend"):
        binding.prepare()
    binding.bind_backend(backend)
    binding.prepare()
    binding.prepare()  # repeatable
    assert list(backend.loaded) == ["requirement-check_alora"]
    assert phases(hook_calls) == ["prepare"]

    binding.activate()
    assert backend.model_options[ModelOption.ADAPTER] == "requirement-check_alora"
    with pytest.raises(RuntimeError, match="deactivate"):
        binding.release()
    binding.deactivate()
    assert ModelOption.ADAPTER not in backend.model_options
    binding.release()
    with pytest.raises(RuntimeError, match="released"):
        binding.prepare()
    with pytest.raises(ValueError, match="unloaded"):
        backend.activate_peft_adapter("requirement-check_alora")


def test_a_missing_binding_names_what_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(tmp_path))
    binding = LocalFileBinding.from_catalog("uncertainty")
    binding.bind_backend(VerbBackend())
    with pytest.raises(AdapterNotFoundError, match="granitelib-core"):
        binding.prepare()


def test_adapter_scope_activates_around_the_body_and_fires_the_hooks(adapters_dir, hook_calls):
    backend = VerbBackend()
    backend.model_options[ModelOption.ADAPTER] = "before"
    binding = LocalFileBinding("answerability", AdapterType.ALORA, RAG_REPO)
    adapter = Adapter(
        Identity("answerability", "alora", "answerability"),
        _DictContract("a", frozenset()),
        binding,
    )
    adapter_backend.add_adapter(backend, adapter)
    assert backend.list_adapters() == ["answerability_alora"]
    assert backend._find_adapter("answerability", ("lora", "alora")) is adapter
    assert backend._find_adapter("citations") is None

    with backend.adapter_scope(adapter):
        assert backend.model_options[ModelOption.ADAPTER] == "answerability_alora"
    assert backend.model_options[ModelOption.ADAPTER] == "before"
    assert phases(hook_calls) == ["activate", "deactivate"]
    (done,) = [p for kind, p in hook_calls if kind == "adapter_function_invocation_complete"]
    assert (done.name, done.binding_type, done.adapter_type, done.outcome) == (
        "answerability", "local_file", "alora", "success",
    )  # fmt: skip
    assert done.revision == fetch_intrinsic_metadata("answerability").revision

    with pytest.raises(AdapterSchemaMismatchError), backend.adapter_scope(adapter):
        adapter.io_contract.parse("{}")
        raise AdapterSchemaMismatchError("a", frozenset(), frozenset({"x"}))
    with pytest.raises(KeyError), backend.adapter_scope(adapter):
        raise KeyError("boom")
    assert outcomes(hook_calls) == ["success", "schema_error", "error"]
    assert backend.model_options[ModelOption.ADAPTER] == "before"  # deactivated each time
    with backend.adapter_scope(None):
        pass
    assert len(outcomes(hook_calls)) == 3


def test_an_embedded_adapter_is_switched_by_the_chat_template(adapters_dir):
    from mellea.backends.openai import OpenAIBackend

    backend = OpenAIBackend("granite-switch", base_url="http://127.0.0.1:9/v1")
    adapter = EmbeddedIntrinsicAdapter("answerability", REQUIREMENT_CHECK_IO)
    backend.add_adapter(adapter)
    with backend.adapter_scope(adapter):
        assert backend.model_options["chat_template_kwargs"] == {"adapter_name": "answerability"}
    assert "chat_template_kwargs" not in backend.model_options
    with pytest.raises(NotImplementedError, match=r"ModelOption\.ADAPTER"):
        backend.set_request_adapter("answerability_lora")


# -- the Granite intrinsic formatters ------------------------------------------


def _choice(text: str, tokens: list | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
    if tokens:
        choice["logprobs"] = {
            "content": [
                {
                    "token": t,
                    "logprob": lp,
                    "top_logprobs": [{"token": a, "logprob": v} for a, v in top],
                }
                for t, lp, top in tokens
            ]
        }
    return choice


CONVERSATION = [
    {"role": "user", "content": "Invite the team to a party."},
    {"role": "assistant", "content": "Dear team, join us on Friday."},
]


def test_a_requirement_check_round_trip_gives_upstreams_score():
    rewriter = IntrinsicsRewriter(config_dict=REQUIREMENT_CHECK_IO)
    request = rewriter.transform(
        {"messages": CONVERSATION, "temperature": 0.3}, requirement="Use a professional tone."
    )
    body = request.model_dump()
    library = build_request(
        rewriter.config, CONVERSATION, kwargs={"requirement": "Use a professional tone."}
    )
    assert body["messages"] == [
        {"content": m["content"], "role": m["role"]} for m in library.messages
    ]
    assert body["logprobs"] is True and body["top_logprobs"] == 10
    assert body["max_completion_tokens"] == 15 and body["temperature"] == 0.3
    assert body["extra_body"]["structured_outputs"]["json"]["required"] == ["score"]

    response = {"choices": [_choice('{"score": "no"}', NO_TOKENS)], "id": "x"}
    result = IntrinsicsResultProcessor(config_dict=REQUIREMENT_CHECK_IO).transform(
        response, request
    )
    assert isinstance(result, ChatCompletionResponse)
    score = json.loads(result.choices[0].message.content)["requirement_check"]["score"]
    assert score == pytest.approx(UPSTREAM_NO_SCORE)
    assert "logprobs" not in result.choices[0].model_dump()
    assert result.model_dump()["id"] == "x"  # unknown response fields pass through


def test_citations_round_trip_matches_the_library_path():
    documents = [{"doc_id": "d1", "text": "The sky is blue. The sea is big."}]
    answer = [
        {"role": "user", "content": "Colours?"},
        {"role": "assistant", "content": "It is blue. It is big."},
    ]
    request = IntrinsicsRewriter(config_dict=CITATIONS_IO).transform(
        {"messages": answer, "extra_body": {"documents": documents}}
    )
    assert request.messages[1].content == "<r0> It is blue. <r1> It is big."
    assert request.extra_body.documents[0].text == "<c0> The sky is blue. <c1> The sea is big."
    raw = '[{"r": 0, "c": [0]}, {"r": 1, "c": [1]}]'
    result = IntrinsicsResultProcessor(config_dict=CITATIONS_IO).transform(
        {"choices": [_choice(raw)]}, request
    )
    library = process_output(
        CITATIONS_IO, raw, None, build_request(CITATIONS_IO, answer, documents)
    )
    got = json.loads(result.choices[0].message.content)
    assert got == json.loads(library)
    assert got[1]["citation_text"] == "The sea is big." and got[1]["response_text"] == "It is big."


def test_documents_move_into_the_messages_in_the_type_given():
    body = {
        "messages": [{"role": "user", "content": "Q"}],
        "extra_body": {"documents": [{"doc_id": "1", "text": "D"}]},
    }
    moved = intrinsics_input.move_documents_to_message(body, "roles")
    assert isinstance(moved, dict)
    assert moved["messages"][0] == {"content": "D", "role": "document 1"}
    assert "documents" not in moved.get("extra_body", {})
    as_model = intrinsics_input.move_documents_to_message(
        ChatCompletion.model_validate(body), "string"
    )
    assert as_model.messages[0].content.startswith("You have access to the following documents")
    with pytest.raises(ValueError):
        intrinsics_input.move_documents_to_message(body, "xml")
    marked, after = intrinsics_input.mark_sentence_boundaries([["A.", "B."], ["C."]], "c", 2)
    assert (marked, after) == (["<c2> A. <c3> B.", "<c4> C."], 5)


def test_request_types_keep_what_was_set_and_granite_requests_move_documents():
    request = ChatCompletion.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], "seed": 3}
    )
    assert request.model_dump() == {"messages": [{"content": "hi", "role": "user"}], "seed": 3}
    granite = GraniteChatCompletion.model_validate(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "extra_body": {
                "chat_template_kwargs": {"documents": [{"text": "a"}], "thinking": True}
            },
        }
    )
    assert granite.model_dump()["extra_body"] == {
        "documents": [{"text": "a"}],
        "chat_template_kwargs": {"thinking": True},
    }
    with pytest.raises(ValueError, match="extra_body"):
        GraniteChatCompletion.model_validate({"messages": [], "documents": []})


def test_the_result_processor_refuses_unknown_rules_and_names_its_rules():
    config = dict(REQUIREMENT_CHECK_IO, transformations=[{"type": "shuffle", "input_path": []}])
    with pytest.raises(ValueError, match="unknown transformation 'shuffle'"):
        IntrinsicsResultProcessor(config_dict=config)
    processor = IntrinsicsResultProcessor(config_dict=REQUIREMENT_CHECK_IO)
    assert type(processor.rules[0]) is TokenToFloat
    assert sorted(NAME_TO_RULE) == [
        "decode_sentences", "drop_duplicates", "explode", "likelihood", "merge_spans", "nest", "project",
    ]  # fmt: skip
    rule = processor.rules[0]
    logprobs = (
        ChatCompletionResponse.model_validate({"choices": [_choice('{"score": "no"}', NO_TOKENS)]})
        .choices[0]
        .logprobs
    )
    assert rule.apply({"score": "no"}, '{"score": "no"}', logprobs, None)["score"] == pytest.approx(
        UPSTREAM_NO_SCORE
    )


def test_adapter_files_are_found_locally_or_named_for_download(adapters_dir, tmp_path):
    found = obtain_lora("requirement-check", "ibm-granite/granite-4.1-3b", CORE_REPO, alora=True)
    assert found == adapters_dir / CORE_REPO / "requirement-check" / "granite-4.1-3b" / "alora"
    io_yaml = obtain_io_yaml("requirement-check", "granite-4.1-3b", CORE_REPO, alora=True)
    assert io_yaml == found / "io.yaml" and io_yaml.is_file()
    with pytest.raises(AdapterNotFoundError, match="not on this machine"):
        obtain_lora("uncertainty", "granite-4.1-3b", CORE_REPO)
    elsewhere = obtain_lora(
        "requirement-check",
        "granite-4.1-3b",
        "other/repo",
        alora=True,
        cache_dir=str(adapters_dir / CORE_REPO),
    )
    assert elsewhere == found


@pytest.fixture
def server():
    """The recording OpenAI-compatible server of test_openai_adapters, on a loopback port."""
    import threading
    from http.server import ThreadingHTTPServer

    from tests.unit import test_openai_adapters as wire

    state = wire._Server()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), wire._handler(state))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_active_adapter_is_the_model_an_openai_backend_sends(adapters_dir, server):
    """Over the wire (a loopback server, the ``openai`` client): inside
    ``adapter_scope`` a plain generation names the adapter as the request's model."""
    from mellea.backends.openai import OpenAIBackend

    state, url = server
    backend = OpenAIBackend("ibm-granite/granite-4.1-3b", base_url=url)
    adapter = IntrinsicAdapter("requirement-check", base_model_name=backend.base_model_name)
    backend.add_adapter(adapter)

    async def ask() -> str:
        thunk = await backend.generate([{"role": "user", "content": "Hi"}])
        return await thunk.avalue()

    from mellea.core._sync import run_sync

    with backend.adapter_scope(adapter):
        run_sync(ask())
    run_sync(ask())
    assert [body["model"] for body in state.bodies] == [
        "requirement-check_alora",
        "ibm-granite/granite-4.1-3b",
    ]


HARMONY_HEAD = [
    ("<|channel|>", 0.0, []), ("analysis", 0.0, []), ("<|message|>", 0.0, []),
    ("Check the tone.", 0.0, []), ("<|end|>", 0.0, []), ("<|start|>", 0.0, []),
    ("assistant", 0.0, []), ("<|channel|>", 0.0, []), (" final", 0.0, []), ("<|message|>", 0.0, []),
]  # fmt: skip


def test_the_logprobs_workaround_reads_the_final_harmony_channel():
    from mellea.backends.adapters.harmony import final_channel_span, final_message_start

    config = dict(REQUIREMENT_CHECK_IO, logprobs_workaround=True)
    tokens = HARMONY_HEAD + NO_TOKENS + [("<|return|>", 0.0, [])]
    content = "analysisCheck the tone.assistant final" + '{"score": "no"}'
    response = {"choices": [_choice(content, tokens)]}
    result = IntrinsicsResultProcessor(config_dict=config).transform(response)
    score = json.loads(result.choices[0].message.content)["requirement_check"]["score"]
    assert score == pytest.approx(UPSTREAM_NO_SCORE)
    library = process_output(config, content, logprobs_of(tokens))
    assert json.loads(library)["requirement_check"]["score"] == pytest.approx(UPSTREAM_NO_SCORE)
    # "<|channel|>" spelled out of several ordinary tokens is not a channel header
    assert final_message_start(["<|", "channel", "|>", "final", "<|message|>", "x"]) is None
    assert final_channel_span(["<|channel|>", "final", "<|message|>", "<|end|>"]) is None
    without = dict(REQUIREMENT_CHECK_IO)  # no workaround: the content must be the JSON
    with pytest.raises(ValueError):
        IntrinsicsResultProcessor(config_dict=without).transform(response)


def test_a_composed_adapter_on_a_remote_backend_is_named_not_loaded(adapters_dir, server):
    from mellea.backends.openai import OpenAIBackend
    from mellea.core._sync import run_sync

    state, url = server
    backend = OpenAIBackend("ibm-granite/granite-4.1-3b", base_url=url)
    binding = LocalFileBinding(
        "guardian-core", AdapterType.ALORA, "nowhere/repo"
    )  # no files needed
    adapter = Adapter(Identity("guardian-core", "alora"), _DictContract("g", frozenset()), binding)
    backend.add_adapter(adapter)
    assert binding.path is None and backend.list_adapters() == ["guardian-core_alora"]

    async def ask() -> None:
        thunk = await backend.generate([{"role": "user", "content": "Hi"}])
        await thunk.avalue()

    with backend.adapter_scope(adapter):
        run_sync(ask())
    assert state.bodies[0]["model"] == "guardian-core_alora"
    with pytest.raises(TypeError, match="LocalFileBinding"):
        VerbBackend().add_adapter(
            Adapter(Identity("x", "lora"), _DictContract("x", frozenset()), EmbeddedBinding())
        )
