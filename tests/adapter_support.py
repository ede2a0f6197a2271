"""Fakes for the adapter tests: an adapters directory in upstream's hub layout and a
backend that implements the adapter contract (``load_adapter``, ``adapters``) and
answers each adapter function the way the real adapter's output looks.

The io.yaml files are reconstructions of upstream's (from the requests and outputs
in upstream's canned test data): the requirement-check output ``{"score": "no"}``
with the logprobs below decodes to upstream's expected 0.4206108287116171.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mellea.core.backend import Backend
from mellea.core.logprobs import TokenLogprob
from mellea.core.model_options import ModelOption
from mellea.core.thunk import GenerationChunk, ModelOutputThunk

BASE_MODEL = "ibm-granite/granite-4.1-3b"
CORE_REPO = "ibm-granite/granitelib-core-r1.0"
RAG_REPO = "ibm-granite/granitelib-rag-r1.0"
GUARDIAN_REPO = "ibm-granite/granitelib-guardian-r1.0"

REQUIREMENT_CHECK_IO = {
    "model": None,
    "response_format": json.dumps(
        {
            "type": "object",
            "properties": {"score": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["score"],
            "additionalProperties": False,
        }
    ),
    "transformations": [
        {
            "type": "likelihood",
            "categories_to_values": {"yes": 1.0, "no": 0.0},
            "input_path": ["score"],
        },
        {"type": "nest", "input_path": [], "field_name": "requirement_check"},
    ],
    "instruction": (
        "<requirements>: {requirement}\nPlease verify if the assistant's generation "
        "satisfies the user's requirements or not and reply with a binary label "
        'accordingly. Respond with a json {{"score": "yes"}} if the constraints are '
        'satisfied or respond with {{"score": "no"}} if the constraints are not satisfied.'
    ),
    "parameters": {"max_completion_tokens": 15},
    "sentence_boundaries": None,
}

ANSWERABILITY_IO = {
    "model": None,
    "response_format": json.dumps({"type": "string", "enum": ["answerable", "unanswerable"]}),
    "transformations": [{"type": "nest", "input_path": [], "field_name": "answerability"}],
    "instruction": None,
    "parameters": {"max_completion_tokens": 6},
    "sentence_boundaries": None,
}

GUARDIAN_IO = {
    "model": None,
    "response_format": json.dumps(
        {"type": "object", "properties": {"score": {"type": "string", "enum": ["yes", "no"]}}}
    ),
    "transformations": [
        {
            "type": "likelihood",
            "categories_to_values": {"yes": 1.0, "no": 0.0},
            "input_path": ["score"],
        },
        {"type": "nest", "input_path": [], "field_name": "guardian"},
    ],
    "instruction": "<guardian>{criteria}\n\n### Scoring Schema: {scoring_schema}",
    "parameters": {"max_completion_tokens": 8},
    "sentence_boundaries": None,
}

# citations: sentence-marked response and documents; the model answers which
# document sentences ("c") support each response sentence ("r")
CITATIONS_IO = {
    "model": None,
    "response_format": json.dumps(
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "r": {"type": "integer", "minimum": 0},
                    "c": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                },
                "required": ["r", "c"],
            },
        }
    ),
    "transformations": [
        {"type": "explode", "input_path": [], "target_field": "c"},
        {"type": "drop_duplicates", "input_path": [], "target_fields": ["r", "c"]},
        {
            "type": "decode_sentences",
            "source": "last_message",
            "input_path": [None, "r"],
            "output_names": {
                "begin": "response_begin",
                "end": "response_end",
                "text": "response_text",
            },
        },
        {
            "type": "decode_sentences",
            "source": "documents",
            "input_path": [None, "c"],
            "output_names": {
                "document_id": "citation_doc_id",
                "begin": "citation_begin",
                "end": "citation_end",
                "text": "citation_text",
            },
        },
        {
            "type": "project",
            "input_path": [],
            "retained_fields": [
                "response_begin",
                "response_end",
                "response_text",
                "citation_doc_id",
                "citation_begin",
                "citation_end",
                "citation_text",
            ],
        },
    ],
    "instruction": (
        "Split the last assistant response into individual sentences. For each sentence, "
        "list the ids of the document sentences it references, as JSON."
    ),
    "parameters": {"max_completion_tokens": 512},
    "sentence_boundaries": {"last_message": "r", "documents": "c"},
}

# upstream's canned requirement-check output: {"score": "no"}, token by token
NO_TOKENS = [
    ('{"', 0.0, []),
    ("score", 0.0, []),
    ('":', 0.0, []),
    (' "', 0.0, []),
    (
        "no",
        -0.5457810759544373,
        [
            ("no", -0.5457810759544373),
            ("yes", -0.8660477995872498),
            ("ye", -15.616496086120605),
            ("n", -15.969169616699219),
            ("y", -16.61600112915039),
        ],
    ),
    ('"}', 0.0, []),
]
UPSTREAM_NO_SCORE = 0.4206108287116171


def logprobs_of(tokens: list[tuple[str, float, list[tuple[str, float]]]]) -> list[TokenLogprob]:
    """Token logprobs as a backend reports them."""
    return [
        TokenLogprob(text, lp, list(text.encode()), [TokenLogprob(t, v) for t, v in top])
        for text, lp, top in tokens
    ]


def yes_tokens(probability_yes: float) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """``{"score": "yes"}`` whose answer token has the given probability against "no"."""
    import math

    yes, no = math.log(probability_yes), math.log(1 - probability_yes)
    return [('{"', 0.0, []), ("score", 0.0, []), ('":', 0.0, []), (' "', 0.0, []),
            ("yes", yes, [("yes", yes), ("no", no)]), ('"}', 0.0, [])]  # fmt: skip


def write_adapter(root: Path, repo: str, name: str, kind: str, io: dict[str, Any]) -> Path:
    """An adapter directory in upstream's layout, with an io.yaml and a PEFT config."""
    import yaml

    directory = root / repo / name / "granite-4.1-3b" / kind
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "io.yaml").write_text(yaml.safe_dump(io), encoding="utf-8")
    (directory / "adapter_config.json").write_text(json.dumps({"r": 8}), encoding="utf-8")
    return directory


