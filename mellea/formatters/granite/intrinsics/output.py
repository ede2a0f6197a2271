"""An adapter function's result: its raw JSON output rewritten by its io.yaml's
``transformations``.

:class:`IntrinsicsResultProcessor` applies them to each choice of a chat completion
response, reading the token log-probabilities (``likelihood``) and the request that
was sent (``decode_sentences``) where a rule needs them; the log-probabilities are
dropped from the result, since its tokens no longer match them. With the io.yaml's
``logprobs_workaround`` (gpt-oss), the answer is read from the tokens of the output's
final Harmony channel (:mod:`mellea.backends.adapters.harmony`). The rule classes name
upstream's rules; the rules themselves are the ones the library's adapter calls use
(:mod:`mellea.backends.adapters.results`).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, ClassVar

from mellea.backends.adapters.harmony import final_channel_span
from mellea.backends.adapters.io import IntrinsicRequest
from mellea.backends.adapters.results import apply_rule, parse_with_positions
from mellea.backends.logprobs import openai_logprobs
from mellea.core.logprobs import TokenLogprob
from mellea.formatters.granite.base.io import ChatCompletionResultProcessor
from mellea.formatters.granite.base.types import (
    ChatCompletion,
    ChatCompletionLogProbs,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
)
from mellea.formatters.granite.intrinsics.util import make_config_dict


class TransformationRule:
    """One io.yaml transformation: its kind (``YAML_NAME``), the paths it applies to
    (``input_path_expr``; ``None`` matches any key or index) and its arguments."""

    YAML_NAME: ClassVar[str | None] = None

    def __init__(
        self, config: dict, input_path_expr: list[str | int | None], /, **kwargs: Any
    ) -> None:
        self.config = config
        self.input_path_expr = input_path_expr
        self.arguments = kwargs

    def rule_name(self) -> str:
        """The name the io.yaml gives this rule."""
        if self.YAML_NAME is None:
            raise ValueError(f"{type(self).__name__} has no YAML_NAME")
        return self.YAML_NAME

    def spec(self) -> dict[str, Any]:
        """The rule as its io.yaml entry."""
        return {"type": self.rule_name(), "input_path": self.input_path_expr, **self.arguments}

    def apply(
        self,
        parsed_json: Any,
        reparsed_json: Any,
        logprobs: ChatCompletionLogProbs | None,
        chat_completion: ChatCompletion | None,
    ) -> Any:
        """``parsed_json`` with this rule applied. ``reparsed_json`` is the raw output
        text here (upstream passes a position-annotated parse of it): the positions of
        its values are read from it."""
        raw = reparsed_json if isinstance(reparsed_json, str) else json.dumps(parsed_json)
        _, literals = parse_with_positions(raw)
        request = _request_of(chat_completion) if chat_completion is not None else None
        return apply_rule(
            self.spec(), parsed_json, raw, literals, _token_logprobs(logprobs), self.config, request
        )


class InPlaceTransformation(TransformationRule):
    """A rule that replaces the values it matches."""


class AddFieldsTransformation(TransformationRule):
    """A rule that adds fields beside the values it matches."""


class TokenToFloat(InPlaceTransformation):
    """``likelihood``: a categorical value -> its expected value under the token
    probabilities (``categories_to_values``)."""

    YAML_NAME = "likelihood"

    def __init__(
        self,
        config: dict,
        input_path_expr: list[str | int | None],
        /,
        categories_to_values: dict[str | int | bool, float] | None = None,
    ) -> None:
        super().__init__(config, input_path_expr, categories_to_values=categories_to_values)


class DecodeSentences(AddFieldsTransformation):
    """``decode_sentences``: a sentence number -> the sentence's offsets and text."""

    YAML_NAME = "decode_sentences"

    def __init__(
        self,
        config: dict,
        input_path_expr: list[str | int | None],
        /,
        source: str | list[str],
        output_names: dict,
    ) -> None:
        super().__init__(config, input_path_expr, source=source, output_names=output_names)


class Explode(InPlaceTransformation):
    """``explode``: one record per element of its list ``target_field``."""

    YAML_NAME = "explode"

    def __init__(self, config: dict, input_path_expr: list, /, target_field: str) -> None:
        super().__init__(config, input_path_expr, target_field=target_field)


class DropDuplicates(InPlaceTransformation):
    """``drop_duplicates``: records equal on ``target_fields`` keep one."""

    YAML_NAME = "drop_duplicates"

    def __init__(self, config: dict, input_path_expr: list, /, target_fields: list[str]) -> None:
        super().__init__(config, input_path_expr, target_fields=target_fields)


