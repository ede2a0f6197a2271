"""``session.instruct(tool_calls=True)`` on the local backend, over a scripted engine.

The engine stands in for the model: it streams a fixed text one character at a time,
so the tool-call markup arrives split in every possible place.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pytest

import mellea
from mellea.backends.base import function_tool
from mellea.backends.local import LocalBackend
from mellea.backends.model_options import ModelOption

CALLS = (
    'Let me look. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
)


def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


@dataclass
class Output:
    text: str
    finished: bool = False
    finish_reason: str | None = None
    prompt_tokens: int = 5
    completion_tokens: int = 0
    cached_tokens: int = 0
    logprobs: Any = None


class ScriptedEngine:
    """Streams ``reply`` a character at a time, whatever the prompt."""

    model_id = "scripted"
    max_model_len = 1024
    tokenizer = None  # only needed for logprobs and token counts

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.templates: list[list[dict[str, Any]]] = []

    def apply_chat_template(self, messages, *, tools=None):
        self.templates.append(messages)
        return [1, 2, 3]  # like a template with no place for tools

    def compile_grammar(self, grammar: str) -> None:
        return None  # the script ignores grammars

    async def add_request(self, prompt, params, request_id=None):
        for ch in self.reply:
            yield Output(ch)
        yield Output("", finished=True, finish_reason="stop", completion_tokens=len(self.reply))


def session(reply: str, **backend_kwargs: Any) -> mellea.MelleaSession:
    backend = LocalBackend(engine=ScriptedEngine(reply), **backend_kwargs)
    return mellea.MelleaSession(backend)


def ask(s: mellea.MelleaSession, tools: Any, tool_calls: bool = True, **options: Any):
    return s.instruct(
        "Weather in Paris and Oslo?",
        strategy=None,
        tool_calls=tool_calls,
        model_options={ModelOption.TOOLS: tools, **options},
    )


def test_calls_in_the_text_land_on_the_thunk_with_their_functions():
    thunk = ask(session(CALLS), [get_weather])
    assert thunk.value == "Let me look."
    calls = list(thunk.tool_calls.values())
    assert [(c.name, c.args) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert len({c.id for c in calls}) == 2
    assert [c.call_func() for c in calls] == ["sunny in Paris", "sunny in Oslo"]
    assert thunk.finish_reason == "stop" and thunk.usage["completion_tokens"] == len(CALLS)


def test_streamed_content_never_shows_the_markup():
    async def run() -> list[str]:
        s = session(CALLS)
        thunk = await s.ainstruct(
            "Weather?",
            strategy=None,
            tool_calls=True,
            await_result=False,
            model_options={ModelOption.TOOLS: [get_weather]},
        )
        pieces = []
        while not thunk.is_computed():
            pieces.append(await thunk.astream())
        return pieces

    pieces = asyncio.run(run())
    assert "".join(pieces) == "Let me look."
    assert not any("<" in p for p in pieces)


def test_without_tool_calls_or_with_choice_none_the_text_is_left_alone():
    tools = [function_tool(get_weather)]
    assert ask(session(CALLS), tools, tool_calls=False).value == CALLS
    plain = ask(session(CALLS), tools, **{ModelOption.TOOL_CHOICE: "none"})
    assert plain.value == CALLS and not plain.tool_calls


def test_the_parser_follows_the_backend_setting_then_the_runtime():
    from mellea.backends.runtime import Runtime

    mistral = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}]'
    thunk = ask(session(mistral, tool_call_parser="mistral"), [get_weather])
    assert thunk.tool_calls["get_weather"].args == {"city": "Rome"} and thunk.value == ""
    assert not ask(session(mistral), [get_weather]).tool_calls  # hermes reads none
    with Runtime(tool_call_parser="mistral").active():  # what m serve --tool-call-parser sets
        by_runtime = session(mistral)
    assert ask(by_runtime, [get_weather]).tool_calls["get_weather"].args == {"city": "Rome"}


def test_functions_become_openai_tools_described_by_their_docstrings():
    tool = function_tool(get_weather)
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "get_weather"
    assert tool["function"]["parameters"]["properties"]["city"]["type"] == "string"
    assert "return" not in tool["function"]

    def bare(a, b):
        return a

    assert function_tool(bare)["function"]["parameters"]["required"] == ["a", "b"]
    s = session("no calls")
    ask(s, [get_weather])
    system = s.backend.engine.templates[-1][0]
    assert system["role"] == "system" and json.dumps(tool["function"]) in system["content"]


@pytest.mark.parametrize("reply", ["<tool_call>{not json</tool_call>", "<tool_call>"])
def test_broken_calls_do_not_raise(reply):
    thunk = ask(session(reply), [get_weather])
    assert thunk.is_computed()
