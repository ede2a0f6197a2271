"""Tool-call parsers: one-shot parsing per format, and streaming that adds up to it."""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

import pytest

from mellea.core.parsers import (
    TOOL_PARSERS,
    ParsedToolCall,
    StreamDelta,
    ToolCallParser,
    get_tool_parser,
)

Calls = list[tuple[str, dict[str, Any]]]

NESTED = {
    "code": 'if (x) { return "}"; } else { y = [1, 2]; }',
    "opts": {"deep": [1, {"a": None, "b": [True, False]}], "quote": 'say "hi"\\n'},
}
UNICODE = {"city": "Zürich", "note": "日本語 🌧 naïve — “quoted”"}


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def hermes(name: str, args: Any, key: str = "arguments") -> str:
    return f'<tool_call>\n{{"name": "{name}", "{key}": {dumps(args)}}}\n</tool_call>'


CASES = [
    # --- hermes ---------------------------------------------------------------------------
    (
        "hermes",
        "single",
        hermes("get_weather", {"city": "Paris"}),
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        "hermes",
        "text_then_two",
        "I'll look up both cities.\n\n"
        + hermes("get_weather", {"city": "Paris"})
        + "\n"
        + hermes("get_weather", {"city": "Rome", "days": 3}),
        "I'll look up both cities.",
        [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome", "days": 3})],
    ),
    ("hermes", "nested", hermes("run", NESTED), None, [("run", NESTED)]),
    ("hermes", "unicode", "Voilà :\n" + hermes("météo", UNICODE), "Voilà :", [("météo", UNICODE)]),
    (
        "hermes",
        "compact_and_text_after",
        '<tool_call>{"name":"f","arguments":{"a":1,"b":"x"}}</tool_call>\n\nDone.',
        "Done.",
        [("f", {"a": 1, "b": "x"})],
    ),
    (
        "hermes",
        "string_arguments",
        '<tool_call>{"name": "f", "arguments": "{\\"q\\": \\"x\\"}"}</tool_call>',
        None,
        [("f", {"q": "x"})],
    ),
    ("hermes", "no_arguments", '<tool_call>{"name": "now"}</tool_call>', None, [("now", {})]),
    (
        "hermes",
        "parameters_key",
        hermes("f", {"x": [1]}, key="parameters"),
        None,
        [("f", {"x": [1]})],
    ),
    (
        "hermes",
        "list_in_one_block",
        '<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"n": 2}}]</tool_call>',
        None,
        [("a", {}), ("b", {"n": 2})],
    ),
    (
        "hermes",
        "marker_inside_string",
        hermes("echo", {"text": "<tool_call> and {braces}"}),
        None,
        [("echo", {"text": "<tool_call> and {braces}"})],
    ),
    (
        "hermes",
        "text_between_calls",
        hermes("a", {}) + "\nthen\n" + hermes("b", {}),
        "then",
        [("a", {}), ("b", {})],
    ),
    (
        "hermes",
        "text_call_text",
        "Checking:\n\n" + hermes("a", {}) + "\n\nDone.\n",
        "Checking:\n\nDone.\n",
        [("a", {})],
    ),
    (
        "hermes",
        "unclosed_complete",
        '<tool_call>\n{"name": "f", "arguments": {}}\n',
        None,
        [("f", {})],
    ),
    ("hermes", "plain", "Hello, <b>world</b>! 3 < 4 \n", "Hello, <b>world</b>! 3 < 4 \n", []),
    (
        "hermes",
        "lookalike",
        "Use <tools> or <tool_call_x> or <tool",
        "Use <tools> or <tool_call_x> or <tool",
        [],
    ),
    ("hermes", "only_space", " \n\t", " \n\t", []),
    (
        "hermes",
        "malformed",
        '<tool_call>{"name": "f", "arguments": {"a": }</tool_call>',
        '<tool_call>{"name": "f", "arguments": {"a": }</tool_call>',
        [],
    ),
    (
        "hermes",
        "no_name",
        'x <tool_call>{"arguments": {}}</tool_call> y',
        'x <tool_call>{"arguments": {}}</tool_call> y',
        [],
    ),
    (
        "hermes",
        "malformed_then_valid",
        "<tool_call>oops</tool_call>\n" + hermes("f", {"k": "v"}),
        "<tool_call>oops</tool_call>",
        [("f", {"k": "v"})],
    ),
    (
        "hermes",
        "truncated",
        'Sure <tool_call>{"name": "f", "argu',
        'Sure <tool_call>{"name": "f", "argu',
        [],
    ),
    # --- llama3_json ----------------------------------------------------------------------
    (
        "llama3_json",
        "tagged",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        "llama3_json",
        "untagged_arguments_key",
        '\n{"name": "f", "arguments": {"x": 1.5}}',
        None,
        [("f", {"x": 1.5})],
    ),
    (
        "llama3_json",
        "several",
        f'{{"name": "a", "parameters": {dumps(NESTED)}}}; {{"name": "b", "parameters": {dumps(UNICODE)}}};',
        None,
        [("a", NESTED), ("b", UNICODE)],
    ),
    (
        "llama3_json",
        "text_after",
        '{"name": "f", "parameters": {}}\n\nLet me know.',
        "Let me know.",
        [("f", {})],
    ),
    ("llama3_json", "plain", "The answer is {42}.", "The answer is {42}.", []),
    (
        "llama3_json",
        "json_answer",
        '{"name": "Alice", "age": 30}',
        '{"name": "Alice", "age": 30}',
        [],
    ),
    (
        "llama3_json",
        "truncated",
        '{"name": "f", "parameters": {"a": "b',
        '{"name": "f", "parameters": {"a": "b',
        [],
    ),
    (
        "llama3_json",
        "builtin_tool_code",
        '<|python_tag|>brave_search.call(query="x")',
        '<|python_tag|>brave_search.call(query="x")',
        [],
    ),
    ("llama3_json", "partial_tag", "  <|python", "  <|python", []),
    ("llama3_json", "lookalike_tag", "<|pythonista|> hi", "<|pythonista|> hi", []),
    (
        "llama3_json",
        "valid_then_malformed",
        '{"name": "f", "parameters": {}}; {"name": oops}',
        '{"name": oops}',
        [("f", {})],
    ),
    # --- mistral --------------------------------------------------------------------------
    (
        "mistral",
        "array_single",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        "mistral",
        "array_several_text_before",
        f'Checking.[TOOL_CALLS][{{"name": "a", "arguments": {dumps(NESTED)}, "id": "abc123def"}}, '
        f'{{"name": "b", "arguments": {dumps(UNICODE)}}}]',
        "Checking.",
        [("a", NESTED), ("b", UNICODE)],
    ),
    (
        "mistral",
        "array_string_arguments",
        '[TOOL_CALLS][{"name": "f", "arguments": "{\\"a\\": [1]}"}]',
        None,
        [("f", {"a": [1]})],
    ),
    (
        "mistral",
        "args_form",
        f'[TOOL_CALLS]get_weather[ARGS]{{"city": "Paris"}}[TOOL_CALLS]run[ARGS]{dumps(NESTED)}',
        None,
        [("get_weather", {"city": "Paris"}), ("run", NESTED)],
    ),
    (
        "mistral",
        "call_id_form",
        '[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{"x": "日本"}\nDone',
        "Done",
        [("f", {"x": "日本"})],
    ),
    ("mistral", "lookalike", "a [TOOL_CALL] b [TOOL_CALLSX", "a [TOOL_CALL] b [TOOL_CALLSX", []),
    ("mistral", "marker_then_prose", "[TOOL_CALLS]hello world", "[TOOL_CALLS]hello world", []),
    (
        "mistral",
        "args_not_json",
        "[TOOL_CALLS]f[ARGS]not json",
        "[TOOL_CALLS]f[ARGS]not json",
        [],
    ),
    (
        "mistral",
        "malformed_array",
        '[TOOL_CALLS][{"name": "f", "arguments": {]',
        '[TOOL_CALLS][{"name": "f", "arguments": {]',
        [],
    ),
    (
        "mistral",
        "malformed_then_valid",
        "[TOOL_CALLS][1, 2] [TOOL_CALLS]g[ARGS]{}",
        "[TOOL_CALLS][1, 2]",
        [("g", {})],
    ),
    ("mistral", "marker_at_end", "text [TOOL_CALLS]", "text [TOOL_CALLS]", []),
    # --- pythonic -------------------------------------------------------------------------
    (
        "pythonic",
        "several",
        '[get_weather(city="Paris", days=3), other(x=[1, 2])]',
        None,
        [("get_weather", {"city": "Paris", "days": 3}), ("other", {"x": [1, 2]})],
    ),
    (
        "pythonic",
        "literals",
        "[f(a=True, b=None, c=(1, 2.5), d={'k': [False]}, e='it\\'s ]', g=-3)]",
        None,
        [("f", {"a": True, "b": None, "c": [1, 2.5], "d": {"k": [False]}, "e": "it's ]", "g": -3})],
    ),
    (
        "pythonic",
        "strings_with_brackets",
        '[run(code="""x = [1]\nprint("]")"""), echo(text="Zürich 🌧 [")]',
        None,
        [("run", {"code": 'x = [1]\nprint("]")'}), ("echo", {"text": "Zürich 🌧 ["})],
    ),
    (
        "pythonic",
        "tags_dotted_text_after",
        '<|python_start|>[tools.search(q="x")]<|python_end|>\nDone',
        "Done",
        [("tools.search", {"q": "x"})],
    ),
    ("pythonic", "no_args", "  [now()]", None, [("now", {})]),
    ("pythonic", "plain", "Sure, here it is.", "Sure, here it is.", []),
    ("pythonic", "number_list", "[1, 2, 3] are numbers", "[1, 2, 3] are numbers", []),
    ("pythonic", "positional", '[f("Paris")]', '[f("Paris")]', []),
    ("pythonic", "not_literal", '[f(x=open("a"))]', '[f(x=open("a"))]', []),
    ("pythonic", "infinite", "[f(x=1e999)]", "[f(x=1e999)]", []),
    ("pythonic", "kwargs", "[f(**d)]", "[f(**d)]", []),
    ("pythonic", "unclosed", '[f(x="a]"', '[f(x="a]"', []),
    ("pythonic", "empty", "[]", "[]", []),
    ("pythonic", "partial_tag", "<|python_st", "<|python_st", []),
    # --- granite --------------------------------------------------------------------------
    (
        "granite",
        "token_marker",
        f'<|tool_call|>[{{"name": "a", "arguments": {dumps(NESTED)}}}, {{"name": "b", "arguments": {{}}}}]',
        None,
        [("a", NESTED), ("b", {})],
    ),
    (
        "granite",
        "string_marker",
        f'<tool_call> [{{"name": "get_weather", "arguments": {dumps(UNICODE)}}}]',
        None,
        [("get_weather", UNICODE)],
    ),
    ("granite", "plain", "Paris is sunny.", "Paris is sunny.", []),
    ("granite", "marker_then_text", "<|tool_call|> sorry", "<|tool_call|> sorry", []),
    ("granite", "lookalike", "<tool_calls>[]", "<tool_calls>[]", []),
    # --- json -----------------------------------------------------------------------------
    ("json", "object", f'{{"name": "run", "arguments": {dumps(NESTED)}}}', None, [("run", NESTED)]),
    (
        "json",
        "list",
        f' [{{"name": "a", "arguments": {dumps(UNICODE)}}}, {{"name": "b", "parameters": {{}}}}]\n',
        None,
        [("a", UNICODE), ("b", {})],
    ),
    ("json", "plain", "No tool needed.", "No tool needed.", []),
    ("json", "not_a_call", '{"answer": 42}', '{"answer": 42}', []),
    ("json", "empty_list", "[]", "[]", []),
    (
        "json",
        "list_with_non_call",
        '[{"name": "a", "arguments": {}}, 3]',
        '[{"name": "a", "arguments": {}}, 3]',
        [],
    ),
    (
        "json",
        "nan",
        '{"name": "a", "arguments": {"x": NaN}}',
        '{"name": "a", "arguments": {"x": NaN}}',
        [],
    ),
    ("json", "text_after", '{"name": "a", "arguments": {}} trailing', "trailing", [("a", {})]),
]

PARAMS = [pytest.param(*case, id=f"{case[0]}-{case[1]}") for case in CASES]


def run_stream(parser: ToolCallParser, pieces: list[str]) -> tuple[str, list[ParsedToolCall]]:
    """Feed the pieces, check the delta protocol, and join the deltas."""
    deltas: list[StreamDelta] = [parser.feed(piece) for piece in pieces] + [parser.finish()]
    content = "".join(d.content for d in deltas)
    calls: list[ParsedToolCall] = []
    for delta in deltas:
        for d in delta.tool_calls:
            if d.index == len(calls):  # first delta of a call: id and name
                assert d.id is not None and re.fullmatch(r"call_[0-9a-f]{24}", d.id)
                assert d.name
                calls.append(ParsedToolCall(name=d.name, arguments="", id=d.id))
            else:
                assert d.index == len(calls) - 1 and d.id is None and d.name is None
            calls[-1].arguments += d.arguments or ""
    return content, calls


def random_pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, min(12, len(text) - 1))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize(("fmt", "case", "text", "content", "calls"), PARAMS)
def test_parse(fmt: str, case: str, text: str, content: str | None, calls: Calls):
    got_content, got_calls = get_tool_parser(fmt).parse(text)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in got_calls] == calls
    # The canonical arguments form, the same string ModelToolCall.arguments_json gives.
    assert [c.arguments for c in got_calls] == [dumps(args) for _, args in calls]
    assert len({c.id for c in got_calls}) == len(got_calls)


