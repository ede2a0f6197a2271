"""Test program: takes the request's images and audio (as an upstream-style program that
forwards them to a vision model does) and says how many it got, without a model call.

``via: to_openai`` in the last message's text reads the messages with ``to_openai()``
instead of the media accessors.
"""

from mellea.serve import ChatMessage


def serve(input: list[ChatMessage]) -> str:
    """Count the last message's images and audio clips."""
    last = input[-1]
    if "via: to_openai" in last.get_text_content():
        parts = [p for m in input for p in (m.to_openai().get("content") or []) if p != ""]
        kinds = [p["type"] for p in parts if isinstance(p, dict)]
        return f"{kinds.count('image_url')} images, {kinds.count('input_audio')} clips"
    images, clips = last.get_image_blocks(), last.get_audio_blocks()
    return f"{len(images)} images, {len(clips)} clips"
