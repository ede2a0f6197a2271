"""Upstream-style program: builds its backend from upstream's module paths.

It relies on ``ainstruct``'s default ``await_result`` (False) with ``strategy=None``,
so the server streams the reply as upstream's would.
"""

import os
from typing import Any

from mellea.backends import ModelOption, model_ids
from mellea.backends.model_ids import IBM_GRANITE_4_1_8B
from mellea.backends.ollama import OllamaModelBackend
from mellea.backends.openai import OpenAIBackend
from mellea.backends.tools import MelleaTool, tool
from mellea.core.base import AbstractMelleaTool, CBlock, Component, ModelOutputThunk
from mellea.formatters import TemplateFormatter
from mellea.serve import ChatMessage
from mellea.stdlib.context import SimpleContext
from mellea.stdlib.session import MelleaSession, start_session


@tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


assert isinstance(get_weather, MelleaTool) and isinstance(get_weather, AbstractMelleaTool)
assert callable(start_session) and issubclass(OllamaModelBackend, OpenAIBackend)
assert isinstance(CBlock("x"), CBlock) and Component is not None
assert model_ids.IBM_GRANITE_4_1_3B.ollama_name == "granite4.1:3b"

backend = OpenAIBackend(
    model_id=IBM_GRANITE_4_1_8B,
    formatter=TemplateFormatter(model_id=IBM_GRANITE_4_1_8B),
    base_url=os.environ["UPSTREAM_BASE_URL"],
    api_key="not-needed",
)
session = MelleaSession(backend, ctx=SimpleContext())


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Forward the last message; the tool is offered to show MelleaTool is accepted."""
    options = {**(model_options or {}), ModelOption.TOOLS: [get_weather]}
    return await session.ainstruct(
        input[-1].get_text_content(), strategy=None, model_options=options
    )
