"""What mixing LoRA adapters costs per decode step, steps of each kind taking turns.

```sh
python benchmarks/lora_step_time.py                                 # every projection
python benchmarks/lora_step_time.py --targets q_proj,k_proj,v_proj  # q/k/v only
python benchmarks/lora_step_time.py --prompt 64 --steps 10          # prompt steps
```

Builds the engine's model runner for the default model in int4 (the fused C++ decode
layer) as ``step_time.py`` does, loads ``--adapters`` random rank-``--rank`` PEFT
LoRAs (made with ``peft``, as ``bench_lora.py`` makes them), and times one decode
step of ``--batch`` sequences three ways, one step of each in turn so that all three
see the same load: all rows on the base model, all on one adapter, each on a
different adapter. Prints the minimum, first quartile and median ms per step of each
and their ratios to base-only (the 1.3x target: a ratio of at least 0.77); with
``--prompt N``, a prompt step of ``--batch`` prompts of N tokens instead. Only the
forward step (``prepare`` + ``execute``) is timed: no scheduler, sampling, prefill or
HTTP, which ``bench_lora.py`` includes; on a shared machine its interleaving is what
makes the ratios steady.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from bench_lora import TARGETS, make_adapters
from step_time import make_batch, make_runner

from mellea.engine.scheduler import ScheduledBatch
from mellea.engine.sequence import Sequence
from mellea.engine.types import SamplingParams


def prompt_batch(batch: int, length: int, block_size: int = 16) -> ScheduledBatch:
    """``batch`` prompts of ``length`` tokens, each one whole chunk of a prompt step."""
    prefills, next_block = [], 1
    for i in range(batch):
        seq = Sequence(
            f"p{i}", [(11 * i + j) % 1000 + 10 for j in range(length)], SamplingParams(), 8
        )
        blocks = -(-length // block_size)
        seq.block_table = list(range(next_block, next_block + blocks))
        next_block += blocks
        prefills.append((seq, length))
    return ScheduledBatch(prefills=prefills)


def main() -> None:
    """Parse options, load the adapters, time the three kinds of step, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--targets", default=",".join(TARGETS), help="modules adapted")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--prompt",
        type=int,
        default=0,
        metavar="N",
        help="time prompt steps of --batch prompts of N tokens each instead of decode steps",
    )
    args = parser.parse_args()

    from mellea.engine import cpu_kernels
    from mellea.engine.lora import load_peft_adapter
    from mellea.engine.model import qkv_row_order

    runner = make_runner(args.batch, 512, weights="int4")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = qkv_row_order(runner.model_cfg)
    with tempfile.TemporaryDirectory() as tmp:
        made = make_adapters(Path(tmp), args.adapters, args.rank, args.targets.split(","))
        for name, path in made.items():
            adapter = load_peft_adapter(name, path, runner.model_cfg, rows, runner.device)
            runner.adapters.add(adapter)
    names = list(made)
    kinds = ("base", "one adapter", "mixed")
    if args.prompt:
        batches = {kind: prompt_batch(args.batch, args.prompt) for kind in kinds}
    else:  # contexts of 100 to 300 tokens (make_batch's), in blocks of 16
        batches = {kind: make_batch(args.batch, 16) for kind in kinds}
    for kind, batch in batches.items():
        seqs = batch.decodes + [seq for seq, _ in batch.prefills]
        for i, seq in enumerate(seqs if kind != "base" else ()):
            name = names[0] if kind == "one adapter" else names[i % len(names)]
            seq.adapter = runner.adapters.use(name, [])
    times: dict[str, list[float]] = {kind: [] for kind in batches}
    for step in range(args.steps + 3):
        for kind, batch in batches.items():
            start = time.perf_counter()
            runner.execute(runner.prepare(batch))
            if step >= 3:
                times[kind].append(time.perf_counter() - start)
    step = f"prompt steps of {args.prompt} tokens a prompt" if args.prompt else "decode steps"
    print(
        f"{step}, {runner.model.path.value}, {cpu_kernels.family()} kernels, batch {args.batch}, "
        f"{args.adapters} adapters of rank {args.rank} on {args.targets}, "
        f"{torch.get_num_threads()} threads"
    )
    for label, at in (("min", 0.0), ("first quartile", 0.25), ("median", 0.5)):
        ms = {k: sorted(v)[int(at * (len(v) - 1))] * 1e3 for k, v in times.items()}
        line = ", ".join(f"{k} {v:.2f} ms ({ms['base'] / v:.3f})" for k, v in ms.items())
        print(f"{label}: {line}")


if __name__ == "__main__":
    main()
