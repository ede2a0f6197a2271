"""Our engine against llama.cpp on a model of SmolLM2-1.7B's exact shape, from GGUF.

Builds (once, under ``benchmarks/peers/large/``, git-ignored) a random-weight Llama of
SmolLM2-1.7B's dimensions (hidden 2048, 24 layers, 32 heads and 32 KV heads,
intermediate 8192, vocabulary 49152, tied embeddings) with the bundled model's
tokenizer, so that llama.cpp's tools accept it (``--shape llama3-8b``: Llama 3.1 8B's,
hidden 4096, 32 layers, 32 heads and 8 KV heads, intermediate 14336, vocabulary 128256
of which the bundled tokenizer names the first 49152, untied); converts it with llama.cpp's
``convert_hf_to_gguf.py`` to F16 and ``llama-quantize`` to Q4_1 and Q4_K_M (llama.cpp
built from the source vendored in the ``llama-cpp-python`` sdist, as
``benchmarks/bench_peers.py`` does). Then, per file, in one run:

* ours: a fresh process builds the engine on the file (``dtype auto``): time to ready,
  peak RSS while loading, RSS once serving, batch-1 greedy decode tok/s;
* llama.cpp: ``llama-server`` time to healthy and its peak RSS (``VmHWM``), and
  ``llama-bench`` tg tok/s at batch 1 (2 threads; native build only);
* with ``--streams 1,8,32``: ``benchmarks/bench_peers.py --gguf`` on the same file,
  ``llama-server`` and our ``m serve --model`` streaming at those concurrencies.

``--isa avx2`` runs both on their AVX2 paths: ours with ``MELLEA_CPU_ISA=avx2
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``, llama.cpp's x86-64-v3 build
(``benchmarks/peers/llama-build-avx2``, built by ``bench_peers.py --llama-isa avx2``).

The kernel family that ran (``cpu_kernels``' report) is printed beside our numbers.
At 1.7B a run takes tens of minutes on 2 busy cores; ``--layers 2`` checks it quickly.

    python benchmarks/bench_large.py                      # 1.7B shape, Q4_1 and Q4_K_M
    python benchmarks/bench_large.py --layers 2 --formats Q4_1
    python benchmarks/bench_large.py --isa avx2 --streams 1,8,32 --tokens 32
    python benchmarks/bench_large.py --shape llama3-8b --formats Q4_K_M
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_peers import LOGS, PEERS, llama_source, run_logged  # noqa: E402

WORK = PEERS / "large"
BUILD = PEERS / "llama-build"
TOOLS = ("llama-quantize", "llama-bench", "llama-server")
QUANT_NAMES = {"Q4_1": "Q4_1", "Q4_K_M": "Q4_K_M", "Q8_0": "Q8_0"}


def llama_tools() -> dict[str, Path]:
    """``llama-quantize``, ``llama-bench`` and ``llama-server``, built (-j2) if missing."""
    paths = {tool: BUILD / "bin" / tool for tool in TOOLS}
    missing = [tool for tool, path in paths.items() if not path.is_file()]
    if missing:
        source = llama_source()
        configure = ["cmake", "-S", str(source), "-B", str(BUILD), "-DCMAKE_BUILD_TYPE=Release"]
        configure += ["-DGGML_NATIVE=ON", "-DGGML_CUDA=OFF", "-DLLAMA_CURL=OFF"]
        configure += ["-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF"]
        configure += ["-DLLAMA_USE_PREBUILT_UI=OFF", "-DBUILD_SHARED_LIBS=OFF"]
        run_logged(configure, LOGS / "llama-build.log")
        build = ["cmake", "--build", str(BUILD), "--config", "Release", "-j2", "--target"]
        run_logged(build + missing, LOGS / "llama-build.log")
    return paths


# The shapes a model can be built in: its files' name, and its LlamaConfig.
SHAPES: dict[str, tuple[str, dict]] = {
    "smollm2-1.7b": (
        "smollm2-1.7b-shape",
        dict(
            vocab_size=49152,
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=24,
            num_attention_heads=32,
            num_key_value_heads=32,
            rope_theta=130000.0,
            tie_word_embeddings=True,
        ),
    ),
    "llama3-8b": (
        "llama3-8b-shape",
        dict(
            vocab_size=128256,  # convert_hf_to_gguf names the tokenizer's missing ids [PADn]
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            rope_theta=500000.0,
            tie_word_embeddings=False,
        ),
    ),
}


def hf_model(folder: Path, layers: int, shape: str = "smollm2-1.7b") -> Path:
    """The random-weight model of ``shape`` (``layers`` of its own), bf16."""
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mellea.engine.loader import resolve_model

    config = LlamaConfig(
        **{**SHAPES[shape][1], "num_hidden_layers": layers},
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # half the memory of building in fp32
    model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    del model
    tokenizer_dir = resolve_model(None)  # the bundled GGUF's tokenizer files
    for file in tokenizer_dir.iterdir():
        if file.name.startswith("tokenizer") or file.suffix == ".jinja":
            shutil.copy(file, tmp / file.name)
    tmp.rename(folder)
    return folder


def gguf_files(layers: int, formats: list[str], shape: str = "smollm2-1.7b") -> dict[str, Path]:
    """The model as GGUF files, one per format (F16 through convert_hf_to_gguf.py,
    then llama-quantize)."""
    name = f"{SHAPES[shape][0]}-{layers}l"
    folder = hf_model(WORK / name, layers, shape)
    f16 = WORK / f"{name}-F16.gguf"
    if not f16.is_file():
        source = llama_source()
        env = {**os.environ, "PYTHONPATH": str(source / "gguf-py")}
        command = [sys.executable, str(source / "convert_hf_to_gguf.py"), str(folder)]
        command += ["--outtype", "f16", "--outfile", str(f16)]
        log = LOGS / "convert.log"
        with open(log, "ab") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        if done.returncode:
            raise RuntimeError(f"convert_hf_to_gguf failed:\n{log.read_text()[-3000:]}")
    files = {}
    for fmt in formats:
        target = WORK / f"{name}-{fmt}.gguf"
        if not target.is_file():
            quantize = [str(llama_tools()["llama-quantize"]), str(f16), str(target)]
            run_logged(quantize + [QUANT_NAMES[fmt], "2"], LOGS / "quantize.log")
        files[fmt] = target
    return files


OURS = """
import asyncio, json, resource, sys, time
started = time.monotonic()
from mellea.engine import cpu_kernels
from mellea.engine.engine import Engine
from mellea.engine.loader import resolve_model
from mellea.engine.formats.resolve import resolve_format
from mellea.engine.types import SamplingParams
import torch

