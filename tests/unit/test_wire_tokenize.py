"""``/tokenize`` and ``/detokenize`` on the wire, in-process, in vLLM's and llama-server's shapes.

The tiny random Llama (with the default model's tokenizer and chat template) served with
``--model``: each reply is checked against the transformers tokenizer of the same files.
Bad values are 400s naming the field; a program without a local model gets a 404. The
defaults of ``add_special_tokens`` per field are checked on a tokenizer that adds a BOS
(the default model's adds none).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from cli.serve.app import build_app, create_app
from cli.serve.program import Program
from cli.serve.settings import ServeSettings
from mellea.backends.runtime import Runtime
from mellea.serve.tokenize import TokenizeRequest, tokenize
from tests.compat.media_samples import PNG
from tests.engine.conftest import make_tiny_llama
from tests.inprocess import BASE_URL, client_for
from tests.server import PROGRAMS

TEXT = "Hello world, here is some text: héllo 🤗!"
USER = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("tokenize") / "tiny")


@pytest.fixture(scope="module")
def hf(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def built(program: str, **settings: Any) -> Iterator[FastAPI]:
    app = build_app(
        ServeSettings(
            program=str(PROGRAMS / program), dtype="float32", playground=False, **settings
        )
    )
    try:
        yield app
    finally:
        app.state.runtime.shutdown()


@pytest.fixture(scope="module")
def served(model_dir: Path) -> Iterator[FastAPI]:
    """A program on the served model (``--model``)."""
    yield from built("plain_session.py", model=str(model_dir))


@pytest.fixture
async def client(served: FastAPI):
    async with client_for(served) as client:
        yield client


async def post(client: httpx.AsyncClient, path: str, body: dict) -> dict:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def assert_400(response: httpx.Response, param: str) -> dict:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
    return error


# -- vLLM's shape ----------------------------------------------------------------------------


async def test_a_prompt_is_tokenized_as_transformers_does(client, hf, served):
    reply = await post(client, "/tokenize", {"model": "anything", "prompt": TEXT})
    expected = hf.encode(TEXT, add_special_tokens=True)
    assert reply == {
        "count": len(expected),
        "max_model_len": served.state.runtime.engine().max_model_len,
        "tokens": expected,
    }
    assert reply["max_model_len"] > 0


async def test_token_strs_are_the_vocabularys_pieces(client, hf):
    reply = await post(client, "/tokenize", {"prompt": TEXT, "return_token_strs": True})
    assert reply["token_strs"] == hf.convert_ids_to_tokens(reply["tokens"])


async def test_chat_messages_go_through_the_template(client, hf, served):
    reply = await post(client, "/tokenize", {"messages": USER})
    text = hf.apply_chat_template(USER, add_generation_prompt=True, tokenize=False)
    assert reply["tokens"] == hf.encode(text, add_special_tokens=False)
    assert reply["tokens"] == served.state.runtime.engine().apply_chat_template(USER)
    bare = await post(client, "/tokenize", {"messages": USER, "add_generation_prompt": False})
    text = hf.apply_chat_template(USER, add_generation_prompt=False, tokenize=False)
    assert bare["tokens"] == hf.encode(text, add_special_tokens=False)
    assert bare["count"] < reply["count"]


async def test_chat_content_parts_and_template_variables(client, hf):
    parts = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Name a "}, {"type": "text", "text": "colour."}],
        }
    ]
    joined = await post(client, "/tokenize", {"messages": parts})
    assert joined == await post(client, "/tokenize", {"messages": USER})
    body = {"messages": USER, "chat_template_kwargs": {"custom_flag": True}}
    assert (await post(client, "/tokenize", body))["tokens"] == joined["tokens"]


async def test_a_conversation_with_tool_calls_renders(client, hf):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "blue"},
    ]
    reply = await post(client, "/tokenize", {"messages": messages})
    assert reply["count"] > (await post(client, "/tokenize", {"messages": USER}))["count"]


async def test_tools_count_in_a_chat_prompt(client):
    tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}},
    }
    plain = await post(client, "/tokenize", {"messages": USER})
    with_tools = await post(client, "/tokenize", {"messages": USER, "tools": [tool]})
    assert with_tools["count"] > plain["count"]


async def test_detokenize_gives_the_text_back(client, hf):
    ids = hf.encode(TEXT, add_special_tokens=False)
    reply = await post(client, "/detokenize", {"model": "m", "tokens": ids})
    assert reply == {"prompt": TEXT, "content": TEXT}
    special = await post(
        client, "/detokenize", {"tokens": [hf.convert_tokens_to_ids("<|im_start|>")]}
    )
    assert special["prompt"] == "<|im_start|>"  # special tokens are written out
    assert (await post(client, "/detokenize", {"tokens": []}))["content"] == ""


# -- llama-server's shape --------------------------------------------------------------------


async def test_content_is_tokenized_without_special_tokens_by_default(client, hf):
    reply = await post(client, "/tokenize", {"content": TEXT})
    assert reply["tokens"] == hf.encode(TEXT, add_special_tokens=False)
    flagged = await post(client, "/tokenize", {"content": TEXT, "add_special": True})
    assert flagged["tokens"] == hf.encode(TEXT, add_special_tokens=True)


async def test_with_pieces_gives_each_tokens_text_or_bytes(client, hf):
    reply = await post(client, "/tokenize", {"content": TEXT, "with_pieces": True})
    pieces = reply["tokens"]
    assert [p["id"] for p in pieces] == hf.encode(TEXT, add_special_tokens=False)
    raw = b"".join(
        p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces
    )
    assert raw == TEXT.encode()
    assert any(isinstance(p["piece"], list) for p in pieces)  # the emoji splits its bytes
    assert {"id": pieces[0]["id"], "piece": "Hello"} == pieces[0]


async def test_a_llama_server_round_trip(client):
    tokens = (await post(client, "/tokenize", {"content": TEXT}))["tokens"]
    assert (await post(client, "/detokenize", {"tokens": tokens}))["content"] == TEXT


async def test_the_openai_client_reaches_the_routes(served):
    async with client_for(served) as http:
        client = openai.AsyncOpenAI(base_url=BASE_URL, api_key="x", max_retries=0, http_client=http)
        reply = await client.post("/tokenize", body={"prompt": "Hi"}, cast_to=object)
        assert reply["count"] == len(reply["tokens"]) > 0
        with pytest.raises(openai.BadRequestError) as caught:
            await client.post("/detokenize", body={"tokens": [10**9]}, cast_to=object)
        assert caught.value.body["param"] == "tokens[0]"


# -- bad values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": "a", "content": "b"}, "content"),
        ({"prompt": "a", "messages": USER}, "messages"),
        ({"prompt": 3}, "prompt"),
        ({"content": ["a"]}, "content"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"prompt": "a", "add_special_tokens": "sometimes"}, "add_special_tokens"),
        ({"prompt": "a", "add_special_tokens": True, "add_special": False}, "add_special"),
        ({"content": "a", "parse_special": False}, "parse_special"),
        ({"messages": USER, "continue_final_message": True}, "continue_final_message"),
        ({"prompt": "a", "add_generation_prompt": False}, "add_generation_prompt"),
        ({"content": "a", "tools": []}, "tools"),
        ({"prompt": "a", "with_pieces": "yes please"}, "with_pieces"),
        (
            {"messages": USER, "chat_template_kwargs": {"return_assistant_tokens_mask": True}},
            "chat_template_kwargs",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is this?"},
                            {
                                "type": "image_url",
                                "image_url": {"url": f"data:image/png;base64,{PNG}"},
                            },
                        ],
                    }
                ]
            },
            "messages[0].content[1]",
        ),
    ],
)
async def test_bad_tokenize_values_are_400s_naming_the_field(client, body, param):
    assert_400(await client.post("/tokenize", json=body), param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "tokens"),
        ({"tokens": "1 2 3"}, "tokens"),
        ({"tokens": [1, "two"]}, "tokens[1]"),
        ({"tokens": [1, 2.5]}, "tokens[1]"),
        ({"tokens": [5, -1]}, "tokens[1]"),
        ({"tokens": [5, 6, 49152]}, "tokens[2]"),
        ({"tokens": [2**70]}, "tokens[0]"),
    ],
)
async def test_bad_detokenize_values_are_400s_naming_the_field(client, body, param):
    error = assert_400(await client.post("/detokenize", json=body), param)
    if param == "tokens[2]":
        assert "49152" in error["message"] and "vocabulary" in error["message"]


async def test_a_body_that_is_not_json_is_a_400(client):
    response = await client.post(
        "/tokenize", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


# -- which tokenizer ------------------------------------------------------------------------


async def test_a_program_without_a_local_model_gets_a_404():
    # Its own runtime: the process's default one holds whatever earlier tests loaded.
    program = Program.load(PROGRAMS / "plain_sync.py", Runtime())
    app = create_app(program, ServeSettings(program=str(PROGRAMS / "plain_sync.py")))
    async with client_for(app) as client:
        for path, body in [("/tokenize", {"prompt": "a"}), ("/detokenize", {"tokens": [1]})]:
            response = await client.post(path, json=body)
            assert response.status_code == 404, response.text
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["code"] == "model_not_found" and "no local model" in error["message"]


async def test_the_model_a_program_loads_at_import_is_used(model_dir, hf, monkeypatch):
    monkeypatch.setenv("LOCAL_MODEL", str(model_dir))
    for app in built("local_model.py"):
        async with client_for(app) as client:
            reply = await post(client, "/tokenize", {"prompt": TEXT})
        assert reply["tokens"] == hf.encode(TEXT)


async def test_a_chat_replys_prompt_tokens_are_what_tokenize_counted(model_dir, monkeypatch):
    monkeypatch.setenv("LOCAL_MODEL", str(model_dir))
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    for app in built("chat_passthrough.py"):
        async with client_for(app) as client:
            counted = await post(client, "/tokenize", {"messages": messages})
            reply = await post(
                client, "/v1/chat/completions", {"messages": messages, "max_tokens": 2}
            )
        assert reply["usage"]["prompt_tokens"] == counted["count"]


# -- add_special_tokens' defaults, on a tokenizer that adds a BOS -----------------------------


class BosTokenizer:
    """Words as ids 10, 11, ...; a BOS (1) when special tokens are added."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [10 + i for i, _ in enumerate(text.split())]
        return [1, *ids] if add_special_tokens else ids

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [f"t{i}" for i in ids]


class BosEngine:
    tokenizer = BosTokenizer()
    max_model_len = 64

    def apply_chat_template(self, messages, *, tools=None, **render) -> list[int]:
        return [7, 8]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"prompt": "a b"}, [1, 10, 11]),  # vLLM's default for a prompt: special tokens added
        ({"prompt": "a b", "add_special_tokens": False}, [10, 11]),
        ({"prompt": "a b", "add_special": False}, [10, 11]),
        ({"content": "a b"}, [10, 11]),  # llama-server's default: none
        ({"content": "a b", "add_special": True}, [1, 10, 11]),
        ({"content": "a b", "add_special_tokens": True}, [1, 10, 11]),
        ({"messages": USER}, [7, 8]),  # vLLM's default for chat: the template's own
        ({"messages": USER, "add_special_tokens": True}, [1, 7, 8]),
    ],
)
def test_special_tokens_default_as_each_server_does(fields, expected):
    reply = tokenize(BosEngine(), TokenizeRequest(**fields), None)
    assert reply.tokens == expected and reply.count == len(expected)
