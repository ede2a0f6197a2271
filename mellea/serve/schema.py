"""Turn a ``response_format`` JSON schema into the pydantic model a program's ``format`` expects."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}


class UnsupportedSchemaError(ValueError):
    """The schema uses a construct this converter does not handle."""


def model_from_schema(schema: dict[str, Any], name: str = "Output") -> type[BaseModel]:
    """A pydantic model class validating what ``schema`` (an object schema) describes."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise UnsupportedSchemaError("the top-level schema must have type 'object'")
    try:
        return _object_model(schema, _identifier(name), schema.get("$defs", {}))
    except UnsupportedSchemaError:
        raise
    except Exception as exc:  # a malformed schema (e.g. "required": 5, "enum": [])
        raise UnsupportedSchemaError(f"malformed schema: {exc}") from None


def _object_model(schema: dict[str, Any], name: str, defs: dict[str, Any]) -> type[BaseModel]:
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise UnsupportedSchemaError("'properties' must be an object")
    required = set(schema.get("required", []))
    fields: dict[str, Any] = {}
    for field, sub in properties.items():
        annotation = _annotation(sub, f"{name}_{_identifier(field)}", defs)
        fields[field] = (annotation, ...) if field in required else (annotation | None, None)
    extra = "forbid" if schema.get("additionalProperties") is False else "allow"
    return create_model(name, __config__=ConfigDict(extra=extra), **fields)


def _annotation(schema: Any, name: str, defs: dict[str, Any]) -> Any:
    if not isinstance(schema, dict):
        raise UnsupportedSchemaError("every property schema must be an object")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/") or ref[8:] not in defs:
            raise UnsupportedSchemaError(f"unsupported $ref {ref!r}")
        return _annotation(defs[ref[8:]], ref[8:], defs)
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    if "const" in schema:
        return Literal[schema["const"]]
    if "anyOf" in schema:
        options = [_annotation(s, f"{name}_{i}", defs) for i, s in enumerate(schema["anyOf"])]
        union = options[0]
        for option in options[1:]:
            union = union | option
        return union
    kind = schema.get("type")
    if isinstance(kind, list):
        return _annotation({**schema, "anyOf": [{**schema, "type": t} for t in kind]}, name, defs)
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "null":
        return type(None)
    if kind == "array":
        return list[_annotation(schema.get("items", {"type": "string"}), name, defs)]
    if kind == "object":
        if "properties" in schema:
            return _object_model(schema, name, defs)
        return dict[str, Any]
    raise UnsupportedSchemaError(f"unsupported schema type {kind!r}")


def _identifier(text: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in text) or "Output"
    return cleaned if cleaned[0].isalpha() else f"M_{cleaned}"
