"""Images and audio through ``m serve`` and the openai backend, to a recording model server.

client (openai) -> m serve (an upstream-style program) -> recording server on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from tests.compat.media_recorder import Recorder, recording_server
from tests.compat.media_samples import JPEG, PNG, WAV
from tests.server import serve, sse_events

pytestmark = pytest.mark.e2e

PROGRAMS = Path(__file__).parent / "programs"
# Nothing listens on port 9: a server that tried to fetch this URL would fail.
REMOTE_IMAGE = "http://127.0.0.1:9/pictures/cat.png"


@pytest.fixture(scope="module")
def recorder():
    with recording_server() as running:
        yield running


@pytest.fixture(scope="module")
def image_server(recorder: Recorder):
    with serve(PROGRAMS / "media_image.py", env={"MEDIA_BASE_URL": recorder.base_url}) as server:
        yield server


@pytest.fixture(scope="module")
def chat_server(recorder: Recorder):
    with serve(PROGRAMS / "media_chat.py", env={"MEDIA_BASE_URL": recorder.base_url}) as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)


def image_request() -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What color is this image?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": REMOTE_IMAGE, "detail": "low"}},
            ],
        }
    ]


def user_parts(recorder: Recorder) -> list[dict]:
    """The content parts of the last user message the model server received."""
    body = recorder.last()
    user = [m for m in body["messages"] if m["role"] == "user"][-1]
    assert isinstance(user["content"], list)
    return user["content"]


def test_images_reach_the_model_server_in_openai_format(image_server, recorder):
    reply = client(image_server).chat.completions.create(model="m", messages=image_request())
    assert reply.choices[0].message.content == "saw text,image_url,image_url"
    parts = user_parts(recorder)
    assert parts[0] == {"type": "text", "text": "What color is this image?"}
    assert parts[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    # the http URL is passed on for the model server to fetch, not fetched by m serve
    assert parts[2] == {"type": "image_url", "image_url": {"url": REMOTE_IMAGE}}
    assert recorder.last()["model"] == "vision-model"


def test_images_streamed(image_server, recorder):
    before = len(recorder.bodies)
    chunks = list(
        client(image_server).chat.completions.create(
            model="m", messages=image_request(), stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "saw text,image_url,image_url"
    assert len(recorder.bodies) == before + 1
    assert [p["type"] for p in user_parts(recorder)] == ["text", "image_url", "image_url"]


def test_a_jpeg_data_url_is_accepted(image_server, recorder):
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this one?"},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
            ],
        }
    ]
    reply = client(image_server).chat.completions.create(model="m", messages=messages)
    assert reply.choices[0].message.content == "saw text,image_url"
    assert user_parts(recorder)[1]["image_url"]["url"] == f"data:image/jpeg;base64,{JPEG}"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("data:image/png;base64,aGVsbG8gd29ybGQ=", "PNG, JPEG, GIF or WEBP"),
        ("data:image/png;base64,@@not base64@@", "PNG, JPEG, GIF or WEBP"),
        ("ftp://example.com/a.png", "data: URL or an http(s) URL"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_a_bad_image_is_a_400_naming_it(image_server, recorder, url, why, stream):
    before = len(recorder.bodies)
    messages = [
        {"role": "user", "content": "look"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]},
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        client(image_server).chat.completions.create(model="m", messages=messages, stream=stream)
    error = caught.value.body
    assert caught.value.status_code == 400
    assert error["param"] == "messages[1].content[0].image_url"
    assert why in error["message"]
    assert len(recorder.bodies) == before  # nothing reached the model server


def test_images_through_the_responses_api(image_server, recorder):
    response = client(image_server).responses.create(
        model="m",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is shown?"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                    {"type": "input_image", "image_url": REMOTE_IMAGE},
                ],
            }
        ],
    )
    assert response.output_text == "saw text,image_url,image_url"
    parts = user_parts(recorder)
    assert parts[1]["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    assert parts[2]["image_url"]["url"] == REMOTE_IMAGE


def test_images_through_the_responses_api_streamed(image_server, recorder):
    with httpx.stream(
        "POST",
        f"{image_server.base_url}/v1/responses",
        json={
            "model": "m",
            "stream": True,
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is shown?"},
                        {"type": "input_image", "image_url": REMOTE_IMAGE},
                    ],
                }
            ],
        },
        timeout=60,
    ) as response:
        assert response.status_code == 200
        events = [e for e in sse_events(response.iter_lines()) if e != "[DONE]"]
    parsed = [json.loads(e) for e in events]
    deltas = [e["delta"] for e in parsed if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "saw text,image_url"
    assert user_parts(recorder)[1] == {"type": "image_url", "image_url": {"url": REMOTE_IMAGE}}


def test_a_bad_image_in_responses_input_is_a_400(image_server):
    with pytest.raises(openai.BadRequestError) as caught:
        client(image_server).responses.create(
            model="m",
            input=[
                {"role": "user", "content": [{"type": "input_image", "image_url": "file:///x"}]}
            ],
        )
    assert caught.value.body["param"] == "input[0].content[0].image_url"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_forwards_images_and_audio(chat_server, recorder, stream):
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What do you see and hear?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
            ],
        }
    ]
    reply = client(chat_server).chat.completions.create(model="m", messages=messages, stream=stream)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
    else:
        text = reply.choices[0].message.content
    assert text == "saw text,image_url,input_audio"
    parts = user_parts(recorder)
    assert parts[2] == {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
    assert recorder.last()["model"] == "multimodal-model"


def test_bad_audio_is_a_400_naming_it(chat_server):
    messages = [
        {
            "role": "user",
            "content": [{"type": "input_audio", "input_audio": {"data": "%%%", "format": "wav"}}],
        }
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        client(chat_server).chat.completions.create(model="m", messages=messages)
    assert caught.value.body["param"] == "messages[0].content[0].input_audio.data"


@pytest.fixture(scope="module")
def audio_server(recorder: Recorder):
    with serve(PROGRAMS / "media_audio.py", env={"MEDIA_BASE_URL": recorder.base_url}) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True])
def test_audio_reaches_the_model_server_with_the_session_options(audio_server, recorder, stream):
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What colors are mentioned?"},
                {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
            ],
        }
    ]
    reply = client(audio_server).chat.completions.create(
        model="m", messages=messages, stream=stream
    )
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
    else:
        text = reply.choices[0].message.content
    assert text == "saw text,input_audio"
    body = recorder.last()
    assert body["model"] == "audio-model"
    assert body["modalities"] == ["text"] and body["max_tokens"] == 1000
    assert user_parts(recorder)[1] == {
        "type": "input_audio",
        "input_audio": {"data": WAV, "format": "wav"},
    }
