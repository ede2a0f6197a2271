"""Images and audio in-process: the blocks, ChatMessage parts, Responses input, the session,
and what each backend does with them."""

from __future__ import annotations

import base64
import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

import mellea
from mellea.backends.base import Backend
from mellea.backends.local import text_only
from mellea.backends.openai import wire_messages
from mellea.core import (
    AudioBlock,
    AudioUrlBlock,
    GenerationChunk,
    ImageBlock,
    ImageUrlBlock,
    ModelOutputThunk,
    RequestError,
    make_image_block,
)
from mellea.core.content import openai_part, user_content
from mellea.serve import ChatMessage
from mellea.serve.errors import OpenAIError, param_path
from mellea.serve.responses.items import chat_messages, input_items
from tests.compat.media_samples import JPEG, PNG, WAV

GIF = base64.b64encode(b"GIF89a" + b"\x00" * 10).decode()
WEBP = base64.b64encode(b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8).decode()
NOT_AN_IMAGE = base64.b64encode(b"hello world, plain text").decode()
MP3_URL = "data:audio/mpeg;base64," + base64.b64encode(b"ID3\x03\x00").decode()


# -- blocks --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "mime"),
    [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")],
)
def test_image_blocks_take_the_common_formats_bare_or_as_data_urls(data, mime):
    bare = ImageBlock(data)
    assert bare.mime_type == mime
    assert bare.data_url() == f"data:{mime};base64,{data}"
    url = f"data:{mime};base64,{data}"
    assert ImageBlock(url).data_url() == url
    assert ImageBlock.is_valid_base64_png(data) is (mime == "image/png")


@pytest.mark.parametrize("value", [NOT_AN_IMAGE, "@@@", "", "data:image/png;base64,"])
def test_an_image_block_refuses_what_is_not_an_image(value):
    with pytest.raises(ValueError, match="PNG, JPEG, GIF or WEBP"):
        ImageBlock(value)


def test_an_image_block_from_a_pil_image():
    image_module = pytest.importorskip("PIL.Image")
    block = ImageBlock.from_pil_image(image_module.new("RGB", (3, 2), "green"))
    assert block.mime_type == "image/png"
    assert make_image_block(image_module.new("L", (1, 1))).mime_type == "image/png"


def test_url_blocks_need_http_urls():
    assert ImageUrlBlock("https://example.com/a.png").value == "https://example.com/a.png"
    for bad in ("file:///etc/passwd", "example.com/a.png"):
        with pytest.raises(ValueError):
            ImageUrlBlock(bad)
        with pytest.raises(ValueError):
            AudioUrlBlock(bad, "wav")
    with pytest.raises(ValueError):
        AudioUrlBlock("https://example.com/a.wav", " ")


def test_audio_blocks_take_their_format_or_read_it_from_a_data_url():
    assert AudioBlock(WAV, "wav").format == "wav"
    assert AudioBlock(f"data:audio/wav;base64,{WAV}").format == "wav"
    block = AudioBlock(MP3_URL)
    assert block.format == "mp3"  # audio/mpeg is OpenAI's "mp3"
    assert block.base64_data == MP3_URL.split(",", 1)[1]
    with pytest.raises(ValueError, match="format"):
        AudioBlock(WAV)
    with pytest.raises(ValueError, match="base64"):
        AudioBlock("%%%", "wav")


def test_make_image_block_picks_the_block_for_its_source():
    assert isinstance(make_image_block("https://example.com/a.png"), ImageUrlBlock)
    assert isinstance(make_image_block(PNG), ImageBlock)
    with pytest.raises(TypeError):
        make_image_block(42)


def test_each_block_has_its_openai_part():
    assert openai_part(ImageBlock(PNG)) == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{PNG}"},
    }
    assert openai_part(ImageUrlBlock("https://e.com/a.png")) == {
        "type": "image_url",
        "image_url": {"url": "https://e.com/a.png"},
    }
    assert openai_part(AudioBlock(MP3_URL)) == {
        "type": "input_audio",
        "input_audio": {"data": MP3_URL.split(",", 1)[1], "format": "mp3"},
    }
    assert openai_part(AudioUrlBlock("https://e.com/a.wav", "wav")) == {
        "type": "audio_url",
        "audio_url": {"url": "https://e.com/a.wav"},
    }


