"""What the openai backend sends: the request body built from a call's model options."""

from __future__ import annotations

from mellea.backends import ModelOption
from mellea.backends.openai import request_body


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name
    """
    return f"sunny in {city}"


def test_tools_reach_the_remote_server_in_openai_form():
    body = request_body({ModelOption.TOOLS: [get_weather], "tool_choice": "required"}, None)
    assert body["tool_choice"] == "required"
    (tool,) = body["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "get_weather"
    assert tool["function"]["parameters"]["properties"]["city"]["type"] == "string"


def test_no_tools_sends_no_tools_key():
    assert "tools" not in request_body({ModelOption.TOOLS: []}, None)
    assert "tools" not in request_body({ModelOption.TEMPERATURE: 0.0}, None)
