"""One decode-only step's inputs for the tests that compare compute paths on it."""

from __future__ import annotations

from typing import Any

import torch


def decode_batch(runner: Any, contexts: list[int], adapters: list[str | None] | None = None):
    """``runner.prepare`` of one decode-only step: a sequence per context length (its
    last token still to compute, blocks laid out one after another), each on
    ``adapters[i]`` where given; the KV cache is filled with seeded noise first."""
    from mellea.engine.scheduler import ScheduledBatch
    from mellea.engine.sequence import Sequence
    from mellea.engine.types import SamplingParams

    torch.manual_seed(0)
    with torch.no_grad():
        runner.k_cache.normal_()
        runner.v_cache.normal_()
    seqs, next_block = [], 1
    for i, ctx in enumerate(contexts):
        seq = Sequence(f"s{i}", [(5 * i + j) % 200 + 3 for j in range(ctx)], SamplingParams(), 8)
        name = adapters[i] if adapters else None
        if name is not None:
            seq.adapter = runner.adapters.use(name, seq.token_ids)
        blocks = -(-ctx // runner.block_size)
        seq.block_table = list(range(next_block, next_block + blocks))
        next_block += blocks
        seq.num_computed = ctx - 1
        seqs.append(seq)
    return runner.prepare(ScheduledBatch(decodes=seqs))
