"""Engine benchmark on the default model: naive baseline vs the engine vs a bare loop.

Measures, in one run, for streaming greedy requests of N new tokens (EOS ignored):

1. naive: one Hugging Face ``generate()`` per request, requests in threads
   (``benchmarks/hf_generate.py``), at concurrency 1 and 8;
2. the engine at concurrency 1, 8 and 32;
3. the limit: bare batched greedy decode loops without any serving, at batch 1, 8, 32:
   the Hugging Face model with its KV cache, and the engine's own model weights over
   a contiguous static KV cache.

Prints a table and writes ``benchmarks/results/engine.json``. Every function takes
what it measures as an argument, so other benchmarks (e.g. through ``m serve``) can
reuse the prompt set, the streaming client and the report.

    python benchmarks/bench_engine.py            # full run (a few minutes)
    python benchmarks/bench_engine.py --quick    # short run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "engine.json"
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the naive baseline lives beside us, in benchmarks/

TOPICS = [
    "how tides work",
    "why the sky is blue",
    "the history of the bicycle",
    "how to bake sourdough bread",
    "what a black hole is",
    "how vaccines train the immune system",
    "the rules of chess",
    "how a refrigerator keeps food cold",
    "why leaves change color in autumn",
    "how airplanes stay in the air",
    "the life cycle of a butterfly",
    "how the internet routes a message",
    "what causes earthquakes",
    "how bees make honey",
    "the water cycle",
    "how a compass works",
    "why we dream",
    "how coffee is roasted",
    "what photosynthesis does",
    "how volcanoes form",
    "the invention of the printing press",
    "how solar panels make electricity",
    "why cats purr",
    "how glass is made",
    "what DNA is",
    "how rainbows form",
    "how a battery stores energy",
    "the Roman aqueducts",
    "how submarines dive",
    "why the moon has phases",
    "how paper is recycled",
    "how a piano makes sound",
]


# -- workload ----------------------------------------------------------------------


def make_prompts(apply_chat_template: Callable[[list[dict]], list[int]], n: int) -> list[list[int]]:
    """``n`` distinct chat prompts (~40 tokens). Each starts with its own request number,
    so no two share a prefix block and the prefix cache does not flatter the engine."""
    prompts = []
    for i in range(n):
        messages = [
            {"role": "system", "content": f"Session {i}. You are a helpful assistant."},
            {"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} in detail."},
        ]
        prompts.append(apply_chat_template(messages))
    return prompts


@dataclass
class RunResult:
    """One measured streaming run."""

    name: str
    concurrency: int
    requests: int
    completion_tokens: int
    wall_s: float
    ttft_s: list[float] = field(default_factory=list)
    cached_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        """Aggregate output tokens per second."""
        return self.completion_tokens / self.wall_s

    @property
    def ttft_median_s(self) -> float:
        """Median time to first token."""
        return statistics.median(self.ttft_s)

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers."""
        out = asdict(self)
        out.pop("ttft_s")
        out["tokens_per_s"] = round(self.tokens_per_s, 2)
        out["ttft_median_s"] = round(self.ttft_median_s, 4)
        return out


async def stream_requests(
    add_request: Callable[[list[int], Any], Any],
    prompts: list[list[int]],
    params: Any,
    concurrency: int,
    name: str,
) -> RunResult:
    """Run ``prompts`` through ``add_request`` with ``concurrency`` clients, each
    streaming one request at a time; time to first token is per request."""
    queue = list(reversed(prompts))
    ttfts: list[float] = []
    tokens = 0
    cached = 0

    async def client() -> None:
        nonlocal tokens, cached
        while queue:
            prompt = queue.pop()
            start = time.perf_counter()
            first = None
            last = None
            async for out in add_request(prompt, params):
                if first is None:
                    first = time.perf_counter() - start
                last = out
            ttfts.append(first)
            tokens += last.completion_tokens
            cached += last.cached_tokens

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    return RunResult(name, concurrency, len(prompts), tokens, wall, ttfts, cached)


def greedy_params(max_tokens: int) -> Any:
    """Greedy, exactly ``max_tokens`` new tokens."""
    from mellea.engine.types import SamplingParams

    return SamplingParams(max_tokens=max_tokens, ignore_eos=True)