def test_user_content_is_plain_text_without_media():
    assert user_content("hi") == "hi"
    assert user_content("hi", [], []) == "hi"
    parts = user_content("hi", [PNG], [AudioBlock(WAV, "wav")])
    assert [p["type"] for p in parts] == ["text", "image_url", "input_audio"]
    with pytest.raises(TypeError):
        user_content("hi", audio=[WAV])


def test_importing_mellea_does_not_import_pillow():
    code = "import mellea, mellea.core, mellea.serve, sys; print('PIL' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


# -- ChatMessage ---------------------------------------------------------------


def multimodal_message() -> ChatMessage:
    return ChatMessage.model_validate(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
                {"type": "image_url", "image_url": {"url": "https://e.com/a.png", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
            ],
        }
    )


def test_chat_messages_keep_images_and_audio():
    message = multimodal_message()
    assert message.get_text_content() == "What is this?"
    assert message.get_image_urls() == [f"data:image/jpeg;base64,{JPEG}", "https://e.com/a.png"]
    images = message.get_image_blocks()
    assert [type(b) for b in images] == [ImageBlock, ImageUrlBlock]
    assert images[0].mime_type == "image/jpeg"
    [audio] = message.get_audio_blocks()
    assert (audio.value, audio.format) == (WAV, "wav")
    assert message.to_openai()["content"][2] == {
        "type": "image_url",
        "image_url": {"url": "https://e.com/a.png", "detail": "low"},
    }


def test_an_image_url_given_as_a_string_is_read_as_its_url():
    message = ChatMessage.model_validate(
        {"role": "user", "content": [{"type": "image_url", "image_url": "https://e.com/a.png"}]}
    )
    assert message.get_image_urls() == ["https://e.com/a.png"]
    assert message.to_openai()["content"][0]["image_url"] == {"url": "https://e.com/a.png"}


def test_text_messages_have_no_media():
    message = ChatMessage(role="user", content="just text")
    assert message.get_image_blocks() == [] and message.get_audio_blocks() == []


def test_the_upstream_import_paths_name_the_same_class():
    from cli.serve.models import ChatMessage as FromCli
    from mellea.serve import ImageUrlContent, InputAudioContent, InputAudioData, TextContent

    assert FromCli is ChatMessage
    assert {TextContent, ImageUrlContent, InputAudioContent, InputAudioData}


@pytest.mark.parametrize(
    ("content", "param", "why"),
    [
        (7, "content", "a string or a list"),
        ([{"type": "video"}], "content[0]", "'text', 'image_url'"),
        ([{"type": "image_url", "image_url": {}}], "content[0].image_url", "url"),
        (
            [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{NOT_AN_IMAGE}"}}],
            "content[0].image_url",
            "PNG, JPEG, GIF or WEBP",
        ),
        (
            [{"type": "image_url", "image_url": {"url": "gopher://e.com/a.png"}}],
            "content[0].image_url",
            "http(s) URL",
        ),
        (
            [{"type": "input_audio", "input_audio": {"data": "%%", "format": "wav"}}],
            "content[0].input_audio.data",
            "base64",
        ),
        (
            [{"type": "input_audio", "input_audio": {"data": WAV}}],
            "content[0].input_audio.format",
            "required",
        ),
    ],
)
def test_bad_parts_are_one_error_naming_the_field(content, param, why):
    with pytest.raises(ValidationError) as caught:
        ChatMessage.model_validate({"role": "user", "content": content})
    errors = caught.value.errors()
    assert len(errors) == 1
    assert param_path(errors[0]["loc"]) == param
    assert why in errors[0]["msg"]


# -- the Responses API's input -------------------------------------------------


def test_responses_input_images_and_audio_become_chat_parts():
    items = input_items(
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Describe"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                    {"type": "input_image", "image_url": "https://e.com/a.png", "detail": "high"},
                    {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
                ],
            }
        ]
    )
    [message] = chat_messages(None, items)
    assert message.get_text_content() == "Describe"
    assert [type(b) for b in message.get_image_blocks()] == [ImageBlock, ImageUrlBlock]
    assert message.get_audio_blocks()[0].format == "wav"


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "input_image", "image_url": "ftp://e.com/a.png"}, "image_url"),
        (
            {"type": "input_image", "image_url": f"data:image/png;base64,{NOT_AN_IMAGE}"},
            "image_url",
        ),
        ({"type": "input_image", "image_url": "https://e.com/a.png", "detail": 1}, "detail"),
        ({"type": "input_audio", "input_audio": "raw"}, "input_audio"),
        ({"type": "input_audio", "input_audio": {"data": WAV}}, "input_audio.format"),
        (
            {"type": "input_audio", "input_audio": {"data": "%", "format": "wav"}},
            "input_audio.data",
        ),
    ],
)
def test_bad_responses_media_are_a_400_naming_the_field(part, param):
    with pytest.raises(OpenAIError) as caught:
        input_items([{"role": "user", "content": [part]}])
    assert caught.value.status_code == 400
    assert caught.value.param == f"input[0].content[0].{param}"


