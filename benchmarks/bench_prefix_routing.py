"""Is routing a conversation to the replica that holds its prefix worth it?

Replicas share stored responses but not their prefix caches: a conversation's next turn
landing on another replica prefills its whole history again. This measures what that
costs on the local engine (the default model, CPU): the time to first token of a
follow-up whose history the server has cached ("same replica") against one it has not
("another replica"). One server plays both: a fresh ``cache_salt`` partitions the prefix
cache exactly as another replica's empty cache would, and the two alternate, so the
machine's load falls on both alike.

    python benchmarks/bench_prefix_routing.py              # histories of ~250, 1000, 2000 tokens
    python benchmarks/bench_prefix_routing.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_engine import TOPICS  # noqa: E402
from tests.server import EXAMPLES, serve  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def history(words: int, seed: int) -> str:
    """A conversation-sized text of about ``words`` words, different for each ``seed``."""
    sentences, i = [], 0
    while sum(len(s.split()) for s in sentences) < words:
        topic = TOPICS[(seed + i) % len(TOPICS)]
        sentences.append(f"Turn {i} of talk {seed}: we discussed {topic} at some length.")
        i += 1
    return " ".join(sentences)


def first_token(client: httpx.Client, text: str, salt: str) -> tuple[float, int]:
    """Stream one reply: (seconds to the first content, prompt tokens served from cache)."""
    body = {
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 4,
        "temperature": 0,
        "cache_salt": salt,
    }
    started, first, cached = time.perf_counter(), None, 0
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            frame = json.loads(line[5:])
            if first is None and frame["choices"] and frame["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - started
            details = (frame.get("usage") or {}).get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens") or cached
    return first if first is not None else time.perf_counter() - started, cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, nargs="+", default=[180, 750, 1500])
    parser.add_argument("--repeats", type=int, default=4)
    options = parser.parse_args()
    rows = []
    with (
        serve(EXAMPLES / "hello.py") as server,
        httpx.Client(base_url=server.base_url, timeout=300) as client,
    ):
        first_token(client, "warm up", "warm-up")
        for words in options.words:
            same, other, cached = [], [], []
            for r in range(options.repeats):
                past = history(words, seed=words * 100 + r)
                salt = f"conversation-{words}-{r}"
                first_token(client, past, salt)  # the previous turn, on this replica
                follow_up = past + " Now, what should we talk about next?"
                pair = [("same", salt), ("other", f"elsewhere-{words}-{r}")]
                for where, use in pair if r % 2 == 0 else pair[::-1]:
                    seconds, hit = first_token(client, follow_up, use)
                    (same if where == "same" else other).append(seconds)
                    if where == "same":
                        cached.append(hit)
            row = {
                "history_words": words,
                "same_replica_ttft_ms": 1000 * statistics.median(same),
                "other_replica_ttft_ms": 1000 * statistics.median(other),
                "cached_tokens": statistics.median(cached),
            }
            row["ratio"] = row["other_replica_ttft_ms"] / row["same_replica_ttft_ms"]
            rows.append(row)
            print(
                f"~{words} words ({row['cached_tokens']:.0f} tokens cached): same replica "
                f"{row['same_replica_ttft_ms']:.0f} ms, another {row['other_replica_ttft_ms']:.0f} "
                f"ms to the first token ({row['ratio']:.1f}x)",
                flush=True,
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "prefix_routing.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
