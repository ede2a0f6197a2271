"""How much one request may ask for, and the checks that hold requests to it.

Every number a client can multiply (generations, stop strings, logit biases, tools,
schema nodes, JSON values) has its bound here, so that one request cannot slow the
requests batched with it, and so that a hostile body is refused with a 400 naming
the field before the server spends time on it. ``docs/serve.md`` lists them.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic_core import PydanticCustomError

from mellea.serve.errors import OpenAIError

MAX_BODY_DEPTH = 64  # nesting levels of the whole JSON body
MAX_BODY_VALUES = 30_000  # JSON values in a body; validating them holds the loop ~10 us each
MAX_CHOICES = 128  # ``n``
MAX_GENERATIONS = 128  # ``/v1/completions``: prompts x ``n``
MAX_STOP_SEQUENCES = 16  # entries of ``stop`` (OpenAI allows 4)
MAX_STOP_CHARS = 256  # characters of one stop string
MAX_LOGIT_BIAS = 300  # entries of ``logit_bias``, as OpenAI
LOGIT_BIAS_RANGE = 100.0  # each bias lies in [-100, 100], as OpenAI
MAX_TOP_LOGPROBS = 20  # chat ``top_logprobs``, Responses ``top_logprobs``
MAX_PROMPT_LOGPROBS = 20  # ``/v1/completions`` ``prompt_logprobs`` (vLLM's default cap)
MAX_TOOLS = 128  # entries of ``tools``, as OpenAI
MAX_SCHEMA_DEPTH = 48  # nesting levels of one tool or output JSON schema
MAX_SCHEMA_VALUES = 10_000  # JSON values in one tool or output JSON schema
MAX_REQUIREMENTS = 64  # mellea ``requirements``: each may cost the program a model call
MAX_METADATA_PAIRS = 16  # ``metadata``, as OpenAI
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512

MAX_SALT_LENGTH = 256  # characters of a request's own ``cache_salt``
WIRE_PARAM = "wire_param"  # ctx key of a body error that names its field itself
_SURROGATE = re.compile("[\ud800-\udfff]")
_SHOWN_PARTS = 6  # path parts an error names; a deep path says no more than its start
_TOKEN_ID = re.compile("[0-9]{1,10}")  # ASCII digits only: int() also takes "²", " 1", "1_0"


def check_body(data: Any) -> Any:
    """Refuse, with one error, a body too deep, too large, or holding a lone surrogate.

    Meant as a pydantic ``mode="before"`` validator of a request model, so it runs on
    the parsed JSON before any field is validated: a body of a million bad items costs
    one walk up to the bound, not a million error objects. Returns ``data`` unchanged.
    """
    if not isinstance(data, dict):
        return data
    # Only containers are pushed, each with its path; strings are checked in place
    # (ASCII ones, nearly all, by one C call each).
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    count = 1
    while stack:
        value, path = stack.pop()
        if len(path) >= MAX_BODY_DEPTH:
            raise body_error(
                f"the request body nests deeper than {MAX_BODY_DEPTH} levels", path[:_SHOWN_PARTS]
            )
        count += len(value)  # counted before they are looked at: the walk stops at the bound
        if count > MAX_BODY_VALUES:
            raise body_error(
                f"the request body holds more than {MAX_BODY_VALUES} JSON values", path[:1]
            )
        if type(value) is dict:
            for key, item in value.items():
                if not key.isascii() and _SURROGATE.search(key):
                    raise _surrogate_error((*path, key))
                kind = type(item)
                if kind is str:
                    if not item.isascii() and _SURROGATE.search(item):
                        raise _surrogate_error((*path, key))
                elif kind is dict or kind is list:
                    stack.append((item, (*path, key)))
        else:
            for index, item in enumerate(value):
                kind = type(item)
                if kind is str:
                    if not item.isascii() and _SURROGATE.search(item):
                        raise _surrogate_error((*path, index))
                elif kind is dict or kind is list:
                    stack.append((item, (*path, index)))
    return data


def check_cache_salt(data: Any) -> None:
    """Refuse a body whose ``cache_salt`` is not a non-empty string of at most
    ``MAX_SALT_LENGTH`` characters (``null`` is no salt). A ``mode="before"`` check, like
    :func:`check_body`, and run before it: the error names ``cache_salt`` whatever else
    is wrong with the body."""
    if not isinstance(data, dict):
        return
    salt = data.get("cache_salt")
    if salt is not None and not (isinstance(salt, str) and 0 < len(salt) <= MAX_SALT_LENGTH):
        message = f"cache_salt must be a non-empty string of at most {MAX_SALT_LENGTH} characters"
        raise PydanticCustomError(
            "request_bounds", "{message}", {"message": message, WIRE_PARAM: "cache_salt"}
        )


def body_error(message: str, path: tuple[Any, ...]) -> PydanticCustomError:
    """A validation error whose message and field (``WIRE_PARAM`` in its ctx) are ours."""
    param = dotted(path)
    text = f"{param}: {message}" if param else message
    return PydanticCustomError("request_bounds", "{message}", {"message": text, WIRE_PARAM: param})


def _surrogate_error(path: tuple[Any, ...]) -> PydanticCustomError:
    return body_error(
        "the text holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), "
        "which is not valid Unicode",
        path,
    )


def dotted(path: tuple[Any, ...] | list[Any]) -> str | None:
    """``("messages", 0, "content")`` -> ``"messages[0].content"``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:  # a client's key: a surrogate in it is shown escaped, as it cannot be encoded
            name = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", str(part)[:64])
            text += f".{name}" if text else name
    return text or None


