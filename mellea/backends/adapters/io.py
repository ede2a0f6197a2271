"""An adapter function's input description (its ``io.yaml``) and the request it makes.

Upstream's adapters ship an ``io.yaml`` beside their weights: the JSON schema the
output must match (``response_format``), an optional ``instruction`` template appended
as a last user turn, request ``parameters`` (``max_completion_tokens``,
``temperature``, ...), how documents reach the model (``docs_as_message``) and the
``transformations`` that turn the raw output into the function's result
(:mod:`mellea.backends.adapters.results`). This module reads the file and builds
the chat request a backend runs: the same messages and parameters upstream's
``IntrinsicsRewriter`` builds.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mellea.core.model_options import ModelOption

REQUIRED_FIELDS = ("model", "response_format", "transformations")
OPTIONAL_FIELDS = (
    "logprobs_workaround",
    "docs_as_message",
    "instruction",
    "name",
    "parameters",
    "sentence_boundaries",
)
# Alternatives requested per token when a transformation decodes log-probabilities.
TOP_LOGPROBS = 10


class IOConfigError(ValueError):
    """An ``io.yaml`` this library cannot read or apply."""


@dataclass
class IntrinsicRequest:
    """What a backend is asked to run for one adapter-function call."""

    messages: list[dict[str, Any]]
    model_options: dict[str, Any]
    documents: list[dict[str, str]] = field(default_factory=list)


def read_io_config(
    config_file: str | Path | None = None, config_dict: dict | None = None
) -> dict[str, Any]:
    """The checked configuration from a file or an already parsed dict (exactly one).

    Optional fields are filled with ``None``; ``response_format`` is parsed from its
    JSON text. An unknown or missing field is an :class:`IOConfigError`.
    """
    if (config_file is None) == (config_dict is None):
        raise IOConfigError("give exactly one of config_file and config_dict")
    if config_file is not None:
        import yaml

        with open(config_file, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
        if not isinstance(config, dict):
            raise IOConfigError(f"{config_file} is not a YAML mapping")
    else:
        config = copy.deepcopy(config_dict)
    assert isinstance(config, dict)
    for name in REQUIRED_FIELDS:
        if name not in config:
            raise IOConfigError(f"io.yaml is missing the required field '{name}'")
    known = set(REQUIRED_FIELDS) | set(OPTIONAL_FIELDS)
    for name in config:
        if name not in known:
            raise IOConfigError(f"io.yaml has an unknown field '{name}'; known: {sorted(known)}")
    for name in OPTIONAL_FIELDS:
        config.setdefault(name, None)
    if isinstance(config["response_format"], str):
        try:
            config["response_format"] = json.loads(config["response_format"])
        except json.JSONDecodeError as exc:
            raise IOConfigError(f"io.yaml's response_format is not JSON: {exc}") from None
    if config["parameters"] is not None and not isinstance(config["parameters"], dict):
        raise IOConfigError("io.yaml's parameters must be a mapping or null")
    return config


def needs_logprobs(config: dict[str, Any]) -> bool:
    """Whether a transformation reads token log-probabilities (``likelihood``)."""
    return any(t.get("type") == "likelihood" for t in config.get("transformations") or [])


def build_request(
    config: dict[str, Any],
    messages: list[dict[str, Any]],
    documents: list[dict[str, str]] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> IntrinsicRequest:
    """The chat request ``config`` makes of a conversation and its documents.

    The instruction template is filled with ``kwargs`` and ``last_message`` (the last
    turn's text) and appended as a user turn; ``parameters`` become model options;
    ``response_format`` becomes a JSON-schema ``response_format`` (constrained
    decoding); log-probabilities are asked for when a transformation reads them.
    """
    messages = [dict(m) for m in messages]
    documents = [dict(d) for d in documents or []]
    if config.get("sentence_boundaries"):
        messages, documents = mark_sentences(config["sentence_boundaries"], messages, documents)
    how = config.get("docs_as_message")
    if how and documents:
        messages = documents_as_messages(messages, documents, how)
        documents = []
    instruction = config.get("instruction")
    if instruction is not None:
        args = dict(kwargs or {})
        if messages:
            args["last_message"] = messages[-1].get("content") or ""
        try:
            text = instruction.format(**args)
        except KeyError as exc:
            raise IOConfigError(f"the adapter's instruction needs the argument {exc}") from None
        messages.append({"role": "user", "content": text})
    return IntrinsicRequest(messages, request_options(config), documents)


SENTENCE_LOCATIONS = ("last_message", "documents", "all_but_last_message")


def sentence_tag(prefix: str, number: int) -> str:
    """The marker placed before sentence ``number``: ``<c3> ``."""
    return f"<{prefix}{number}> "


def split_sentences(text: str) -> list[str]:
    """``text``'s sentences, as upstream splits them (nltk's Punkt, untrained)."""
    try:
        from nltk.tokenize.punkt import PunktSentenceTokenizer
    except ImportError:
        raise IOConfigError(
            "this adapter marks sentence boundaries, which needs the 'nltk' package: "
            "pip install nltk"
        ) from None
    return list(PunktSentenceTokenizer().tokenize(text))


def _tagged(text: str, prefix: str, first: int) -> tuple[str, int]:
    """``text`` with each sentence prefixed by its marker; the next free number."""
    parts = []
    number = first
    for sentence in split_sentences(text):
        parts.append(sentence_tag(prefix, number) + sentence)
        number += 1
    return " ".join(parts), number


def mark_sentences(
    boundaries: dict[str, str], messages: list[dict[str, Any]], documents: list[dict[str, str]]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Sentence markers in the last message (numbered from 0), then in the documents
    and the earlier messages (one numbering across both), as the io.yaml asks."""
    if not isinstance(boundaries, dict) or set(boundaries) - set(SENTENCE_LOCATIONS):
        raise IOConfigError(
            f"sentence_boundaries must map some of {SENTENCE_LOCATIONS} to a marker prefix"
        )
    if boundaries.get("last_message") and messages:
        text, _ = _tagged(messages[-1].get("content") or "", boundaries["last_message"], 0)
        messages[-1]["content"] = text
    number = 0
    if boundaries.get("documents"):
        for doc in documents:
            doc["text"], number = _tagged(doc["text"], boundaries["documents"], number)
    if boundaries.get("all_but_last_message"):
        for message in messages[:-1]:
            prefix = boundaries["all_but_last_message"]
            message["content"], number = _tagged(message.get("content") or "", prefix, number)
    return messages, documents


