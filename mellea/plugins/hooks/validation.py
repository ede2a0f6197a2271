"""Payloads of the validation hooks."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mellea.plugins.base import MelleaBasePayload


class ValidationPreCheckPayload(MelleaBasePayload):
    """``validation_pre_check``: before requirements are checked. Writable:
    ``requirements``, ``model_options``."""

    validation_id: str = ""
    requirements: list[Any] = Field(default_factory=list)
    target: Any = None
    context: Any = None
    model_options: dict[str, Any] = Field(default_factory=dict)


class ValidationPostCheckPayload(MelleaBasePayload):
    """``validation_post_check``: the checks are done (or raised ``exception``).
    Writable: ``results``, ``all_validations_passed``."""

    validation_id: str = ""
    requirements: list[Any] = Field(default_factory=list)
    results: list[Any] = Field(default_factory=list)
    all_validations_passed: bool = False
    passed_count: int = 0
    failed_count: int = 0
    exception: BaseException | None = None
