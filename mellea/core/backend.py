"""The interface every backend implements (upstream's module path; ``mellea.backends.base``
re-exports it beside the helpers backends share)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from mellea.core.base import BaseModelSubclass
from mellea.core.thunk import ModelOutputThunk

__all__ = ["Backend", "BaseModelSubclass"]


class Backend(ABC):
    """Turns chat messages into a streaming :class:`ModelOutputThunk`."""

    model_id: str

    def __init__(self, model_options: dict[str, Any] | None = None) -> None:
        self.model_options: dict[str, Any] = dict(model_options or {})

    @abstractmethod
    async def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        model_options: dict[str, Any] | None = None,
        format: type | None = None,
        tool_calls: bool = False,
    ) -> ModelOutputThunk:
        """Start generating a reply to ``messages`` and return its uncomputed thunk.

        Errors the client caused (e.g. a prompt too long) are raised here, before
        any output, as :class:`mellea.core.RequestError`.
        """
