"""Perplexity of the bundled GGUF on a plain-English text, ours beside llama.cpp's.

Scores a long text that is on every Debian machine (``/usr/share/common-licenses/GPL-3``)
the way llama.cpp's ``llama-perplexity`` does: the text's tokens cut into windows of
512, each window run alone, and the negative log-likelihood of each window's second
half (every token after position 256, given the ones before it in the window)
averaged over all windows; the perplexity is its exponential.

Ours goes through the new API: ``m serve docs/examples/hello.py --dtype D`` answers
``POST /v1/completions`` with ``echo: true, logprobs: 0, max_tokens: 0`` for each
window's text (the prompt's own log-probabilities, computed in the engine's prompt
pass). A window's text is its tokens decoded; the server tokenizes it again, and a
window whose token count comes back different is counted (``retokenized``).

llama.cpp's figure comes from ``llama-perplexity -c 512`` on the same GGUF file, when
it is built under ``benchmarks/peers/`` (``--build-llama`` builds it from the source
``bench_peers.py`` uses: about 6 minutes on 2 cores); otherwise only ours is reported.

    python benchmarks/bench_perplexity.py --windows 8             # a quick look
    python benchmarks/bench_perplexity.py --dtypes float32,auto   # the whole text
    python benchmarks/bench_perplexity.py --build-llama           # and llama.cpp's
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_peers import (  # noqa: E402
    LLAMA_ISA_FLAGS,
    LOGS,
    PEERS,
    bundled_gguf,
    llama_source,
    run_logged,
)
from tests.server import EXAMPLES, serve  # noqa: E402

TEXT = Path("/usr/share/common-licenses/GPL-3")
WINDOW = 512
OUT = ROOT / "benchmarks" / "results" / "perplexity.json"
LLAMA_PERPLEXITY = PEERS / "llama-build" / "bin" / "llama-perplexity"
THREADS = 2
CONCURRENT = 4  # windows in flight at once (the engine batches their prompt passes)


def windows_of(text: str, count: int) -> list[str]:
    """The text cut into windows of :data:`WINDOW` tokens (the served model's
    tokenizer), each decoded back to its text; the first ``count`` (all with 0)."""
    from mellea.engine.loader import resolve_model
    from mellea.engine.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(resolve_model(None))
    ids = tokenizer.encode(text)
    windows = [ids[i : i + WINDOW] for i in range(0, len(ids) - WINDOW + 1, WINDOW)]
    return [tokenizer.decode(w) for w in (windows[:count] if count else windows)]


def second_half_nll(token_logprobs: list[float | None]) -> tuple[float, int]:
    """(negative log-likelihood sum, tokens) of a window's second half, as llama.cpp
    scores it: the tokens after position ``n // 2``."""
    n = len(token_logprobs)
    scored = [lp for lp in token_logprobs[n // 2 + 1 :] if lp is not None]
    return -sum(scored), len(scored)


async def score_window(client: httpx.AsyncClient, text: str) -> list[float | None]:
    """The window's prompt log-probabilities through ``/v1/completions``."""
    body = {"prompt": text, "echo": True, "logprobs": 0, "max_tokens": 0, "temperature": 0}
    response = await client.post("/v1/completions", json=body)
    response.raise_for_status()
    return response.json()["choices"][0]["logprobs"]["token_logprobs"]


async def ours(dtype: str, texts: list[str]) -> dict[str, Any]:
    """Our perplexity over the windows' texts, served with ``--dtype dtype``."""
    with serve(EXAMPLES / "hello.py", "--no-playground", "--dtype", dtype, timeout=600) as server:
        started = time.monotonic()
        limit = asyncio.Semaphore(CONCURRENT)
        async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as client:

            async def one(text: str) -> list[float | None]:
                async with limit:
                    return await score_window(client, text)

            scored = await asyncio.gather(*(one(t) for t in texts))
        seconds = time.monotonic() - started
    nll, count, running = 0.0, 0, []
    for logprobs in scored:
        window_nll, window_count = second_half_nll(logprobs)
        nll, count = nll + window_nll, count + window_count
        running.append(round(math.exp(nll / count), 4))
    return {
        "ppl": math.exp(nll / count),
        "running": running,  # after each window, as llama-perplexity prints it
        "tokens_scored": count,
        "retokenized": sum(len(lp) != WINDOW for lp in scored),
        "seconds": round(seconds, 1),
    }


def llama_binary(build: bool) -> Path | None:
    """``llama-perplexity`` (built first with ``build``); None when it is not there."""
    if LLAMA_PERPLEXITY.is_file():
        return LLAMA_PERPLEXITY
    if not build:
        return None
    build_dir = LLAMA_PERPLEXITY.parent.parent
    configure = ["cmake", "-S", str(llama_source()), "-B", str(build_dir)]
    configure += ["-DCMAKE_BUILD_TYPE=Release", *LLAMA_ISA_FLAGS["native"], "-DGGML_CUDA=OFF"]
    configure += ["-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF"]
    configure += ["-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF"]
    configure += ["-DLLAMA_USE_PREBUILT_UI=OFF"]  # would fetch the web UI from the hub
    run_logged(configure, LOGS / "llama-build.log")
    target = ["--target", "llama-perplexity", f"-j{THREADS}"]
    run_logged(
        ["cmake", "--build", str(build_dir), "--config", "Release", *target],
        LOGS / "llama-build.log",
    )
    return LLAMA_PERPLEXITY


def llama(binary: Path, gguf: Path, windows: int) -> dict[str, Any]:
    """``llama-perplexity``'s final estimate on the text, ``windows`` chunks (0: all)."""
    command = [str(binary), "-m", str(gguf), "-f", str(TEXT), "-c", str(WINDOW)]
    command += ["-t", str(THREADS), "-b", str(WINDOW)]
    if windows:
        command += ["--chunks", str(windows)]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    output = done.stdout + done.stderr
    found = re.search(r"Final estimate: PPL = ([0-9.]+)", output)
    if found is None:
        raise RuntimeError(f"no final estimate in llama-perplexity's output:\n{output[-2000:]}")
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", output)]
    seconds = round(time.monotonic() - started, 1)
    return {"ppl": float(found.group(1)), "running": running, "seconds": seconds}


def main() -> None:
    """Parse options, score, print a table and save the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=0, help="windows to score (0: all)")
    parser.add_argument("--dtypes", default="float32,auto", help="our --dtype values")
    parser.add_argument("--build-llama", action="store_true", help="build llama-perplexity")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    texts = windows_of(TEXT.read_text(), args.windows)
    gguf = bundled_gguf()
    print(f"{TEXT}: {len(texts)} windows of {WINDOW} tokens; GGUF {gguf.name}")
    results: dict[str, Any] = {"text": str(TEXT), "windows": len(texts), "gguf": gguf.name}
    for dtype in args.dtypes.split(","):
        results[f"ours --dtype {dtype}"] = asyncio.run(ours(dtype, texts))
    binary = llama_binary(args.build_llama)
    if binary is not None:
        results["llama.cpp"] = llama(binary, gguf, len(texts))
    else:
        print("llama-perplexity is not built (--build-llama builds it): ours only")
    reference = results.get("llama.cpp", {}).get("ppl")
    print(f"{'':28} {'PPL':>9} {'vs llama.cpp':>13} {'seconds':>8}")
    for name, row in results.items():
        if not isinstance(row, dict):
            continue
        versus = f"{100 * (row['ppl'] / reference - 1):+.2f} %" if reference else "-"
        print(f"{name:28} {row['ppl']:9.4f} {versus:>13} {row['seconds']:8.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
