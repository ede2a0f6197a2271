"""What mixing LoRA adapters in one batch costs: 8 streams on 8 adapters against 8 on the base.

The default model gets ``--adapters`` random PEFT LoRAs (rank ``--rank`` on
``--targets``, by default every projection: q/k/v/o, gate/up/down), made here with
``peft``. Rounds alternate, in one engine, between runs of ``--streams`` concurrent
greedy requests: all on the base model, all on one adapter, and each on a different
adapter, then the base and the mixed runs again op by op. The best round of each is
kept, and the median over rounds of each round's ratio to its own base-only run
(steadier where other work comes and goes); the ratios to base-only are what to read
(the target: mixed within 1.3x of base-only, i.e. a ratio of at least 1/1.3 = 0.77).

With int4 weights on the C++ kernels, decode-only steps run each layer as one C++ op
that adds the adapters' low-rank products itself (fp16 pairs, each adapter's rows
together); the "op by op" runs take the layers' own path for comparison, where a
hook on each projection adds them (one ``lora_add`` per projection from the same
fp16 pairs, as prompt steps do). Each ``execute`` of the model runner is timed too:
per run kind, the median prompt step and decode step, the median over rounds of their
ratios to the round's base-only steps, and the share of decode steps the thread tuner
ran on one thread.

    python benchmarks/bench_lora.py            # 64 tokens, 3 rounds
    python benchmarks/bench_lora.py --quick    # 16 tokens, one round
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import tempfile
import time
from collections import defaultdict
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

OUT = RESULTS.parent / "lora.json"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapters(where: Path, count: int, rank: int, targets: list[str]) -> dict[str, Path]:
    """``count`` random PEFT LoRA adapters for the default model, saved under ``where``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from mellea.engine.gguf_file import transformers_weights
    from mellea.engine.loader import resolve_model

    source, extra = transformers_weights(resolve_model(None))
    dirs = {}
    for i in range(count):
        base = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **extra)
        torch.manual_seed(i)
        config = LoraConfig(
            r=rank, lora_alpha=2 * rank, target_modules=targets, init_lora_weights=False
        )
        dirs[f"lora{i}"] = where / f"lora{i}"
        get_peft_model(base, config).save_pretrained(dirs[f"lora{i}"])
    return dirs


class StepTimes:
    """Times each ``execute`` of the engine's model runner (on the engine thread), filed
    under the round and run kind being measured: the steps with prompt tokens, and the
    decode-only steps with the thread count the tuner gave them."""

    def __init__(self, runner) -> None:
        import torch

        self.at: tuple[int, str] = (0, "")  # (round, kind) now running
        self.prompt: dict[tuple[int, str], list[float]] = defaultdict(list)
        self.decode: dict[tuple[int, str], list[tuple[float, int]]] = defaultdict(list)
        execute = runner.execute

        def timed(inputs):
            start = time.perf_counter()
            result = execute(inputs)
            seconds = time.perf_counter() - start
            if inputs.meta.num_decode == inputs.input_ids.shape[0]:
                self.decode[self.at].append((seconds, torch.get_num_threads()))
            else:
                self.prompt[self.at].append(seconds)
            return result

        runner.execute = timed

    def report(self) -> dict:
        """Per kind: median ms of its prompt steps and of its decode steps over all
        rounds, the median over rounds of each round's base-only median over its own
        (prompt and decode ratios), and the share of decode steps on one thread."""
        out = {}
        kinds = list(dict.fromkeys(kind for _, kind in self.decode))
        rounds = sorted({r for r, _ in self.decode})

        def median_ms(times: list[float]) -> float:
            return statistics.median(times) * 1e3 if times else float("nan")

        for kind in kinds:
            prompt = [t for r in rounds for t in self.prompt[(r, kind)]]
            decode = [t for r in rounds for t in self.decode[(r, kind)]]
            row = {
                "prompt_step_ms": round(median_ms(prompt), 2),
                "decode_step_ms": round(median_ms([s for s, _ in decode]), 2),
                "one_thread_share": round(sum(n == 1 for _, n in decode) / max(1, len(decode)), 2),
            }
            for name, steps, pick in (
                ("prompt_ratio", self.prompt, lambda v: v),
                ("decode_ratio", self.decode, lambda v: [s for s, _ in v]),
            ):
                ratios = [
                    median_ms(pick(steps[(r, "base")])) / median_ms(pick(steps[(r, kind)]))
                    for r in rounds
                    if steps[(r, kind)] and steps[(r, "base")]
                ]
                if ratios:
                    row[name] = round(statistics.median(ratios), 3)
            out[kind] = row
            print(f"  steps, {kind}: {row}")
        return out