# -- a quiet machine ---------------------------------------------------------------


def cpu_busy_fraction(interval: float = 0.5) -> float:
    """Fraction of all CPUs busy over ``interval`` seconds (Linux ``/proc/stat``)."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    busy0, total0 = sample()
    time.sleep(interval)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(1, total1 - total0)


def wait_for_quiet(limit_s: float = 60.0, threshold: float = 0.15) -> float:
    """Wait (up to ``limit_s``) until other processes leave the CPUs alone.

    On a 2-core machine a single busy neighbour halves a 2-thread forward pass or
    worse (OpenMP threads wait for each other), so measurements start on an idle
    machine when possible. Returns the busy fraction seen last.
    """
    deadline = time.monotonic() + limit_s
    busy = cpu_busy_fraction()
    while busy > threshold and time.monotonic() < deadline:
        busy = cpu_busy_fraction()
    return busy


# -- memory ------------------------------------------------------------------------


class PeakRSS:
    """Peak resident memory of this process while the block runs (Linux)."""

    def __enter__(self) -> PeakRSS:
        try:  # reset the kernel's high-water mark, so VmHWM is this block's peak
            Path("/proc/self/clear_refs").write_text("5")
            self.reset = True
        except OSError:
            self.reset = False
        self.peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.reset:
            self.peak = max(self.peak, _status_kb("VmHWM") * 1024)


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _rss_bytes() -> int:
    return _status_kb("VmRSS") * 1024


# -- the engine --------------------------------------------------------------------


async def bench_engine(
    engine: Any, prompts: list[list[int]], max_tokens: int, concurrency: int
) -> RunResult:
    """The engine at one concurrency; records the KV blocks it used at most."""
    peak_blocks = 0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak_blocks
        while not done.is_set():
            peak_blocks = max(peak_blocks, engine.stats()["kv_blocks_used"])
            await asyncio.sleep(0.05)

    watcher = asyncio.ensure_future(watch())
    steps = engine.stats()["steps"]
    result = await stream_requests(
        engine.add_request, prompts, greedy_params(max_tokens), concurrency, "engine"
    )
    done.set()
    await watcher
    stats = engine.stats()
    block_bytes = stats["kv_cache_bytes"] // stats["kv_blocks_total"]
    result.extra = {
        "steps": stats["steps"] - steps,
        "peak_kv_blocks_used": peak_blocks,
        "peak_kv_bytes_used": peak_blocks * block_bytes,
        "preemptions": stats["preemptions"],
    }
    return result


async def warm_up(add_request: Callable[[list[int], Any], Any], prompt: list[int]) -> None:
    """One short request, so lazy initialisation is not measured."""
    async for _ in add_request(prompt, greedy_params(4)):
        pass


# -- the limit: bare loops ---------------------------------------------------------


@dataclass
class BareResult:
    """A bare decode loop: prefill once, then ``steps`` greedy steps for the batch."""

    name: str
    batch: int
    prompt_len: int
    steps: int
    prefill_s: float
    decode_s: float
    prefill_samples: list[float] = field(default_factory=list)  # over all repetitions

    @property
    def prefill_median_s(self) -> float:
        """Median prefill time over all repetitions (this one if there were none)."""
        return statistics.median(self.prefill_samples or [self.prefill_s])

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second, prefill included (it yields the first token)."""
        return self.batch * self.steps / (self.prefill_s + self.decode_s)

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers."""
        out = asdict(self)
        out["tokens_per_s"] = round(self.tokens_per_s, 2)
        out["prefill_median_s"] = round(self.prefill_median_s, 4)
        return out


def bare_hf_loop(model: Any, prompt: list[int], batch: int, steps: int) -> BareResult:
    """Hugging Face model, its dynamic KV cache, argmax, no sampling or streaming."""
    import torch

    ids = torch.tensor([prompt] * batch)
    with torch.inference_mode():
        start = time.perf_counter()
        out = model(ids, use_cache=True)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        prefill = time.perf_counter() - start
        cache = out.past_key_values
        start = time.perf_counter()
        for _ in range(steps - 1):
            out = model(token, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            token = out.logits[:, -1].argmax(-1, keepdim=True)
        decode = time.perf_counter() - start
    return BareResult("bare-hf", batch, len(prompt), steps, prefill, decode)


def bare_own_loop(model: Any, prompt: list[int], batch: int, steps: int) -> BareResult:
    """The engine's own model weights over a contiguous static KV cache [B, Hk, L, D]:
    the same maths as the engine's CPU path, minus paging, scheduling and streaming."""
    import torch
    import torch.nn.functional as F

    cfg = model.cfg
    n_heads, n_kv, head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    max_len = len(prompt) + steps
    shape = (cfg.num_layers, batch, n_kv, max_len, head_dim)
    k_cache = torch.zeros(shape)
    v_cache = torch.zeros(shape)
    q_size, kv_size = n_heads * head_dim, n_kv * head_dim

    def forward(ids: torch.Tensor, start: int) -> torch.Tensor:
        n = ids.shape[1]
        x = model.embed_tokens(ids)
        rot = model.rope["full_attention"][start : start + n][None, :, None, :]
        residual = None
        for i, layer in enumerate(model.layers):
            residual = x if residual is None else x + residual
            h = F.rms_norm(residual, (cfg.hidden_size,), layer.input_layernorm, cfg.rms_norm_eps)
            qkv = layer.self_attn.qkv_proj(h)
            qk = qkv[..., : q_size + kv_size].view(batch, n, n_heads + n_kv, -1, 2)
            qk = torch.view_as_real(torch.view_as_complex(qk) * rot)
            qk = qk.view(batch, n, n_heads + n_kv, head_dim).transpose(1, 2)
            v = qkv[..., q_size + kv_size :].view(batch, n, n_kv, head_dim).transpose(1, 2)
            k_cache[i, :, :, start : start + n] = qk[:, n_heads:]
            v_cache[i, :, :, start : start + n] = v
            attn = F.scaled_dot_product_attention(
                qk[:, :n_heads],
                k_cache[i, :, :, : start + n],
                v_cache[i, :, :, : start + n],
                is_causal=n > 1,
                enable_gqa=True,
                scale=layer.self_attn.scale,
            )
            h = layer.self_attn.o_proj(attn.transpose(1, 2).reshape(batch, n, q_size))
            residual = h + residual
            h = F.rms_norm(
                residual, (cfg.hidden_size,), layer.post_attention_layernorm, cfg.rms_norm_eps
            )
            x = layer.mlp(h)
        x = F.rms_norm(x + residual, (cfg.hidden_size,), model.norm, cfg.rms_norm_eps)
        return model.compute_logits(x[:, -1]).argmax(-1, keepdim=True)

    ids = torch.tensor([prompt] * batch)
    with torch.inference_mode():
        start = time.perf_counter()
        token = forward(ids, 0)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for step in range(steps - 1):
            token = forward(token, len(prompt) + step)
        decode = time.perf_counter() - start
    return BareResult("bare-own", batch, len(prompt), steps, prefill, decode)


