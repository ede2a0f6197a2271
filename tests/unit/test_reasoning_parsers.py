"""Reasoning parsers, and reasoning chained with a tool-call parser."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from mellea.core.parsers import (
    REASONING_PARSERS,
    ReasoningParser,
    ReplyParser,
    get_reasoning_parser,
    get_tool_parser,
)

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'

CASES = [
    # --- qwen3 ----------------------------------------------------------------------------
    (
        "qwen3",
        "standard",
        "<think>\nThe user wants X.\n</think>\n\nHere is X.",
        "The user wants X.",
        "Here is X.",
    ),
    ("qwen3", "no_think", "Just an answer.\n", None, "Just an answer.\n"),
    ("qwen3", "empty_block", "<think>\n\n</think>\n\nHi", None, "Hi"),
    ("qwen3", "unclosed", "<think>\nStill thinking about 日本", "Still thinking about 日本", ""),
    ("qwen3", "text_before", "Hmm. <think>why</think> So yes.", "why", "Hmm. So yes."),
    ("qwen3", "space_only_before", " \n<think>x</think>\n\nAnswer", "x", "Answer"),
    ("qwen3", "text_before_nothing_after", "Hmm. <think>why</think>  ", "why", "Hmm."),
    ("qwen3", "lookalike", "<thinking>no</thinking> <thin", None, "<thinking>no</thinking> <thin"),
    ("qwen3", "close_without_open", "a</think>b", None, "a</think>b"),
    (
        "qwen3",
        "tags_inside",
        "<think>a <think> b</thin k</think>c </think>",
        "a <think> b</thin k",
        "c </think>",
    ),
    ("qwen3", "call_inside_reasoning", f"<think>maybe {CALL}</think>no", f"maybe {CALL}", "no"),
    # --- deepseek_r1 ----------------------------------------------------------------------
    ("deepseek_r1", "standard", "Okay, so 2+2.\n</think>\n\n4", "Okay, so 2+2.", "4"),
    ("deepseek_r1", "repeated_open", "\n<think>\nhm\n</think>\n4", "hm", "4"),
    ("deepseek_r1", "never_closed", "All reasoning, no answer ", "All reasoning, no answer", ""),
    ("deepseek_r1", "partial_close_at_end", "x </thin", "x </thin", ""),
    ("deepseek_r1", "lookalike_open", "<thing> is </think>done", "<thing> is", "done"),
    ("deepseek_r1", "open_later_is_text", "a <think> b</think>c", "a <think> b", "c"),
    ("deepseek_r1", "empty", "", None, ""),
    ("deepseek_r1", "empty_reasoning", "</think>answer", None, "answer"),
]

PARAMS = [pytest.param(*case, id=f"{case[0]}-{case[1]}") for case in CASES]


def random_pieces(text: str, rng: random.Random) -> list[str]:
    if len(text) < 2:
        return [text]
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, min(12, len(text) - 1))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def splits(text: str, seed: str) -> list[list[str]]:
    rng = random.Random(seed)
    return [[text], list(text)] + [random_pieces(text, rng) for _ in range(40)]


def run_stream(parser: ReasoningParser, pieces: list[str]) -> tuple[str, str]:
    deltas = [parser.feed(piece) for piece in pieces] + [parser.finish()]
    return "".join(r for r, _ in deltas), "".join(c for _, c in deltas)


@pytest.mark.parametrize(("fmt", "case", "text", "reasoning", "content"), PARAMS)
def test_parse(fmt: str, case: str, text: str, reasoning: str | None, content: str):
    assert get_reasoning_parser(fmt).parse(text) == (reasoning, content)


@pytest.mark.parametrize(("fmt", "case", "text", "reasoning", "content"), PARAMS)
def test_stream_matches_parse(fmt: str, case: str, text: str, reasoning: str | None, content: str):
    for pieces in splits(text, f"{fmt}-{case}"):
        assert run_stream(get_reasoning_parser(fmt), pieces) == (reasoning or "", content), pieces


def test_streaming_holds_back_only_partial_tags():
    parser = get_reasoning_parser("qwen3")
    assert parser.feed("<thi") == ("", "")
    assert parser.feed("nk>\nStep one") == ("Step one", "")
    assert parser.feed(" and two</th") == (" and two", "")
    assert parser.feed("ink>\n\nAns") == ("", "Ans")
    assert parser.feed("wer") == ("", "wer")
    assert parser.finish() == ("", "")
    parser = get_reasoning_parser("qwen3")
    assert parser.feed("No thinking") == ("", "No thinking")
    parser = get_reasoning_parser("deepseek_r1")
    assert parser.feed("Let me") == ("Let me", "")


def test_feed_after_finish_is_an_error():
    parser = get_reasoning_parser("deepseek_r1")
    parser.finish()
    with pytest.raises(RuntimeError):
        parser.feed("x")


def test_registry_and_unknown_name():
    assert set(REASONING_PARSERS) == {"qwen3", "deepseek_r1"}
    for name, cls in REASONING_PARSERS.items():
        assert type(get_reasoning_parser(name)) is cls
    with pytest.raises(ValueError, match="deepseek_r1") as info:
        get_reasoning_parser("o1")
    assert "qwen3" in str(info.value) and "'o1'" in str(info.value)


# --- reasoning chained with tool calls ---------------------------------------------------

CHAIN_CASES = [
    (
        "qwen3",
        "hermes",
        f"<think>\nNeed the weather.\n</think>\n\nChecking.\n{CALL}",
        ("Need the weather.", "Checking.", [("get_weather", {"city": "Zürich"})]),
    ),
    (
        "qwen3",
        "hermes",
        f"<think>Draft: {CALL}</think>\n\n{CALL}\n{CALL}",
        (f"Draft: {CALL}", None, [("get_weather", {"city": "Zürich"})] * 2),
    ),
    ("qwen3", "hermes", "Plain answer", (None, "Plain answer", [])),
    (
        "deepseek_r1",
        "llama3_json",
        'think </think>\n\n<|python_tag|>{"name": "f", "parameters": {"a": "b"}}',
        ("think", None, [("f", {"a": "b"})]),
    ),
    (
        "deepseek_r1",
        "pythonic",
        'hm</think>[f(x="]")]',
        ("hm", None, [("f", {"x": "]"})]),
    ),
    ("deepseek_r1", "pythonic", "never done [f()]", ("never done [f()]", None, [])),
    (
        None,
        "mistral",
        '[TOOL_CALLS]f[ARGS]{"k": 1}',
        (None, None, [("f", {"k": 1})]),
    ),
    ("qwen3", None, "<think>r</think>c", ("r", "c", [])),
]


@pytest.mark.parametrize(("reasoning", "tools", "text", "expected"), CHAIN_CASES)
def test_reasoning_then_tool_calls(reasoning, tools, text, expected):
    def make() -> ReplyParser:
        return ReplyParser(
            get_reasoning_parser(reasoning) if reasoning else None,
            get_tool_parser(tools) if tools else None,
        )

    got_reasoning, got_content, calls = make().parse(text)
    assert (
        got_reasoning,
        got_content,
        [(c.name, json.loads(c.arguments)) for c in calls],
    ) == expected
    expected_calls = [(c.name, c.arguments) for c in calls]
    for pieces in splits(text, text):
        parser = make()
        deltas = [parser.feed(piece) for piece in pieces] + [parser.finish()]
        assert "".join(d.reasoning for d in deltas) == (got_reasoning or "")
        assert "".join(d.content for d in deltas) == (got_content or "")
        streamed = [d for delta in deltas for d in delta.tool_calls]
        assert [d.index for d in streamed] == list(range(len(calls)))
        assert [(d.name, d.arguments) for d in streamed] == expected_calls


@pytest.mark.parametrize("fmt", sorted(REASONING_PARSERS))
def test_chain_streams_like_parse_on_random_mixtures(fmt: str):
    """Random mixtures of tags, calls and text: every split streams like parse()."""
    rng = random.Random(fmt)
    pool = ["<think>", "</think>", "<thi", "</th", " ", "\n\n", "text", "日本 🌧", CALL, "<tool"]
    for _ in range(150):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 10)))
        reasoning, content, calls = ReplyParser(
            get_reasoning_parser(fmt), get_tool_parser("hermes")
        ).parse(text)
        expected = [(c.name, c.arguments) for c in calls]
        for pieces in [list(text)] + [random_pieces(text, rng) for _ in range(4)]:
            parser = ReplyParser(get_reasoning_parser(fmt), get_tool_parser("hermes"))
            deltas = [parser.feed(piece) for piece in pieces] + [parser.finish()]
            got = (
                "".join(d.reasoning for d in deltas),
                "".join(d.content for d in deltas),
                [(d.name, d.arguments) for delta in deltas for d in delta.tool_calls],
            )
            assert got == (reasoning or "", content or "", expected), pieces
