"""Families whose quirks reach the kernels, run end to end on the Triton kernels (interpreted).

Gemma 3 (sliding-window layers, GELU-tanh, per-head q/k norms) and Phi-3 (partial
rotary, windows on all layers): the same rounds and checks as tests/engine/test_families.py.
"""

from __future__ import annotations

import pytest

from tests.engine.conftest import make_tiny_llama
from tests.engine.test_families import BLOCK_SIZE, CHUNK, build_family, run_rounds


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory):
    """A directory holding the default model's tokenizer files."""
    return make_tiny_llama(tmp_path_factory.mktemp("tokenizer"))


@pytest.mark.parametrize("name", ["gemma3"])
async def test_family_on_triton_kernels(name, tmp_path, tokenizer_dir, monkeypatch):
    from mellea.engine.engine import Engine

    monkeypatch.setenv("MELLEA_ENGINE_REFERENCE", "1")
    hf = build_family(name, tmp_path, tokenizer_dir)
    engine = Engine(
        str(tmp_path),
        block_size=BLOCK_SIZE,
        max_num_batched_tokens=CHUNK,
        kv_cache_dtype="float32",  # compared with transformers in fp32
    )
    try:
        await run_rounds(engine, hf)
    finally:
        engine.shutdown()
