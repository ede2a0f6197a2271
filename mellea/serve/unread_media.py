"""Images and audio a program answered without: refused, as a model without vision is.

A chat request's ``image_url`` and ``input_audio`` parts reach ``serve()`` in its
messages. A program that hands them on reads them (``get_image_blocks()``,
``get_image_urls()``, ``get_audio_blocks()`` or ``to_openai()`` on any message; each
message notes it). One that returns without having read any answered without seeing
what the user sent, so the reply is a 400 naming the first such part
(``messages[i].content[j]``), and what the program started is closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mellea.serve.closing import close_source
from mellea.serve.errors import OpenAIError
from mellea.serve.messages import ChatMessage
from mellea.serve.program_call import ProgramOutputError, as_thunk

_KINDS = {"image_url": "an image", "input_audio": "audio"}


def unread_media(messages: Sequence[Any]) -> tuple[str, str] | None:
    """``(param, part type)`` of the first image or audio part, when the program read
    the media of no message; ``None`` when there are none or the program read them."""
    chat = [m for m in messages if isinstance(m, ChatMessage)]
    if any(m.media_taken for m in chat):
        return None
    for i, message in enumerate(messages):
        if isinstance(message, ChatMessage):
            for j, kind in message.media_parts():
                return f"messages[{i}].content[{j}]", kind
    return None


async def refuse_unread_media(messages: Sequence[Any], result: Any) -> None:
    """400 naming the first image or audio part when the program that returned
    ``result`` read none of them; the generation ``result`` holds is closed first."""
    unread = unread_media(messages)
    if unread is None:
        return
    param, kind = unread
    try:
        await close_source(as_thunk(result))
    except ProgramOutputError:
        pass  # a wrong return type: nothing to close
    raise OpenAIError(
        400,
        f"{param} is {_KINDS.get(kind, kind)} ({kind}), and this program reads text only: "
        "it answered without it. Send text, or serve a program that takes images and "
        "audio (one that passes get_image_blocks() or get_audio_blocks() to a model "
        "that reads them)",
        param=param,
    )
