"""The runtime: engines shared per resolved model, settings per app, ``--model``."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

import mellea
from cli.serve.app import create_app
from cli.serve.program import Program
from cli.serve.settings import ServeSettings
from mellea.backends.runtime import ModelUnavailableError, Runtime, current_runtime
from tests.stub_engine import FakeEngine

PROBE = Path(__file__).resolve().parents[1] / "programs" / "runtime_probe.py"


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A directory the loader takes for a model (the fake engine never reads it)."""
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


def test_every_spelling_of_one_directory_shares_one_engine(model_dir: Path, tmp_path_factory):
    runtime = Runtime(engine_factory=FakeEngine)
    link = tmp_path_factory.mktemp("links") / "model"
    link.symlink_to(model_dir)
    first = runtime.engine(str(model_dir))
    for spelling in (f"{model_dir}/", str(model_dir / "."), link, f"{link}/"):
        assert runtime.engine(spelling) is first, spelling
    assert runtime.engine(str(model_dir), dtype="float32") is first  # the CPU's default
    assert runtime.engine(str(model_dir), dtype="bfloat16") is not first
    assert len(runtime.engines()) == 2


def test_sessions_started_at_once_from_many_threads_build_one_engine(model_dir: Path):
    from concurrent.futures import ThreadPoolExecutor

    runtime = Runtime(engine_factory=FakeEngine)
    before = FakeEngine.built
    with ThreadPoolExecutor(8) as pool:
        engines = list(pool.map(lambda _: runtime.engine(str(model_dir)), range(32)))
    assert FakeEngine.built - before == 1
    assert all(engine is engines[0] for engine in engines)


@pytest.mark.model
def test_the_three_spellings_of_the_default_model_share_one_engine():
    from mellea.engine.loader import DEFAULT_MODEL_ID, resolve_model

    runtime = Runtime(engine_factory=FakeEngine)
    engine = runtime.engine(None)
    assert runtime.engine(DEFAULT_MODEL_ID) is engine
    assert runtime.engine(str(resolve_model(None))) is engine
    assert len(runtime.engines()) == 1 and engine.model_id == DEFAULT_MODEL_ID


def test_sessions_reach_the_active_runtime_and_otherwise_the_default(model_dir: Path):
    runtime = Runtime(engine_factory=FakeEngine, model=str(model_dir), tool_call_parser="mistral")
    with runtime.active():
        assert current_runtime() is runtime
        session = mellea.start_session()
    assert current_runtime() is not runtime
    assert session.backend.engine in runtime.engines()
    assert session.backend.tool_call_parser == "mistral"


def test_model_override_serves_one_model_for_every_name_and_logs_each_once(
    model_dir: Path, caplog: pytest.LogCaptureFixture
):
    class Granite:  # an upstream-style ModelIdentifier with no local weights
        hf_model_name = "ibm-granite/granite-4.1-3b"
        ollama_name = "granite4.1:3b"

    runtime = Runtime(engine_factory=FakeEngine, model=str(model_dir))
    caplog.set_level(logging.INFO, logger="mellea.runtime")
    with runtime.active():
        sessions = [
            mellea.start_session(model_id=Granite()),
            mellea.start_session(model_id=Granite()),
            mellea.start_session("hf", "some/other-model"),
            mellea.start_session("ollama", "granite4:micro", base_url="http://nowhere:1/v1"),
        ]
    assert {id(s.backend.engine) for s in sessions} == {id(runtime.engines()[0])}
    lines = [r.getMessage() for r in caplog.records]
    assert (
        lines.count(f"program asked for ibm-granite/granite-4.1-3b; serving {model_dir} (--model)")
        == 1
    )
    assert any("ollama backend; serving it locally" in line for line in lines)


