"""MelleaTool, @tool and AbstractMelleaTool subclasses, as the backends see them."""

from __future__ import annotations

from typing import Any

from mellea.backends import MelleaTool, tool
from mellea.backends.base import openai_tools
from mellea.backends.tool_parsing import tool_functions
from mellea.core.base import AbstractMelleaTool


@tool
def get_weather(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    Args:
        city: The city's name.
        days: How many days ahead.
    """
    return f"sunny in {city} for {days} days"


@tool(name="stock_price")
async def price(symbol: str) -> str:
    """The price of a stock.

    Args:
        symbol: The ticker.
    """
    return f"{symbol}: 100"


class Clock(AbstractMelleaTool):
    """A tool written against upstream's abstract class."""

    name = "clock"

    def run(self, zone: str) -> str:
        return f"noon in {zone}"

    @property
    def as_json_tool(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": "clock", "parameters": {}}}


def test_tool_decorator_makes_a_mellea_tool_with_a_schema():
    assert isinstance(get_weather, MelleaTool)
    assert get_weather.run(city="Oslo") == "sunny in Oslo for 1 days"
    schema = get_weather.as_json_tool
    assert schema["function"]["name"] == "get_weather"
    props = schema["function"]["parameters"]["properties"]
    assert props["city"]["type"] == "string" and props["days"]["type"] == "integer"
    assert schema["function"]["parameters"]["required"] == ["city"]


def test_named_async_tool_runs_to_completion():
    assert price.name == "stock_price" and price.as_json_tool["function"]["name"] == "stock_price"
    assert price.run(symbol="ACME") == "ACME: 100"


def test_backends_describe_and_call_every_kind_of_tool():
    tools = [get_weather, price, Clock()]
    names = [t["function"]["name"] for t in openai_tools(tools)]
    assert names == ["get_weather", "stock_price", "clock"]
    functions = tool_functions(tools)
    assert functions["clock"](zone="UTC") == "noon in UTC"
    assert functions["stock_price"](symbol="X") == "X: 100"
    assert functions["get_weather"](city="Rome", days=2) == "sunny in Rome for 2 days"


def test_thunk_tool_calls_are_a_list_as_upstream_and_readable_by_name():
    from mellea.core import GenerationChunk, ModelOutputThunk, ModelToolCall

    first = ModelToolCall("get_weather", None, {"city": "Oslo"})
    second = ModelToolCall("get_weather", None, {"city": "Rome"})
    other = ModelToolCall("clock", None, {})

    async def chunks():
        yield GenerationChunk(text="", tool_calls=[first])
        yield GenerationChunk(finish_reason="tool_calls", tool_calls=[second, other])

    import asyncio

    thunk = ModelOutputThunk.from_stream(chunks())
    asyncio.run(thunk.avalue())
    calls = thunk.tool_calls
    assert [tc.name for tc in calls] == ["get_weather", "get_weather", "clock"]  # upstream
    assert calls[0] is first and calls["get_weather"] is first and "clock" in calls
    assert calls.keys() == ["get_weather", second.id, "clock"]  # the older dict's keys
    assert list(calls.values()) == [first, second, other]
    assert calls.get("missing") is None and first in calls


def test_tool_requirements_read_the_calls_in_the_last_output():
    from mellea.core import ModelOutputThunk, ModelToolCall
    from mellea.stdlib.context import SimpleContext
    from mellea.stdlib.requirements import tool_arg_validator, uses_tool

    call = ModelToolCall("get_weather", None, {"city": "Oslo", "days": 9})
    ctx = SimpleContext().add(ModelOutputThunk("", tool_calls=[call]))
    assert uses_tool(get_weather).validation_fn(ctx).as_bool()
    assert not uses_tool("clock").validation_fn(ctx).as_bool()
    days_ok = tool_arg_validator("days <= 7", "get_weather", "days", lambda d: d <= 7)
    verdict = days_ok.validation_fn(ctx)
    assert not verdict and "days=9" in verdict.reason
    city_ok = tool_arg_validator("city set", None, "city", bool)
    assert city_ok.validation_fn(ctx).as_bool()
    assert not uses_tool("x").validation_fn(SimpleContext().add(ModelOutputThunk("t")))


def test_functional_api_and_call_tools():
    import mellea.stdlib.functional as mfuncs
    from mellea.core import ModelOutputThunk, ModelToolCall
    from mellea.stdlib.components import ToolMessage
    from mellea.stdlib.context import ChatContext
    from tests.compat.lib_scripted import ScriptedBackend

    backend = ScriptedBackend(["fine"])
    result, ctx = mfuncs.instruct("How are you?", ChatContext(), backend)
    assert result.value == "fine " and ctx.last_output() is result
    reply, ctx = mfuncs.chat("And now?", ctx, backend)
    assert reply.content == "fine " and len(ctx.as_list()) == 4

    def boom() -> str:
        raise RuntimeError("no network")

    calls = [
        ModelToolCall("get_weather", get_weather.run, {"city": "Oslo"}),
        ModelToolCall("boom", boom),
    ]
    messages = mfuncs.call_tools(ModelOutputThunk("", tool_calls=calls), backend)
    assert all(isinstance(m, ToolMessage) and m.role == "tool" for m in messages)
    assert messages[0].content == "sunny in Oslo for 1 days" and messages[0].name == "get_weather"
    assert isinstance(messages[1].tool_output, RuntimeError) and messages[1].content == "no network"
    assert ctx.add(messages[0]).as_list()[-1].tool_call_id == calls[0].id
