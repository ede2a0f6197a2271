"""Time one engine decode step on the default model, and break it down by op.

```sh
python benchmarks/step_time.py                 # batches 1, 8, 32; contexts 100-300
python benchmarks/step_time.py --profile       # plus the top aten ops by self CPU time
python benchmarks/step_time.py --batches 1 --steps 50
python benchmarks/step_time.py --formats float32,bfloat16,int8,int4   # weight formats
python benchmarks/step_time.py --neighbour --formats int4   # beside a busy process
MELLEA_CPU_ISA=avx2 python benchmarks/step_time.py --formats int8,int4   # AVX2 kernels
python benchmarks/step_time.py --model FILE.gguf --q4k-forms --threads 1   # Q4_K forms
python benchmarks/step_time.py --model FILE.gguf --dtype int4 --bytes-ab  # 8-bit layers
python benchmarks/step_time.py --model Q4_K_M.gguf --stacked-ab  # its mixed q/k/v
python benchmarks/step_time.py --model FILE.gguf --dtype int4 --prompt 40  # a prompt step
python benchmarks/step_time.py --model FILE.gguf --dtype int4 --huge-pages-ab  # 2 MiB pages
python benchmarks/step_time.py --model Q4_K_M.gguf --dtype int4 --six-ab  # Q6_K in 6 bits
python benchmarks/step_time.py --dtype int4 --kv-ab --context 2000  # fp32 vs fp16 KV cache
```

``--bytes-ab`` builds the GGUF twice, its 8-bit layers (a Q4_K_M file's Q6_K tensors
and the q/k/v beside them) once in the exact byte form and once requantized per row
to int8 (as before the byte form), and times the two taking turns step by step.

Every run prints the kernel family that ran (``avx512-vnni``, ``avx2``, ``generic``).
The runners' thread count is fixed (``--threads``) unless ``--neighbour``: that times
each format four ways in one run, with and without a CPU-bound neighbour (``yes``)
and with all threads or the engine's tuned count (:mod:`mellea.engine.cpu_threads`).
``--q4k-forms`` serves a GGUF's Q4_K layers in their exact form (the file's factors,
formed in fp32 by the kernel) and in the former fp16 form (those products rounded to
fp16, the same nibbles), alternating step by step in one process.

It builds the engine's :class:`~mellea.engine.model_runner.ModelRunner` directly
(no scheduler thread, no tokenizer): B sequences whose contexts are spread over
100-300 tokens each take one decode step again and again (the same slot is
rewritten, so the cache does not grow). ``prepare`` + ``execute`` is what the engine
thread runs per step; the time of both is reported, in ms per step and tokens/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections.abc import Callable

import torch

from mellea.engine import cpu_kernels
from mellea.engine.compute_path import ComputePath
from mellea.engine.config import EngineConfig, ModelConfig, resolve_kv_dtype
from mellea.engine.cpu_threads import ThreadTuner
from mellea.engine.loader import resolve_model
from mellea.engine.model_runner import ModelRunner
from mellea.engine.scheduler import ScheduledBatch
from mellea.engine.sequence import Sequence
from mellea.engine.types import SamplingParams


def make_runner(
    max_seqs: int,
    max_len: int,
    block_size: int = 16,
    weights: str = "float32",
    model: str | None = None,
    kv_dtype: str = "auto",
) -> ModelRunner:
    """The engine's runner for ``model`` (a path or name; the default model when None)
    with room for ``max_seqs`` x ``max_len``, its weights in the format ``weights``
    (:mod:`mellea.engine.formats`), its KV cache in ``kv_dtype`` (``auto``: the
    engine's default, float16 on CPU)."""
    path = resolve_model(model)
    model_cfg = ModelConfig.from_dir(path)
    blocks = max_seqs * (-(-max_len // block_size)) + 1
    cfg = EngineConfig(
        model_path=path,
        block_size=block_size,
        max_model_len=max_len,
        weights=weights,
        kv_cache_dtype=resolve_kv_dtype(kv_dtype, torch.device("cpu"), torch.float32),
    )
    runner = ModelRunner(model_cfg, cfg, blocks)
    runner.threads = None  # a fixed thread count unless a benchmark asks for the tuner
    return runner


def make_batch(batch: int, block_size: int, lo: int = 100, hi: int = 300) -> ScheduledBatch:
    """``batch`` decoding sequences with contexts spread evenly over [lo, hi]."""
    seqs = []
    next_block = 1
    for i in range(batch):
        ctx = lo + (hi - lo) * i // max(1, batch - 1) if batch > 1 else (lo + hi) // 2
        seq = Sequence(f"s{i}", [(7 * i + j) % 1000 + 10 for j in range(ctx)], SamplingParams(), 64)
        n_blocks = -(-ctx // block_size)
        seq.block_table = list(range(next_block, next_block + n_blocks))
        next_block += n_blocks
        seq.num_computed = ctx - 1
        seqs.append(seq)
    return ScheduledBatch(decodes=seqs)


def make_prompt_batch(tokens: int, block_size: int) -> ScheduledBatch:
    """One sequence's whole prompt of ``tokens`` tokens in one step (a prompt chunk)."""
    seq = Sequence("p0", [(7 * j) % 1000 + 10 for j in range(tokens)], SamplingParams(), 64)
    seq.block_table = list(range(1, 1 + -(-tokens // block_size)))
    return ScheduledBatch(prefills=[(seq, tokens)])


def time_steps(runner: ModelRunner, batch: ScheduledBatch, steps: int) -> float:
    """Median seconds of one prepare + execute over ``steps`` steps (after 3 warm-ups)."""
    for _ in range(3):
        runner.execute(runner.prepare(batch))
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        runner.execute(runner.prepare(batch))
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def ab_steps(runner: ModelRunner, batch: ScheduledBatch, steps: int) -> dict[str, float]:
    """Median seconds per step of the CPU path with and without its C++ ops, the two
    alternating step by step so that both see the same machine load."""
    times: dict[str, list[float]] = {"cpp": [], "torch": []}
    built = runner.model.path  # the C++ path, fused or not
    for i in range(2 * (steps + 3)):
        path = "cpp" if i % 2 else "torch"
        runner.model.set_path(built if path == "cpp" else ComputePath.TORCH)
        t = time.perf_counter()
        runner.execute(runner.prepare(batch))
        if i >= 6:
            times[path].append(time.perf_counter() - t)
    runner.model.set_path(built)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def format_steps(
    runners: dict[str, ModelRunner], batch: ScheduledBatch, steps: int
) -> dict[str, float]:
    """Median seconds per step of each weight format's runner, the formats taking turns
    step by step so that all see the same machine load."""
    times: dict[str, list[float]] = {fmt: [] for fmt in runners}
    for runner in runners.values():
        for _ in range(3):
            runner.execute(runner.prepare(batch))
    for _ in range(steps):
        for fmt, runner in runners.items():
            t = time.perf_counter()
            runner.execute(runner.prepare(batch))
            times[fmt].append(time.perf_counter() - t)
    return {fmt: sorted(v)[len(v) // 2] for fmt, v in times.items()}


def q4k_form_switch(runner: ModelRunner) -> Callable[[bool], None]:
    """Give each exact Q4_K layer the fp16 form's factors as well (d * sc and -dmin * m
    rounded to fp16, tiled as they are); the returned function puts every such layer in
    the exact form (True) or the fp16 one, and plans the fused layers again."""
    from mellea.engine.formats.linear import Int4Linear

    model = runner.model
    layers = [m for m in model.modules() if isinstance(m, Int4Linear) and m.q4k]
    assert layers, "no Q4_K layer in the exact form: a Q4_K GGUF at int4, with the kernels"
    for layer in layers:
        products = layer.super_scales.float().repeat_interleave(8, dim=1) * layer.sub_scales
        layer.scales = products[:, :, 0].half().contiguous()
        layer.mins = products[:, :, 1].half().contiguous()
    built = model.path

    def use(exact: bool) -> None:
        for layer in layers:
            layer.q4k = exact
        if built is ComputePath.CPP_FUSED:
            model._fused = None
            model.set_path(ComputePath.CPP)
            model.set_path(model.plan_fused_decode())

    return use


def q4k_form_steps(
    runner: ModelRunner, use: Callable[[bool], None], batch: ScheduledBatch, steps: int
) -> dict[str, float]:
    """Median seconds per step of the two Q4_K forms, taking turns step by step, in this
    process's CPU time (with ``--threads 1``, what the step computes: a busy machine's
    preemption does not count)."""
    times: dict[str, list[float]] = {"fp16": [], "exact": []}
    for i in range(2 * (steps + 3)):
        form = "exact" if i % 2 else "fp16"
        use(form == "exact")
        t = time.process_time()
        runner.execute(runner.prepare(batch))
        if i >= 6:
            times[form].append(time.process_time() - t)
    use(True)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def profile_steps(runner: ModelRunner, batch: ScheduledBatch, steps: int, top: int) -> str:
    """A table of the top aten ops by self CPU time over ``steps`` steps."""
    from torch.profiler import ProfilerActivity, profile

    runner.execute(runner.prepare(batch))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            runner.execute(runner.prepare(batch))
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--prompt", type=int, default=0, help="also time one prompt step of this many tokens"
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--json", help="append results to this JSON-lines file")
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--ab", action="store_true", help="alternate the C++ ops with the PyTorch-only path"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--model", help="a model path or name (default: the bundled model)")
    parser.add_argument("--dtype", default="float32", help="weight format of a plain run")
    parser.add_argument(
        "--formats", help="weight formats side by side, e.g. float32,bfloat16,int8,int4"
    )
    parser.add_argument(
        "--neighbour", action="store_true", help="with and without a busy process beside"
    )
    parser.add_argument(
        "--q4k-forms", action="store_true", help="a Q4_K GGUF's exact and fp16 forms (int4)"
    )
    parser.add_argument(
        "--bytes-ab",
        action="store_true",
        help="a GGUF's 8-bit layers in the exact byte form against per-row int8",
    )
    parser.add_argument(
        "--stacked-ab",
        action="store_true",
        help="a Q4_K_M GGUF's mixed q/k/v as Q4_K + byte form against all in the byte form",
    )
    parser.add_argument(
        "--huge-pages-ab",
        action="store_true",
        help="the weights in huge pages (as the engine moves them) against where they were built",
    )
    parser.add_argument(
        "--six-ab",
        action="store_true",
        help="a GGUF's 6-bit layers (Q6_K) in the six-bit form against the byte form",
    )
    parser.add_argument(
        "--kv-ab", action="store_true", help="a float32 KV cache against a float16 one"
    )
    parser.add_argument(
        "--context", type=int, default=300, help="--kv-ab's longest context (tokens)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"CPU kernels: {cpu_kernels.family()}, torch: {torch.backends.cpu.get_cpu_capability()}")
    if args.neighbour:
        compare_neighbour((args.formats or "int4").split(","), args.batches, args.steps)
        return
    if args.formats:
        compare_formats(args.formats.split(","), args.batches, args.steps)
        return
    if args.q4k_forms:
        args.dtype = "int4"
    if args.bytes_ab:
        compare_byte_form(args.model, args.dtype, args.batches, args.steps)
        return
    if args.huge_pages_ab:
        compare_huge_pages(args.model, args.dtype, args.batches, args.steps)
        return
    if args.stacked_ab:
        compare_stacked(args.model, args.batches, args.steps)
        return
    if args.kv_ab:
        compare_kv(args.model, args.dtype, args.batches, args.steps, args.context)
        return
    if args.six_ab:
        compare_six(args.model, args.dtype, args.batches, args.steps)
        return
    runner = make_runner(max(args.batches), 320, 16, args.dtype, args.model)
    switch = q4k_form_switch(runner) if args.q4k_forms else None
    load = os.getloadavg()[0]
    results = {}
    for b in args.batches:
        batch = make_batch(b, runner.block_size)
        if switch is not None:
            both = q4k_form_steps(runner, switch, batch, args.steps)
            results[b] = both
            fp16, exact = both["fp16"], both["exact"]
            print(
                f"batch {b:3d}: Q4_K fp16 form {fp16 * 1e3:7.2f} ms ({b / fp16:6.1f} tok/s), "
                f"exact {exact * 1e3:7.2f} ms ({b / exact:6.1f} tok/s), "
                f"exact / fp16 time {exact / fp16:.3f}"
            )
            continue
        if args.ab:
            both = ab_steps(runner, batch, args.steps)
            results[b] = both
            cpp, tor = both["cpp"], both["torch"]
            print(
                f"batch {b:3d}: C++ ops {cpp * 1e3:7.2f} ms ({b / cpp:6.1f} tok/s), "
                f"PyTorch only {tor * 1e3:7.2f} ms ({b / tor:6.1f} tok/s), "
                f"ratio {tor / cpp:.2f}"
            )
            continue
        sec = time_steps(runner, batch, args.steps)
        results[b] = sec
        print(f"{args.label} batch {b:3d}: {sec * 1e3:7.2f} ms/step  {b / sec:7.1f} tok/s")
        if args.profile:
            print(profile_steps(runner, batch, 10, args.top))
    if args.prompt:
        batch = make_prompt_batch(args.prompt, runner.block_size)
        sec = time_steps(runner, batch, max(3, args.steps // 4))
        results[f"prompt{args.prompt}"] = sec
        print(f"{args.label} prompt {args.prompt}: {sec * 1e3:7.2f} ms/step")
        if args.profile:
            print(profile_steps(runner, batch, 3, args.top))
    print(f"load before: {load:.2f}, threads: {torch.get_num_threads()}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({"label": args.label, "load": load, "ms": results}) + "\n")


def compare_byte_form(model: str | None, weights: str, batches: list[int], steps: int) -> None:
    """Print ms per step of ``model`` (a GGUF) with its 8-bit layers in the exact byte
    form and in per-row int8, taking turns, and the byte form's speed against per-row."""
    from unittest import mock

    from mellea.engine.weights import _GGUFTensor

    runners = {"bytes": make_runner(max(batches), 320, 16, weights, model)}
    with mock.patch.object(_GGUFTensor, "has_byte_form", lambda self: False):
        runners["per-row"] = make_runner(max(batches), 320, 16, weights, model)
    exact = [m for m in runners["bytes"].model.modules() if getattr(m, "exact", False)]
    print(f"{len(exact)} layers in the byte form; load before: {os.getloadavg()[0]:.2f}")
    for b in batches:
        secs = format_steps(runners, make_batch(b, 16), steps)
        ratio = secs["per-row"] / secs["bytes"]
        print(
            f"batch {b:3d}: bytes {secs['bytes'] * 1e3:7.2f} ms, per-row int8 "
            f"{secs['per-row'] * 1e3:7.2f} ms: bytes {ratio:.3f}x as fast"
        )


def compare_stacked(model: str | None, batches: list[int], steps: int) -> None:
    """Print ms per step of ``model`` (a Q4_K_M GGUF) at int4 with each fused q/k/v whose
    v is Q6_K in two parts (Q4_K q and k in int4, v in the byte form) and, as before,
    all in the byte form, built in turn (all bytes first and again last: the model built
    later ran up to 10 % faster here, whatever its form) and taking turns step by step;
    the ratio is against the mean of the two all-bytes models."""
    from unittest import mock

    from mellea.engine import weights

    def all_bytes() -> ModelRunner:
        with mock.patch.object(weights, "_int4_then_bytes", lambda *args: None):
            return make_runner(max(batches), 320, 16, "int4", model)

    runners = {"all bytes": all_bytes()}
    runners["stacked"] = make_runner(max(batches), 320, 16, "int4", model)
    runners["all bytes, built last"] = all_bytes()
    print(f"load before: {os.getloadavg()[0]:.2f}, threads: {torch.get_num_threads()}")
    for b in batches:
        secs = format_steps(runners, make_batch(b, 16), steps)
        cells = [f"{k} {v * 1e3:7.2f} ms" for k, v in secs.items()]
        ratio = (secs["all bytes"] + secs["all bytes, built last"]) / 2 / secs["stacked"]
        print(f"batch {b:3d}: " + ", ".join(cells) + f": stacked {ratio:.3f}x as fast")


def compare_huge_pages(model: str | None, weights: str, batches: list[int], steps: int) -> None:
    """Print ms per step of ``model`` with its weights moved to huge pages (what the
    runner does, :mod:`mellea.engine.huge_pages`) and left where the load put them, the
    two built in turn (the plain one first, then again last) and taking turns step by
    step."""
    from unittest import mock

    from mellea.engine import huge_pages

    def plain() -> ModelRunner:
        with mock.patch.object(huge_pages, "thp_mode", lambda: "never"):  # the mover idles
            return make_runner(max(batches), 320, 16, weights, model)

    runners = {"plain": plain(), "huge": make_runner(max(batches), 320, 16, weights, model)}
    runners["plain, built last"] = plain()
    print(f"load before: {os.getloadavg()[0]:.2f}, threads: {torch.get_num_threads()}")
    print_built_twice(runners, "plain", "huge", batches, steps, "huge pages")


def print_built_twice(
    runners: dict[str, ModelRunner], old: str, new: str, batches: list[int], steps: int, what: str
) -> None:
    """Time ``runners`` (``old``, ``new`` and ``old`` built again last) taking turns step
    by step at each batch size; print their ms and ``new``'s speed against the faster
    of the two ``old`` ones."""
    for b in batches:
        secs = format_steps(runners, make_batch(b, 16), steps)
        cells = [f"{k} {v * 1e3:7.2f} ms" for k, v in secs.items()]
        ratio = min(secs[old], secs[f"{old}, built last"]) / secs[new]
        print(f"batch {b:3d}: " + ", ".join(cells) + f": {what} {ratio:.3f}x as fast")


def compare_kv(
    model: str | None, weights: str, batches: list[int], steps: int, context: int
) -> None:
    """Print ms per step with a float32 and a float16 KV cache (the same weights), the
    two taking turns step by step, at contexts spread over [context / 2, context]."""
    max_len = context + 16
    runners = {
        kv: make_runner(max(batches), max_len, 16, weights, model, kv)
        for kv in ("float32", "float16")
    }
    print(f"load before: {os.getloadavg()[0]:.2f}, threads: {torch.get_num_threads()}")
    for b in batches:
        batch = make_batch(b, 16, context // 2, context)
        secs = format_steps(runners, batch, steps)
        cells = [f"{k} {v * 1e3:7.2f} ms ({b / v:7.1f} tok/s)" for k, v in secs.items()]
        ratio = secs["float32"] / secs["float16"]
        print(f"batch {b:3d}, context {context}: " + ", ".join(cells) + f": fp16 {ratio:.3f}x")


def compare_six(model: str | None, weights: str, batches: list[int], steps: int) -> None:
    """Print ms per step of ``model`` (a GGUF) with the byte-form layers whose values fit
    6 bits (Q6_K's) in the six-bit form (what the loader does, ``cpu_kernels.bytes_to_six``) and
    in the byte form, built in turn (the byte form first, then again last) and taking
    turns step by step."""
    from unittest import mock

    from mellea.engine.formats import linear

    def plain() -> ModelRunner:
        with mock.patch.object(linear, "six_form_runs", lambda: False):
            return make_runner(max(batches), 320, 16, weights, model)

    runners = {"bytes": plain(), "six": make_runner(max(batches), 320, 16, weights, model)}
    runners["bytes, built last"] = plain()
    six = [m for m in runners["six"].model.modules() if getattr(m, "exact", False)]
    held = sum(m.qweight.shape[2] == 6 for m in six)
    print(f"{held} of {len(six)} byte-form layers in six bits; load {os.getloadavg()[0]:.2f}")
    print_built_twice(runners, "bytes", "six", batches, steps, "six bits")


def compare_formats(formats: list[str], batches: list[int], steps: int) -> None:
    """Print ms per step of each format at each batch size, and its speed against the
    first format's. Every runner is built and run on this thread (one OpenMP team)."""
    runners = {fmt: make_runner(max(batches), 320, 16, fmt) for fmt in formats}
    print(f"load before: {os.getloadavg()[0]:.2f}, threads: {torch.get_num_threads()}")
    for b in batches:
        secs = format_steps(runners, make_batch(b, 16), steps)
        base = secs[formats[0]]
        cells = [
            f"{fmt} {sec * 1e3:6.2f} ms ({b / sec:6.1f} tok/s, {base / sec:.2f}x)"
            for fmt, sec in secs.items()
        ]
        print(f"batch {b:3d}: " + ", ".join(cells))


def neighbour_steps(runner: ModelRunner, batch: ScheduledBatch, steps: int, tune: bool) -> float:
    """Median seconds per step, all threads or (``tune``) the engine's thread tuner."""
    most = torch.get_num_threads()
    runner.threads = ThreadTuner(most) if tune else None
    try:
        tuner = runner.threads

        def step() -> None:
            inputs = runner.prepare(batch)
            if tuner is None:
                runner.execute(inputs)
            else:  # as EngineCore.execute runs it
                tuner.step(lambda: runner.execute(inputs), inputs.input_ids.numel(), True)

        for _ in range(3):
            step()
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
    finally:
        runner.threads = None
        torch.set_num_threads(most)
    return sorted(times)[len(times) // 2]


def compare_neighbour(formats: list[str], batches: list[int], steps: int) -> None:
    """ms per step of each format without and with a CPU-bound neighbour (``yes``), with
    all threads and with the tuned count, in one run (the quiet and busy phases
    alternate twice; the better of each is kept)."""
    runners = {fmt: make_runner(max(batches), 320, 16, fmt) for fmt in formats}
    print(f"load before: {os.getloadavg()[0]:.2f}, threads: {torch.get_num_threads()}")
    for b in batches:
        batch = make_batch(b, 16)
        for fmt, runner in runners.items():
            best: dict[tuple[bool, bool], float] = {}
            for _ in range(2):
                for busy in (False, True):
                    neighbour = (
                        subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if busy else None
                    )
                    try:
                        for tune in (False, True):
                            sec = neighbour_steps(runner, batch, steps, tune)
                            best[busy, tune] = min(best.get((busy, tune), sec), sec)
                    finally:
                        if neighbour is not None:
                            neighbour.kill()
                            neighbour.wait()
            cells = [
                f"{'busy' if busy else 'quiet'}/{'tuned' if tune else 'all threads'} "
                f"{sec * 1e3:6.2f} ms"
                for (busy, tune), sec in best.items()
            ]
            print(f"batch {b:3d} {fmt}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