@pytest.mark.parametrize(("fmt", "case", "text", "content", "calls"), PARAMS)
def test_stream_matches_parse(fmt: str, case: str, text: str, content: str | None, calls: Calls):
    expected_content, expected = get_tool_parser(fmt).parse(text)
    expected_calls = [(c.name, c.arguments) for c in expected]
    rng = random.Random(f"{fmt}-{case}")
    splits = [[text], list(text)] + [random_pieces(text, rng) for _ in range(40)]
    for pieces in splits:
        got_content, got = run_stream(get_tool_parser(fmt), pieces)
        assert got_content == (expected_content or ""), pieces
        assert [(c.name, c.arguments) for c in got] == expected_calls, pieces


SNIPPETS = {
    "hermes": [hermes("f", NESTED), hermes("g", {}), "<tool_call>{bad}</tool_call>", "<tool"],
    "llama3_json": [
        '{"name": "f", "parameters": {"a": "}"}}',
        '<|python_tag|>{"name": "g", "parameters": {}}; ',
        "; ",
        "<|python_tag|>",
        "{",
    ],
    "mistral": [
        '[TOOL_CALLS]f[ARGS]{"a": "]"}',
        '[TOOL_CALLS][{"name": "g", "arguments": {}}]',
        "[TOOL_CALLS]",
        "h[CALL_ID]x1[ARGS]{}",
        "[ARGS]",
    ],
    "pythonic": ['[f(a="]", b=[1])]', "<|python_start|>", "<|python_end|>", "[", "]", "f("],
    "granite": ['<|tool_call|>[{"name": "f", "arguments": {"a": "]"}}]', "<tool_call>", "[", "{"],
    "json": ['{"name": "f", "arguments": {"a": 1}}', '[{"name": "g"}]', "{", "]"],
}
COMMON = [" ", "\n\n", "text", "Zürich 🌧", '"', "\\", "<", "[", "{"]


