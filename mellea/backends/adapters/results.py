"""An adapter function's raw output -> its result, by the ``transformations`` of its io.yaml.

The output is JSON (the request constrained it to the adapter's schema). Each
transformation rewrites the values at the paths ``input_path`` matches (``null`` in a
path matches any key or index), in order, as upstream's ``IntrinsicsResultProcessor``
does:

- ``likelihood``: a categorical value becomes the expected value of
  ``categories_to_values`` under the token probabilities of the value's first token
  (so ``{"score": "yes"}`` becomes ``{"score": 0.97}``); needs log-probabilities;
- ``nest``: a value becomes ``{field_name: value}``;
- ``project``: records keep only ``retained_fields`` (a list, or old -> new names);
- ``explode``: each record becomes one per element of its list ``target_field``;
- ``drop_duplicates``: records with the same ``target_fields`` keep the last one;
- ``decode_sentences``: a sentence number (the request marked sentences ``<c0>``,
  ``<c1>``, ...) becomes the sentence's ``begin``/``end`` offsets, ``text`` and, for
  ``documents``, ``document_id`` (or ``message_index``), under the ``output_names``
  given, beside the number's field;
- ``merge_spans``: records of one ``group_fields`` group whose spans touch become one.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Callable
from typing import Any

from mellea.backends.adapters.harmony import final_channel_span
from mellea.backends.adapters.io import IntrinsicRequest, IOConfigError, sentence_tag
from mellea.core.logprobs import TokenLogprob

Path = tuple[str | int, ...]
log = logging.getLogger("mellea.backends.adapters")


class AdapterSchemaMismatchError(ValueError):
    """An adapter's output lacks a field its function's result must have."""

    def __init__(
        self, name: str, observed_keys: frozenset[str], expected_keys: frozenset[str]
    ) -> None:
        self.name = name
        self.observed_keys = observed_keys
        self.expected_keys = expected_keys
        # the fields themselves as args, so the error survives pickle and copy
        super().__init__(name, observed_keys, expected_keys)

    def __str__(self) -> str:
        missing = sorted(self.expected_keys - self.observed_keys)
        return (
            f"adapter '{self.name}' output does not match its contract: expected "
            f"{sorted(self.expected_keys)}, got {sorted(self.observed_keys)} (missing {missing})"
        )


def process_output(
    config: dict[str, Any],
    raw: str,
    logprobs: list[TokenLogprob] | None = None,
    request: IntrinsicRequest | None = None,
) -> str:
    """The adapter's result for ``raw`` output, as JSON text (what the thunk holds).

    ``request`` is what was sent (``decode_sentences`` reads its marked sentences).
    With the io.yaml's ``logprobs_workaround``, the answer is read from the tokens of
    a Harmony output's final channel (:func:`harmony_answer`).
    """
    if config.get("logprobs_workaround") and logprobs:
        raw, logprobs = harmony_answer(raw, logprobs)
    rules = config.get("transformations") or []
    if not rules:
        return raw
    try:
        value, literals = parse_with_positions(raw)
    except ValueError as exc:
        raise ValueError(f"adapter output is not JSON: {exc}: {raw[:200]!r}") from None
    for rule in rules:
        value = apply_rule(rule, value, raw, literals, logprobs, config, request)
    return json.dumps(value)


def harmony_answer(raw: str, logprobs: list[TokenLogprob]) -> tuple[str, list[TokenLogprob]]:
    """The answer text and its tokens from a Harmony output's final channel; ``raw``
    and ``logprobs`` unchanged when the tokens hold no final channel. Where the
    tokens and ``raw`` disagree, the tokens win (a warning says so)."""
    span = final_channel_span([t.token for t in logprobs])
    if span is None:
        return raw, logprobs
    tokens = logprobs[span[0] : span[1]]
    text = "".join(t.token for t in tokens)
    if text != raw:
        log.warning("adapter output differs from its final-channel tokens; the tokens are used")
    return text, tokens


def apply_rule(
    rule: dict[str, Any],
    value: Any,
    raw: str,
    literals: dict[Path, tuple[Any, int]],
    logprobs: list[TokenLogprob] | None,
    config: dict[str, Any] | None = None,
    request: IntrinsicRequest | None = None,
) -> Any:
    """``value`` with one transformation applied at every path it matches."""
    kind = rule.get("type")
    pattern = list(rule.get("input_path") or [])
    if kind == "decode_sentences":
        if request is None or config is None:
            raise ValueError("decode_sentences needs the request that was sent")
        table = _sentence_table(rule, config, request)
        return _apply_beside(copy.deepcopy(value), pattern, _decode_sentence(rule, table))
    if kind == "likelihood":
        if not logprobs:
            raise ValueError("the likelihood transformation needs the output's log-probabilities")
        starts = token_starts(logprobs)
        table = rule.get("categories_to_values")

        def change(v: Any, path: Path) -> Any:
            return likelihood(v, path, literals, starts, logprobs, table)
    elif kind == "nest":
        name = rule["field_name"]

        def change(v: Any, path: Path) -> Any:
            return {name: v}
    elif kind == "project":
        change = _project(rule["retained_fields"])
    elif kind == "explode":
        change = _explode(rule["target_field"])
    elif kind == "drop_duplicates":
        change = _drop_duplicates(list(rule["target_fields"]))
    elif kind == "merge_spans":
        change = _merge_spans(
            list(rule["group_fields"]),
            rule["begin_field"],
            rule["end_field"],
            rule.get("text_field"),
        )
    else:
        raise IOConfigError(f"the '{kind}' transformation is not implemented in this library yet")
    return _apply_at_matches(copy.deepcopy(value), pattern, change)


def _apply_at_matches(value: Any, pattern: list, change: Callable[[Any, Path], Any]) -> Any:
    """Replace every sub-value whose path matches ``pattern`` by ``change(sub, path)``."""

    def walk(node: Any, depth: int, path: Path) -> Any:
        if depth == len(pattern):
            return change(node, path)
        want = pattern[depth]
        if isinstance(node, dict):
            for key in list(node):
                if want is None or key == want:
                    node[key] = walk(node[key], depth + 1, (*path, key))
        elif isinstance(node, list):
            for index in range(len(node)):
                if want is None or index == want:
                    node[index] = walk(node[index], depth + 1, (*path, index))
        return node

    return walk(value, 0, ())


def likelihood(
    value: Any,
    path: Path,
    literals: dict[Path, tuple[Any, int]],
    starts: dict[int, int],
    logprobs: list[TokenLogprob],
    table: dict[Any, float] | None,
) -> float:
    """The expected value of a categorical literal under its first token's alternatives."""
    table = table or {}
    literal = literals.get(path)
    if literal is None or literal[0] != value:
        raise ValueError(f"no literal at {list(path)} in the adapter's output to read")
    offset = literal[1] + (1 if isinstance(value, str) else 0)  # past the opening quote
    index = starts.get(offset)
    if index is None:
        # The value began inside a token (e.g. `"yes` as one token): its probability
        # cannot be read, so take the value itself, as upstream does.
        before = max((o for o in starts if o <= offset), default=None)
        if before is not None and logprobs[starts[before]].token.endswith(json.dumps(value)):
            return table[value]
        raise ValueError(f"the value at {list(path)} does not start on a token boundary")
    chosen = logprobs[index]
    values: list[float] = []
    weights: list[float] = []
    if value in table:
        values.append(table[value])
        weights.append(math.exp(chosen.logprob))
    for alternative in chosen.top_logprobs:
        if alternative.token == chosen.token:
            continue  # some engines list the chosen token among the alternatives too
        for category, category_value in table.items():
            if alternative.token and str(category).startswith(alternative.token):
                values.append(category_value)
                weights.append(math.exp(alternative.logprob))
                break
    total = sum(weights)
    if not values or total <= 0:
        return 0.0
    return sum(w / total * v for w, v in zip(weights, values, strict=True))


