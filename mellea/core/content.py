"""Content blocks a program hands a model besides text: images and audio.

Images travel as base64 data (``ImageBlock``) or as an http(s) URL (``ImageUrlBlock``);
audio as base64 data with its format (``AudioBlock``) or a URL (``AudioUrlBlock``).
:func:`openai_part` gives each block's OpenAI chat content part, the form every
backend receives. Pillow is optional: it is imported only by the helpers that take
a PIL image.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import Any

# leading bytes -> the image type they mark (the formats OpenAI-style servers take)
_IMAGE_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?((?:;[\w.+-]+=[\w.+-]+)*);base64,", re.I)
# MIME subtypes that name a format differently from the OpenAI ``input_audio.format`` token
_AUDIO_SUBTYPES = {"x-wav": "wav", "wave": "wav", "mpeg": "mp3", "x-mpeg": "mp3", "x-mp3": "mp3"}


class CBlock:
    """A block of content for or from a model: a string value plus metadata."""

    def __init__(
        self, value: str | None, meta: dict[str, Any] | None = None, *, cache: bool = False
    ) -> None:
        if value is not None and not isinstance(value, str):
            raise TypeError("a CBlock's value must be a string or None")
        self._underlying_value = value
        self._meta: dict[str, Any] = meta if meta is not None else {}
        self.cache = cache

    @property
    def value(self) -> str | None:
        """The block's content."""
        return self._underlying_value

    @value.setter
    def value(self, value: str) -> None:
        self._underlying_value = value

    def __str__(self) -> str:
        return self.value or ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({_short(self.value)!r})"


def split_data_url(value: str) -> tuple[str | None, str]:
    """``(mime type or None, base64 payload)`` for a ``data:`` URL or bare base64."""
    match = _DATA_URL.match(value)
    if match is None:
        return None, value.strip()
    return (match.group(1) or "").lower() or None, value[match.end() :].strip()


def decode_base64(payload: str) -> bytes | None:
    """The bytes ``payload`` encodes (padding may be missing), or None if it is not base64."""
    payload = payload.strip()
    payload += "=" * (-len(payload) % 4)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None


def image_mime_type(data: bytes) -> str | None:
    """The image type of ``data`` from its first bytes (PNG, JPEG, GIF, WEBP), else None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for signature, mime in _IMAGE_SIGNATURES:
        if data.startswith(signature):
            return mime
    return None


class ImageBlock(CBlock):
    """An image as base64 data: bare, or a ``data:image/...;base64,`` URL.

    Upstream mellea takes PNG only; this one also takes JPEG, GIF and WEBP, the
    formats OpenAI-compatible servers read. Anything else is a ``ValueError``.
    """

    def __init__(self, value: str, meta: dict[str, Any] | None = None) -> None:
        if not isinstance(value, str) or not self.is_valid_base64_image(value):
            raise ValueError(
                "an ImageBlock needs a PNG, JPEG, GIF or WEBP image as base64 "
                "(bare or as a data: URL)"
            )
        super().__init__(value, meta)

    @staticmethod
    def is_valid_base64_image(value: str) -> bool:
        """Whether ``value`` is base64 (or a data: URL) of a PNG, JPEG, GIF or WEBP image."""
        data = decode_base64(split_data_url(value)[1])
        return data is not None and image_mime_type(data) is not None

    @staticmethod
    def is_valid_base64_png(value: str) -> bool:
        """Whether ``value`` is base64 (or a data: URL) of a PNG image, as upstream checks."""
        data = decode_base64(split_data_url(value)[1])
        return data is not None and image_mime_type(data) == "image/png"

    @property
    def mime_type(self) -> str:
        """The image's type, read from its bytes (e.g. ``image/png``)."""
        head = decode_base64(split_data_url(self.value or "")[1][:32]) or b""  # 24 bytes
        return image_mime_type(head) or "image/png"

    def data_url(self) -> str:
        """The image as a ``data:`` URL (as given, if it was one)."""
        value = self.value or ""
        if value.startswith("data:"):
            return value
        return f"data:{self.mime_type};base64,{value.strip()}"

    @staticmethod
    def pil_to_base64(image: Any) -> str:
        """A PIL image as base64 PNG (needs Pillow)."""
        import io

        buffer = io.BytesIO()
        image.save(buffer, "PNG")
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    @classmethod
    def from_pil_image(cls, image: Any, meta: dict[str, Any] | None = None) -> ImageBlock:
        """An ``ImageBlock`` holding a PIL image, encoded as PNG (needs Pillow)."""
        return cls(cls.pil_to_base64(image), meta)


