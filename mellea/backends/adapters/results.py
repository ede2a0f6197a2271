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
- ``drop_duplicates``: records with the same ``target_fields`` keep the last one.

``decode_sentences`` and ``merge_spans`` (the sentence-offset rules of citations,
hallucination detection and context attribution) are not implemented yet: an
:class:`IOConfigError` says so.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any

from mellea.backends.adapters.io import IOConfigError
from mellea.core.logprobs import TokenLogprob

Path = tuple[str | int, ...]


class AdapterSchemaMismatchError(ValueError):
    """An adapter's output lacks a field its function's result must have."""

    def __init__(
        self, name: str, observed_keys: frozenset[str], expected_keys: frozenset[str]
    ) -> None:
        self.name = name
        self.observed_keys = observed_keys
        self.expected_keys = expected_keys
        missing = sorted(expected_keys - observed_keys)
        super().__init__(
            f"adapter '{name}' output does not match its contract: expected "
            f"{sorted(expected_keys)}, got {sorted(observed_keys)} (missing {missing})"
        )


def process_output(
    config: dict[str, Any], raw: str, logprobs: list[TokenLogprob] | None = None
) -> str:
    """The adapter's result for ``raw`` output, as JSON text (what the thunk holds)."""
    rules = config.get("transformations") or []
    if not rules:
        return raw
    try:
        value, literals = parse_with_positions(raw)
    except ValueError as exc:
        raise ValueError(f"adapter output is not JSON: {exc}: {raw[:200]!r}") from None
    for rule in rules:
        value = apply_rule(rule, value, raw, literals, logprobs)
    return json.dumps(value)


def apply_rule(
    rule: dict[str, Any],
    value: Any,
    raw: str,
    literals: dict[Path, tuple[Any, int]],
    logprobs: list[TokenLogprob] | None,
) -> Any:
    """``value`` with one transformation applied at every path it matches."""
    kind = rule.get("type")
    pattern = list(rule.get("input_path") or [])
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