def token_starts(logprobs: list[TokenLogprob]) -> dict[int, int]:
    """Character offset in the output -> the index of the token that begins there."""
    starts: dict[int, int] = {}
    offset = 0
    for index, token in enumerate(logprobs):
        starts.setdefault(offset, index)
        text = bytes(token.bytes).decode("utf-8", "replace") if token.bytes else token.token
        offset += len(text)
    return starts


def _project(retained: list[str] | dict[str, str]) -> Callable[[Any, Path], Any]:
    names = {f: f for f in retained} if isinstance(retained, list) else dict(retained)

    def change(value: Any, path: Path) -> Any:
        if isinstance(value, dict):
            return {new: value.get(old) for old, new in names.items()}
        if isinstance(value, list):
            return [{new: r.get(old) for old, new in names.items()} for r in value]
        raise ValueError(f"project: the value at {list(path)} is not a record or a list")

    return change


def _explode(target: str) -> Callable[[Any, Path], Any]:
    def change(value: Any, path: Path) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"explode: the value at {list(path)} is not a list")
        rows = []
        for record in value:
            if not isinstance(record, dict) or not isinstance(record.get(target), list):
                raise ValueError(f"explode: a record at {list(path)} has no list '{target}'")
            for item in record[target]:
                rows.append({k: item if k == target else v for k, v in record.items()})
        return rows

    return change