# -- the session ---------------------------------------------------------------


class RecordingBackend(Backend):
    """Answers "ok" and keeps the messages of every call."""

    model_id = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[dict[str, Any]]] = []

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        self.calls.append(messages)

        async def stream():
            yield GenerationChunk(text="ok", finish_reason="stop")

        return ModelOutputThunk.from_stream(stream())


def last_content(backend: RecordingBackend) -> Any:
    return backend.calls[-1][-1]["content"]


@pytest.mark.parametrize("method", ["instruct", "chat"])
def test_sync_session_calls_send_images_and_audio(method):
    backend = RecordingBackend()
    session = mellea.MelleaSession(backend)
    images = [ImageBlock(PNG), ImageUrlBlock("https://e.com/a.png")]
    getattr(session, method)("Look and listen", images=images, audio=[AudioBlock(WAV, "wav")])
    content = last_content(backend)
    assert content[0] == {"type": "text", "text": "Look and listen"}
    assert [p["type"] for p in content[1:]] == ["image_url", "image_url", "input_audio"]
    assert content[2]["image_url"]["url"] == "https://e.com/a.png"
    assert content[3]["input_audio"] == {"data": WAV, "format": "wav"}


async def test_async_session_calls_send_images_and_audio():
    backend = RecordingBackend()
    session = mellea.MelleaSession(backend)
    await session.ainstruct("Describe", images=[ImageBlock(PNG)], strategy=None)
    assert [p["type"] for p in last_content(backend)] == ["text", "image_url"]
    await session.achat("Transcribe", audio=[AudioBlock(MP3_URL)])
    assert last_content(backend)[1]["input_audio"]["format"] == "mp3"
    await session.ainstruct("Plain text", strategy=None)
    assert last_content(backend) == "Plain text"


# -- backends ------------------------------------------------------------------


def test_the_openai_backend_sends_openai_parts():
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                ImageBlock(PNG),
                {"type": "input_audio", "input_audio": {"data": MP3_URL, "format": "mp3"}},
                {"type": "image_url", "image_url": {"url": "https://e.com/a.png"}},
            ],
        },
    ]
    wire = wire_messages(messages)
    assert wire[0] == messages[0]
    parts = wire[1]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert parts[2]["input_audio"]["data"] == MP3_URL.split(",", 1)[1]  # bare base64
    assert parts[3] == messages[1]["content"][3]
    assert messages[1]["content"][1].__class__ is ImageBlock  # the caller's list is untouched


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "https://e.com/a.png"}},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
        {"type": "file", "file": {"file_data": "x"}},
    ],
)
def test_the_local_backend_refuses_media_naming_messages(part):
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]
    with pytest.raises(RequestError) as caught:
        text_only(messages)
    assert caught.value.param == "messages"
    assert caught.value.status_code == 400
    assert part["type"] in caught.value.message


def test_the_local_backend_joins_text_parts():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "c"},
    ]
    assert text_only(messages) == [
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "c"},
    ]
