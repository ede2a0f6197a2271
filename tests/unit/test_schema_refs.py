"""``$ref`` expansion in ``mellea.serve.schema`` is linear in the schema's size."""

from __future__ import annotations

import pytest

from mellea.serve import schema as schema_module
from mellea.serve.schema import UnsupportedSchemaError, model_from_schema


def fanned_out_schema(levels: int) -> dict:
    """About 100 bytes a level; each definition names the next one twice, so expanding
    the references one by one would build 2**levels types."""
    defs = {
        f"d{i}": {
            "type": "object",
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}, "b": {"$ref": f"#/$defs/d{i + 1}"}},
        }
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def _annotations_built(schema: dict, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many schema nodes the converter turned into annotations for ``schema``."""
    count = 0
    original = schema_module._Converter.annotation

    def counted(self, sub, name):
        nonlocal count
        count += 1
        return original(self, sub, name)

    monkeypatch.setattr(schema_module._Converter, "annotation", counted)
    model_from_schema(schema)
    return count


def test_work_grows_with_the_definitions_not_with_their_expansion(monkeypatch):
    # Counted work, not time: 2**levels expansions before, 3 nodes a level now.
    for levels in (10, 20, 40):
        assert _annotations_built(fanned_out_schema(levels), monkeypatch) <= 3 * levels + 3


def test_a_reused_definition_is_one_model():
    model = model_from_schema(fanned_out_schema(3))
    assert set(model.model_json_schema()["$defs"]) == {"d0", "d1", "d2"}
    value = {"x": {"a": {"a": {"a": "s", "b": "t"}, "b": {"a": "u", "b": "v"}}, "b": None}}
    assert model.model_validate(value).x.a.b.b == "v"


def test_a_recursive_reference_is_still_refused():
    schema = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
    }
    with pytest.raises(UnsupportedSchemaError, match="recursive"):
        model_from_schema(schema)
