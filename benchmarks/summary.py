"""Today's answers: the tables at the top of benchmarks/README.md and their plot.

``benchmarks/summary.json`` holds the latest figure for each question (each CPU path
against llama.cpp, start and memory, the GPU against transformers), copied from the
dated runs in ``benchmarks/LOG.md`` when a session measures anew. This script renders
it into README.md between the summary markers and draws ``benchmarks/summary.png``::

    python benchmarks/summary.py          # rewrite the README block and the plot
    python benchmarks/summary.py --check  # exit 1 if the README block is stale

``tests/test_docs.py`` runs the check, so the README cannot drift from the data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "summary.json"
README = HERE / "README.md"
PLOT = HERE / "summary.png"
START, END = "<!-- summary:start -->", "<!-- summary:end -->"


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours:g} / {theirs:g} (**{ours / theirs:.2f}x**)"


def throughput_table(section: dict) -> list[str]:
    """Markdown rows: ours against llama-server per file and CPU path."""
    heads = " | ".join(f"{n} stream{'s' if n > 1 else ''}" for n in section["streams"])
    lines = [
        f"| file | path | {heads} | measured |",
        "| --- | --- |" + " ---: |" * len(section["streams"]) + " --- |",
    ]
    for row in section["rows"]:
        cells = " | ".join(_ratio(o, t) for o, t in zip(row["ours"], row["llama"], strict=True))
        lines.append(
            f"| {row['file']} | {row['path']} | {cells} | {row['date']}, `{row['command']}` |"
        )
    return lines


def start_table(section: dict) -> list[str]:
    """Markdown rows: time to ready and peak memory, ours against llama-server."""
    lines = [
        "| file | path | ready, ours | ready, llama-server | peak RSS, ours | peak RSS, llama-server | bound | measured |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in section["rows"]:
        cells = [r["ours_ready_s"] + " s", r["llama_ready_s"] + " s", r["ours_peak_gb"] + " GB"]
        cells += [f"{r[k]} GB" if r[k] else "" for k in ("llama_peak_gb", "bound_gb")]
        lines.append(f"| {r['file']} | {r['path']} | {' | '.join(cells)} | {r['date']} |")
    return lines


def gpu_table(section: dict) -> list[str]:
    """Markdown rows: the engine against transformers' generate on one GPU."""
    lines = [
        "| model | streams | engine tok/s | generate, one request at a time | x | generate, batched | x |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in section["rows"]:
        e, one, batched = r["engine"], r["hf_per_request"], r["hf_batched"]
        lines.append(
            f"| {r['model']} | {r['streams']} | {e} | {one} | {e / one:.1f} | {batched} | {e / batched:.1f} |"
        )
    return lines


def perplexity_table(section: dict) -> list[str]:
    """Markdown rows: our perplexity per format against llama-perplexity's."""
    theirs = section["llama"]
    lines = ["| `--dtype` | ours | llama.cpp | ours / llama.cpp |", "| --- | ---: | ---: | ---: |"]
    for r in section["rows"]:
        lines.append(f"| {r['dtype']} | {r['ppl']:.4f} | {theirs:.4f} | {r['ppl'] / theirs:.4f} |")
    return lines


def render(data: dict) -> str:
    """The README block, from the summary data."""
    tp, st, gpu, ppl = data["throughput"], data["start"], data["gpu"], data["perplexity"]
    paths = "\n".join(f"- **{name}**: {what}." for name, what in data["paths"].items())
    parts = [
        START,
        f"Machine: {data['machine']}. The two CPU paths:\n\n{paths}\n",
        f"### {tp['title']}\n\n{tp['unit']}; the bold figure is the ratio.\n",
        *throughput_table(tp),
        "",
        "![Ours against llama-server](summary.png)\n",
        f"### {st['title']}\n\nReady: `m serve` started to `/ready`. Bound: 1.3x the file plus the KV budget.\n",
        *start_table(st),
        "",
        f"### {ppl['title']}\n\n{ppl['file']}; {ppl['text']}; {ppl['date']}, `{ppl['command']}`.\n",
        *perplexity_table(ppl),
        "",
        f"### {gpu['title']}\n\n{gpu['device']}, {gpu['date']}, `{gpu['command']}`.\n",
        *gpu_table(gpu),
        END,
    ]
    return "\n".join(parts)


def plot(data: dict, path: Path) -> None:
    """Bars of ours / llama-server per file, path and stream count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tp = data["throughput"]
    rows = tp["rows"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(tp["streams"])
    for i, n in enumerate(tp["streams"]):
        ratios = [r["ours"][i] / r["llama"][i] for r in rows]
        xs = [k + (i - (len(tp["streams"]) - 1) / 2) * width for k in range(len(rows))]
        ax.bar(xs, ratios, width, label=f"{n} stream{'s' if n > 1 else ''}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    labels = [f"{r['short']}\n{r['path']}" for r in rows]
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("ours / llama-server, tok/s")
    ax.set_title("Same GGUF file, same machine, side by side")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def splice(readme: str, block: str) -> str:
    """README text with the summary block replaced."""
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + block + tail


def main() -> int:
    """Rewrite (or check) the README block and draw the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md is stale")
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    readme = README.read_text()
    wanted = splice(readme, render(data))
    if args.check:
        if wanted != readme:
            print(
                "benchmarks/README.md is stale: run python benchmarks/summary.py", file=sys.stderr
            )
            return 1
        return 0
    README.write_text(wanted)
    plot(data, PLOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
