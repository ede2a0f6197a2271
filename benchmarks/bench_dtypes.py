"""Weight formats side by side: speed and quality of float32, bfloat16, int8 and int4 on CPU.

Loads the default model once per format (all kept in memory), then, for each
concurrency level, runs the same streaming greedy workload through every format's
engine in turn (best of ``--rounds`` rounds, formats interleaved so a noisy
neighbour hurts all alike). Quality: the numbers of :mod:`tests.format_quality`
(mean logprob of fp32's greedy continuations, agreement of greedy outputs) over its
12 fixed prompts. Prints a table and writes ``benchmarks/results/dtypes.json``.

    python benchmarks/bench_dtypes.py            # concurrency 1, 8 and 32
    python benchmarks/bench_dtypes.py --quick    # concurrency 1 and 8, fewer requests
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_engine import (  # noqa: E402
    bench_engine,
    make_prompts,
    wait_for_quiet,
    warm_up,
)

RESULTS = Path(__file__).parent / "results" / "dtypes.json"
FORMATS = ("float32", "bfloat16", "int8", "int4")


def weight_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers, a shared tensor counted once."""
    seen: dict[int, int] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        seen[tensor.data_ptr()] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def main() -> None:
    """Run the comparison and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="levels 1 and 8, fewer requests")
    parser.add_argument("--rounds", type=int, default=2, help="best of this many per level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--formats", default=",".join(FORMATS))
    args = parser.parse_args()

    import torch

    from mellea.engine.engine import Engine
    from tests import format_quality as quality

    formats = args.formats.split(",")
    levels = (1, 8) if args.quick else (1, 8, 32)
    engines, loads = {}, {}
    for fmt in formats:
        started = time.perf_counter()
        engines[fmt] = Engine(None, dtype=fmt)
        loads[fmt] = time.perf_counter() - started
    first = engines[formats[0]]
    prompts = make_prompts(first.apply_chat_template, 64)
    for engine in engines.values():
        asyncio.run(warm_up(engine.add_request, prompts[0]))

    speed: dict[str, dict[int, dict]] = {fmt: {} for fmt in formats}
    busy_seen = []
    for level in levels:
        n = max(level, 4) * (1 if args.quick else 2)
        work = prompts[:n]
        for _ in range(args.rounds):
            for fmt in formats:
                busy_seen.append(wait_for_quiet())
                result = asyncio.run(bench_engine(engines[fmt], work, args.max_tokens, level))
                best = speed[fmt].get(level)
                if best is None or result.tokens_per_s > best["tokens_per_s"]:
                    speed[fmt][level] = result.summary()

    reference = quality.reference(
        engines["float32"] if "float32" in engines else Engine(None, dtype="float32")
    )
    scores = {fmt: quality.compare(fmt, engines[fmt], reference) for fmt in formats}

    print(f"\n{'format':10} {'weights MB':>10} {'load s':>7}", end="")
    for level in levels:
        print(f" {'tok/s @' + str(level):>10}", end="")
    print(f" {'logprob':>8} {'drop %':>7} {'exact':>6} {'agree':>6} {'bar':>5}")
    fp32 = speed.get("float32", {})
    for fmt in formats:
        q = scores[fmt]
        mb = weight_bytes(engines[fmt].runner.model) / 2**20
        print(f"{fmt:10} {mb:10.0f} {loads[fmt]:7.1f}", end="")
        for level in levels:
            tps = speed[fmt][level]["tokens_per_s"]
            ratio = f"({tps / fp32[level]['tokens_per_s']:.2f}x)" if level in fp32 else ""
            print(f" {tps:6.1f}{ratio:>4}", end="")
        print(
            f" {q.mean_logprob:8.4f} {100 * q.relative_logprob_drop:7.2f}"
            f" {q.exact_agreement:6.2f} {q.agreement:6.2f} {'pass' if q.passes else 'FAIL':>5}"
        )
    load = os.getloadavg()
    print(
        f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; torch threads "
        f"{torch.get_num_threads()}; CPU busy before runs: max {max(busy_seen):.2f}"
    )

    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "model": first.model_id,
                "max_tokens": args.max_tokens,
                "rounds": args.rounds,
                "torch_threads": torch.get_num_threads(),
                "loadavg": load,
                "cpu_busy_before_runs_max": max(busy_seen),
                "formats": {
                    fmt: {
                        "load_s": round(loads[fmt], 2),
                        "weight_bytes": weight_bytes(engines[fmt].runner.model),
                        "speed": speed[fmt],
                        "quality": scores[fmt].summary(),
                    }
                    for fmt in formats
                },
            },
            indent=2,
        )
    )
    print(f"wrote {RESULTS}")
    for engine in engines.values():
        engine.shutdown()


if __name__ == "__main__":
    main()
