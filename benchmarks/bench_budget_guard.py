"""What budget-aware closing costs: one constrained request, closing on and off.

    python benchmarks/bench_budget_guard.py [--max-tokens 256] [--runs 2]

On the default model, a JSON-schema request (nested objects, arrays, required
members) at temperature 1 runs to its ``max_tokens`` twice, interleaved: with the
engine's closing (the default) and with its guard taken off the compiled constraint.
Prints the wall time per output token of each, their ratio, how many tokens the
guard checked and what one check cost, and whether each answer parses. The ratio is
only as good as the machine is quiet; the cost of one check is the steadier figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from mellea.engine import budget_guard as closing
from mellea.engine.constraints import json_schema_grammar
from mellea.engine.types import SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "score": {"type": "number"},
                },
                "required": ["name", "tags", "score"],
            },
        },
        "done": {"type": "boolean"},
    },
    "required": ["title", "items", "done"],
}


class CountingGuard(closing.BudgetGuard):
    """A guard that also counts and times its checks."""

    checks = 0
    seconds = 0.0

    def choose(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return super().choose(*args, **kwargs)
        finally:
            CountingGuard.checks += 1
            CountingGuard.seconds += time.perf_counter() - started


async def one_run(engine, prompt, grammar, max_tokens, seed, guarded):
    constraint = engine.compile_grammar(grammar)
    if guarded:
        constraint.guard.__class__ = CountingGuard
    else:
        constraint.guard = None
    params = SamplingParams(max_tokens=max_tokens, grammar=grammar, temperature=1.0, seed=seed)
    started = time.perf_counter()
    text, tokens = "", 0
    async for out in engine.add_request(prompt, params, constraint=constraint):
        text += out.text
        tokens += len(out.token_ids)
    elapsed = time.perf_counter() - started
    try:
        json.loads(text)
        valid = True
    except ValueError:
        valid = False
    return elapsed / max(tokens, 1), tokens, valid


async def main() -> None:
    """Run the comparison and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    from mellea.engine.engine import Engine
    from mellea.engine.loader import resolve_model

    engine = Engine(str(resolve_model(None)))
    try:
        prompt = engine.apply_chat_template(
            [{"role": "user", "content": "Describe three fruits as a JSON report."}]
        )
        grammar = json_schema_grammar(SCHEMA)
        await one_run(engine, prompt, grammar, 16, 0, False)  # warm-up, not counted
        per_token = {True: [], False: []}
        for run in range(args.runs):
            for guarded in (False, True):
                seconds, tokens, valid = await one_run(
                    engine, prompt, grammar, args.max_tokens, run, guarded
                )
                per_token[guarded].append(seconds)
                label = "closing" if guarded else "no guard"
                print(
                    f"run {run} {label:8}: {seconds * 1e3:6.1f} ms/token, {tokens} tokens, "
                    f"valid JSON: {valid}"
                )
        off, on = min(per_token[False]), min(per_token[True])
        print(
            f"best ms/token: no guard {off * 1e3:.1f}, closing {on * 1e3:.1f}, ratio {on / off:.3f}"
        )
        checks = max(CountingGuard.checks, 1)
        print(
            f"guard checks: {CountingGuard.checks} over {args.runs} runs, "
            f"{CountingGuard.seconds / checks * 1e3:.2f} ms each"
        )
    finally:
        engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