def kernel_family():
    return cpu_kernels.family()

engine = Engine(sys.argv[1], dtype="auto")
ready = time.monotonic() - started
loading_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
tokens = int(sys.argv[2])

async def decode():
    prompt = engine.apply_chat_template([{"role": "user", "content": "Tell me a story."}])
    params = SamplingParams(max_tokens=tokens, ignore_eos=True)
    first = None
    count = 0
    async for out in engine.add_request(prompt, params):
        count += len(out.token_ids)
        if first is None:
            first = time.monotonic()
    return (count - 1) / (time.monotonic() - first)

rate = asyncio.run(decode())
rss = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
stats = engine.stats()
print(json.dumps({
    "ready_s": round(ready, 2), "peak_rss_loading_gb": round(loading_peak / 1e9, 3),
    "rss_serving_gb": round(rss / 1e9, 3), "decode_tok_s": round(rate, 2),
    "kv_cache_gb": round(stats.get("kv_cache_bytes", 0) / 1e9, 3),
    "format": resolve_format("auto", torch.device("cpu"), resolve_model(sys.argv[1])),
    "kernels": kernel_family(),
}))
engine.shutdown()
"""


# What puts our engine and torch on their AVX2 paths on an AVX-512 machine.
AVX2_ENV = {"MELLEA_CPU_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def isa_env(isa: str) -> dict[str, str]:
    """This process's environment for our engine on ``isa`` (native or avx2)."""
    return {**os.environ, **(AVX2_ENV if isa == "avx2" else {}), "PYTHONPATH": str(ROOT)}


