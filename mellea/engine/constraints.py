"""Constrained decoding: only tokens a grammar allows may be sampled.

Built on llguidance, which computes the allowed-token mask for a JSON schema, a Lark
grammar or a regex in well under a millisecond per token on a CPU, ships prebuilt
wheels, and whose masks apply the same way to CPU and CUDA logits.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from mellea.engine.budget_guard import BudgetGuard, ClosingTokens


class GrammarError(ValueError):
    """The grammar (e.g. a JSON schema) cannot be compiled."""


SAFE_INTEGER = 2**53 - 1  # the largest integer every JSON reader holds exactly


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The llguidance grammar for JSON text matching ``schema`` (compact, no free whitespace).

    Three tightenings keep a small model from running on until it runs out of tokens:
    integers without bounds get the JSON safe-integer range, objects that list
    their ``properties`` without saying ``additionalProperties`` allow no others (as
    OpenAI's strict mode requires and xgrammar assumes by default), and a value the
    schema leaves free (``{"type": "object"}`` alone, ``{}``, ``true``, an array
    without ``items``) nests at most :data:`FREE_DEPTH` levels, each object or array
    of it holding at most :data:`FREE_MEMBERS` members (:func:`bounded_free_values`).
    """
    import llguidance

    tightened = bounded_integers(bounded_free_values(closed_objects(schema)))
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(tightened), defaults={"whitespace_flexible": False}
        )
    except Exception as exc:  # llguidance reports unsupported keywords as ValueError/RuntimeError
        raise GrammarError(f"unsupported JSON schema: {exc}") from None