@pytest.mark.parametrize("fmt", sorted(TOOL_PARSERS))
def test_stream_matches_parse_on_random_mixtures(fmt: str):
    """Random mixtures of calls, marker pieces and text: every split streams like parse()."""
    rng = random.Random(fmt)
    pool = SNIPPETS[fmt] + COMMON
    for _ in range(150):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.5:  # most formats only look for calls at the start
            text = rng.choice(SNIPPETS[fmt]) + text
        content, calls = get_tool_parser(fmt).parse(text)
        expected = [(c.name, c.arguments) for c in calls]
        for pieces in [list(text)] + [random_pieces(text, rng) for _ in range(4)]:
            got_content, got = run_stream(get_tool_parser(fmt), pieces)
            assert (got_content, [(c.name, c.arguments) for c in got]) == (content or "", expected)


@pytest.mark.parametrize("fmt", sorted(TOOL_PARSERS))
def test_stream_with_empty_pieces(fmt: str):
    text = next(case[2] for case in CASES if case[0] == fmt and case[4])
    content, calls = run_stream(get_tool_parser(fmt), ["", *text, ""])
    assert (content or None, [c.name for c in calls]) == (
        get_tool_parser(fmt).parse(text)[0],
        [c.name for c in get_tool_parser(fmt).parse(text)[1]],
    )


