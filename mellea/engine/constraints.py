"""Constrained decoding: only tokens a grammar allows may be sampled.

Built on llguidance, which computes the allowed-token mask for a JSON schema, a Lark
grammar or a regex in well under a millisecond per token on a CPU, ships prebuilt
wheels, and whose masks apply the same way to CPU and CUDA logits.
"""

from __future__ import annotations

import json
from typing import Any

import torch


class GrammarError(ValueError):
    """The grammar (e.g. a JSON schema) cannot be compiled."""


SAFE_INTEGER = 2**53 - 1  # the largest integer every JSON reader holds exactly


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The llguidance grammar for JSON text matching ``schema`` (compact, no free whitespace).

    Two tightenings keep a small model from running on until it runs out of tokens:
    integers without bounds get the JSON safe-integer range, and objects that list
    their ``properties`` without saying ``additionalProperties`` allow no others (as
    OpenAI's strict mode requires and xgrammar assumes by default).
    """
    import llguidance

    tightened = bounded_integers(closed_objects(schema))
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


def closed_objects(schema: Any) -> Any:
    """A copy of ``schema`` where objects with ``properties`` and no word on
    ``additionalProperties`` (or ``patternProperties``) allow no other properties."""
    if isinstance(schema, list):
        return [closed_objects(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _LITERALS:
            result[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            result[key] = {name: closed_objects(sub) for name, sub in value.items()}
        else:
            result[key] = closed_objects(value)
    open_ended = "additionalProperties" in schema or "patternProperties" in schema
    if isinstance(schema.get("properties"), dict) and not open_ended:
        result["additionalProperties"] = False
    return result


class ConstraintCompiler:
    """Builds per-request matchers over one tokenizer (its token table is built once)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self._hf_tokenizer = tokenizer
        self._ll_tokenizer: Any = None
        self.vocab_size = vocab_size

    def matcher(self, grammar: str) -> Constraint:
        """A fresh matcher for ``grammar``; :class:`GrammarError` if it does not compile."""
        import llguidance
        import llguidance.hf

        if self._ll_tokenizer is None:
            self._ll_tokenizer = llguidance.hf.from_tokenizer(self._hf_tokenizer)
        matcher = llguidance.LLMatcher(self._ll_tokenizer, grammar)
        error = matcher.get_error()
        if error:
            raise GrammarError(f"the grammar does not compile: {error}")
        return Constraint(matcher, self._ll_tokenizer.vocab_size)


class Constraint:
    """One sequence's grammar state: which tokens may come next, and what was accepted."""

    def __init__(self, matcher: Any, grammar_vocab: int) -> None:
        self.matcher = matcher
        self.grammar_vocab = grammar_vocab

    def accept(self, token: int) -> bool:
        """Advance past ``token``; False if the grammar did not allow it."""
        return bool(self.matcher.consume_token(token))


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