def bounded_integers(schema: Any) -> Any:
    """A copy of ``schema`` where every unbounded integer is limited to the safe range."""
    if isinstance(schema, list):
        return [bounded_integers(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: bounded_integers(value) for key, value in schema.items()}
    kind = schema.get("type")
    if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
        if "minimum" not in schema and "exclusiveMinimum" not in schema:
            result["minimum"] = -SAFE_INTEGER
        if "maximum" not in schema and "exclusiveMaximum" not in schema:
            result["maximum"] = SAFE_INTEGER
    return result


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LITERALS = ("enum", "const", "default", "examples")


def _map_subschemas(schema: dict[str, Any], change: Any) -> dict[str, Any]:
    """A copy of ``schema`` with ``change`` applied to each subschema: the values of its
    schema maps (``properties``, ``$defs``, ...) and of every other key but literals."""
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _LITERALS:
            result[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            result[key] = {name: change(sub) for name, sub in value.items()}
        else:
            result[key] = change(value)
    return result


def closed_objects(schema: Any) -> Any:
    """A copy of ``schema`` where objects with ``properties`` and no word on
    ``additionalProperties`` (or ``patternProperties``) allow no other properties."""
    if isinstance(schema, list):
        return [closed_objects(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = _map_subschemas(schema, closed_objects)
    open_ended = "additionalProperties" in schema or "patternProperties" in schema
    if isinstance(schema.get("properties"), dict) and not open_ended:
        result["additionalProperties"] = False
    return result


# A value the schema leaves free (any JSON) opens at most this many levels of arrays
# and objects, each with at most FREE_MEMBERS members and strings of at most
# FREE_STRING characters: a model that keeps opening objects (a `dict` return type,
# whose schema is {"type": "object"}) must close them, and the text stays bounded.
FREE_DEPTH = 3
FREE_MEMBERS = 16
FREE_STRING = 512
FREE_KEY = 64  # characters of a free object's property names
# Keywords that say nothing about a value's shape: a schema of only these is free.
_ANNOTATIONS = {"title", "description", "default", "examples", "$comment", "$schema", "$id"}


def any_value(depth: int = FREE_DEPTH) -> dict[str, Any]:
    """A schema for any JSON value of at most ``depth`` levels of nesting."""
    options: list[dict[str, Any]] = [
        {"type": "string", "maxLength": FREE_STRING},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
    ]
    if depth > 0:
        inner = any_value(depth - 1)
        options.append({"type": "array", "items": inner, "maxItems": FREE_MEMBERS})
        options.append(free_members({"type": "object"}, inner))
    return {"anyOf": options}


def free_members(schema: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an object) with at most :data:`FREE_MEMBERS` members, each named in
    at most :data:`FREE_KEY` characters and a ``value``. The names are bounded through
    ``patternProperties`` (llguidance has no ``propertyNames``)."""
    return {
        **schema,
        "patternProperties": {f"^.{{0,{FREE_KEY}}}$": value},
        "additionalProperties": False,
        "maxProperties": schema.get("maxProperties", FREE_MEMBERS),
    }


def _is_free(schema: Any) -> bool:
    return schema is True or (isinstance(schema, dict) and set(schema) <= _ANNOTATIONS)


def _has_type(schema: dict[str, Any], kind: str) -> bool:
    declared = schema.get("type")
    return declared == kind or (isinstance(declared, list) and kind in declared)


def bounded_free_values(schema: Any) -> Any:
    """A copy of ``schema`` where every value it leaves free is :func:`any_value`: a
    free subschema (``{}``, ``true``, annotations only), the members of an object with
    no ``properties`` and no (or a free) ``additionalProperties``, the items of an array
    without (or with free) ``items``. Free members nest one level less than
    :data:`FREE_DEPTH`, so the document does too."""
    if _is_free(schema):
        extra = schema if isinstance(schema, dict) else {}
        return {**extra, **any_value()}
    if isinstance(schema, list):
        return [bounded_free_values(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = _map_subschemas(schema, bounded_free_values)
    member = any_value(FREE_DEPTH - 1)
    named = "properties" in schema or "patternProperties" in schema
    if (
        _has_type(schema, "object")
        and not named
        and _is_free(schema.get("additionalProperties", {}))
    ):
        result = free_members(result, member)
    if (
        _has_type(schema, "array")
        and "prefixItems" not in schema
        and _is_free(schema.get("items", {}))
    ):
        result["items"] = member
        result.setdefault("maxItems", FREE_MEMBERS)
    return result


class ConstraintCompiler:
    """Builds per-request matchers over one tokenizer (its token table is built once)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self._hf_tokenizer = tokenizer
        self._ll_tokenizer: Any = None
        self._closing: ClosingTokens | None = None
        self.vocab_size = vocab_size

    def matcher(self, grammar: str) -> Constraint:
        """A fresh matcher for ``grammar``; :class:`GrammarError` if it does not compile."""
        import llguidance
        import llguidance.hf

        if self._ll_tokenizer is None:
            self._ll_tokenizer = llguidance.hf.from_tokenizer(self._hf_tokenizer)
            self._closing = ClosingTokens(self._ll_tokenizer)
        matcher = llguidance.LLMatcher(self._ll_tokenizer, grammar)
        error = matcher.get_error()
        if error:
            raise GrammarError(f"the grammar does not compile: {error}")
        assert self._closing is not None
        return Constraint(matcher, self._ll_tokenizer.vocab_size, BudgetGuard(self._closing))


class Constraint:
    """One sequence's grammar state: which tokens may come next, and what was accepted.

    With a ``guard``, :meth:`within_budget` keeps the answer able to close before its
    token limit (:mod:`mellea.engine.budget_guard`).
    """

    def __init__(self, matcher: Any, grammar_vocab: int, guard: BudgetGuard | None = None) -> None:
        self.matcher = matcher
        self.grammar_vocab = grammar_vocab
        self.guard = guard

    def accept(self, token: int) -> bool:
        """Advance past ``token``; False if the grammar did not allow it."""
        ok = bool(self.matcher.consume_token(token))
        if ok and self.guard is not None:
            self.guard.accepted(token)
        return ok

    def budget_due(self, produced: int, max_tokens: int) -> bool:
        """Whether the next token (after ``produced`` of ``max_tokens``) must be checked
        by :meth:`within_budget`; cheap, so the sampler asks it every step."""
        return self.guard is not None and self.guard.due(produced, max_tokens)

    def within_budget(self, token: int, produced: int, max_tokens: int) -> int:
        """``token``, or the token to use instead so that the answer still closes
        within ``max_tokens`` (the grammar's state is not advanced)."""
        if self.guard is None:
            return token
        return self.guard.choose(self.matcher, token, produced, max_tokens)

    @property
    def closed_by_budget(self) -> bool:
        """Whether the budget replaced some sampled token to close the answer in time."""
        return self.guard is not None and self.guard.closed


def mask_logits(logits: torch.Tensor, constraints: list[Constraint | None]) -> None:
    """Set the logits of disallowed tokens to -inf, in place, for rows with a constraint."""
    rows = [i for i, c in enumerate(constraints) if c is not None]
    if not rows:
        return
    import llguidance.torch as llt

    first = constraints[rows[0]]
    assert first is not None
    bitmask = llt.allocate_token_bitmask(len(rows), first.grammar_vocab)
    for slot, row in enumerate(rows):
        constraint = constraints[row]
        assert constraint is not None
        llt.fill_next_token_bitmask(constraint.matcher, bitmask, slot)
    allowed = _unpack(bitmask, logits.shape[-1]).to(logits.device)
    index = torch.tensor(rows, device=logits.device)
    logits[index] = logits[index].masked_fill(~allowed, float("-inf"))


def _unpack(bitmask: torch.Tensor, width: int) -> torch.Tensor:
    """[R, ceil(V/32)] int32 bitmask -> [R, width] bool (tokens past the grammar's vocab: False)."""
    shifts = torch.arange(32, dtype=torch.int32)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    allowed = bits.flatten(1).bool()
    if allowed.shape[1] >= width:
        return allowed[:, :width]
    pad = torch.zeros(allowed.shape[0], width - allowed.shape[1], dtype=torch.bool)
    return torch.cat([allowed, pad], dim=1)