# -- report ------------------------------------------------------------------------

TARGETS = [
    # (label, numerator, denominator, comparison, threshold)
    ("engine@8 / naive@8", ("engine", 8), ("naive", 8), ">=", 3.0),
    ("engine@1 / bare@1", ("engine", 1), ("bare", 1), ">=", 0.85),
    ("engine@8 / bare@8", ("engine", 8), ("bare", 8), ">=", 0.7),
    ("engine@32 / bare@32", ("engine", 32), ("bare", 32), ">=", 0.6),
]


def report(
    runs: list[RunResult], bares: list[BareResult], memory: dict[str, Any], meta: dict
) -> dict[str, Any]:
    """Print the table and return the JSON document."""
    rate: dict[tuple[str, int], float] = {}
    for run in runs:
        rate[(run.name, run.concurrency)] = run.tokens_per_s
    for bare in bares:
        rate[(bare.name, bare.batch)] = bare.tokens_per_s
        # "bare" is the faster of the two bare loops: the stricter limit.
        rate[("bare", bare.batch)] = max(rate.get(("bare", bare.batch), 0.0), bare.tokens_per_s)

    print(f"\n{'system':<10} {'conc':>5} {'tok/s':>8} {'TTFT med':>9} {'prefill med':>11}")
    for run in runs:
        print(
            f"{run.name:<10} {run.concurrency:>5} {run.tokens_per_s:>8.1f} "
            f"{run.ttft_median_s * 1000:>7.0f}ms {'':>8}"
        )
    for bare in bares:
        print(
            f"{bare.name:<10} {bare.batch:>5} {bare.tokens_per_s:>8.1f} {'':>9} "
            f"{bare.prefill_median_s * 1000:>6.0f}ms"
        )

    ratios = {}
    print(f"\n{'ratio':<30} {'value':>7} {'target':>8}  ok")
    for label, num, den, _, threshold in TARGETS:
        if num in rate and den in rate:
            value = rate[num] / rate[den]
            ratios[label] = {"value": round(value, 3), "target": threshold}
            print(f"{label:<30} {value:>7.2f} {'>=':>4}{threshold:>4}  {value >= threshold}")
    engine1 = next((r for r in runs if r.name == "engine" and r.concurrency == 1), None)
    prefill1 = min((b.prefill_median_s for b in bares if b.batch == 1), default=None)
    if engine1 and prefill1:
        ttft1 = statistics.median(engine1.extra.get("ttft_all_reps_s") or engine1.ttft_s)
        value = ttft1 / prefill1
        ratios["engine TTFT@1 / bare prefill"] = {"value": round(value, 3), "target": 1.3}
        print(f"{'engine TTFT@1 / bare prefill':<30} {value:>7.2f} {'<':>4}{1.3:>4}  {value < 1.3}")
    if memory:
        print(
            f"\npeak RSS at concurrency {memory['concurrency']}: "
            f"{memory['peak_rss_bytes'] / 2**20:.0f} MiB; KV cache "
            f"{memory['kv_cache_bytes'] / 2**20:.0f} MiB allocated of a "
            f"{memory['kv_cache_budget_bytes'] / 2**20:.0f} MiB budget, "
            f"{memory['peak_kv_bytes_used'] / 2**20:.1f} MiB used at peak"
        )
    return {
        "meta": meta,
        "runs": [r.summary() for r in runs],
        "bare": [b.summary() for b in bares],
        "ratios": ratios,
        "memory": memory,
    }


