"""Test program: replies with exactly what serve() received, as JSON."""

import json
from typing import Any

from mellea.serve import ChatMessage


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
    format: type | None = None,
) -> str:
    """The messages (as OpenAI dicts), requirements, model options and format schema."""
    return json.dumps(
        {
            "messages": [m.to_openai() for m in input],
            "requirements": requirements,
            "model_options": model_options,
            "format": format.model_json_schema() if format else None,
        }
    )
