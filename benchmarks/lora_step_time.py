"""What mixing LoRA adapters costs per decode step, steps of each kind taking turns.

```sh
python benchmarks/lora_step_time.py                                 # every projection
python benchmarks/lora_step_time.py --targets q_proj,k_proj,v_proj  # q/k/v only
```

Builds the engine's model runner for the default model in int4 (the fused C++ decode
layer) as ``step_time.py`` does, loads ``--adapters`` random rank-``--rank`` PEFT
LoRAs (made with ``peft``, as ``bench_lora.py`` makes them), and times one decode
step of ``--batch`` sequences three ways, one step of each in turn so that all three
see the same load: all rows on the base model, all on one adapter, each on a
different adapter. Prints the minimum, first quartile and median ms per step of each
and their ratios to base-only (the 1.3x target: a ratio of at least 0.77). Only the
forward step (``prepare`` + ``execute``) is timed: no scheduler, sampling, prefill or
HTTP, which ``bench_lora.py`` includes; on a shared machine its interleaving is what
makes the ratios steady.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench_lora import TARGETS, make_adapters
from step_time import make_batch, make_runner


def main() -> None:
    """Parse options, load the adapters, time the three kinds of step, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--targets", default=",".join(TARGETS), help="modules adapted")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()

    from mellea.engine import cpu_kernels
    from mellea.engine.lora import load_peft_adapter
    from mellea.engine.model import qkv_row_order

    runner = make_runner(args.batch, 512, weights="int4")
    rows = qkv_row_order(runner.model_cfg)
    with tempfile.TemporaryDirectory() as tmp:
        made = make_adapters(Path(tmp), args.adapters, args.rank, args.targets.split(","))
        for name, path in made.items():
            adapter = load_peft_adapter(name, path, runner.model_cfg, rows, runner.device)
            runner.adapters.add(adapter)
    names = list(made)
    batches = {kind: make_batch(args.batch, 16) for kind in ("base", "one adapter", "mixed")}
    for seq in batches["one adapter"].decodes:
        seq.adapter = runner.adapters.use(names[0], [])
    for i, seq in enumerate(batches["mixed"].decodes):
        seq.adapter = runner.adapters.use(names[i % len(names)], [])
    times: dict[str, list[float]] = {kind: [] for kind in batches}
    for step in range(args.steps + 3):
        for kind, batch in batches.items():
            start = time.perf_counter()
            runner.execute(runner.prepare(batch))
            if step >= 3:
                times[kind].append(time.perf_counter() - start)
    print(
        f"{runner.model.path.value}, {cpu_kernels.family()} kernels, batch {args.batch}, "
        f"{args.adapters} adapters of rank {args.rank} on {args.targets}"
    )
    for label, at in (("min", 0.0), ("first quartile", 0.25), ("median", 0.5)):
        ms = {k: sorted(v)[int(at * (len(v) - 1))] * 1e3 for k, v in times.items()}
        line = ", ".join(f"{k} {v:.2f} ms ({ms['base'] / v:.3f})" for k, v in ms.items())
        print(f"{label}: {line}")


if __name__ == "__main__":
    main()