def check_generations(prompts: int, n: int) -> None:
    """400 when ``prompts`` x ``n`` generations exceed :data:`MAX_GENERATIONS`."""
    if prompts * n > MAX_GENERATIONS:
        param = "prompt" if prompts > MAX_GENERATIONS or n == 1 else "n"
        raise OpenAIError(
            400,
            f"{prompts} prompt(s) x n={n} asks for {prompts * n} generations; "
            f"this server allows at most {MAX_GENERATIONS} per request",
            param=param,
        )


def check_stop(stop: str | list[str] | None) -> None:
    """400 for too many, empty or too long stop strings."""
    if stop is None:
        return
    entries = [stop] if isinstance(stop, str) else stop
    if len(entries) > MAX_STOP_SEQUENCES:
        raise OpenAIError(
            400,
            f"stop holds {len(entries)} strings; at most {MAX_STOP_SEQUENCES} are allowed",
            param="stop",
        )
    for entry in entries:
        if entry == "" and not isinstance(stop, str):
            raise OpenAIError(400, "stop sequences must not be empty", param="stop")
        if len(entry) > MAX_STOP_CHARS:
            raise OpenAIError(
                400,
                f"a stop string is {len(entry)} characters long; "
                f"at most {MAX_STOP_CHARS} are allowed",
                param="stop",
            )


def check_logit_bias(bias: dict[str, float] | None) -> None:
    """400 unless ``bias`` maps at most 300 token ids (ASCII digits) to finite values in
    [-100, 100]. Token ids beyond the model's vocabulary are the backend's to refuse."""
    if not bias:
        return
    if len(bias) > MAX_LOGIT_BIAS:
        raise OpenAIError(
            400,
            f"logit_bias holds {len(bias)} entries; at most {MAX_LOGIT_BIAS} are allowed",
            param="logit_bias",
        )
    for key, value in bias.items():
        if not _TOKEN_ID.fullmatch(key):
            raise OpenAIError(
                400,
                f"logit_bias keys must be token ids (digits 0-9), got {key[:32]!r}",
                param="logit_bias",
            )
        if not (math.isfinite(value) and -LOGIT_BIAS_RANGE <= value <= LOGIT_BIAS_RANGE):
            raise OpenAIError(
                400,
                f"logit_bias values must be numbers from {-LOGIT_BIAS_RANGE:g} to "
                f"{LOGIT_BIAS_RANGE:g}; token {key} has {value!r}",
                param="logit_bias",
            )


def check_requirements(requirements: list[str] | None) -> None:
    """400 for more than :data:`MAX_REQUIREMENTS` requirements."""
    if requirements is not None and len(requirements) > MAX_REQUIREMENTS:
        raise OpenAIError(
            400,
            f"requirements holds {len(requirements)} entries; "
            f"at most {MAX_REQUIREMENTS} are allowed",
            param="requirements",
        )


def check_metadata(metadata: dict[str, str] | None) -> None:
    """400 for metadata over OpenAI's bounds (16 pairs, keys of 64, values of 512 characters)."""
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise OpenAIError(
            400, f"metadata holds at most {MAX_METADATA_PAIRS} pairs", param="metadata"
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS or len(value) > MAX_METADATA_VALUE_CHARS:
            raise OpenAIError(
                400,
                f"metadata keys hold at most {MAX_METADATA_KEY_CHARS} characters and values "
                f"at most {MAX_METADATA_VALUE_CHARS}",
                param="metadata",
            )


def check_tool_count(count: int) -> None:
    """400 for more than :data:`MAX_TOOLS` tools."""
    if count > MAX_TOOLS:
        raise OpenAIError(
            400, f"tools holds {count} tools; at most {MAX_TOOLS} are allowed", param="tools"
        )


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is too deep or too large to accept, or None if it is within bounds."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_SCHEMA_VALUES:
            return f"the schema holds more than {MAX_SCHEMA_VALUES} JSON values"
        if depth > MAX_SCHEMA_DEPTH:
            return f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return None


def check_schema(schema: Any, param: str) -> None:
    """400 naming ``param`` when ``schema`` is over the depth or size bound."""
    problem = schema_problem(schema)
    if problem is not None:
        raise OpenAIError(400, f"{param}: {problem}", param=param)


PRESCAN_BYTES = 1024 * 1024  # bodies up to this size parse in tens of ms at worst: no pre-scan


def too_many_values(body: bytes) -> bool:
    """Whether a raw JSON body surely holds more than :data:`MAX_BODY_VALUES` values.

    Parsing 16 MiB of ``[0,0,0,...]`` holds the event loop (and the GIL, so a thread
    does not help) for about half a second; this scan of the bytes takes a few
    percent of that. It counts what lies outside strings: strings are found between
    quotes once escaped backslashes and quotes are taken out, and the commas and
    brackets outside them bound the number of values from above. It errs towards
    False (the exact count follows the parse, in :func:`check_body`).
    """
    if len(body) <= PRESCAN_BYTES or _separators(body) <= 2 * MAX_BODY_VALUES:
        return False
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in body else body
    quotes = plain.count(b'"')
    # Each string is a key or a value, and each key has a value: values >= strings / 2.
    if quotes // 2 > 2 * MAX_BODY_VALUES:
        return True
    # Values = commas + non-empty containers (+1): twice the bound leaves room for empty ones.
    outside = sum(_separators(part) for part in plain.split(b'"')[0::2])
    return outside > 2 * MAX_BODY_VALUES


def _separators(data: bytes) -> int:
    return data.count(b",") + data.count(b"[") + data.count(b"{")
