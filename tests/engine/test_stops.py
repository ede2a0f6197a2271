"""Stop tokens, length, and stop strings held back until decided."""

from __future__ import annotations

from mellea.engine.stops import StopChecker
from mellea.engine.types import SamplingParams


def feed_all(checker: StopChecker, pieces: list[str]) -> tuple[list[str], bool]:
    out = []
    for piece in pieces:
        text, hit = checker.feed(piece)
        out.append(text)
        if hit:
            return out, True
    out.append(checker.flush())
    return out, False


def test_stop_token_and_eos():
    checker = StopChecker(SamplingParams(stop_token_ids=[9]), eos_ids={2}, max_tokens=5)
    assert checker.check_token(9, 1) == "stop"
    assert checker.check_token(2, 1) == "stop"
    assert checker.check_token(3, 1) is None
    assert checker.check_token(3, 5) == "length"


def test_ignore_eos_keeps_explicit_stop_ids():
    checker = StopChecker(SamplingParams(stop_token_ids=[9], ignore_eos=True), {2}, 5)
    assert checker.check_token(2, 1) is None
    assert checker.check_token(9, 1) == "stop"


def test_stop_string_split_across_pieces_never_leaks():
    checker = StopChecker(SamplingParams(stop=["</end>"]), set(), 100)
    out, hit = feed_all(checker, ["Hello <", "/e", "nd> more"])
    assert hit
    assert "".join(out) == "Hello "
    assert out == ["Hello ", "", ""]


def test_false_alarm_is_released():
    checker = StopChecker(SamplingParams(stop=["STOP"]), set(), 100)
    out, hit = feed_all(checker, ["a ST", "ay", " here"])
    assert not hit
    assert out == ["a ", "STay", " here", ""]


def test_held_text_flushed_at_end():
    checker = StopChecker(SamplingParams(stop=["###"]), set(), 100)
    out, hit = feed_all(checker, ["done #"])
    assert not hit
    assert out == ["done ", "#"]


def test_earliest_of_several_stops_wins():
    checker = StopChecker(SamplingParams(stop=["world", "lo w"]), set(), 100)
    text, hit = checker.feed("hello world")
    assert hit and text == "hel"


def test_no_stops_passes_through():
    checker = StopChecker(SamplingParams(), set(), 100)
    assert checker.feed("abc") == ("abc", False)
