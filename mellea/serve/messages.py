"""Chat messages as clients send them, and as a program's ``serve()`` receives them.

Content parts keep images (``image_url``: a ``data:`` URL or an http(s) URL) and audio
(``input_audio``: base64 data and its format). They are checked when the request is
read, so :meth:`ChatMessage.get_image_blocks` and :meth:`ChatMessage.get_audio_blocks`
hand a program valid blocks; http(s) URLs are passed on, never fetched by the server.
A message notes when the program reads its media (:attr:`ChatMessage.media_taken`), so
the server can refuse media a program answered without (:mod:`mellea.serve.unread_media`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    field_validator,
)
from pydantic_core import PydanticCustomError

from mellea.core.content import (
    AudioBlock,
    ImageBlock,
    ImageUrlBlock,
    decode_base64,
    split_data_url,
)


class TextContent(BaseModel):
    """A text content part: ``{"type": "text", "text": "..."}``."""

    type: Literal["text"]
    text: str


class ImageUrlContent(BaseModel):
    """An image part: ``{"type": "image_url", "image_url": {"url": ..., "detail": ...}}``.

    ``url`` is a ``data:image/...;base64,`` URL (PNG, JPEG, GIF or WEBP) or an http(s) URL;
    ``image_url`` given as the URL string alone is read as ``{"url": ...}``.
    """

    type: Literal["image_url"]
    image_url: dict[str, str]

    @field_validator("image_url", mode="before")
    @classmethod
    def _url_alone(cls, value: Any) -> Any:
        # ``"image_url": "https://..."``, a short form some clients send (vLLM reads it too)
        return {"url": value} if isinstance(value, str) else value

    @field_validator("image_url")
    @classmethod
    def _check_url(cls, value: dict[str, str]) -> dict[str, str]:
        problem = image_url_problem(value.get("url"))
        if problem is not None:
            raise PydanticCustomError("invalid_image", problem)
        return value


class InputAudioData(BaseModel):
    """The audio of an ``input_audio`` part: base64 ``data`` and its ``format`` (``wav``, ``mp3``)."""

    data: str
    format: str = Field(min_length=1)

    @field_validator("data")
    @classmethod
    def _check_data(cls, value: str) -> str:
        problem = audio_data_problem(value)
        if problem is not None:
            raise PydanticCustomError("invalid_audio", problem)
        return value


class InputAudioContent(BaseModel):
    """An audio part: ``{"type": "input_audio", "input_audio": {"data": ..., "format": ...}}``."""

    type: Literal["input_audio"]
    input_audio: InputAudioData


class OtherPart(BaseModel):
    """A file or refusal part, kept as the client sent it."""

    model_config = ConfigDict(extra="allow")
    type: Literal["file", "refusal"]


_PART_TAGS = {"text": "Text", "image_url": "ImageUrl", "input_audio": "InputAudio"}


def _part_tag(part: Any) -> str | None:
    # Capitalised tags keep pydantic's union member names out of the error's ``param``.
    kind = part.get("type") if isinstance(part, dict) else getattr(part, "type", None)
    if not isinstance(kind, str):
        return None
    return _PART_TAGS.get(kind, "Other" if kind in ("file", "refusal") else None)


MessageContent = Annotated[
    Annotated[TextContent, Tag("Text")]
    | Annotated[ImageUrlContent, Tag("ImageUrl")]
    | Annotated[InputAudioContent, Tag("InputAudio")]
    | Annotated[OtherPart, Tag("Other")],
    Discriminator(
        _part_tag,
        custom_error_type="invalid_content_part",
        custom_error_message=(
            "a content part's type must be 'text', 'image_url', 'input_audio', 'file' or 'refusal'"
        ),
    ),
]
# earlier names of the part models
TextPart = TextContent
ContentPart = MessageContent


def _content_tag(content: Any) -> str | None:
    if content is None:
        return "none"
    if isinstance(content, str):
        return "str"
    return "list" if isinstance(content, list) else None


Content = Annotated[
    Annotated[str, Tag("str")]
    | Annotated[list[MessageContent], Tag("list")]
    | Annotated[None, Tag("none")],
    Discriminator(
        _content_tag,
        custom_error_type="invalid_content",
        custom_error_message="content must be a string or a list of content parts",
    ),
]


def image_url_problem(url: Any) -> str | None:
    """Why ``url`` cannot be an image part's URL, or None if it can (http(s), or a data: URL
    holding a PNG, JPEG, GIF or WEBP image as base64)."""
    if not isinstance(url, str) or not url:
        return "an image needs its url as a string"
    if url.startswith(("http://", "https://")):
        return None
    if not url.startswith("data:"):
        return "an image url must be a data: URL or an http(s) URL"
    if not ImageBlock.is_valid_base64_image(url):
        return "the data: URL must hold a PNG, JPEG, GIF or WEBP image as base64"
    return None


def audio_data_problem(data: Any) -> str | None:
    """Why ``data`` cannot be an audio part's data, or None if it is base64 (or a data: URL)."""
    if not isinstance(data, str) or not data or decode_base64(split_data_url(data)[1]) is None:
        return "the audio data must be base64"
    return None