async def compare(engine, pool: PromptPool, names: list[str], args) -> dict:
    """Best tokens/s of each run kind over the rounds, and their ratios to base-only."""
    params = greedy_params(args.max_tokens)

    def adding(choose):
        def add(prompt, p):
            return engine.add_request(prompt, replace(p, adapter=choose()))

        return add

    cycle = itertools.cycle(names)
    kinds = {
        "base": adding(lambda: None),
        "one adapter": adding(lambda: names[0]),
        "mixed adapters": adding(lambda: next(cycle)),
        "base, op by op": adding(lambda: None),
        "mixed adapters, op by op": adding(lambda: next(cycle)),
    }
    model = engine.runner.model
    own_path = model.path
    steps = StepTimes(engine.runner)
    best = dict.fromkeys(kinds, 0.0)
    rounds = []  # per round, each kind's tokens/s: ratios within a round share its load
    for round_ in range(args.rounds):
        rounds.append({})
        for kind, add in kinds.items():
            wait_for_quiet(args.quiet_wait)
            # Between steps (the engine is idle here), so no forward pass sees it change.
            model.set_path(own_path.layer_path if kind.endswith("op by op") else own_path)
            steps.at = (round_, kind)
            run = await stream_requests(add, pool.take(args.streams), params, args.streams, kind)
            print(f"  {kind}: {run.tokens_per_s:.1f} tok/s")
            best[kind] = max(best[kind], run.tokens_per_s)
            rounds[-1][kind] = run.tokens_per_s
    model.set_path(own_path)
    ratios = {k: round(v / best["base"], 3) for k, v in best.items()}
    medians = {k: round(statistics.median(r[k] / r["base"] for r in rounds), 3) for k in kinds}
    for kind, ratio in ratios.items():
        print(
            f"{kind}: {best[kind]:.1f} tok/s, {ratio:.3f} of base-only "
            f"(median of each round's ratio: {medians[kind]:.3f})"
        )
    return {
        "tokens_per_s": best,
        "ratio_to_base": ratios,
        "median_round_ratio": medians,
        "rounds": rounds,
        "steps": steps.report(),
    }


def main() -> None:
    """Parse options, make the adapters, run, print and save."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 tokens, one round")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--targets", default=",".join(TARGETS), help="modules adapted")
    parser.add_argument("--dtype", default="auto", help="the engine's weight format")
    parser.add_argument("--rounds", type=int, default=None, help="default: 3 (--quick: 1)")
    parser.add_argument(
        "--quiet-wait", type=float, default=60.0, help="seconds to wait for idle CPUs per run"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.max_tokens = 16 if args.quick else 64
    args.rounds = args.rounds or (1 if args.quick else 3)

    from mellea.engine.engine import Engine

    engine = Engine(dtype=args.dtype)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in make_adapters(
            Path(tmp), args.adapters, args.rank, args.targets.split(",")
        ).items():
            engine.load_adapter(name, path)
    names = list(engine.adapters)
    pool = PromptPool(make_prompts(engine.apply_chat_template, 5 * args.streams * args.rounds + 2))

    async def run() -> dict:
        await warm_up(engine.add_request, pool.take(1)[0])
        return await compare(engine, pool, names, args)

    results = asyncio.run(run())
    weights = engine.config.weights
    engine.shutdown()
    from mellea.engine import cpu_kernels

    report = {
        "weights": weights,
        "compute_path": engine.runner.model.path.value,
        "kernels": cpu_kernels.family(),
        "streams": args.streams,
        "adapters": args.adapters,
        "rank": args.rank,
        "targets": args.targets.split(","),
        "max_tokens": args.max_tokens,
        **results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
