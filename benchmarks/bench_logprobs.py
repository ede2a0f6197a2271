"""What asking for logprobs costs the engine: greedy streams with and without them.

At each concurrency, rounds alternate between plain greedy requests and the same
requests with ``logprobs=5`` (the sampled token's logprob plus five alternatives);
the best round of each is kept and their throughput ratio reported.

    python benchmarks/bench_logprobs.py            # 64 tokens, levels 1 and 8, 3 rounds
    python benchmarks/bench_logprobs.py --quick    # 16 tokens, one round
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from pathlib import Path

from bench_engine import (
    RESULTS,
    PromptPool,
    greedy_params,
    make_prompts,
    stream_requests,
    wait_for_quiet,
    warm_up,
)

OUT = RESULTS.parent / "logprobs.json"


async def compare(engine, pool: PromptPool, max_tokens: int, levels: list[int], reps: int) -> dict:
    """Best tokens/s with and without logprobs at each level, and their ratio."""
    plain = greedy_params(max_tokens)
    asking = replace(plain, logprobs=5)
    results = {}
    for level in levels:
        best = {"plain": 0.0, "logprobs": 0.0}
        for _ in range(reps):
            for name, params in (("plain", plain), ("logprobs", asking)):
                wait_for_quiet()
                run = await stream_requests(
                    engine.add_request, pool.take(2 * level), params, level, name
                )
                print(f"  {name}@{level}: {run.tokens_per_s:.1f} tok/s")
                best[name] = max(best[name], run.tokens_per_s)
        ratio = best["logprobs"] / best["plain"]
        print(f"logprobs/plain @{level}: {ratio:.3f}")
        results[f"@{level}"] = {**best, "ratio": round(ratio, 3)}
    return results


def main() -> None:
    """Parse options, run, print and save."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 tokens, one round")
    parser.add_argument("--levels", default="1,8")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    from mellea.engine.engine import Engine

    max_tokens = 16 if args.quick else 64
    reps = 1 if args.quick else 3
    levels = [int(x) for x in args.levels.split(",")]
    engine = Engine()
    pool = PromptPool(make_prompts(engine.apply_chat_template, 4 * sum(levels) * reps + 8))

    async def run() -> dict:
        await warm_up(engine.add_request, pool.take(1)[0])
        return await compare(engine, pool, max_tokens, levels, reps)

    results = asyncio.run(run())
    engine.shutdown()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"max_tokens": max_tokens, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