def test_hermes_releases_content_early_and_holds_only_a_marker_prefix():
    parser = get_tool_parser("hermes")
    assert parser.feed("Hello wor").content == "Hello wor"
    assert parser.feed("ld <tool").content == "ld"  # " " may precede a call, "<tool" may start one
    assert parser.feed("s> x").content == " <tools> x"
    delta = parser.feed(' <tool_call>{"name": "f", "arguments": {"a": 1}')
    assert delta == StreamDelta()
    delta = parser.feed("}</tool_")
    assert delta.content == "" and delta.tool_calls == []
    delta = parser.feed("call>")
    assert [(d.index, d.name, d.arguments) for d in delta.tool_calls] == [(0, "f", '{"a": 1}')]
    assert parser.finish() == StreamDelta()


def test_call_is_sent_as_soon_as_its_json_closes():
    parser = get_tool_parser("llama3_json")
    assert parser.feed('{"name": "f", "parameters": {"a": "}"}').tool_calls == []
    assert [d.name for d in parser.feed("}").tool_calls] == ["f"]
    parser = get_tool_parser("pythonic")
    assert parser.feed('[f(a="]")').tool_calls == []
    assert [d.name for d in parser.feed("]").tool_calls] == ["f"]


@pytest.mark.parametrize("fmt", ["llama3_json", "pythonic", "json"])
def test_reply_not_starting_with_a_call_streams_at_once(fmt: str):
    parser = get_tool_parser(fmt)
    assert parser.feed("Sure").content == "Sure"
    assert parser.feed(" thing").content == " thing"


