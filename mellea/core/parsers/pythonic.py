"""Pythonic calls (Llama 3.2/4 and others): ``[get_weather(city="Paris"), f(x=[1, 2])]``."""

from __future__ import annotations

import ast
import math
import warnings
from typing import Any

from mellea.core.parsers._text import canonical_arguments
from mellea.core.parsers.tool_calls import ParsedToolCall, ScanningToolParser


class _NotACall(ValueError):
    pass


def _jsonable(value: Any) -> Any:
    """``value`` if JSON can carry it unchanged (tuples become lists), else raise."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotACall("non-finite number")
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _jsonable(item) for key, item in value.items()}
    raise _NotACall(f"{type(value).__name__} is not a JSON value")


def _dotted_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise _NotACall("the called object is not a name")


def _call(node: ast.expr) -> ParsedToolCall:
    if not isinstance(node, ast.Call) or node.args:
        raise _NotACall("not a call with keyword arguments only")
    args = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise _NotACall("**kwargs")
        # literal_eval accepts literals only: nothing from the model is ever executed.
        args[keyword.arg] = _jsonable(ast.literal_eval(keyword.value))
    return ParsedToolCall(name=_dotted_name(node.func), arguments=canonical_arguments(args))


def parse_call_list(source: str) -> list[ParsedToolCall] | None:
    """The calls of a Python list of keyword-argument calls, None if ``source`` is not one.

    Raises ``SyntaxError`` when ``source`` is not a complete Python expression.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. invalid escape sequences in the model's strings
        tree = ast.parse(source, mode="eval").body
    if not isinstance(tree, ast.List) or not tree.elts:
        return None
    try:
        return [_call(node) for node in tree.elts]
    except (ValueError, TypeError, RecursionError, MemoryError):
        return None


class PythonicToolParser(ScanningToolParser):
    """A reply that starts with a Python list of calls, optionally in Llama 4's python tags.

    The list ends at the first ``]`` where the text so far is a complete Python expression
    (a ``]`` inside a string never completes one). A reply that does not start with ``[``
    is all content; so is a list that is not made of keyword-argument calls on literals.
    """

    name = "pythonic"
    tag = "<|python_start|>"
    end_tag = "<|python_end|>"

    def __init__(self) -> None:
        """Start a reply before its list."""
        super().__init__()
        self._searched = 0

    def _step(self, final: bool) -> bool:
        if self._state == "pass":
            return self._pass_rest()
        if self._state == "list":
            return self._list(final)
        if not self._skip_space(final):
            return False
        for tag, state in ((self.tag, "expect"), (self.end_tag, "after")):
            if self._state == state and tag.startswith(self._buf[: len(tag)]):
                if len(self._buf) < len(tag):
                    if not final:
                        return False
                    break
                if state == "expect":
                    self._raw, self._state = tag, "tagged"
                else:
                    self._state = "pass"
                self._buf = self._buf[len(tag) :]
                return True
        if self._state in ("expect", "tagged") and self._buf[0] == "[":
            self._state, self._searched = "list", 0
        elif self._state == "tagged":
            self._fallback()
        else:
            self._state = "pass"
        return True

    def _list(self, final: bool) -> bool:
        at = self._buf.find("]", self._searched)
        while at >= 0:
            try:
                calls = parse_call_list(self._buf[: at + 1])
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                at = self._buf.find("]", at + 1)
                continue
            region, self._buf = self._buf[: at + 1], self._buf[at + 1 :]
            if calls is None:
                self._raw += region
                self._fallback()
                return True
            self._raw, self._state = "", "after"
            for call in calls:
                self._call(call)
            return True
        self._searched = len(self._buf)
        if final:
            self._raw, self._buf = self._raw + self._buf, ""
            self._fallback()
        return False