def _drop_duplicates(targets: list[str]) -> Callable[[Any, Path], Any]:
    def change(value: Any, path: Path) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"drop_duplicates: the value at {list(path)} is not a list")
        kept: dict[tuple, Any] = {}
        for record in value:
            key = tuple(json.dumps(record.get(t), sort_keys=True) for t in targets)
            kept[key] = record
        return list(kept.values())

    return change


def _merge_spans(
    group: list[str], begin: str, end: str, text: str | None
) -> Callable[[Any, Path], Any]:
    def change(value: Any, path: Path) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"merge_spans: the value at {list(path)} is not a list")
        ordered = sorted(value, key=lambda r: (*(str(r.get(g)) for g in group), r[begin]))
        merged: list[dict[str, Any]] = []
        for record in ordered:
            last = merged[-1] if merged else None
            same_group = last is not None and all(last.get(g) == record.get(g) for g in group)
            if last is not None and same_group and last[end] == record[begin]:
                last[end] = record[end]
                if text is not None:
                    last[text] += record[text]
            else:
                merged.append(dict(record))
        return merged

    return change


def _sentence_table(
    rule: dict[str, Any], config: dict[str, Any], request: IntrinsicRequest
) -> list[dict[str, Any]]:
    """Every marked sentence of the request's ``source`` locations, in numbering order:
    its offsets and text in the unmarked text, and its document id or message index."""
    sources = rule["source"] if isinstance(rule["source"], list) else [rule["source"]]
    boundaries = config.get("sentence_boundaries") or {}
    how = config.get("docs_as_message")
    if how == "string":
        raise IOConfigError("decode_sentences cannot read documents sent as a string message")
    table: list[dict[str, Any]] = []
    for source in sources:
        tag = boundaries.get(source)
        if not tag:
            raise IOConfigError(f"decode_sentences reads '{source}', which has no sentence marker")
        if source == "documents":
            for doc in _sent_documents(request, how):
                for sentence in desplit(doc["text"], tag, len(table)):
                    table.append({**sentence, "document_id": doc.get("doc_id")})
        elif source == "last_message":
            index = -2 if config.get("instruction") else -1
            table.extend(desplit(request.messages[index]["content"], tag, len(table)))
        elif source == "all_but_last_message":
            last = -2 if config.get("instruction") else -1
            for i, message in enumerate(request.messages[:last]):
                for sentence in desplit(message["content"], tag, len(table)):
                    table.append({**sentence, "message_index": i})
        else:
            raise IOConfigError(f"decode_sentences: unknown source '{source}'")
    return table


def _sent_documents(request: IntrinsicRequest, how: str | None) -> list[dict[str, Any]]:
    """The documents as sent: beside the messages, or inside them (json, roles)."""
    if not how:
        return request.documents
    if how == "json":
        return json.loads(request.messages[0]["content"])
    return [
        {"doc_id": m["role"][len("document ") :], "text": m["content"]}
        for m in request.messages
        if m["role"].startswith("document ")
    ]


