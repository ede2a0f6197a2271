"""Images and audio a program answers without are refused with a 400 naming the part,
in-process; a program that takes them keeps getting them.

A text-only program (``plain_sync.py``, ``echo.py``: they read the text alone) sent an
``image_url`` or ``input_audio`` part answers ``400`` with ``param:
messages[i].content[j]`` (``input`` on ``/v1/responses``), whole and streamed; one that
reads them (``media_counter.py``, as programs that forward them to a vision backend do)
is answered as before. The same with upstream-style programs over a real server and a
recording model server: ``tests/compat/test_media_openai.py``.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.compat.media_samples import PNG, WAV
from tests.inprocess import app_for, client_for, openai_client, stream_frames
from tests.server import PROGRAMS

CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
IMAGE = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
IMAGE_URL = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
AUDIO = {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
TEXT = {"type": "text", "text": "What is this?"}


def asking(*parts: dict) -> list[dict]:
    return [{"role": "user", "content": [TEXT, *parts]}]


@pytest.fixture(scope="module")
def apps():
    return {
        "text": app_for(PROGRAMS / "plain_sync.py"),
        "echo": app_for(PROGRAMS / "echo.py"),
        "media": app_for(PROGRAMS / "media_counter.py"),
    }


@pytest.fixture
async def text(apps):
    async with client_for(apps["text"]) as client:
        yield client


@pytest.fixture
async def echo(apps, monkeypatch):
    monkeypatch.setenv("ECHO_DELAY", "0.001")
    async with client_for(apps["echo"]) as client:
        yield client


@pytest.fixture
async def media(apps):
    async with client_for(apps["media"]) as client:
        yield client


def assert_refused(response: httpx.Response, param: str, kind: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert kind in error["message"] and "text only" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("part", "kind"), [(IMAGE, "image_url"), (AUDIO, "input_audio")])
async def test_a_text_only_program_refuses_media_naming_the_part(text, stream, part, kind):
    body = {"messages": asking(part), "stream": stream}
    assert_refused(await text.post(CHAT, json=body), "messages[0].content[1]", kind)


async def test_the_first_media_part_is_named(text):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": [TEXT, TEXT, IMAGE_URL, AUDIO]},
    ]
    response = await text.post(CHAT, json={"messages": messages})
    assert_refused(response, "messages[3].content[2]", "image_url")


async def test_the_openai_client_gets_a_bad_request(text):
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client(text).chat.completions.create(model="m", messages=asking(IMAGE))
    assert caught.value.body["param"] == "messages[0].content[1]"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_generating_program_that_ignores_media_is_refused(echo, stream):
    body = {"messages": asking(IMAGE), "stream": stream, "n": 2}
    assert_refused(await echo.post(CHAT, json=body), "messages[0].content[1]", "image_url")


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_name_the_input(text, stream):
    content = [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
    ]
    body = {"input": [{"role": "user", "content": content}], "stream": stream}
    assert_refused(await text.post(RESPONSES, json=body), "input", "image_url")


async def test_text_parts_alone_are_answered(text):
    reply = await openai_client(text).chat.completions.create(model="m", messages=asking())
    assert reply.choices[0].message.content == "WHAT IS THIS?"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_program_that_takes_the_media_gets_them(media, stream):
    body = {"messages": asking(IMAGE, IMAGE_URL, AUDIO), "stream": stream}
    if stream:
        frames = await stream_frames(media, CHAT, body)
        text = "".join(f["choices"][0]["delta"].get("content") or "" for f in frames)
    else:
        response = await media.post(CHAT, json=body)
        assert response.status_code == 200, response.text
        text = response.json()["choices"][0]["message"]["content"]
    assert text == "2 images, 1 clips"


async def test_a_program_that_reads_the_last_message_keeps_earlier_media(media):
    messages = [*asking(IMAGE), {"role": "assistant", "content": "a cat"}]
    messages.append({"role": "user", "content": "and now?"})
    reply = await openai_client(media).chat.completions.create(model="m", messages=messages)
    assert reply.choices[0].message.content == "0 images, 0 clips"


async def test_to_openai_takes_the_media_too(media):
    messages = [{"role": "user", "content": [{"type": "text", "text": "via: to_openai"}, IMAGE]}]
    reply = await openai_client(media).chat.completions.create(model="m", messages=messages)
    assert reply.choices[0].message.content == "1 images, 0 clips"


async def test_responses_media_reach_a_program_that_takes_them(media):
    content = [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "https://example.com/cat.png"},
    ]
    reply = await openai_client(media).responses.create(
        model="m", input=[{"role": "user", "content": content}]
    )
    assert reply.output_text == "1 images, 0 clips"
