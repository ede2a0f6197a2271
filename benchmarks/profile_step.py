"""Where one decode step of the engine goes, at batch 1 and batch 32.

Drives :class:`mellea.engine.core.EngineCore` on the default model (SmolLM2-135M,
``--dtype auto`` as ``m serve`` runs it, CPU unless ``--device``) the way the engine
thread does: ``schedule`` (the scheduler and building the inputs, under the engine
lock), ``execute`` (forward pass and sampling, off the lock), ``update`` (appending
tokens, under the lock), then each request's :class:`DeltaBuilder` (detokenizer and
stop strings, off the lock). Two passes over the same kind of steps:

1. timed: ``perf_counter`` around each phase, no profiler (the wall times);
2. profiled: ``torch.profiler`` with a scope around every linear layer (``nn.Linear``
   and the int8/int4 layers), each attention module, the LM head and the sampler;
   each op's self time (ATen's and our C++ ops') goes to the innermost scope it ran
   in (linear matmuls, attention with RoPE and the paged cache write and gather, LM
   head with its own linear layer, sampling, other ops: norms, activation,
   embedding, residual adds). A decode layer run whole by
   ``cpu_kernels.decode_layer`` (int4 on VNNI) is one op, its own row.

The forward's time under the profiler minus its ops' self time is reported as
Python and dispatch overhead (the profiler adds a little to it); the scheduler, token
bookkeeping and output rows are the timed pass's. Percentages are of the sum of the
rows. Usage::

    python benchmarks/profile_step.py               # batch 1 and 32, 24 steps each
    python benchmarks/profile_step.py --batches 1,8,32 --steps 40
    python benchmarks/profile_step.py --unfused     # int4 layers op by op: inside a layer
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SCOPES = ("linear", "lm_head", "sampling", "attention")
FUSED_LAYER = "mellea_cpu::decode_layer"
ROWS = [
    ("scheduler + prepare (under lock)", "schedule"),
    ("decoder layers, each one C++ op (fused)", "layers"),
    ("linear matmuls (QKV, O, MLP)", "linear"),
    ("attention (RoPE, cache write, gather, SDPA)", "attention"),
    ("LM head", "lm_head"),
    ("sampling", "sampling"),
    ("other ops (norms, activation, embedding)", "other_ops"),
    ("Python / dispatch in the forward", "dispatch"),
    ("token bookkeeping (under lock)", "update"),
    ("detokenizer + stop strings (off lock)", "output"),
]


def scoped(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run inside a profiler scope called ``name``."""
    import torch

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with torch.profiler.record_function(name):
            return fn(*args, **kwargs)

    return wrapper


def add_scopes(core: Any) -> None:
    """Put profiler scopes around the model's linears, attention modules, LM head and
    the sampler, by wrapping instances and the runner's ``sample`` (no source edited)."""
    import torch.nn as nn

    import mellea.engine.model_runner as model_runner

    model = core.runner.model
    for module in model.modules():
        if isinstance(module, nn.Linear) or type(module).__name__ in ("Int8Linear", "Int4Linear"):
            module.forward = scoped("linear", module.forward)
        elif type(module).__name__ == "Attention":
            module.forward = scoped("attention", module.forward)
    model.compute_logits = scoped("lm_head", model.compute_logits)
    model_runner.sample = scoped("sampling", model_runner.sample)


def remove_scopes(core: Any) -> None:
    """Undo :func:`add_scopes` (the timed pass runs without them)."""
    import mellea.engine.model_runner as model_runner
    from mellea.engine.sampler import sample

    model = core.runner.model
    for module in model.modules():
        module.__dict__.pop("forward", None)
    model.__dict__.pop("compute_logits", None)
    model_runner.sample = sample


def start_batch(core: Any, tokenizer: Any, prompts: list[list[int]]) -> list[Any]:
    """Add one request per prompt and step through their prefills; their builders."""
    from mellea.engine.output import DeltaBuilder
    from mellea.engine.types import SamplingParams

    params = SamplingParams(max_tokens=10_000, ignore_eos=True, stop=["<|never|>"])
    builders = []
    for i, prompt in enumerate(prompts):
        seq = core.new_sequence(f"r{i}", prompt, params)
        core.add(seq)
        builders.append(DeltaBuilder(seq, tokenizer))
    while any(b.seq.num_output == 0 for b in builders):
        deliver(core.step(), builders)
    return builders


def deliver(outputs: list[Any], builders: list[Any]) -> None:
    by_id = {b.seq.request_id: b for b in builders}
    for out in outputs:
        by_id[out.seq.request_id].add(out.token, out.logprobs, out.finish_reason)


