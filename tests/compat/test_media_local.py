"""The local engine reads text only: images and audio sent to it are a 400 naming ``messages``.

client (openai) -> m serve (an upstream-style program on the local default model).
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.compat.media_samples import PNG, WAV
from tests.server import serve

PROGRAMS = Path(__file__).parent / "programs"

pytestmark = [pytest.mark.e2e, pytest.mark.model]


@pytest.fixture(scope="module")
def local_server():
    with serve(PROGRAMS / "media_local.py") as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=300)


AUDIO = {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
IMAGE = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("part", "kind"), [(AUDIO, "input_audio"), (IMAGE, "image_url")])
def test_media_are_refused_with_a_400_naming_messages(local_server, stream, part, kind):
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, part]}]
    with pytest.raises(openai.BadRequestError) as caught:
        client(local_server).chat.completions.create(
            model="m", messages=messages, stream=stream, max_tokens=5
        )
    error = caught.value.body
    assert caught.value.status_code == 400
    assert error["param"] == "messages"
    assert error["type"] == "invalid_request_error"
    assert "text only" in error["message"] and kind in error["message"]
    assert "Traceback" not in local_server.log


@pytest.mark.parametrize("stream", [False, True])
def test_audio_in_responses_input_is_refused_naming_input(local_server, stream):
    with pytest.raises(openai.BadRequestError) as caught:
        client(local_server).responses.create(
            model="m",
            stream=stream,
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Transcribe this"},
                        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
                    ],
                }
            ],
        )
    assert caught.value.body["param"] == "input"  # the field a Responses client sent


@pytest.mark.parametrize("stream", [False, True])
def test_text_parts_alone_are_answered(local_server, stream):
    messages = [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]
    reply = client(local_server).chat.completions.create(
        model="m", messages=messages, stream=stream, max_tokens=5, temperature=0
    )
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
    else:
        text = reply.choices[0].message.content
    assert text.strip()
