"""Both engines satisfy InferenceEngine, member by member and signature by signature."""

from __future__ import annotations

import inspect

import pytest

from mellea.engine.core import EngineCore
from mellea.engine.engine import Engine
from mellea.engine.fallback import FallbackCore, FallbackEngine
from mellea.engine.front import EngineFront
from mellea.engine.interface import (
    InferenceEngine,
    SteppingCore,
    missing_members,
    protocol_members,
)


def _parameters(function) -> list[tuple]:
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(function).parameters.values()
    ]


@pytest.mark.parametrize("engine_class", [Engine, FallbackEngine])
@pytest.mark.parametrize("name", protocol_members())
def test_engine_class_has_the_protocols_member_with_its_signature(engine_class, name):
    wanted = inspect.getattr_static(InferenceEngine, name, None)
    got = inspect.getattr_static(engine_class, name, None)
    if wanted is None:  # a data member (model_id): set on the instance
        assert name in InferenceEngine.__annotations__
        return
    if isinstance(wanted, property):
        assert isinstance(got, property), f"{engine_class.__name__}.{name} is not a property"
        return
    assert callable(got), f"{engine_class.__name__} has no method {name}"
    assert _parameters(got) == _parameters(wanted), name


def _core_members() -> list[str]:
    names = set(SteppingCore.__annotations__)
    return sorted(names | {n for n in vars(SteppingCore) if not n.startswith("_")})


@pytest.mark.parametrize("core_class", [EngineCore, FallbackCore])
@pytest.mark.parametrize("name", _core_members())
def test_both_cores_have_the_stepping_protocols_member(core_class, name):
    """The front steps either core through SteppingCore alone (its phases take each
    core's own types, so only the parameters' names, kinds and defaults must agree)."""
    wanted = inspect.getattr_static(SteppingCore, name, None)
    got = inspect.getattr_static(core_class, name, None)
    if wanted is None:  # a data member (eos_token_ids): set on the instance
        assert name in SteppingCore.__annotations__
        return
    if isinstance(wanted, property):
        assert isinstance(got, property), f"{core_class.__name__}.{name} is not a property"
        return
    assert callable(got), f"{core_class.__name__} has no method {name}"
    assert [p[:3] for p in _parameters(got)] == [p[:3] for p in _parameters(wanted)], name


def test_both_engines_are_the_one_front():
    assert issubclass(Engine, EngineFront) and issubclass(FallbackEngine, EngineFront)


def test_the_protocol_names_what_the_serving_side_uses():
    assert set(protocol_members()) >= {
        "add_request",
        "abort",
        "apply_chat_template",
        "compile_grammar",
        "tokenizer",
        "max_model_len",
        "stats",
        "shutdown",
        "model_id",
    }


def test_a_built_engine_is_one(make_engine):
    engine = make_engine()
    assert isinstance(engine, InferenceEngine) and missing_members(engine) == []
    assert isinstance(engine.core, SteppingCore)
    assert engine.weights == engine.config.weights == "float32"


def test_missing_members_names_what_an_object_lacks():
    class Half:
        model_id = "x"

        def stats(self) -> dict:
            return {}

    assert not isinstance(Half(), InferenceEngine)
    assert "add_request" in missing_members(Half()) and "stats" not in missing_members(Half())


def test_the_runtime_refuses_a_factory_that_builds_no_engine(tmp_path):
    from mellea.backends.runtime import Runtime

    class NotAnEngine:
        def __init__(self, model, **kwargs) -> None:
            self.model_id = model.model_id

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(TypeError, match=r"NotAnEngine is not an InferenceEngine .*add_request"):
        Runtime(engine_factory=NotAnEngine).engine(str(tmp_path))


def test_the_runtime_resolves_the_model_once_and_hands_it_down(tmp_path, monkeypatch):
    from mellea.backends.runtime import Runtime
    from mellea.engine import loader
    from mellea.engine.loader import ResolvedModel
    from tests.stub_engine import FakeEngine

    calls = []
    resolve = loader.resolve_model
    monkeypatch.setattr(
        loader, "resolve_model", lambda *a, **k: calls.append(a) or resolve(*a, **k)
    )
    built = []

    class Recording(FakeEngine):
        def __init__(self, model, **kwargs) -> None:
            built.append(model)
            super().__init__(model, **kwargs)

    (tmp_path / "config.json").write_text("{}")
    engine = Runtime(engine_factory=Recording).engine(str(tmp_path))
    assert len(calls) == 1
    assert built == [ResolvedModel(tmp_path, str(tmp_path))] and engine.model_id == str(tmp_path)


def test_runtime_engine_and_factory_resolve_a_model_once(tiny_model_dir, monkeypatch):
    """Runtime -> build_engine -> Engine: the directory is looked up by the runtime only."""
    from mellea.backends.runtime import Runtime
    from mellea.engine import loader

    calls = []
    resolve = loader.resolve_model
    monkeypatch.setattr(
        loader, "resolve_model", lambda *a, **k: calls.append(a) or resolve(*a, **k)
    )
    runtime = Runtime()
    try:
        engine = runtime.engine(str(tiny_model_dir))
        assert isinstance(engine, Engine) and len(calls) == 1
        assert engine.model_id == str(tiny_model_dir)
    finally:
        runtime.shutdown()
