"""Incremental detokenization: same text as a full decode, never a broken character."""

from __future__ import annotations

import pytest

from mellea.engine.detokenizer import IncrementalDetokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.mark.parametrize(
    "text",
    [
        "Hello, world! How are you today?",
        "Ünïcödé — 日本語のテキスト and emoji 🎉🧪👩‍👩‍👧 mixed in.",
        "  leading spaces\n\nand newlines\ttabs",
    ],
)
def test_incremental_equals_full_decode(tokenizer, text):
    prompt = tokenizer.encode("Say:")
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, prompt)
    pieces = [detok.step([i]) for i in ids]
    pieces.append(detok.flush())
    assert "".join(pieces) == tokenizer.decode(ids)
    assert not any("\ufffd" in p for p in pieces)


def test_multibyte_character_held_back(tokenizer):
    ids = tokenizer.encode("🎉", add_special_tokens=False)
    assert len(ids) > 1  # byte-level BPE splits it
    detok = IncrementalDetokenizer(tokenizer, [])
    assert [detok.step([i]) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert detok.step([ids[-1]]) == "🎉"


def test_flush_drops_incomplete_character(tokenizer):
    ids = tokenizer.encode("ok 🎉", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [])
    text = "".join(detok.step([i]) for i in ids[:-1]) + detok.flush()
    assert text == "ok "


def test_special_tokens_skipped(tokenizer):
    ids = tokenizer.encode("hi", add_special_tokens=False) + [2]
    detok = IncrementalDetokenizer(tokenizer, [])
    assert "".join(detok.step([i]) for i in ids) + detok.flush() == "hi"
