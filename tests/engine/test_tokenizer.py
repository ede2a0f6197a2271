"""load_tokenizer: the plain tokenizers class straight, the same tokenizer as
AutoTokenizer's, without importing transformers' model-loading modules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mellea.engine.loader import resolve_model
from mellea.engine.tokenizer import load_tokenizer, plain_tokenizer_class

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Grüße! Write `x = 1` twice.\n\tThanks <|im_end|>"},
]


def test_the_plain_class_loads_the_same_tokenizer_as_auto_tokenizer() -> None:
    from transformers import AutoTokenizer

    path = resolve_model(None)
    assert plain_tokenizer_class(path)
    ours, auto = load_tokenizer(path), AutoTokenizer.from_pretrained(path)
    assert type(ours) is type(auto)
    assert ours.get_vocab() == auto.get_vocab()
    assert ours.all_special_tokens == auto.all_special_tokens
    assert ours.eos_token_id == auto.eos_token_id
    assert ours.chat_template == auto.chat_template
    prompt = ours.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert prompt == auto.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = ours.encode(prompt, add_special_tokens=False)
    assert ids == auto.encode(prompt, add_special_tokens=False)
    assert ours.decode(ids) == auto.decode(ids) == prompt


def test_other_tokenizer_classes_go_through_auto_tokenizer(tmp_path: Path) -> None:
    source = resolve_model(None)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(source / name, tmp_path / name)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "GPT2Tokenizer"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert not plain_tokenizer_class(tmp_path)
    assert load_tokenizer(tmp_path).encode("hello world")  # AutoTokenizer's class
    (tmp_path / "tokenizer_config.json").write_text("not json")
    assert not plain_tokenizer_class(tmp_path)


@pytest.mark.parametrize("missing", ["tokenizer.json", "tokenizer_config.json"])
def test_a_directory_without_the_files_is_not_plain(tmp_path: Path, missing: str) -> None:
    source = resolve_model(None)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if name != missing:
            shutil.copy(source / name, tmp_path / name)
    assert not plain_tokenizer_class(tmp_path)


def test_loading_skips_transformers_model_loading_imports() -> None:
    """AutoTokenizer reads the model config, whose imports reach torch.distributed.tensor
    (about a second before the engine is ready); the plain class needs none of it."""
    code = (
        "import sys\n"
        "from mellea.engine.loader import resolve_model\n"
        "from mellea.engine.tokenizer import load_tokenizer\n"
        "load_tokenizer(resolve_model(None))\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch.distributed.tensor')"
        " or m.startswith('transformers.models.llama')))\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True
    )
    assert done.stdout.strip() == "[]"


ROPE_MODULES = (
    "import sys\n"
    "from mellea.engine.engine import _import_for_the_build\n"
    "_import_for_the_build(__import__('pathlib').Path(sys.argv[1]))\n"
    "print('transformers.modeling_rope_utils' in sys.modules,"
    " 'transformers.models.llama.configuration_llama' in sys.modules)\n"
)


@pytest.mark.parametrize(("rope", "imported"), [(None, "False"), ("llama3", "True")])
def test_the_engine_imports_a_scaled_ropes_functions_before_its_thread(tmp_path, rope, imported):
    """The engine thread builds a scaled RoPE's table with transformers' functions (and
    the model type's config class) while the main thread imports the tokenizer from
    transformers; imported by both at once, a module could be half-initialized (an
    ImportError a Llama 3 model's first request met). So the main thread imports them
    before the thread starts, and only where the model needs them."""
    source = resolve_model(None)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, tmp_path / name)
    config = json.loads((source / "config.json").read_text())
    if rope:
        config["rope_parameters"] = {
            "rope_type": rope,
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        }
    (tmp_path / "config.json").write_text(json.dumps(config))
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", ROPE_MODULES, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=root,
        check=True,
    )
    assert done.stdout.split() == [imported, imported]