class Project(InPlaceTransformation):
    """``project``: records keep only ``retained_fields`` (a list, or old -> new names)."""

    YAML_NAME = "project"

    def __init__(
        self, config: dict, input_path_expr: list, /, retained_fields: list[str] | dict[str, str]
    ) -> None:
        if not isinstance(retained_fields, list | dict):
            raise TypeError("retained_fields must be a list of fields or a mapping to new names")
        super().__init__(config, input_path_expr, retained_fields=retained_fields)


class Nest(InPlaceTransformation):
    """``nest``: a value -> ``{field_name: value}``."""

    YAML_NAME = "nest"

    def __init__(self, config: dict, input_path_expr: list, /, field_name: str) -> None:
        if not isinstance(field_name, str):
            raise TypeError("field_name must be a string")
        super().__init__(config, input_path_expr, field_name=field_name)


class MergeSpans(InPlaceTransformation):
    """``merge_spans``: records of one group whose spans touch become one."""

    YAML_NAME = "merge_spans"

    def __init__(
        self,
        config: dict,
        input_path_expr: list,
        /,
        group_fields: list[str],
        begin_field: str,
        end_field: str,
        text_field: str | None = None,
    ) -> None:
        super().__init__(
            config,
            input_path_expr,
            group_fields=group_fields,
            begin_field=begin_field,
            end_field=end_field,
            text_field=text_field,
        )


ALL_RULES: list[type[TransformationRule]] = [
    DecodeSentences,
    DropDuplicates,
    Explode,
    MergeSpans,
    Nest,
    Project,
    TokenToFloat,
]
NAME_TO_RULE: dict[str, type[TransformationRule]] = {rule.YAML_NAME: rule for rule in ALL_RULES}  # type: ignore[misc]


def _token_logprobs(logprobs: ChatCompletionLogProbs | None) -> list[TokenLogprob] | None:
    if logprobs is None or logprobs.content is None:
        return None
    return openai_logprobs(logprobs.content)


def _request_of(chat_completion: ChatCompletion) -> IntrinsicRequest:
    """The sent request as the result rules read it (messages and documents)."""
    messages = [m.model_dump() for m in chat_completion.messages]
    documents = [d.model_dump() for d in chat_completion._documents() or []]
    return IntrinsicRequest(messages, {}, documents)


class IntrinsicsResultProcessor(ChatCompletionResultProcessor):
    """Applies one adapter function's io.yaml ``transformations`` (``config_file`` or
    ``config_dict``) to responses; ``rules`` holds them in order."""

    def __init__(
        self, /, config_file: str | pathlib.Path | None = None, config_dict: dict | None = None
    ) -> None:
        config = make_config_dict(config_file, config_dict)
        if config is None:
            raise ValueError("the io.yaml configuration is empty")
        self.config = config
        self.rules: list[TransformationRule] = []
        for spec in config["transformations"] or []:
            rule = NAME_TO_RULE.get(spec.get("type"))
            if rule is None:
                raise ValueError(
                    f"unknown transformation {spec.get('type')!r}; known: {sorted(NAME_TO_RULE)}"
                )
            arguments = {k: v for k, v in spec.items() if k not in ("type", "input_path")}
            self.rules.append(rule(config, spec.get("input_path"), **arguments))

    def _transform_impl(
        self,
        chat_completion_response: ChatCompletionResponse,
        chat_completion: ChatCompletion | None,
    ) -> ChatCompletionResponse:
        choices = [
            self._transform_choice(c, chat_completion) for c in chat_completion_response.choices
        ]
        return chat_completion_response.model_copy(update={"choices": choices})

    def _transform_choice(
        self, choice: ChatCompletionResponseChoice, chat_completion: ChatCompletion | None
    ) -> ChatCompletionResponseChoice:
        raw, logprobs = choice.message.content, choice.logprobs
        if self.config.get("logprobs_workaround") and logprobs and logprobs.content:
            span = final_channel_span([entry.token for entry in logprobs.content])
            if span is not None:
                tokens = logprobs.content[span[0] : span[1]]
                raw = "".join(entry.token for entry in tokens)
                logprobs = logprobs.model_copy(update={"content": tokens})
        value = json.loads(raw)
        for rule in self.rules:
            value = rule.apply(value, raw, logprobs, chat_completion)
        message = choice.message.model_copy(update={"content": json.dumps(value)})
        fields = choice.model_dump()
        fields.pop("logprobs", None)  # its tokens no longer match the rewritten content
        fields["message"] = message
        return ChatCompletionResponseChoice.model_validate(fields)


__all__ = [
    "ALL_RULES",
    "NAME_TO_RULE",
    "AddFieldsTransformation",
    "DecodeSentences",
    "DropDuplicates",
    "Explode",
    "InPlaceTransformation",
    "IntrinsicsResultProcessor",
    "MergeSpans",
    "Nest",
    "Project",
    "TokenToFloat",
    "TransformationRule",
]
