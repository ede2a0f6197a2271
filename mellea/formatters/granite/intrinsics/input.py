"""An adapter function's request: the chat completion its io.yaml makes of a conversation.

:class:`IntrinsicsRewriter` applies an io.yaml to an OpenAI-style request: sentence
markers, documents moved into the messages, the instruction turn, the request
parameters, log-probabilities when a result is decoded from them, and the output
schema as vLLM's ``structured_outputs``. The rewriting rules are the ones the
library's adapter calls use (:mod:`mellea.backends.adapters.io`).
"""

from __future__ import annotations

import pathlib
from typing import Any

from mellea.backends.adapters import io as adapter_io
from mellea.formatters.granite.base.io import ChatCompletionRewriter
from mellea.formatters.granite.base.types import ChatCompletion, VLLMExtraBody
from mellea.formatters.granite.intrinsics.constants import TOP_LOGPROBS
from mellea.formatters.granite.intrinsics.util import make_config_dict

DOCS_AS_MESSAGE = ("string", "json", "roles")


def sentence_delimiter(tag: str, sentence_num: int) -> str:
    """The marker before sentence ``sentence_num``: ``<{tag}{n}> ``."""
    return adapter_io.sentence_tag(tag, sentence_num)


def mark_sentence_boundaries(
    split_strings: list[list[str]], tag_prefix: str, index: int = 0
) -> tuple[list[str], int]:
    """Each text (given as its sentences) joined back with a marker before every
    sentence, numbered on from ``index``; and the next free number."""
    marked = []
    for sentences in split_strings:
        parts = []
        for sentence in sentences:
            parts.append(sentence_delimiter(tag_prefix, index) + sentence)
            index += 1
        marked.append(" ".join(parts))
    return marked, index


def move_documents_to_message(
    chat_completion: ChatCompletion | dict, how: str = "string"
) -> ChatCompletion | dict:
    """A copy of the request with ``extra_body.documents`` moved to the front of the
    messages (``how``: one ``string`` turn, one ``json`` turn, or a ``roles`` turn per
    document); returned as the type given."""
    as_model = isinstance(chat_completion, ChatCompletion)
    if not as_model and not isinstance(chat_completion, dict):
        raise TypeError(
            f"chat_completion must be a ChatCompletion or a dict, not {type(chat_completion).__name__}"
        )
    if how not in DOCS_AS_MESSAGE:
        raise ValueError(f"documents can be moved as {DOCS_AS_MESSAGE}, not {how!r}")
    request = chat_completion if as_model else ChatCompletion.model_validate(chat_completion)
    assert isinstance(request, ChatCompletion)
    documents = request._documents()
    if documents is not None:
        messages = [m.model_dump() for m in request.messages]
        docs = [d.model_dump() for d in documents]
        moved = adapter_io.documents_as_messages(messages, docs, how)
        extra = request.extra_body.model_dump() if request.extra_body else {}
        extra.pop("documents", None)
        request = request.model_copy(
            update={
                "messages": ChatCompletion.model_validate({"messages": moved}).messages,
                "extra_body": VLLMExtraBody.model_validate(extra),
            }
        )
    return request if as_model else request.model_dump()


class IntrinsicsRewriter(ChatCompletionRewriter):
    """Rewrites chat completion requests for one adapter function, from its io.yaml
    (``config_file`` or ``config_dict``); ``model_name`` replaces the io.yaml's model.

    Attributes: ``config`` (the checked io.yaml), ``response_format`` (its output
    schema), ``parameters`` (set on every request), ``extra_body_parameters`` (merged
    into ``extra_body``), ``instruction``, ``sentence_boundaries``, ``docs_as_message``.
    ``transform(request, **kwargs)`` fills the instruction with ``kwargs``.
    """

    def __init__(
        self,
        /,
        config_file: str | pathlib.Path | None = None,
        config_dict: dict | None = None,
        model_name: str | None = None,
    ) -> None:
        config = make_config_dict(config_file, config_dict)
        if config is None:
            raise ValueError("the io.yaml configuration is empty")
        self.config = config
        self.response_format = config["response_format"]
        self.parameters: dict[str, Any] = dict(config["parameters"] or {})
        self.extra_body_parameters: dict[str, Any] = dict(
            self.parameters.pop("extra_body", None) or {}
        )
        if model_name is not None:
            self.parameters["model"] = model_name
        elif config["model"]:
            self.parameters["model"] = config["model"]
        if adapter_io.needs_logprobs(config):
            self.parameters["logprobs"] = True
            self.parameters["top_logprobs"] = TOP_LOGPROBS
        if self.response_format is not None:
            self.extra_body_parameters["structured_outputs"] = {"json": self.response_format}
        self.instruction: str | None = config["instruction"]
        self.sentence_boundaries: dict[str, str] | None = config["sentence_boundaries"]
        if self.sentence_boundaries is not None:
            if not isinstance(self.sentence_boundaries, dict):
                raise TypeError("sentence_boundaries must map a location to a marker prefix")
            for where, prefix in self.sentence_boundaries.items():
                if where not in adapter_io.SENTENCE_LOCATIONS:
                    raise ValueError(
                        f"sentence_boundaries location {where!r} is not one of "
                        f"{adapter_io.SENTENCE_LOCATIONS}"
                    )
                if not isinstance(prefix, str):
                    raise TypeError(f"the marker prefix for {where!r} must be a string")
        self.docs_as_message: str | None = config["docs_as_message"]
        if self.docs_as_message and self.docs_as_message not in DOCS_AS_MESSAGE:
            raise ValueError(
                f"docs_as_message must be one of {DOCS_AS_MESSAGE}, not {self.docs_as_message!r}"
            )

    def _transform(self, chat_completion: ChatCompletion, /, **kwargs: Any) -> ChatCompletion:
        messages = [m.model_dump() for m in chat_completion.messages]
        documents = [d.model_dump() for d in chat_completion._documents() or []]
        extra = chat_completion.extra_body.model_dump() if chat_completion.extra_body else {}
        if self.sentence_boundaries:
            messages, documents = adapter_io.mark_sentences(
                self.sentence_boundaries, messages, documents
            )
            if documents:
                extra["documents"] = documents
        if self.docs_as_message and documents:
            messages = adapter_io.documents_as_messages(messages, documents, self.docs_as_message)
            extra.pop("documents", None)
        if self.instruction is not None:
            args = dict(kwargs)
            if messages:
                args["last_message"] = messages[-1].get("content") or ""
            try:
                text = self.instruction.format(**args)
            except KeyError as exc:
                raise ValueError(f"the adapter's instruction needs the argument {exc}") from None
            messages.append({"role": "user", "content": text})
        extra.update(self.extra_body_parameters)
        edits: dict[str, Any] = {
            "messages": ChatCompletion.model_validate({"messages": messages}).messages,
            **self.parameters,
        }
        if extra:
            edits["extra_body"] = VLLMExtraBody.model_validate(extra)
        body = chat_completion.model_dump()
        body.update({k: v for k, v in edits.items() if k not in ("messages", "extra_body")})
        result = ChatCompletion.model_validate(body)
        return result.model_copy(
            update={k: v for k, v in edits.items() if k in ("messages", "extra_body")}
        )


__all__ = [
    "IntrinsicsRewriter",
    "mark_sentence_boundaries",
    "move_documents_to_message",
    "sentence_delimiter",
]