# -- main --------------------------------------------------------------------------


class PromptPool:
    """Hands out prompts never used before, so no run is helped by the prefix cache."""

    def __init__(self, prompts: list[list[int]]) -> None:
        self.prompts = prompts
        self.next = 0

    def take(self, n: int) -> list[list[int]]:
        """The next ``n`` unused prompts."""
        if self.next + n > len(self.prompts):
            raise ValueError("prompt pool exhausted")
        self.next += n
        return self.prompts[self.next - n : self.next]


async def engine_memory_run(engine: Any, pool: PromptPool, max_tokens: int, level: int) -> dict:
    """Peak RSS and KV use at ``level`` concurrent requests, with nothing else loaded."""
    with PeakRSS() as rss:
        run = await bench_engine(engine, pool.take(level), max_tokens, level)
    stats = engine.stats()
    return {
        "concurrency": level,
        "peak_rss_bytes": rss.peak,
        "kv_cache_bytes": stats["kv_cache_bytes"],
        "kv_cache_budget_bytes": stats["kv_cache_budget_bytes"],
        "peak_kv_bytes_used": run.extra["peak_kv_bytes_used"],
    }


async def run_engine_and_bare(
    engine: Any,
    hf_model: Any,
    pool: PromptPool,
    max_tokens: int,
    levels: list[int],
    per_client: int,
    reps: int,
) -> tuple[list[RunResult], list[BareResult]]:
    """At each level, ``reps`` rounds of: the engine, then both bare loops.

    Interleaving keeps each ratio's two sides close in time, and the best of the
    rounds is kept, which makes the ratios robust to a neighbour's burst of work.
    """
    runs: list[RunResult] = []
    bares: list[BareResult] = []
    for level in levels:
        best_run = None
        best_bare: dict[str, BareResult] = {}
        prefills: dict[str, list[float]] = {}  # TTFT is compared with medians over all rounds
        ttfts: list[float] = []
        for _ in range(reps):
            busy = wait_for_quiet()
            run = await bench_engine(engine, pool.take(level * per_client), max_tokens, level)
            run.extra["cpu_busy_before"] = round(busy, 3)
            ttfts += run.ttft_s
            print(f"  engine@{level}: {run.tokens_per_s:.1f} tok/s, TTFT {run.ttft_median_s:.3f}s")
            if best_run is None or run.tokens_per_s > best_run.tokens_per_s:
                best_run = run
            prompt = pool.take(1)[0]
            for loop, model in ((bare_hf_loop, hf_model), (bare_own_loop, engine.runner.model)):
                loop(model, prompt, level, 4)  # warm up this shape
                wait_for_quiet()
                bare = loop(model, prompt, level, max_tokens)
                print(f"  {bare.name}@{level}: {bare.tokens_per_s:.1f} tok/s")
                prefills.setdefault(bare.name, []).append(bare.prefill_s)
                kept = best_bare.get(bare.name)
                if kept is None or bare.tokens_per_s > kept.tokens_per_s:
                    best_bare[bare.name] = bare
        for name, bare in best_bare.items():
            bare.prefill_samples = prefills[name]
        best_run.extra["ttft_all_reps_s"] = ttfts
        runs.append(best_run)
        bares.extend(best_bare.values())
    return runs, bares


