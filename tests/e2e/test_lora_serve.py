"""``m serve --lora NAME=PATH``: a request whose model names the adapter gets its output,
from a program that routes by the request's model and from one that picks no model (the
routes, streamed and not, in-process: ``tests/unit/test_adapter_requests.py``)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from mellea.engine.types import SamplingParams
from tests.engine.conftest import make_tiny_llama
from tests.engine.test_lora import make_adapter
from tests.lora_reference import ALORA, MAX_TOKENS, QUESTION, adapter_model
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e


def expected_texts(model_dir, adapter_dir) -> dict[str | None, str]:
    """The greedy replies of an in-process engine, base and with the adapter."""
    from mellea.engine.engine import Engine

    engine = Engine(str(model_dir))
    try:
        engine.load_adapter("tuned", adapter_dir)
        prompt = engine.apply_chat_template([{"role": "user", "content": QUESTION}])

        async def one(adapter: str | None) -> str:
            text = ""
            params = SamplingParams(max_tokens=8, adapter=adapter)
            async for out in engine.add_request(prompt, params):
                text += out.text
            return text

        return {a: asyncio.run(one(a)) for a in (None, "tuned")}
    finally:
        engine.shutdown()


def test_a_request_naming_a_served_adapter_gets_its_output(tmp_path):
    model_dir = make_tiny_llama(tmp_path / "tiny")
    adapter_dir = make_adapter(
        model_dir,
        tmp_path / "tuned",
        3,
        r=4,
        lora_alpha=16,
        target_modules=["q_proj", "v_proj", "down_proj"],
    )
    want = expected_texts(model_dir, adapter_dir)
    assert want["tuned"] != want[None]  # the adapter changes the reply
    env = {"LOCAL_MODEL": str(model_dir), "HF_HUB_OFFLINE": "1"}
    flags = ("--lora", f"tuned={adapter_dir}", "--dtype", "float32", "--no-playground")
    with serve(PROGRAMS / "lora_routing.py", *flags, env=env, log_dir=tmp_path) as server:
        models = httpx.get(f"{server.base_url}/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["lora_routing", "tuned"]
        assert httpx.get(f"{server.base_url}/v1/models/tuned").json()["id"] == "tuned"
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x")
        for model, adapter in [("tuned", "tuned"), ("lora_routing", None), ("tuned", "tuned")]:
            reply = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": QUESTION}],
                max_tokens=8,
                temperature=0,
            )
            assert reply.choices[0].message.content == want[adapter], model
        stream = client.chat.completions.create(
            model="tuned",
            messages=[{"role": "user", "content": QUESTION}],
            max_tokens=8,
            temperature=0,
            stream=True,
        )
        assert (
            "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == want["tuned"]
        )


def test_concurrent_clients_of_an_ordinary_program_get_the_adapter_they_name(tmp_path):
    """A program that picks no model, on the served model: base, two LoRAs and an aLoRA
    from concurrent clients, each reply PEFT's greedy text, its ``model`` what served it."""
    tiny = adapter_model(tmp_path)
    flags = ["--model", str(tiny.model_dir), "--dtype", "float32", "--no-playground"]
    for entry in tiny.lora_flags():
        flags += ["--lora", entry]
    models = ["plain_session", "a1", "a2", ALORA, "gpt-4o"] * 2
    with serve(PROGRAMS / "plain_session.py", *flags, env={"HF_HUB_OFFLINE": "1"}) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)

        def ask(model: str, streamed: bool) -> tuple[str, str]:
            messages = [{"role": "user", "content": QUESTION}]
            greedy = {"max_tokens": MAX_TOKENS, "temperature": 0}
            if not streamed:
                reply = client.chat.completions.create(model=model, messages=messages, **greedy)
                calls = reply.choices[0].model_extra["mellea"]["model_calls"]
                used = [call.get("adapter") for call in calls]
                assert used == [model if model in tiny.adapters else None]
                return reply.choices[0].message.content or "", reply.model
            chunks = list(
                client.chat.completions.create(
                    model=model, messages=messages, stream=True, **greedy
                )
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return text, chunks[0].model

        with ThreadPoolExecutor(len(models)) as pool:
            replies = list(pool.map(ask, models, [i >= 5 for i in range(len(models))]))
    wanted = [
        (tiny.expected[m], m) if m in tiny.adapters else (tiny.expected[None], "plain_session")
        for m in models
    ]
    assert replies == wanted


def test_a_lora_flag_without_an_adapter_there_stops_the_start(tmp_path):
    from tests.e2e.test_model_flag import m_serve, one_error_line

    line = one_error_line(m_serve(str(PROGRAMS / "echo.py"), "--lora", f"x={tmp_path}"))
    assert line.startswith(f"Error: --lora x={tmp_path}: no adapter_config.json")
    line = one_error_line(m_serve(str(PROGRAMS / "echo.py"), "--lora", "no-equals-sign"))
    assert "NAME=PATH" in line