def timed_steps(core: Any, builders: list[Any], steps: int) -> dict[str, float]:
    """Median ms per phase of ``steps`` decode steps."""
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(steps):
        t0 = time.perf_counter()
        scheduled = core.schedule()
        t1 = time.perf_counter()
        sampled = core.execute(scheduled)
        t2 = time.perf_counter()
        outputs = core.update(scheduled, sampled)
        t3 = time.perf_counter()
        deliver(outputs, builders)
        t4 = time.perf_counter()
        assert len(scheduled.batch.decodes) == len(builders) and not scheduled.batch.prefills
        phases = {"schedule": t1 - t0, "execute": t2 - t1, "update": t3 - t2, "output": t4 - t3}
        for key, value in phases.items():
            times[key].append(value * 1e3)
    return {key: statistics.median(values) for key, values in times.items()}


def profiled_steps(core: Any, builders: list[Any], steps: int) -> dict[str, float]:
    """Mean ms per step of ATen op self time, by the innermost scope each op ran in."""
    import torch

    add_scopes(core)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                scheduled = core.schedule()
                with torch.profiler.record_function("execute"):
                    sampled = core.execute(scheduled)
                deliver(core.update(scheduled, sampled), builders)
    finally:
        remove_scopes(core)
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.name == "execute":
            totals["execute"] += event.cpu_time_total / 1e3
        if not event.name.startswith(("aten::", "mellea_cpu::")):
            continue
        scope, parent = None, event.cpu_parent
        while parent is not None and parent.name != "execute":
            if parent.name == "lm_head" or (scope is None and parent.name in SCOPES):
                scope = parent.name  # the LM head's own linear layer counts as the head
            parent = parent.cpu_parent
        if parent is None:  # building the inputs: timed with the scheduler
            continue
        if event.name == FUSED_LAYER:
            scope = "layers"
        totals[scope or "other_ops"] += event.self_cpu_time_total / 1e3  # us -> ms
    return {key: value / steps for key, value in totals.items()}


def profile_batch(core: Any, tokenizer: Any, prompts: list[list[int]], steps: int) -> dict:
    """The breakdown of one decode step at ``len(prompts)`` sequences, in ms."""
    builders = start_batch(core, tokenizer, prompts)
    timed_steps(core, builders, 3)  # warm-up
    wall = timed_steps(core, builders, steps)
    ops = profiled_steps(core, builders, steps)
    kinds = ("layers", "linear", "attention", "lm_head", "sampling", "other_ops")
    parts = {
        "schedule": wall["schedule"],
        **{k: ops.get(k, 0.0) for k in kinds},
        "dispatch": max(0.0, ops["execute"] - sum(ops.get(k, 0.0) for k in kinds)),
        "update": wall["update"],
        "output": wall["output"],
    }
    for b in builders:
        core.abort(b.seq.request_id)
    context = builders[0].seq.num_tokens
    return {"parts": parts, "wall": wall, "profiled_forward_ms": ops["execute"], "context": context}


def print_table(batch: int, result: dict) -> None:
    parts, total = result["parts"], sum(result["parts"].values())
    wall = result["wall"]
    print(
        f"\nbatch {batch}: {sum(wall.values()):.2f} ms per decode step (wall, median; "
        f"forward + sampling {wall['execute']:.2f} ms, {result['profiled_forward_ms']:.2f} ms "
        f"under the profiler), ~{result['context']} tokens of context per sequence"
    )
    print(f"{'part':48} {'ms':>8} {'%':>6}")
    for label, key in ROWS:
        print(f"{label:48} {parts[key]:8.2f} {100 * parts[key] / total:6.1f}")


def main() -> None:
    """Load the default model, profile each batch size and print the breakdowns."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--steps", type=int, default=24, help="decode steps measured per pass")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--dtype", default="auto", help="weight format, as m serve's --dtype")
    parser.add_argument(
        "--unfused", action="store_true", help="run decoder layers op by op, to see inside them"
    )
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from benchmarks.bench_engine import make_prompts
    from mellea.engine.chat import render_chat
    from mellea.engine.compute_path import ComputePath
    from mellea.engine.core import EngineCore
    from mellea.engine.loader import resolve_model
    from mellea.engine.output import eos_token_ids

    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(path)
    batches = [int(b) for b in args.batches.split(",")]
    core = EngineCore(
        path,
        eos_token_ids=eos_token_ids(path, tokenizer),
        max_num_seqs=max(batches),
        device=args.device,
        dtype=args.dtype,
    )
    if args.unfused and core.runner.model.path is ComputePath.CPP_FUSED:
        core.runner.model.set_path(ComputePath.CPP)
    prompts = make_prompts(lambda m: render_chat(tokenizer, m), max(batches) * len(batches))
    print(
        f"{path.name}: {core.config.weights} weights, {core.config.dtype} compute, "
        f"{core.config.device}, "
        f"{torch.get_num_threads()} torch threads, load average {os.getloadavg()}"
    )
    results = {}
    for i, batch in enumerate(batches):
        mine = prompts[i * max(batches) : i * max(batches) + batch]
        results[batch] = profile_batch(core, tokenizer, mine, args.steps)
        print_table(batch, results[batch])
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