def desplit(text: str, tag: str, first: int) -> list[dict[str, Any]]:
    """The sentences of marked ``text`` (markers ``<tag{first}> ``, ``<tag{first+1}> ``,
    ...): each one's ``begin``/``end`` in the text without markers, and its ``text``."""
    marker = sentence_tag(tag, first)
    at = text.find(marker)
    if at == -1:
        raise ValueError(f"sentence marker '{marker}' not found in {text[:80]!r}")
    sentences: list[dict[str, Any]] = []
    begin, start, number = 0, at + len(marker), first
    while True:
        following = text.find(sentence_tag(tag, number + 1), start)
        piece = text[start:] if following == -1 else text[start:following]
        sentences.append({"begin": begin, "end": begin + len(piece), "text": piece})
        if following == -1:
            return sentences
        begin += len(piece)
        start = following + len(sentence_tag(tag, number + 1))
        number += 1


def _decode_sentence(
    rule: dict[str, Any], table: list[dict[str, Any]]
) -> Callable[[Any, Path], dict[str, Any]]:
    names = dict(rule.get("output_names") or {})
    known = {"begin", "end", "text", "document_id", "message_index"}
    if set(names) - known:
        raise IOConfigError(f"decode_sentences: unknown output_names {sorted(set(names) - known)}")

    def fields(value: Any, path: Path) -> dict[str, Any]:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < len(table):
            raise ValueError(f"decode_sentences: no sentence {value!r} (at {list(path)})")
        sentence = table[value]
        return {name: sentence.get(role) for role, name in names.items()}

    return fields


def _apply_beside(value: Any, pattern: list, fields: Callable[[Any, Path], dict]) -> Any:
    """Add ``fields(sub, path)`` to the object holding each matched field."""

    def walk(node: Any, depth: int, path: Path) -> Any:
        if depth == len(pattern) - 1:
            want = pattern[depth]
            if not isinstance(node, dict):
                raise ValueError(f"decode_sentences: {list(path)} is not an object")
            for key in [k for k in node if want is None or k == want]:
                node.update(fields(node[key], (*path, key)))
            return node
        want = pattern[depth]
        items = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else []
        )
        for key, child in list(items):
            if want is None or key == want:
                node[key] = walk(child, depth + 1, (*path, key))
        return node

    if not pattern:
        raise IOConfigError("decode_sentences needs an input_path to a field")
    return walk(value, 0, ())


def parse_with_positions(text: str) -> tuple[Any, dict[Path, tuple[Any, int]]]:
    """``json.loads(text)`` and, for each scalar, its path -> (value, start offset)."""
    decoder = json.JSONDecoder()
    literals: dict[Path, tuple[Any, int]] = {}

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def parse(i: int, path: Path) -> tuple[Any, int]:
        i = skip(i)
        if i >= len(text):
            raise ValueError("unexpected end")
        if text[i] == "{":
            result: dict[str, Any] = {}
            i = skip(i + 1)
            if text[i : i + 1] == "}":
                return result, i + 1
            while True:
                key, i = decoder.raw_decode(text, skip(i))
                i = skip(i)
                if text[i : i + 1] != ":":
                    raise ValueError(f"expected ':' at {i}")
                result[key], i = parse(i + 1, (*path, key))
                i = skip(i)
                if text[i : i + 1] == "}":
                    return result, i + 1
                if text[i : i + 1] != ",":
                    raise ValueError(f"expected ',' or '}}' at {i}")
                i += 1
        if text[i] == "[":
            items: list[Any] = []
            i = skip(i + 1)
            if text[i : i + 1] == "]":
                return items, i + 1
            while True:
                item, i = parse(i, (*path, len(items)))
                items.append(item)
                i = skip(i)
                if text[i : i + 1] == "]":
                    return items, i + 1
                if text[i : i + 1] != ",":
                    raise ValueError(f"expected ',' or ']' at {i}")
                i += 1
        value, end = decoder.raw_decode(text, i)
        literals[path] = (value, i)
        return value, end

    value, end = parse(0, ())
    if skip(end) != len(text):
        raise ValueError(f"extra data at {end}")
    return value, literals


__all__ = [
    "AdapterSchemaMismatchError",
    "apply_rule",
    "parse_with_positions",
    "process_output",
    "token_starts",
]