def test_a_model_not_here_fails_in_one_line_naming_it_and_the_way_out(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is unreachable
    runtime = Runtime(engine_factory=FakeEngine)
    with pytest.raises(ModelUnavailableError) as caught:
        runtime.engine("nobody/no-such-model-here")
    line = str(caught.value)
    assert "\n" not in line
    assert "nobody/no-such-model-here" in line and "--model" in line and "cache" in line
    # What a client would see if this happened during a request: our words, no internals.
    assert caught.value.status_code == 503
    assert "no-such-model-here" in caught.value.message and "--model" not in caught.value.message


def test_a_program_naming_a_missing_model_fails_at_load_in_one_line(tmp_path: Path, monkeypatch):
    from cli.serve.program import ProgramLoadError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    program = tmp_path / "granite.py"
    program.write_text(
        "import mellea\n"
        "session = mellea.start_session(model_id='nobody/granite-not-here')\n"
        "def serve(input):\n    return 'x'\n"
    )
    with pytest.raises(ProgramLoadError) as caught:
        Program.load(program, Runtime(engine_factory=FakeEngine))
    message = str(caught.value)
    assert "\n" not in message and "granite-not-here" in message and "--model" in message


def _app(model_dir: Path, **settings: Any) -> Any:
    """An app with its own runtime, as build_app makes one, over the fake engine."""
    config = ServeSettings(program=str(PROBE), model=str(model_dir), playground=False, **settings)
    runtime = config.runtime()
    runtime.engine_factory = FakeEngine
    return create_app(Program.load(PROBE, runtime), config)


async def _ask(app: Any) -> dict[str, Any]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            reply = await client.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            return json.loads(reply.json()["choices"][0]["message"]["content"])


def test_two_apps_in_one_process_keep_their_own_settings(model_dir: Path):
    one = _app(model_dir, tool_call_parser="mistral", kv_cache_memory="1MiB")
    two = _app(model_dir, tool_call_parser="pythonic", kv_cache_memory="2MiB")
    first, second = asyncio.run(_ask(one)), asyncio.run(_ask(two))
    assert first == {
        "parser": "mistral",
        "loop_parser": "mistral",  # the sync helper's loop runs under the caller's runtime
        "kv": 2**20,
        "same_engine": True,  # the module's session and serve()'s share the engine
        "answer": "ok",
    }
    assert (second["parser"], second["loop_parser"], second["kv"]) == (
        "pythonic",
        "pythonic",
        2**21,
    )
    assert one.state.runtime is not two.state.runtime
    assert one.state.runtime.engines()[0] is not two.state.runtime.engines()[0]


def test_a_session_started_inside_serve_on_a_missing_model_gets_a_503_in_our_words(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "late.py"
    path.write_text(
        "import mellea\n"
        "async def serve(input):\n"
        "    session = mellea.start_session(model_id='nobody/late-model')\n"
        "    return await session.ainstruct('hi', strategy=None)\n"
    )
    settings = ServeSettings(program=str(path), playground=False)
    app = create_app(Program.load(path, Runtime(engine_factory=FakeEngine)), settings)

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            return await client.post("/v1/chat/completions", json=body)

    reply = asyncio.run(ask())
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["message"] == (
        "the model this program uses (nobody/late-model) is not available on this server"
    )
    assert error["code"] == "model_unavailable" and "Traceback" not in reply.text


def test_warm_up_builds_each_engines_grammar_table_before_serving(model_dir: Path):
    """The first grammar builds the tokenizer's table holding the GIL: warm-up does it."""

    class GrammarEngine(FakeEngine):
        def __init__(self, path: str, **kwargs: Any) -> None:
            super().__init__(path, **kwargs)
            self.grammars: list[str] = []

        def compile_grammar(self, grammar: str) -> object:
            self.grammars.append(grammar)
            return object()

    runtime = Runtime(engine_factory=GrammarEngine)
    engine = runtime.engine(str(model_dir))
    assert asyncio.run(runtime.warm_up()) == 1
    assert len(engine.grammars) == 1 and json.loads(engine.grammars[0])