def test_one_piece_with_several_calls():
    parser = get_tool_parser("hermes")
    delta = parser.feed(hermes("a", {}) + hermes("b", {"x": 1}) + "ok")
    assert [(d.index, d.name) for d in delta.tool_calls] == [(0, "a"), (1, "b")]
    assert delta.content == "ok"


def test_parse_leaves_streaming_state_alone():
    parser = get_tool_parser("hermes")
    parser.feed("<tool_call>")
    assert parser.parse("plain") == ("plain", [])
    assert [d.name for d in parser.feed('{"name": "f"}</tool_call>').tool_calls] == ["f"]


def test_feed_after_finish_is_an_error():
    parser = get_tool_parser("json")
    parser.finish()
    assert parser.finish() == StreamDelta()
    with pytest.raises(RuntimeError):
        parser.feed("x")


def test_registry_gives_fresh_parsers():
    assert set(TOOL_PARSERS) == {"hermes", "llama3_json", "mistral", "pythonic", "granite", "json"}
    for name, cls in TOOL_PARSERS.items():
        first, second = get_tool_parser(name), get_tool_parser(name)
        assert type(first) is cls and first is not second and cls.name == name


def test_unknown_tool_parser_lists_valid_names():
    with pytest.raises(ValueError, match="nope") as info:
        get_tool_parser("nope")
    for name in TOOL_PARSERS:
        assert name in str(info.value)


@pytest.mark.parametrize("fmt", sorted(TOOL_PARSERS))
@pytest.mark.parametrize(
    "junk",
    [
        "",
        "{",
        "[",
        "}}]]",
        '"\\',
        "<tool_call>",
        "</tool_call>",
        "[TOOL_CALLS]",
        "[TOOL_CALLS][ARGS]",
        "<|python_tag|>{",
        "<|python_start|>[",
        "[" * 500,
        "{" * 500,
        "[f(x=" + "[" * 300 + "1" + "]" * 300 + ")]",
        "\x00\ud800",
    ],
)
def test_junk_never_raises(fmt: str, junk: str):
    content, calls = get_tool_parser(fmt).parse(junk)
    assert calls == [] or all(json.loads(c.arguments) is not None for c in calls)
    streamed, _ = run_stream(get_tool_parser(fmt), list(junk))
    assert streamed == (content or "")
