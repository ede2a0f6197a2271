"""A requirement check on each answer: through an aLoRA adapter against a model judge.

    python benchmarks/bench_alora_check.py            # 1 and 8 clients, 4 programs each
    python benchmarks/bench_alora_check.py --quick    # 1 and 8 clients, 1 program each
    python benchmarks/bench_alora_check.py --adapter DIR   # a trained requirement-check aLoRA

Each client runs a program on the bundled model: write a customer email (up to
``--answer-tokens``, default 160, greedy),
then check one requirement on the answer with ``session.validate``. In ``alora`` mode
the backend has a ``requirement-check`` aLoRA added, so the check is routed to it: the
adapter applies from its invocation tokens on, and the engine's prefix cache serves the
conversation (the answer included) from the base model's blocks. In ``judge`` mode
(``default_to_constraint_checking_alora = False``) the same model is asked, as a new
prompt that repeats the answer, whether the requirement holds.

Reported per mode and concurrency: p50 latency of the check and of the whole program,
tokens computed (prompt tokens not served from the cache, plus generated tokens, over
every call) and tokens computed per second of wall time. Without ``--adapter`` a random
aLoRA is made with ``peft`` (its verdicts mean nothing; the cost is the same). Needs the
engine's LoRA support (``mellea.engine.lora``). Writes ``benchmarks/results/alora_check.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CORE_REPO = "ibm-granite/granitelib-core-r1.0"
REQUIREMENT = "The answer is written in a polite tone."
GENERATION_PROMPT = "<|im_start|>assistant\n"  # the bundled model's (SmolLM2) template

# The requirement-check adapter's io.yaml as upstream publishes it (reconstructed from
# upstream's canned request and output; tests/adapter_support.py holds the same).
REQUIREMENT_CHECK_IO = {
    "model": None,
    "response_format": json.dumps(
        {
            "type": "object",
            "properties": {"score": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["score"],
            "additionalProperties": False,
        }
    ),
    "transformations": [
        {
            "type": "likelihood",
            "categories_to_values": {"yes": 1.0, "no": 0.0},
            "input_path": ["score"],
        },
        {"type": "nest", "input_path": [], "field_name": "requirement_check"},
    ],
    "instruction": (
        "<requirements>: {requirement}\nPlease verify if the assistant's generation "
        "satisfies the user's requirements or not and reply with a binary label "
        'accordingly. Respond with a json {{"score": "yes"}} if the constraints are '
        'satisfied or respond with {{"score": "no"}} if the constraints are not satisfied.'
    ),
    "parameters": {"max_completion_tokens": 15},
    "sentence_boundaries": None,
}


def make_random_alora(model_dir: Path, out: Path) -> Path:
    """A random aLoRA (rank 8 on q, k, v, o) for the model, invoked by the assistant header."""
    import peft
    import torch
    import yaml
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # only the module layout matters (the bundled model's weights live in a GGUF)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    config = peft.LoraConfig(
        r=8,
        lora_alpha=16,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
        alora_invocation_tokens=tokenizer.encode(GENERATION_PROMPT, add_special_tokens=False),
    )
    peft.get_peft_model(model, config).save_pretrained(out)
    (out / "io.yaml").write_text(yaml.safe_dump(REQUIREMENT_CHECK_IO), encoding="utf-8")
    return out


def computed_tokens(usage: dict[str, Any] | None) -> int:
    """Prompt tokens the engine computed (not served from its cache) plus generated ones."""
    if not usage:
        return 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return usage["prompt_tokens"] - cached + usage["completion_tokens"]


async def one_program(backend: Any, topic: int, answer_tokens: int = 48) -> dict[str, Any]:
    """Answer, then check the requirement on the answer; timings and tokens."""
    from mellea.stdlib.context import ChatContext
    from mellea.stdlib.requirements import req
    from mellea.stdlib.session import MelleaSession

    m = MelleaSession(backend, ChatContext())
    began = time.perf_counter()
    answer = await m.ainstruct(
        f"Write a detailed, friendly email of about 120 words to a customer explaining "
        f"why order number {1000 + topic} is late, what caused it and what happens next.",
        strategy=None,
        await_result=True,
        model_options={"max_tokens": answer_tokens, "temperature": 0.0},
    )
    answered = time.perf_counter()
    (verdict,) = await m.avalidate([req(REQUIREMENT)])
    done = time.perf_counter()
    return {
        "check_s": done - answered,
        "program_s": done - began,
        "answer_tokens": computed_tokens(answer.usage),
        "check_tokens": computed_tokens(verdict.thunk.usage if verdict.thunk else None),
        "check_cached": ((verdict.thunk.usage or {}).get("prompt_tokens_details") or {}).get(
            "cached_tokens", 0
        )
        if verdict.thunk
        else 0,
        "passed": bool(verdict),
    }


async def run_mode(
    backend: Any, clients: int, programs: int, offset: int, answer_tokens: int
) -> dict[str, Any]:
    """``clients`` concurrent clients, ``programs`` programs each, distinct prompts."""

    async def client(c: int) -> list[dict[str, Any]]:
        topics = [offset + c * programs + p for p in range(programs)]
        return [await one_program(backend, t, answer_tokens) for t in topics]

    began = time.perf_counter()
    results = [r for rs in await asyncio.gather(*(client(c) for c in range(clients))) for r in rs]
    wall = time.perf_counter() - began
    tokens = sum(r["answer_tokens"] + r["check_tokens"] for r in results)
    return {
        "clients": clients,
        "programs": len(results),
        "check_p50_s": statistics.median(r["check_s"] for r in results),
        "program_p50_s": statistics.median(r["program_s"] for r in results),
        "check_tokens": sum(r["check_tokens"] for r in results),
        "check_cached_tokens": sum(r["check_cached"] for r in results),
        "tokens_computed": tokens,
        "tokens_per_s": tokens / wall,
        "wall_s": wall,
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    from mellea.backends.adapters import IntrinsicAdapter
    from mellea.backends.adapters import backend as adapter_backend
    from mellea.backends.adapters.locate import adapter_subpath
    from mellea.backends.local import LocalBackend
    from mellea.engine.engine import Engine
    from mellea.engine.loader import resolve_model

    engine = Engine(dtype=args.dtype) if args.dtype else Engine()
    backend = LocalBackend(engine=engine)
    modes = ("judge",) if args.judge_only else ("alora", "judge")
    path: Path | None = None
    if "alora" in modes:
        if not hasattr(backend, "load_adapter"):
            sys.exit("this engine has no LoRA support (mellea.engine.lora); try --judge-only")
        if args.adapter:
            path = Path(args.adapter)
        else:
            base = adapter_backend.base_model_name(backend)
            subpath = adapter_subpath("requirement-check", base, CORE_REPO, alora=True)
            path = Path(tempfile.mkdtemp(prefix="alora-bench-")) / CORE_REPO / subpath
            make_random_alora(resolve_model(None), path)
        adapter = IntrinsicAdapter("requirement-check", adapter_path=path)
        adapter_backend.add_adapter(backend, adapter)

    programs = 1 if args.quick else args.programs
    rows = []
    offset = 0
    await one_program(
        backend, 10_000, args.answer_tokens
    )  # warm up (first-call compiles, thread pools)
    for clients in (1, 8):
        for mode in modes:
            backend.default_to_constraint_checking_alora = mode == "alora"
            row = await run_mode(backend, clients, programs, offset, args.answer_tokens)
            offset += clients * programs
            rows.append({"mode": mode, **row})
            print(
                f"{mode:6} @{clients}: check p50 {row['check_p50_s'] * 1000:7.1f} ms, "
                f"program p50 {row['program_p50_s'] * 1000:7.1f} ms, check tokens "
                f"{row['check_tokens']:6d} (cached {row['check_cached_tokens']}), "
                f"all tokens {row['tokens_computed']:6d}, {row['tokens_per_s']:7.1f} tok/s",
                flush=True,
            )
    engine.shutdown()
    return {
        "model": engine.model_id,
        "adapter": str(path) if path else None,
        "answer_tokens": args.answer_tokens,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one program per client")
    parser.add_argument("--programs", type=int, default=4, help="programs per client")
    parser.add_argument("--answer-tokens", type=int, default=160, help="answer token budget")
    parser.add_argument("--adapter", help="a requirement-check aLoRA directory (PEFT + io.yaml)")
    parser.add_argument("--dtype", default=None, help="engine dtype (default: the engine's)")
    parser.add_argument(
        "--judge-only", action="store_true", help="only the model-judge mode (no LoRA needed)"
    )
    args = parser.parse_args()
    result = asyncio.run(bench(args))
    out = ROOT / "benchmarks" / "results" / "alora_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