async def run_naive_suite(
    prompts: list[list[int]], max_tokens: int, levels: list[int]
) -> list[RunResult]:
    """One ``generate()`` per request, in threads (one request per client: it is slow)."""
    from benchmarks.hf_generate import HFGenerateEngine

    naive = HFGenerateEngine()
    await warm_up(naive.add_request, prompts[0])
    runs = []
    for level in levels:
        busy = wait_for_quiet()
        run = await stream_requests(
            naive.add_request, prompts[:level], greedy_params(max_tokens), level, "naive"
        )
        run.extra["cpu_busy_before"] = round(busy, 3)
        runs.append(run)
        print(f"  naive@{level}: {run.tokens_per_s:.1f} tok/s, TTFT {run.ttft_median_s:.3f}s")
    return runs


def main() -> None:
    """Parse options, run everything, print and save."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="short run (16 tokens, fewer requests)"
    )
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--reps", type=int, default=None, help="rounds per level (best kept)")
    parser.add_argument("--levels", default="1,8,32", help="engine concurrency levels")
    parser.add_argument("--naive-levels", default="1,8", help="naive concurrency levels")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from mellea.engine.engine import Engine

    max_tokens = args.max_tokens or (16 if args.quick else 64)
    per_client = 1 if args.quick else 2
    reps = args.reps or (1 if args.quick else 3)
    levels = [int(x) for x in args.levels.split(",")]
    naive_levels = [] if args.skip_naive else [int(x) for x in args.naive_levels.split(",")]
    meta = {
        "max_tokens": max_tokens,
        "requests_per_client": per_client,
        "repetitions": reps,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_avg_start": os.getloadavg(),
        "quick": args.quick,
    }

    print("loading the engine ...")
    engine = Engine()
    pool = PromptPool(
        make_prompts(engine.apply_chat_template, (sum(levels) * per_client + 1) * reps + 50)
    )
    meta["prompt_tokens_mean"] = round(statistics.mean(len(p) for p in pool.prompts), 1)

    async def engine_part() -> tuple[dict, list[RunResult], list[BareResult]]:
        await warm_up(engine.add_request, pool.take(1)[0])
        print(f"engine@{max(levels)} alone, for memory:")
        memory = await engine_memory_run(engine, pool, max_tokens, max(levels))
        hf = AutoModelForCausalLM.from_pretrained(engine.config.model_path, dtype=torch.float32)
        print("engine and bare loops:")
        runs, bares = await run_engine_and_bare(
            engine, hf.eval(), pool, max_tokens, levels, per_client, reps
        )
        return memory, runs, bares

    memory, runs, bares = asyncio.run(engine_part())
    engine.shutdown()
    if naive_levels:
        print("naive (generate per request):")
        runs += asyncio.run(run_naive_suite(pool.prompts, max_tokens, naive_levels))
    meta["load_avg_end"] = os.getloadavg()
    doc = report(runs, bares, memory, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
