"""The GPU's form of the adapters (mellea/engine/lora/dense.py): every adapter's pair
of a projection in two dense stacks indexed by slot, read by the gathered kernel's
reference here on the CPU (the kernel itself: tests/kernels/test_lora_triton.py)."""

from __future__ import annotations

import torch

from mellea.engine.kernels.lora import lora_gathered_ref
from mellea.engine.lora import AdapterInfo, AdapterSet, LoraAdapter, low_rank
from mellea.engine.lora.dense import dense_stacks
from tests.engine.test_lora import lora_reference

QKV = (0, "self_attn.qkv_proj")
DOWN = (0, "mlp.down_proj")
K = 40


def adapter(name: str, seed: int, updates: dict[tuple[int, str], list[tuple[int, int, int]]]):
    """A LoraAdapter with, per key, pieces (first row, rows, rank) of random pairs."""
    gen = torch.Generator().manual_seed(seed)
    built = {
        key: low_rank(
            [
                (
                    0,
                    first,
                    torch.randn(rank, K, generator=gen),
                    torch.randn(rows, rank, generator=gen),
                )
                for first, rows, rank in pieces
            ]
        )
        for key, pieces in updates.items()
    }
    return LoraAdapter(name, AdapterInfo(rank=8, targets=("q_proj",), is_alora=False), built)


ADAPTERS = [
    adapter("qv", 0, {QKV: [(0, 24, 8), (32, 8, 8)]}),  # q and v pieces, not k
    adapter("qkv", 1, {QKV: [(0, 24, 4), (24, 8, 4), (32, 8, 4)], DOWN: [(0, K, 2)]}),
    adapter("k", 2, {QKV: [(24, 8, 16)]}),  # one piece, the largest rank
    adapter("down", 3, {DOWN: [(0, K, 8)]}),  # no qkv at all
]


def test_stacks_hold_each_adapters_pieces_where_they_act():
    stacks = dense_stacks(ADAPTERS)
    assert set(stacks) == {QKV, DOWN}
    qkv = stacks[QKV]
    assert qkv.a.shape == (4, 16, K) and qkv.b.shape == (4, 40, 16)
    assert torch.count_nonzero(qkv.a[3]) == 0 and torch.count_nonzero(qkv.b[3]) == 0
    assert torch.count_nonzero(qkv.b[0, 24:32]) == 0  # "qv" writes no k rows


def test_gathered_deltas_equal_each_rows_own_adapter():
    """Rows of every adapter and of the base mixed; an adapter without the projection
    leaves its rows alone, like a base row."""
    stacks = dense_stacks(ADAPTERS)
    slots = [0, -1, 1, 2, 3, 0, 2, -1]
    for key, width in ((QKV, 40), (DOWN, K)):
        x = torch.randn(len(slots), K)
        out = torch.randn(len(slots), width)
        got = lora_gathered_ref(out.clone(), x, stacks[key].a, stacks[key].b, torch.tensor(slots))
        want = lora_reference(out, x, ADAPTERS, slots, key)
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-5)
        assert not torch.allclose(got, out)


def test_a_gpu_plan_carries_the_slots_and_a_cpu_plan_does_not(monkeypatch):
    """On a CUDA device every step with adapter rows (up to GATHERED_MAX_ROWS tokens) is
    planned for the gathered kernel; on the CPU the row groups stay. Planning makes the
    slot tensor on the device, so the check stands in a fake one for the GPU."""
    from mellea.engine.lora import step as lora_step

    made = []
    real = torch.tensor
    monkeypatch.setattr(
        lora_step.torch,
        "tensor",
        lambda data, **kw: made.append(kw) or real(data, dtype=torch.long),
    )
    adapters = AdapterSet()
    for a in ADAPTERS:
        adapters.add(a)
    step = adapters.plan([0, -1, 2], torch.device("cuda"))
    assert step is not None and step.gathered is not None and step.gathered.tolist() == [0, -1, 2]
    assert made[-1]["device"] == torch.device("cuda") and step.slots is None and not step.groups
    assert adapters.plan([-1, -1], torch.device("cuda")) is None
    long = adapters.plan([0] * (lora_step.GATHERED_MAX_ROWS + 1), torch.device("cuda"))
    assert long is not None and long.gathered is None
    monkeypatch.setattr(lora_step.torch, "tensor", real)
    cpu = adapters.plan([0, -1, 2])
    assert cpu is not None and cpu.gathered is None
