"""LoRA and aLoRA adapters on the GPU: decode steps that mix adapters run as CUDA
graphs through the gathered kernel, and every request's tokens and logprobs equal
PEFT's over transformers on the same GPU (fp32), graphs on or off.

The adapters are random PEFT ones made here (tests/engine/test_lora.py's three: a
LoRA on every projection, an rsLoRA on q/v/down, an aLoRA on q/k/v).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mellea.engine.core import EngineCore
from tests.engine.test_lora import ADAPTERS, INVOCATION, make_adapter, reference
from tests.gpu.test_engine_cuda import add, run

NEW_TOKENS = 12
CONVERSATION = list(range(1200, 1260, 3))
# (prompt, adapter): the base, each adapter, and an aLoRA whose invocation is absent.
REQUESTS = [
    (list(range(300, 340)), None),
    (list(range(300, 340)), "lora"),
    (list(range(7000, 7031, 2)), "rslora"),
    (CONVERSATION + [5, 6] + INVOCATION + [11], "alora"),
    (list(range(2000, 2016)), "alora"),
    (list(range(500, 534)), "lora"),
]
LOGPROB_ATOL = 2e-3


@pytest.fixture(scope="module")
def adapter_dirs(smol_dir: Path, tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("adapters")
    return {
        name: make_adapter(smol_dir, where / name, seed, **config)
        for seed, (name, config) in enumerate(ADAPTERS.items())
    }


@pytest.fixture(scope="module")
def peft_model(smol_dir: Path, adapter_dirs: dict[str, Path]):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(smol_dir, dtype=torch.float32).cuda().eval()
    names = list(adapter_dirs)
    model = PeftModel.from_pretrained(base, adapter_dirs[names[0]], adapter_name=names[0])
    for name in names[1:]:
        model.load_adapter(adapter_dirs[name], adapter_name=name)
    return model.eval()


def engine_run(smol_dir: Path, adapter_dirs: dict[str, Path]) -> tuple[EngineCore, list]:
    core = EngineCore(smol_dir, dtype="float32", device="cuda", max_num_seqs=8)
    for name, where in adapter_dirs.items():
        core.load_adapter(name, where)
    seqs = [
        add(core, f"r{i}", p, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=5, adapter=a)
        for i, (p, a) in enumerate(REQUESTS)
    ]
    outputs = run(core)
    return core, [[o for o in outputs if o.seq is s] for s in seqs]


def check_against_peft(model, per_request: list) -> None:
    """Each token is PEFT's greedy choice (or within the tolerance of it, at a near
    tie), and its logprob and the top-5 equal PEFT's."""
    for (prompt, adapter), outputs in zip(REQUESTS, per_request, strict=True):
        tokens = [o.token for o in outputs]
        assert len(tokens) == NEW_TOKENS
        ref = reference(model, adapter, prompt, tokens)
        for i, out in enumerate(outputs):
            assert float(ref[i].max() - ref[i, tokens[i]]) <= LOGPROB_ATOL, (adapter, i)
            assert out.logprobs.logprob == pytest.approx(float(ref[i, tokens[i]]), abs=LOGPROB_ATOL)
            got = torch.tensor([v for _, v in out.logprobs.top])
            torch.testing.assert_close(got, ref[i].topk(5).values, atol=LOGPROB_ATOL, rtol=0)


def test_mixed_adapter_decode_runs_as_graphs_and_equals_peft(smol_dir, adapter_dirs, peft_model):
    core, per_request = engine_run(smol_dir, adapter_dirs)
    graphs = core.runner.graphs
    assert graphs is not None and graphs.lora_graphs, "no decode step with adapters ran a graph"
    check_against_peft(peft_model, per_request)
    # The adapters change the tokens (so the check above saw them applied).
    base, lora = ([o.token for o in r] for r in per_request[:2])
    assert base != lora


def test_eager_steps_give_the_graphs_tokens(smol_dir, adapter_dirs, monkeypatch):
    _, graphed = engine_run(smol_dir, adapter_dirs)
    monkeypatch.setenv("MELLEA_CUDA_GRAPHS", "0")
    core, eager = engine_run(smol_dir, adapter_dirs)
    assert core.runner.graphs is None
    assert [[o.token for o in r] for r in eager] == [[o.token for o in r] for r in graphed]


def test_an_adapter_loaded_later_is_captured_again(smol_dir, adapter_dirs, tmp_path):
    """The graphs with adapters hold the stacks: a load after them must not leave a
    graph reading the former ones."""
    core = EngineCore(smol_dir, dtype="float32", device="cuda", max_num_seqs=8)
    core.load_adapter("lora", adapter_dirs["lora"])
    prompt = list(range(300, 340))
    first = add(core, "a", prompt, max_tokens=8, ignore_eos=True, adapter="lora")
    run(core)
    generation = core.runner.adapters.generation
    core.load_adapter("rslora", adapter_dirs["rslora"])
    again = add(core, "b", prompt, max_tokens=8, ignore_eos=True, adapter="lora")
    other = add(core, "c", prompt, max_tokens=8, ignore_eos=True, adapter="rslora")
    run(core)
    assert core.runner.adapters.generation > generation
    assert again.output_ids == first.output_ids
    assert other.output_ids != first.output_ids