def request_options(config: dict[str, Any]) -> dict[str, Any]:
    """Model options from the config's parameters, schema and log-probability needs."""
    options: dict[str, Any] = {}
    parameters = dict(config.get("parameters") or {})
    extra_body = parameters.pop("extra_body", None) or {}
    parameters.pop("model", None)
    for key, value in parameters.items():
        if key in ("max_completion_tokens", "max_tokens"):
            options[ModelOption.MAX_NEW_TOKENS] = value
        else:
            options[key] = value
    if extra_body.get("chat_template_kwargs"):
        options["chat_template_kwargs"] = dict(extra_body["chat_template_kwargs"])
    schema = config.get("response_format")
    if schema is not None:
        options["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "intrinsic", "schema": schema},
        }
    if needs_logprobs(config):
        options["logprobs"] = True
        options["top_logprobs"] = TOP_LOGPROBS
    return options


def documents_as_messages(
    messages: list[dict[str, Any]], documents: list[dict[str, str]], how: str
) -> list[dict[str, Any]]:
    """Documents moved into the conversation's first turns (upstream's three ways)."""
    if how == "string":
        body = "\n\n".join(f"[Document {d.get('doc_id')}]\n{d['text']}" for d in documents)
        head = [
            {"role": "user", "content": "You have access to the following documents:\n\n" + body}
        ]
    elif how == "json":
        head = [{"role": "user", "content": json.dumps(documents)}]
    elif how == "roles":
        head = [{"role": f"document {d.get('doc_id')}", "content": d["text"]} for d in documents]
    else:
        raise IOConfigError(f"docs_as_message must be string, json or roles, not {how!r}")
    return head + messages


__all__ = [
    "SENTENCE_LOCATIONS",
    "IOConfigError",
    "IntrinsicRequest",
    "build_request",
    "documents_as_messages",
    "mark_sentences",
    "needs_logprobs",
    "read_io_config",
    "request_options",
    "sentence_tag",
    "split_sentences",
]
