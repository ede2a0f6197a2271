"""Adapters through the runtime and the local backend: ``--lora``, ``model_id=NAME``,
``ModelOption.ADAPTER`` (the engine's side is tests/engine/test_lora.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cli.serve.settings import ServeSettings, SettingsError, check_settings, parse_lora
from mellea.backends.local import LocalBackend
from mellea.backends.runtime import AdapterUnavailableError, Runtime
from mellea.core.model_options import ModelOption
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


def generate(backend: LocalBackend, **options: Any) -> None:
    async def run() -> None:
        thunk = await backend.generate([{"role": "user", "content": "hi"}], model_options=options)
        await thunk.avalue()

    asyncio.run(run())


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
