"""Time the tiled int4 and int8 linears (int4_vnni_linear, int8_vnni_linear) and the
exact byte form of a GGUF's Q6_K blocks (bytes_linear, a Q4_K_M file's attn_v and half
its ffn_down) of one kernel family on one thread, in the thread's CPU time (so a busy machine's preemption
does not count), best of several runs (the formats taking turns), at a few row counts
(decode batches).

    python benchmarks/tile_linears.py --family avx2 --rows 1 4 8 32
    python benchmarks/tile_linears.py --family avx2 --dot avx512vl-vnni
    python benchmarks/tile_linears.py --n 2048 --k 8192 --rows 1 8 32  # a 1.7B ffn_down
    python benchmarks/tile_linears.py --q4k --n 8192 --k 2048   # a Q4_K file's two forms

``--q4k`` times one random Q4_K weight in its two forms instead: ``q4k-fp16``, int4
groups whose factors are rounded to fp16 (int4_vnni_linear), and ``q4k-exact``, the
file's own factors formed in fp32 by the kernel (q4k_vnni_linear), alternating.

Prints milliseconds per call and billions of multiply-adds a second.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from gguf import GGMLQuantizationType

from mellea.engine import cpu_kernels, gguf_blocks
from mellea.engine.formats.quantize import quantize_groups, quantize_rows
from mellea.engine.formats.tiles import tile_bytes, tile_groups, tile_q4k, tile_rows


def q6_k_bytes(n: int, k: int) -> tuple[torch.Tensor, ...]:
    """Random Q6_K blocks [n, k] (random 6-bit values and int8 scales, an fp16 d of a
    realistic size) in the byte form's tiles."""
    import numpy as np
    from gguf import GGMLQuantizationType

    from mellea.engine.gguf_blocks import to_byte_blocks

    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (n, k // 256, 210), dtype=np.uint8)
    d = rng.uniform(1e-4, 2e-3, (n, k // 256)).astype(np.float16)
    blocks[..., 208:210] = d.view(np.uint8).reshape(n, k // 256, 2)
    held = to_byte_blocks(blocks.reshape(n, -1), GGMLQuantizationType.Q6_K)
    return tile_bytes(*(torch.from_numpy(a) for a in held))


def best_seconds(
    calls: dict[str, Callable[[], object]], reps: int, tries: int = 15
) -> dict[str, float]:
    """The fastest of ``tries`` runs of ``reps`` calls of each, in thread CPU seconds per
    call; the calls take turns run by run, so that all see the same machine load."""
    best = dict.fromkeys(calls, float("inf"))
    for call in calls.values():
        call()
    for _ in range(tries):
        for name, call in calls.items():
            start = time.thread_time()
            for _ in range(reps):
                call()
            best[name] = min(best[name], (time.thread_time() - start) / reps)
    return best


Q4_K = GGMLQuantizationType.Q4_K


def random_q4_k(n: int, k: int) -> np.ndarray:
    """Random but valid Q4_K bytes [n, k / 256 * 144]: fp16 d and dmin of a trained
    model's size, random 6-bit scales and minimums and nibbles."""
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (n, k // 256, 144), dtype=np.uint8)
    factors = rng.uniform(1e-4, 2e-3, (n, k // 256, 2)).astype(np.float16)
    blocks[..., 0:4] = factors.view(np.uint8).reshape(n, -1, 4)
    return blocks.reshape(n, -1)


def q4k_calls(n: int, k: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """A random Q4_K weight's fp16 form and exact form, each as a call on x."""
    raw = random_q4_k(n, k)
    rounded = tile_groups(*(torch.from_numpy(g) for g in gguf_blocks.to_int4(raw, Q4_K)))
    exact = tile_q4k(*(torch.from_numpy(g) for g in gguf_blocks.to_q4k(raw)))
    return {
        "q4k-fp16": lambda x: cpu_kernels.int4_vnni_linear(x, *rounded, n),
        "q4k-exact": lambda x: cpu_kernels.q4k_vnni_linear(x, *exact, n),
    }


def main() -> None:
    """Parse the arguments, select the family and print one line per format and rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="", help="avx512-vnni, avx2 or generic")
    parser.add_argument("--dot", default="", help="the avx2 family's dot product")
    parser.add_argument("--n", type=int, default=2048, help="output features")
    parser.add_argument("--k", type=int, default=2048, help="input features")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 5, 8, 32])
    parser.add_argument("--q4k", action="store_true", help="a Q4_K weight's two forms")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds (--q4k)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    assert cpu_kernels.available(), "the C++ CPU kernels are unavailable"
    if args.family:
        cpu_kernels.select(args.family)
    if args.dot:
        cpu_kernels.avx2_dot(args.dot)
    torch.manual_seed(0)
    n, k = args.n, args.k
    if args.q4k:
        compare_q4k(n, k, args.rows, args.rounds)
        return
    weight = torch.randn(n, k)
    int4 = tile_groups(*quantize_groups(weight))
    int8 = tile_rows(*quantize_rows(weight))
    q6_k = q6_k_bytes(n, k) if k % 256 == 0 else None
    print(f"family {cpu_kernels.family()}, {n}x{k}, one thread")
    for rows in args.rows:
        x = torch.randn(rows, k)
        calls = {
            "int4": lambda x=x: cpu_kernels.int4_vnni_linear(x, *int4, n),
            "int8": lambda x=x: cpu_kernels.int8_vnni_linear(x, *int8, n),
        }
        if q6_k is not None:
            calls["q6_k bytes"] = lambda x=x: cpu_kernels.bytes_linear(x, *q6_k, n)
        best = best_seconds(calls, reps=max(4, 64 // rows))
        for name, seconds in best.items():
            rate = rows * n * k / seconds / 1e9
            print(
                f"{name:10s} rows {rows:3d}: {seconds * 1e3:8.3f} ms  {rate:6.1f} G multiply-adds/s"
            )
        if q6_k is not None:
            ratio = best["int8"] / best["q6_k bytes"]
            print(f"{'':10s} rows {rows:3d}: the byte form {ratio:.2f}x as fast as int8")


def compare_q4k(n: int, k: int, rows_list: list[int], rounds: int) -> None:
    """Both forms of one Q4_K weight, alternating ``rounds`` times; the best of each."""
    calls = q4k_calls(n, k)
    print(f"family {cpu_kernels.family()}, Q4_K {n}x{k}, one thread")
    for rows in rows_list:
        x = torch.randn(rows, k)
        best = dict.fromkeys(calls, float("inf"))
        for _ in range(rounds):
            for name, call in calls.items():
                one = {name: lambda c=call, x=x: c(x)}
                best[name] = min(best[name], best_seconds(one, reps=max(4, 64 // rows))[name])
        for name, seconds in best.items():
            rate = rows * n * k / seconds / 1e9
            print(f"{name} rows {rows:3d}: {seconds * 1e3:8.3f} ms  {rate:6.1f} G multiply-adds/s")
        print(f"  exact / fp16 at {rows} rows: {best['q4k-exact'] / best['q4k-fp16']:.3f}")


if __name__ == "__main__":
    main()