class ImageUrlBlock(CBlock):
    """An image by ``http://`` or ``https://`` URL, passed on as the URL (never fetched here)."""

    def __init__(self, value: str, meta: dict[str, Any] | None = None) -> None:
        if not isinstance(value, str) or not value.startswith(("http://", "https://")):
            raise ValueError(f"an ImageUrlBlock needs an http(s) URL, not {_short(value)!r}")
        super().__init__(value, meta)


class AudioBlock(CBlock):
    """Audio as base64 data: bare (then ``format`` is required) or a ``data:audio/...`` URL."""

    def __init__(
        self, value: str, format: str | None = None, meta: dict[str, Any] | None = None
    ) -> None:
        if not isinstance(value, str):
            raise ValueError("an AudioBlock needs its audio as a base64 string")
        mime, payload = split_data_url(value)
        if decode_base64(payload) is None:
            raise ValueError("an AudioBlock needs its audio as base64 (bare or as a data: URL)")
        if format is None and mime is not None and "/" in mime:
            subtype = mime.split("/", 1)[1]
            format = _AUDIO_SUBTYPES.get(subtype, subtype)
        if not format or not format.strip():
            raise ValueError(
                "an AudioBlock needs its format (e.g. 'wav'): pass format= "
                "or give a data:audio/<format>;base64,... URL"
            )
        super().__init__(value, meta)
        self.format = format

    @property
    def base64_data(self) -> str:
        """The audio as bare base64 (without any ``data:`` prefix)."""
        return split_data_url(self.value or "")[1]

    def __repr__(self) -> str:
        return f"AudioBlock({_short(self.value)!r}, {self.format!r})"


class AudioUrlBlock(CBlock):
    """Audio by ``http://`` or ``https://`` URL, with its format."""

    def __init__(self, value: str, format: str, meta: dict[str, Any] | None = None) -> None:
        if not isinstance(value, str) or not value.startswith(("http://", "https://")):
            raise ValueError(f"an AudioUrlBlock needs an http(s) URL, not {_short(value)!r}")
        if not format or not format.strip():
            raise ValueError("an AudioUrlBlock needs its format (e.g. 'wav')")
        super().__init__(value, meta)
        self.format = format

    def __repr__(self) -> str:
        return f"AudioUrlBlock({self.value!r}, {self.format!r})"


MediaBlock = ImageBlock | ImageUrlBlock | AudioBlock | AudioUrlBlock


def make_image_block(src: Any, *, meta: dict[str, Any] | None = None) -> ImageBlock | ImageUrlBlock:
    """The image block for ``src``: a PIL image, an http(s) URL, or base64 / a data: URL."""
    if isinstance(src, ImageBlock | ImageUrlBlock):
        return src
    if isinstance(src, str):
        if src.startswith(("http://", "https://")):
            return ImageUrlBlock(src, meta)
        return ImageBlock(src, meta)
    if callable(getattr(src, "save", None)) and hasattr(src, "mode"):  # a PIL image
        return ImageBlock.from_pil_image(src, meta)
    raise TypeError(f"cannot make an image block from {type(src).__name__}")


def openai_part(block: MediaBlock) -> dict[str, Any]:
    """The OpenAI chat content part for ``block``.

    An ``AudioUrlBlock`` becomes an ``audio_url`` part, the extension vLLM reads;
    OpenAI's own API takes audio only as base64 ``input_audio``.
    """
    if isinstance(block, ImageBlock):
        return {"type": "image_url", "image_url": {"url": block.data_url()}}
    if isinstance(block, ImageUrlBlock):
        return {"type": "image_url", "image_url": {"url": block.value}}
    if isinstance(block, AudioBlock):
        return {
            "type": "input_audio",
            "input_audio": {"data": block.base64_data, "format": block.format},
        }
    if isinstance(block, AudioUrlBlock):
        return {"type": "audio_url", "audio_url": {"url": block.value}}
    raise TypeError(f"not an image or audio block: {type(block).__name__}")


def user_content(
    text: str, images: Iterable[Any] | None = None, audio: Iterable[Any] | None = None
) -> str | list[dict[str, Any]]:
    """A message's content: ``text`` alone, or a text part followed by the media parts.

    ``images`` may hold image blocks, PIL images, URLs or base64 strings; ``audio``
    holds ``AudioBlock`` / ``AudioUrlBlock`` objects.
    """
    parts = [openai_part(make_image_block(image)) for image in images or ()]
    for clip in audio or ():
        if not isinstance(clip, AudioBlock | AudioUrlBlock):
            raise TypeError(f"audio= takes AudioBlock or AudioUrlBlock, not {type(clip).__name__}")
        parts.append(openai_part(clip))
    if not parts:
        return text
    return [{"type": "text", "text": text}, *parts]


def _short(value: Any, limit: int = 48) -> Any:
    """``value`` cut short for a message or repr (base64 can be megabytes)."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "..."
    return value