class FunctionCall(BaseModel):
    """The function a tool call names, with its arguments as a JSON string."""

    name: str
    arguments: str = ""


class ToolCall(BaseModel):
    """A tool call carried by an assistant message."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message of a chat request.

    ``content`` is a string or a list of content parts; use :meth:`get_text_content`
    for the text either way, :meth:`get_image_blocks` and :meth:`get_audio_blocks`
    for the images and audio.
    """

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Content = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: dict[str, Any] | None = None
    reasoning_content: str | None = Field(default=None, exclude=True)
    # Set when the program reads the message's images or audio (or the whole message).
    _media_taken: bool = PrivateAttr(default=False)

    @property
    def media_taken(self) -> bool:
        """Whether the program read this message's images or audio: through
        :meth:`get_image_urls`, :meth:`get_image_blocks`, :meth:`get_audio_blocks` or
        :meth:`to_openai` (which hands every part on)."""
        return self._media_taken

    def media_parts(self) -> list[tuple[int, str]]:
        """``(index, type)`` of each ``image_url`` and ``input_audio`` part of the content."""
        if not isinstance(self.content, list):
            return []
        return [
            (index, part.type)
            for index, part in enumerate(self.content)
            if isinstance(part, ImageUrlContent | InputAudioContent)
        ]

    def get_text_content(self) -> str:
        """The message's text: the string content, or its text parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextContent))

    def get_image_urls(self) -> list[str]:
        """The ``url`` of each image part, in order (data: URLs and http(s) URLs)."""
        self._media_taken = True
        if not isinstance(self.content, list):
            return []
        return [p.image_url["url"] for p in self.content if isinstance(p, ImageUrlContent)]

    def get_image_blocks(self) -> list[ImageBlock | ImageUrlBlock]:
        """The message's images: an ``ImageBlock`` per data: URL, an ``ImageUrlBlock`` per URL."""
        return [
            ImageUrlBlock(url) if url.startswith(("http://", "https://")) else ImageBlock(url)
            for url in self.get_image_urls()
        ]

    def get_audio_blocks(self) -> list[AudioBlock]:
        """The message's audio clips, one ``AudioBlock`` per ``input_audio`` part."""
        self._media_taken = True
        if not isinstance(self.content, list):
            return []
        return [
            AudioBlock(p.input_audio.data, p.input_audio.format)
            for p in self.content
            if isinstance(p, InputAudioContent)
        ]

    def to_openai(self) -> dict[str, Any]:
        """The message as a plain OpenAI-style dict (for a chat template or a remote API)."""
        self._media_taken = True
        return self.model_dump(exclude_none=True)
