"""Payloads of the validated-streaming hooks."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mellea.plugins.base import MelleaBasePayload


class StreamingStartPayload(MelleaBasePayload):
    """``streaming_start``: a validated stream starts."""

    streaming_id: str = ""
    has_requirements: bool = False
    requirement_count: int = 0
    chunking_strategy: str = ""


class StreamingEventPayload(MelleaBasePayload):
    """``streaming_event``: one stream event (``requirements``: those a quick check ran)."""

    streaming_id: str = ""
    event: Any = None
    requirements: list[Any] = Field(default_factory=list)


class StreamingEndPayload(MelleaBasePayload):
    """``streaming_end``: the stream finished, failed validation, or raised."""

    streaming_id: str = ""
    success: bool = True
    failure_reason: str | None = None
    exception: BaseException | None = None
    model: str | None = None
    provider: str | None = None
    full_text_length: int = 0