def ours(gguf: Path, tokens: int, isa: str = "native") -> dict:
    """Our engine on ``gguf`` in a fresh process (its own peak RSS)."""
    env = isa_env(isa)
    command = [sys.executable, "-c", OURS, str(gguf), str(tokens)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"our engine failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def llama_cpp(gguf: Path, tokens: int, isa: str = "native", bench: bool = True) -> dict:
    """llama-server's start and memory, llama-bench's batch-1 decode rate (native)."""
    from benchmarks.bench_peers import free_port, llama_server_binary, wait_healthy

    tools = llama_tools()
    server_binary = tools["llama-server"] if isa == "native" else llama_server_binary(True, isa)
    port = free_port()
    command = [str(server_binary), "-m", str(gguf), "--port", str(port), "-t", "2"]
    command += ["--parallel", "32", "-c", "16384", "--no-webui"]
    log = LOGS / "large-llama-server.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(server, f"http://127.0.0.1:{port}", log, timeout=600)
        ready = time.monotonic() - started
        status = Path(f"/proc/{server.pid}/status").read_text()
        peak = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")
        )
    finally:
        server.terminate()
        server.wait()
    rate = None
    if isa == "native" and bench:
        command = [str(tools["llama-bench"]), "-m", str(gguf), "-p", "0", "-n", str(tokens)]
        command += ["-t", "2", "-o", "json", "-r", "2"]
        done = subprocess.run(command, capture_output=True, text=True)
        rate = json.loads(done.stdout)[0]["avg_ts"] if done.returncode == 0 else None
    return {
        "ready_s": round(ready, 2),
        "peak_rss_gb": round(peak * 1024 / 1e9, 3),
        "decode_tok_s": rate,
    }


def streams(gguf: Path, levels: str, tokens: int, isa: str) -> dict:
    """``bench_peers.py --gguf``: llama-server and ours streaming at ``levels``; its
    ratios (ours / llama-server tok/s per level)."""
    out = ROOT / "benchmarks" / "results" / f"large-streams-{gguf.stem}-{isa}.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_peers.py"), "--gguf", str(gguf)]
    command += ["--only", "llama,ours", "--dtypes", "auto", "--levels", levels]
    command += ["--max-tokens", str(tokens), "--per-client", "1", "--llama-isa", isa]
    command += ["--out", str(out)]
    subprocess.run(command, check=True, env=isa_env(isa), cwd=ROOT)
    doc = json.loads(out.read_text())
    rates = {(r["server"], r["concurrency"]): r["tokens_per_s"] for r in doc["rows"]}
    return {
        f"{n}": {
            "llama_tok_s": rates.get(("llama", n)),
            "ours_tok_s": rates.get(("ours-auto", n)),
            "errors": sum(r["errors"] for r in doc["rows"] if r["concurrency"] == n),
        }
        for n in sorted({n for _, n in rates})
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-1.7b")
    parser.add_argument("--layers", type=int, help="of the shape's (fewer: a quick check)")
    parser.add_argument("--formats", default="Q4_1,Q4_K_M")
    parser.add_argument("--tokens", type=int, default=32, help="decoded per measurement")
    parser.add_argument("--skip-llama", action="store_true", help="measure ours only")
    parser.add_argument("--isa", choices=("native", "avx2"), default="native")
    parser.add_argument("--streams", help="concurrency levels for bench_peers, e.g. 1,8,32")
    parser.add_argument("--skip-start", action="store_true", help="streams only")
    parser.add_argument("--no-llama-bench", action="store_true", help="llama-server only")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    formats = args.formats.split(",")
    layers = args.layers or SHAPES[args.shape][1]["num_hidden_layers"]
    rows = []
    for fmt, path in gguf_files(layers, formats, args.shape).items():
        row = {"format": fmt, "file_gb": round(path.stat().st_size / 1e9, 3), "isa": args.isa}
        if not args.skip_start:
            row["ours"] = ours(path, args.tokens, args.isa)
            if not args.skip_llama:
                row["llama.cpp"] = llama_cpp(
                    path, args.tokens, args.isa, bench=not args.no_llama_bench
                )
        if args.streams:
            row["streams"] = streams(path, args.streams, args.tokens, args.isa)
        print(json.dumps(row), flush=True)
        rows.append(row)
    name = f"{SHAPES[args.shape][0]}-{layers}l-{args.isa}"
    out = ROOT / "benchmarks" / "results" / f"large-{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"shape": args.shape, "layers": layers, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