def adapters_tree(root: Path) -> Path:
    """requirement-check, answerability and guardian-core as aLoRAs; citations as a LoRA."""
    write_adapter(root, CORE_REPO, "requirement-check", "alora", REQUIREMENT_CHECK_IO)
    write_adapter(root, RAG_REPO, "answerability", "alora", ANSWERABILITY_IO)
    write_adapter(root, GUARDIAN_REPO, "guardian-core", "alora", GUARDIAN_IO)
    write_adapter(root, RAG_REPO, "citations", "lora", CITATIONS_IO)
    return root


class FakeAdapterBackend(Backend):
    """A backend with the adapter contract; it records every call.

    A call naming an adapter gets ``adapter_outputs[name]`` (text, logprob tokens); a
    call without one is a model-judge call and gets ``judge_answer``.
    """

    def __init__(self, model_id: str = BASE_MODEL, can_load: bool = True) -> None:
        super().__init__()
        self.model_id = model_id
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
        self.loaded: dict[str, str] = {}
        self.judge_answer = "yes"
        self.judge_script: list[str] = []  # answers for the next model (non-adapter) calls
        self.adapter_outputs: dict[str, tuple[str, list]] = {
            "requirement-check_alora": ('{"score": "no"}', NO_TOKENS),
            "answerability_alora": ('"answerable"', []),
            "guardian-core_alora": ('{"score": "yes"}', yes_tokens(0.8)),
            "citations_lora": ('[{"r": 0, "c": [1]}]', []),
        }
        if can_load:
            self.load_adapter = self._load_adapter

    def _load_adapter(self, name: str, path: str) -> None:
        self.loaded[name] = path

    @property
    def adapters(self) -> dict[str, str]:
        """The loaded adapters by name (the engine contract)."""
        return dict(self.loaded)

    async def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        model_options: dict[str, Any] | None = None,
        format: type | None = None,
        tool_calls: bool = False,
    ) -> ModelOutputThunk:
        options = dict(model_options or {})
        self.calls.append((messages, options))
        adapter = options.get(ModelOption.ADAPTER)
        if adapter is None:
            text = self.judge_script.pop(0) if self.judge_script else self.judge_answer
            tokens = []
        else:
            assert adapter in self.loaded, f"generation names adapter {adapter} never loaded"
            text, tokens = self.adapter_outputs[adapter]
        usage = {"prompt_tokens": 40, "completion_tokens": max(len(tokens), 1), "total_tokens": 41}

        async def chunks() -> AsyncIterator[GenerationChunk]:
            yield GenerationChunk(text=text, logprobs=logprobs_of(tokens) if tokens else None)
            yield GenerationChunk(finish_reason="stop", usage=usage)

        return ModelOutputThunk.from_stream(chunks())

    def adapter_calls(self) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
        """The calls that named an adapter."""
        return [c for c in self.calls if c[1].get(ModelOption.ADAPTER)]
