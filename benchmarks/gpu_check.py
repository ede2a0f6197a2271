"""Time the engine on a GPU against transformers' generate and the memory floor, in one run.

For each model shape (random weights: the default model's, and Llama 3.2 1B's) and
each concurrency, ``c`` requests of a random ``--prompt``-token prompt and
``--tokens`` new tokens (EOS ignored) go into one :class:`EngineCore` at once; the
engine's tok/s is all new tokens over the wall time from the first add to the last
token, prefill included. transformers' baseline is its ``generate`` per request,
one request after another, which is how a server without a batching engine serves
(its throughput is the same at any concurrency); its ``generate`` over the whole
batch at once is listed beside it.

The floor of a decode step is the bytes it must read (every weight once, the LM
head included, plus the KV cache of every sequence at its mean length) over the
device-to-device copy bandwidth measured here. The decode step time is the median
``core.step()`` of decode-only steps (host work and sampling included); the graph
time is the replay of its CUDA graph alone, timed with events.

    python benchmarks/gpu_check.py --out DIR      # tables in DIR/gpu_check.md and .json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mellea.engine.core import EngineCore
from mellea.engine.types import SamplingParams
from tests.gpu.models import LLAMA32_1B, SMOLLM2_135M, make_random_model

SHAPES = {"smollm2-135m": SMOLLM2_135M, "llama3.2-1b": LLAMA32_1B}


def measure_bandwidth(device: torch.device) -> float:
    """Device-to-device copy bandwidth in bytes/s, bytes read plus bytes written."""
    n = 1 << 30  # 1 GiB each way
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * n / statistics.median(times)


def measure_matmul(device: torch.device) -> float:
    """bf16 8192^3 matrix product rate in FLOP/s, on random data."""
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    end.record()
    end.synchronize()
    return 10 * 2 * 8192**3 / (start.elapsed_time(end) / 1e3)


def graph_time_us(fn, reps: int = 20) -> float:
    """Median device time of one ``fn()`` in us, from a CUDA graph of ``reps`` calls (so
    the host's launch overhead, which the engine's graphs also skip, stays out)."""
    import triton

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # compiles
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    return 1e3 * triton.testing.do_bench(graph.replay, return_mode="median") / reps


def attention_kernel_times() -> list[dict]:
    """Decode attention alone, one piece per context against the split default, in bf16."""
    from mellea.engine.kernels.attention_triton import (
        decode_splits,
        paged_attention_decode_triton,
    )

    rows = []
    for batch, n_q, n_kv, ctx in [
        (1, 9, 3, 192),
        (1, 9, 3, 2112),
        (1, 32, 8, 192),
        (1, 32, 8, 2112),
        (8, 32, 8, 2112),
        (64, 9, 3, 2112),
        (64, 32, 8, 2112),
        (128, 9, 3, 192),
    ]:
        block_size, head_dim = 16, 64
        n_blocks = batch * (ctx // block_size + 1)
        shape = (n_blocks, block_size, n_kv, head_dim)
        k_cache = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        v_cache = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        tables = torch.randperm(n_blocks, device="cuda", dtype=torch.int32).view(batch, -1)
        lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
        q = torch.randn(batch, n_q, head_dim, device="cuda", dtype=torch.bfloat16)
        splits = decode_splits(batch, n_kv, q.device)
        row = {"batch": batch, "heads": f"{n_q}/{n_kv}x64", "ctx": ctx, "splits": splits}
        args = (q, k_cache, v_cache, tables, lens, 0.125, 0)
        for label, n in (("one_us", 1), ("split_us", splits), ("four_us", 4)):
            row[label] = graph_time_us(
                lambda args=args, n=n: paged_attention_decode_triton(*args, n)
            )
        kv_bytes = 2 * batch * ctx * n_kv * head_dim * 2
        row["split_tb_s"] = kv_bytes / (row["split_us"] * 1e-6) / 1e12
        rows.append(row)
        print(f"  attention {row}", flush=True)
    return rows


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, vocab - 10, (n, length), generator=g).tolist()


def engine_run(
    core: EngineCore,
    batch: list[list[int]],
    new_tokens: int,
    adapters: list[str | None] | None = None,
) -> dict:
    """Run ``batch`` to the end (request i on ``adapters[i]``, default the base model);
    tok/s, and step times of the decode-only steps."""
    adapters = adapters or [None] * len(batch)
    if core.runner.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    seqs = []
    for i, (p, adapter) in enumerate(zip(batch, adapters, strict=True)):
        params = SamplingParams(max_tokens=new_tokens, ignore_eos=True, adapter=adapter)
        seq = core.new_sequence(f"b{i}", p, params)
        core.add(seq)
        seqs.append(seq)
    decode_steps = []
    while core.has_work():
        scheduled = core.schedule()
        if scheduled is None:
            continue
        s0 = time.perf_counter()
        sampled = core.execute(scheduled)
        s1 = time.perf_counter()
        if not scheduled.batch.prefills and len(scheduled.batch.decodes) == len(batch):
            decode_steps.append(s1 - s0)
        core.update(scheduled, sampled)
    wall = time.perf_counter() - t0
    total = sum(len(s.output_ids) for s in seqs)
    assert total == new_tokens * len(batch)
    return {
        "tok_s": total / wall,
        "wall_s": wall,
        "decode_step_ms": 1e3 * statistics.median(decode_steps) if decode_steps else None,
    }


def replay_ms(graph: torch.cuda.CUDAGraph) -> float:
    """Median replay time of a captured graph in ms (its inputs as last left)."""
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(30):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def graph_replay_ms(core: EngineCore, batch: int) -> float | None:
    """Median replay time of the decode graph for ``batch`` (its inputs as last left)."""
    graphs = core.runner.graphs
    if graphs is None:
        return None
    return replay_ms(graphs.graphs[graphs.size_for(batch)])


def hf_rates(path: Path, batch: list[list[int]], new_tokens: int, concurrency: list[int]) -> dict:
    """transformers generate: tok/s one request at a time, and over whole batches."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()

    def generate(rows: list[list[int]]) -> float:
        ids = torch.tensor(rows, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        torch.cuda.synchronize()
        assert out.shape[1] == ids.shape[1] + new_tokens
        return time.perf_counter() - t0

    generate(batch[:1])  # warm-up
    one = [generate(batch[i : i + 1]) for i in range(3)]
    per_request = new_tokens / statistics.median(one)
    batched = {c: c * new_tokens / generate(batch[:c]) for c in concurrency}
    return {"per_request_tok_s": per_request, "batched_tok_s": batched}


def weight_bytes(core: EngineCore) -> int:
    return sum(p.numel() * p.element_size() for p in core.runner.model.parameters())


def bench_model(name: str, args: argparse.Namespace, bandwidth: float, root: Path) -> dict:
    shape = SHAPES[name]
    path = make_random_model(root / name, shape, dtype=torch.bfloat16, with_tokenizer=False)
    max_c = max(args.concurrency)
    t0 = time.perf_counter()
    core = EngineCore(
        path,
        dtype="bfloat16",
        device="cuda",
        max_num_seqs=max_c,
        max_num_batched_tokens=4096,
        kv_cache_memory=args.kv_gib << 30,
    )
    build_s = time.perf_counter() - t0
    vocab = shape["vocab_size"]
    engine_run(core, prompts(2, args.prompt, vocab, seed=0), 4)  # warm-up: compiles kernels
    wbytes = weight_bytes(core)
    kv_per_token = core.model_config.kv_bytes_per_token(torch.bfloat16)
    mean_ctx = args.prompt + args.tokens / 2
    rows = []
    for c in args.concurrency:
        # An untimed run of the same shapes first: Triton compiles a kernel again for
        # some new argument values (a block table width divisible by 16, say).
        engine_run(core, prompts(c, args.prompt, vocab, seed=10_000 + c), 4)
        # Fresh prompts per run, so no run reuses an earlier one's cached prefix.
        result = engine_run(core, prompts(c, args.prompt, vocab, seed=c), args.tokens)
        floor_ms = 1e3 * (wbytes + c * mean_ctx * kv_per_token) / bandwidth
        result.update(concurrency=c, graph_ms=graph_replay_ms(core, c), floor_ms=floor_ms)
        rows.append(result)
        print(f"  {name} c={c}: {result}", flush=True)
    # Long contexts: attention reads as much KV as there are weights, or more.
    long_rows = []
    for c in args.long_concurrency:
        new = args.tokens // 2
        engine_run(core, prompts(c, args.long_prompt, vocab, seed=20_000 + c), 4)
        long = engine_run(core, prompts(c, args.long_prompt, vocab, seed=99 + c), new)
        long_ctx = args.long_prompt + new / 2
        long.update(
            concurrency=c,
            graph_ms=graph_replay_ms(core, c),
            floor_ms=1e3 * (wbytes + c * long_ctx * kv_per_token) / bandwidth,
        )
        long_rows.append(long)
        print(f"  {name} long c={c}: {long}", flush=True)
    del core
    torch.cuda.empty_cache()
    # The same steps without CUDA graphs, op by op.
    os.environ["MELLEA_CUDA_GRAPHS"] = "0"
    try:
        eager = EngineCore(
            path,
            dtype="bfloat16",
            device="cuda",
            max_num_seqs=max_c,
            max_num_batched_tokens=4096,
            kv_cache_memory=args.kv_gib << 30,
        )
        engine_run(eager, prompts(2, args.prompt, vocab, seed=0), 4)
        for row in rows:
            if row["concurrency"] in (1, max_c):
                batch = prompts(
                    row["concurrency"], args.prompt, vocab, seed=500 + row["concurrency"]
                )
                row["eager_step_ms"] = engine_run(eager, batch, args.tokens)["decode_step_ms"]
        del eager
        torch.cuda.empty_cache()
    finally:
        del os.environ["MELLEA_CUDA_GRAPHS"]
    hf = hf_rates(path, prompts(max_c, args.prompt, vocab, 1), args.tokens, args.concurrency)
    for row in rows:
        row["hf_per_request_tok_s"] = hf["per_request_tok_s"]
        row["hf_batched_tok_s"] = hf["batched_tok_s"][row["concurrency"]]
        row["x_hf_per_request"] = row["tok_s"] / hf["per_request_tok_s"]
        row["x_hf_batched"] = row["tok_s"] / row["hf_batched_tok_s"]
    return {
        "model": name,
        "weight_bytes": wbytes,
        "build_s": build_s,
        "rows": rows,
        "long": long_rows,
    }


def table(results: list[dict], device: str, bandwidth: float, flops: float, args) -> str:
    lines = [
        f"device: {device}; copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + write), "
        f"bf16 matmul {flops / 1e12:.0f} TFLOP/s; torch {torch.__version__}",
        f"prompt {args.prompt} tokens, {args.tokens} new tokens per request, bf16, random weights",
        "",
        "| model | conc | engine tok/s | HF generate per request tok/s | x | HF batched tok/s | x "
        "| decode step ms | graph ms | eager step ms | floor ms | step / floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        for r in res["rows"]:
            step = r["decode_step_ms"]
            eager = f"{r['eager_step_ms']:.2f}" if "eager_step_ms" in r else ""
            lines.append(
                f"| {res['model']} | {r['concurrency']} | {r['tok_s']:.0f} "
                f"| {r['hf_per_request_tok_s']:.0f} | {r['x_hf_per_request']:.1f} "
                f"| {r['hf_batched_tok_s']:.0f} | {r['x_hf_batched']:.1f} "
                f"| {step:.2f} | {r['graph_ms'] or 0:.2f} | {eager} | {r['floor_ms']:.2f} "
                f"| {step / r['floor_ms']:.1f} |"
            )
    lines += [
        "",
        f"Long prompts ({args.long_prompt} tokens, {args.tokens // 2} new):",
        "",
        "| model | conc | engine tok/s | decode step ms | graph ms | floor ms | step / floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for res in results:
        for r in res["long"]:
            step = r["decode_step_ms"]
            lines.append(
                f"| {res['model']} | {r['concurrency']} | {r['tok_s']:.0f} | {step:.2f} "
                f"| {r['graph_ms'] or 0:.2f} | {r['floor_ms']:.2f} | {step / r['floor_ms']:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--concurrency", default="1,8,32,128")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--kv-gib", type=int, default=8)
    parser.add_argument("--long-prompt", type=int, default=2048)
    parser.add_argument("--long-concurrency", default="1,64")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.long_concurrency = [int(c) for c in args.long_concurrency.split(",")]
    if not torch.cuda.is_available():
        sys.exit("gpu_check needs a CUDA GPU")
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    bandwidth = measure_bandwidth(device)
    flops = measure_matmul(device)
    print(f"{name}: {bandwidth / 1e12:.2f} TB/s copy, {flops / 1e12:.0f} TFLOP/s bf16", flush=True)
    attention = attention_kernel_times()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            results.append(bench_model(model, args, bandwidth, Path(tmp)))
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(results, name, bandwidth, flops, args)
    text += (
        "\n\nDecode attention kernel alone (bf16, median us in a CUDA graph; TB/s: KV bytes "
        "over the split default's time, the smaller caches sit in L2):\n\n"
        "| batch | heads | context | splits | one piece us | default split us | 4 pieces us | TB/s |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    text += "\n".join(
        f"| {r['batch']} | {r['heads']} | {r['ctx']} | {r['splits']} | {r['one_us']:.1f} "
        f"| {r['split_us']:.1f} | {r['four_us']:.1f} | {r['split_tb_s']:.2f} |"
        for r in attention
    )
    (args.out / "gpu_check.md").write_text(text + "\n")
    (args.out / "gpu_check.json").write_text(
        json.dumps(
            {
                "device": name,
                "bandwidth": bandwidth,
                "flops": flops,
                "results": results,
                "attention": attention,
            },
            indent=1,
        )
    )
    print(text)


if __name__ == "__main__":
    main()
