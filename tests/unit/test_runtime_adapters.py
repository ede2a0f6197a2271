"""Adapters through the runtime and the local backend: ``--lora``, ``model_id=NAME``,
``ModelOption.ADAPTER`` (the engine's side is tests/engine/test_lora.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cli.serve.settings import ServeSettings, SettingsError, check_settings, parse_lora
from mellea.backends.local import LocalBackend
from mellea.backends.request_adapter import request_adapter
from mellea.backends.runtime import AdapterUnavailableError, Runtime
from mellea.core.model_options import ModelOption
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ProgramTrace
from mellea.serve.program_report import program_report
from tests.unit.test_runtime import FakeEngine


class AdapterEngine(FakeEngine):
    """A fake engine that loads adapters (refusing paths named "bad") and records the
    adapter each request asked for."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.adapters: dict[str, str] = {}
        self.asked: list[str | None] = []
        self.shut = False

    def load_adapter(self, name: str, path: str) -> None:
        if Path(path).name == "bad":
            raise ValueError("A has the wrong shape")
        self.adapters[name] = path

    async def add_request(self, prompt, params, request_id=None):
        self.asked.append(params.adapter)
        async for out in super().add_request(prompt, params, request_id):
            yield out

    def shutdown(self) -> None:
        self.shut = True


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


def generate(backend: LocalBackend, **options: Any) -> ModelOutputThunk:
    async def run() -> ModelOutputThunk:
        thunk = await backend.generate([{"role": "user", "content": "hi"}], model_options=options)
        await thunk.avalue()
        return thunk

    return asyncio.run(run())


def test_a_session_named_after_a_runtime_adapter_uses_it(model_dir: Path):
    runtime = Runtime(engine_factory=AdapterEngine, model=str(model_dir), adapters={"tuned": "/a"})
    tuned = LocalBackend("tuned", runtime=runtime)
    base = LocalBackend(str(model_dir), runtime=runtime)
    assert tuned.engine is base.engine and tuned.engine.adapters == {"tuned": "/a"}
    assert tuned.model_id == "tuned" and tuned.adapters == {"tuned": "/a"}
    generate(tuned)
    generate(base)
    generate(base, **{ModelOption.ADAPTER: "tuned"})  # a request picks the adapter
    generate(tuned, **{ModelOption.ADAPTER: None})  # or the base model
    assert tuned.engine.asked == ["tuned", None, "tuned", None]


def test_a_request_adapter_reaches_the_sessions_that_pick_none(model_dir: Path):
    runtime = Runtime(engine_factory=AdapterEngine, model=str(model_dir), adapters={"a1": "/a"})
    base = LocalBackend(runtime=runtime)
    mine = LocalBackend(runtime=runtime)
    mine.load_adapter("a2", "/b")
    tuned = LocalBackend("a2", runtime=runtime)
    with request_adapter("a1"):
        generate(base)  # picks none: the request's
        generate(base, **{ModelOption.ADAPTER: None})  # the call picks the base model
        generate(base, **{ModelOption.ADAPTER: "a2"})  # or another adapter
        generate(tuned)  # a session on an adapter keeps it
    with request_adapter("elsewhere"):  # an adapter this engine does not hold
        generate(base)
    generate(base)  # no request names one
    assert base.engine.asked == ["a1", None, "a2", "a2", None, None]


def test_a_session_on_an_engine_without_the_adapter_keeps_its_model(tmp_path: Path):
    first, second = tmp_path / "first", tmp_path / "second"
    for directory in (first, second):
        directory.mkdir()
        (directory / "config.json").write_text("{}")
    runtime = Runtime(engine_factory=AdapterEngine)
    owner = LocalBackend(str(first), runtime=runtime)
    owner.load_adapter("mine", "/m")
    other = LocalBackend(str(second), runtime=runtime)
    with request_adapter("mine"):
        generate(owner)
        generate(other)
    assert (owner.engine.asked, other.engine.asked) == (["mine"], [None])


def test_the_report_names_the_adapter_each_call_used(model_dir: Path):
    runtime = Runtime(engine_factory=AdapterEngine, model=str(model_dir), adapters={"a1": "/a"})
    base = LocalBackend(runtime=runtime)
    with request_adapter("a1"):
        tuned = generate(base)
    plain = generate(base)

    async def report() -> dict[str, Any] | None:
        trace = ProgramTrace()
        trace.model_call(tuned, "generate")
        trace.model_call(plain, "chat")
        return program_report(trace, plain)

    calls = asyncio.run(report())["model_calls"]
    assert [(c["purpose"], c.get("adapter")) for c in calls] == [("generate", "a1"), ("chat", None)]
    assert "adapter" not in calls[1]  # the base model's calls look as they always did


def test_an_adapter_a_program_loads_is_found_by_name(model_dir: Path):
    runtime = Runtime(engine_factory=AdapterEngine)
    base = LocalBackend(str(model_dir), runtime=runtime)
    base.load_adapter("mine", "/b")
    assert LocalBackend("mine", runtime=runtime).engine is base.engine
    assert runtime.adapter_engine("other") is None


def test_an_adapter_that_does_not_load_stops_its_engine(model_dir: Path):
    bad = str(model_dir / "bad")
    runtime = Runtime(engine_factory=AdapterEngine, adapters={"x": bad})
    with pytest.raises(AdapterUnavailableError) as err:
        runtime.engine(str(model_dir))
    assert str(err.value) == f"adapter 'x' (--lora x={bad}) does not load: A has the wrong shape"
    assert runtime.engines() == []


def test_lora_flags_parse_and_are_checked(tmp_path: Path):
    assert parse_lora(["a=/x", " b = ~/y "]) == {"a": "/x", "b": str(Path("~/y").expanduser())}
    for wrong in (["a"], ["=x"], ["a="], ["a=/x", "a=/y"]):
        with pytest.raises(SettingsError, match="--lora"):
            parse_lora(wrong)
    (tmp_path / "adapter_config.json").write_text("{}")
    settings = ServeSettings(program="p.py", lora=[f"a={tmp_path}"])
    with pytest.raises(SettingsError, match=r"no adapter_model\.safetensors"):
        check_settings(settings)
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    check_settings(settings)
    assert settings.runtime().adapters == {"a": str(tmp_path)}
    assert settings.adapter_names == ["a"]
    clash = ServeSettings(program="p.py", lora=[f"p={tmp_path}"])
    with pytest.raises(SettingsError, match="'p' is the program's own name"):
        check_settings(clash)
    check_settings(ServeSettings(program="p.py", lora=[f"p={tmp_path}"], model_name="served"))
