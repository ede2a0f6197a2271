"""Payloads of the generation hooks (one backend call)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from mellea.plugins.base import MelleaBasePayload


class GenerationPreCallPayload(MelleaBasePayload):
    """``generation_pre_call``: before a backend call. Writable: ``model_options``,
    ``format``, ``tool_calls``."""

    action: Any = None
    context: Any = None
    model_options: dict[str, Any] = Field(default_factory=dict)
    format: Any = None
    tool_calls: bool = False
    generation_id: str | None = None
    model: str | None = None
    provider: str | None = None


class GenerationPostCallPayload(MelleaBasePayload):
    """``generation_post_call``: the output is complete (``model_output.value`` is set);
    ``latency_ms`` from the call to the last token."""

    prompt: str | list[dict[str, Any]] = ""
    model_output: Any = None
    latency_ms: float = 0.0
    generation_id: str | None = None


class GenerationErrorPayload(MelleaBasePayload):
    """``generation_error``: the backend raised ``exception`` (which then propagates)."""

    exception: BaseException
    model_output: Any = None
    generation_id: str | None = None
    latency_ms: float = 0.0


class GenerationEventPayload(MelleaBasePayload):
    """``generation_event``: a named event during one generation, its values in ``data``."""

    generation_id: str | None = None
    event_name: str = ""
    model: str | None = None
    provider: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class GenerationBatchPreCallPayload(MelleaBasePayload):
    """``generation_batch_pre_call``: before one batch request. Writable:
    ``model_options``, ``format``, ``tool_calls``."""

    actions: Sequence[Any] = ()
    generation_id: str | None = None
    model_options: dict[str, Any] = Field(default_factory=dict)
    format: Any = None
    tool_calls: bool = False
    num_actions: int = 0
    model: str | None = None
    provider: str | None = None


class GenerationBatchPostCallPayload(MelleaBasePayload):
    """``generation_batch_post_call``: a batch request succeeded."""

    generation_id: str | None = None
    model_outputs: list[Any] = Field(default_factory=list)
    usage: dict[str, Any] | None = None
    model: str | None = None
    provider: str | None = None
    latency_ms: float = 0.0


class GenerationBatchErrorPayload(MelleaBasePayload):
    """``generation_batch_error``: a batch request failed."""

    generation_id: str | None = None
    exception: BaseException
    model: str | None = None
    provider: str | None = None
    latency_ms: float = 0.0
