"""Turn a ``response_format`` JSON schema into the pydantic model a program's ``format`` expects."""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

from mellea.serve.bounds import MAX_SCHEMA_VALUES, schema_problem

log = logging.getLogger("mellea.serve")

_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}


class UnsupportedSchemaError(ValueError):
    """The schema uses a construct this converter does not handle."""


def model_from_schema(schema: dict[str, Any], name: str = "Output") -> type[BaseModel]:
    """A pydantic model class validating what ``schema`` (an object schema) describes.

    Raises :class:`UnsupportedSchemaError`, with a message meant for the client, for a
    schema that is malformed, too deep or large (``mellea.serve.bounds``), or uses a
    construct this converter does not handle.
    """
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise UnsupportedSchemaError("the top-level schema must have type 'object'")
    problem = schema_problem(schema)
    if problem is not None:
        raise UnsupportedSchemaError(problem)
    defs = schema.get("$defs", {})
    if not isinstance(defs, dict):
        raise UnsupportedSchemaError("'$defs' must be an object")
    try:
        return _Converter(defs).object_model(schema, _identifier(name))
    except UnsupportedSchemaError:
        raise
    except Exception:  # pydantic refusing a field name or type; its text is not for clients
        log.debug("schema conversion failed", exc_info=True)
        raise UnsupportedSchemaError(
            "the schema could not be turned into a model; check its property names and types"
        ) from None


class _Converter:
    """Builds annotations for one schema, each ``$defs`` entry once.

    A definition is turned into its annotation the first time a ``$ref`` names it and
    reused after, so the work is linear in the schema's size: a small schema whose
    references fan out (each definition naming the next one twice) would otherwise
    expand exponentially.
    """

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.budget = MAX_SCHEMA_VALUES  # annotations built: a bound on the work, as a backstop
        self.refs: list[str] = []  # the $refs being expanded, to refuse a recursive one
        self.resolved: dict[str, Any] = {}  # $ref -> its annotation, built once

    def object_model(self, schema: dict[str, Any], name: str) -> type[BaseModel]:
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            raise UnsupportedSchemaError("'properties' must be an object")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise UnsupportedSchemaError("'required' must be a list of property names")
        fields: dict[str, Any] = {}
        for field, sub in properties.items():
            annotation = self.annotation(sub, f"{name}_{_identifier(field)}")
            fields[field] = (annotation, ...) if field in required else (annotation | None, None)
        extra = "forbid" if schema.get("additionalProperties") is False else "allow"
        return create_model(name, __config__=ConfigDict(extra=extra), **fields)

    def annotation(self, schema: Any, name: str) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise UnsupportedSchemaError("the schema expands to too many types through $ref")
        if not isinstance(schema, dict):
            raise UnsupportedSchemaError("every property schema must be an object")
        if "$ref" in schema:
            return self._ref(schema["$ref"])
        if "enum" in schema:
            return Literal[tuple(_scalars(schema["enum"], "enum"))]
        if "const" in schema:
            return Literal[tuple(_scalars([schema["const"]], "const"))]
        if "anyOf" in schema:
            choices = schema["anyOf"]
            if not isinstance(choices, list) or not choices:
                raise UnsupportedSchemaError("'anyOf' must be a non-empty list of schemas")
            options = [self.annotation(s, f"{name}_{i}") for i, s in enumerate(choices)]
            union = options[0]
            for option in options[1:]:
                union = union | option
            return union
        kind = schema.get("type")
        if isinstance(kind, list):
            if not kind or not all(isinstance(t, str) for t in kind):
                raise UnsupportedSchemaError("a list 'type' must name types as strings")
            return self.annotation({**schema, "anyOf": [{**schema, "type": t} for t in kind]}, name)
        if kind in _SCALARS:
            return _SCALARS[kind]
        if kind == "null":
            return type(None)
        if kind == "array":
            return list[self.annotation(schema.get("items", {"type": "string"}), name)]
        if kind == "object":
            if "properties" in schema:
                return self.object_model(schema, name)
            return dict[str, Any]
        shown = kind if isinstance(kind, str) else type(kind).__name__
        raise UnsupportedSchemaError(f"unsupported schema type {str(shown)[:64]!r}")

    def _ref(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#/$defs/") or ref[8:] not in self.defs:
            shown = ref[:64] if isinstance(ref, str) else type(ref).__name__
            raise UnsupportedSchemaError(f"unsupported $ref {shown!r}; use '#/$defs/<name>'")
        if ref in self.resolved:
            return self.resolved[ref]
        if ref in self.refs:
            raise UnsupportedSchemaError(f"recursive $ref {ref[:64]!r} is not supported")
        self.refs.append(ref)
        try:
            annotation = self.annotation(self.defs[ref[8:]], _identifier(ref[8:]))
        finally:
            self.refs.pop()
        self.resolved[ref] = annotation
        return annotation


def _scalars(values: Any, keyword: str) -> list[Any]:
    """``enum`` / ``const`` values, which must be JSON scalars for a ``Literal``."""
    if not isinstance(values, list) or not values:
        raise UnsupportedSchemaError(f"'{keyword}' must be a non-empty list of values")
    if not all(v is None or isinstance(v, (str, int, float, bool)) for v in values):
        raise UnsupportedSchemaError(
            f"'{keyword}' values must be strings, numbers, booleans or null"
        )
    return values


def _identifier(text: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in text) or "Output"
    return cleaned if cleaned[0].isalpha() else f"M_{cleaned}"
