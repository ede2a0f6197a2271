"""Fixtures: a tiny random Llama (fast), the real default model (``@pytest.mark.model``)
and each CPU kernel family in turn (``kernel_family``)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import torch

from mellea.engine import cpu_kernels
from mellea.engine.types import RequestOutput, SamplingParams


def make_tiny_llama(path: Path, *, max_positions: int = 256, seed: int = 0) -> Path:
    """Save a 2-layer random Llama (GQA, tied embeddings) + the default model's tokenizer.

    A large init range makes its logits peaked, so greedy picks are far from ties and
    numerically robust.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    from mellea.engine.loader import resolve_model

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        initializer_range=0.5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    source = resolve_model(None)
    for file in source.iterdir():
        if file.name.startswith("tokenizer") or file.suffix == ".jinja":
            shutil.copy(file, path / file.name)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the tiny random Llama."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_hf_model(tiny_model_dir: Path):
    """The tiny model loaded by transformers, for reference outputs."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def make_engine(tiny_model_dir: Path):
    """Factory for engines on the tiny model; all are shut down after the test. Their KV
    cache is float32 unless a test asks for another (``kv_cache_dtype``): the tests
    hold these engines to transformers' fp32 to 1e-4 (test_kv_cache_dtype.py tests the
    float16 default against float32)."""
    from mellea.engine.engine import Engine

    engines = []

    def factory(**kwargs) -> Engine:
        kwargs.setdefault("kv_cache_dtype", "float32")
        engine = Engine(str(tiny_model_dir), **kwargs)
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        engine.shutdown()


@pytest.fixture(scope="session")
def real_engine():
    """One engine on the real default model, shared by the ``model`` tests (fp32 weights
    and KV cache: the exact path, which the transformers-equality tests need)."""
    from mellea.engine.engine import Engine

    engine = Engine(dtype="float32", kv_cache_dtype="float32")
    yield engine
    engine.shutdown()


@pytest.fixture(scope="session")
def real_hf_model():
    """The default model loaded by transformers (fp32)."""
    from transformers import AutoModelForCausalLM

    from mellea.engine.gguf_file import transformers_weights
    from mellea.engine.loader import resolve_model

    where, extra = transformers_weights(resolve_model(None))
    return AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **extra).eval()


async def collect(stream) -> tuple[list[int], str, RequestOutput]:
    """Drain a request stream: (all token ids, all text, the final output)."""
    tokens: list[int] = []
    text = ""
    last = None
    async for out in stream:
        tokens += out.token_ids
        text += out.text
        last = out
    assert last is not None and last.finished
    return tokens, text, last


async def generate(engine, prompts, params: SamplingParams | list[SamplingParams]):
    """Submit all prompts at once and collect their results in order."""
    if isinstance(params, SamplingParams):
        params = [params] * len(prompts)
    streams = [engine.add_request(p, sp) for p, sp in zip(prompts, params, strict=True)]
    return await asyncio.gather(*(collect(s) for s in streams))


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Hugging Face greedy continuation of ``prompt`` (stops at EOS like the engine)."""
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=2,
        )
    return out[0, len(prompt) :].tolist()


def hf_logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """[len(tokens), vocab] fp32 log-softmax of the model's logits before each of ``tokens``."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    return torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)


@pytest.fixture(params=cpu_kernels.FAMILIES)
def kernel_family(request: pytest.FixtureRequest):
    """Each kernel family in turn: its build runs the ops for the test (skipped where
    this CPU cannot execute it)."""
    if not cpu_kernels.cpu_runs(request.param):
        pytest.skip(f"this CPU cannot run the {request.param} kernels")
    assert cpu_kernels.available(), "the C++ CPU ops did not build (see the log)"
    before = cpu_kernels.select(request.param)
    yield request.param
    cpu_kernels.select(before)
