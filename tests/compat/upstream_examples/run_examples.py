"""Run upstream mellea's examples that need no outside service, unchanged, and tabulate.

Usage (from the repository root, with a fetched copy of upstream mellea)::

    python tests/compat/upstream_examples/run_examples.py GIT_DIR [--timeout 600]
        [--only SUBSTRING ...] [--results PATH] [--table PATH] [--logs DIR]
    python tests/compat/upstream_examples/run_examples.py GIT_DIR --merge OTHER.json ...

``GIT_DIR`` is a git directory of github.com/generative-computing/mellea. The script
exports ``docs/examples`` at the commit ``examples.json`` was collected from into a
temporary directory (the examples are upstream's and are not copied into this
repository), then runs every example that ``examples.json`` marks as needing no
outside service the way upstream's own ``docs/examples/conftest.py`` does: ``python
FILE`` in a subprocess, from the exported tree's root, with this repository first on
``PYTHONPATH`` so ``import mellea`` is ours (and the exported root after it, as
upstream adds its repository root). Each run is bounded by ``--timeout``
seconds of wall time.

Results are merged into ``--results`` (JSON, one record per example: whether its
imports resolve, whether it ran to completion, its time, and the reason when it did
not), so a subset can be re-run with ``--only``; the Markdown table at ``--table``
(docs/upstream_examples.md) is rewritten from all recorded results. Runs made side by
side with their own ``--results`` files are folded in with ``--merge``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CORPUS = HERE / "examples.json"
DEFAULT_RESULTS = HERE / "run_results.json"
DEFAULT_TABLE = REPO / "docs" / "upstream_examples.md"


def runnable_examples(corpus: dict) -> list[dict]:
    """The corpus's programs that need no outside service, in path order."""
    return [e for e in corpus["examples"] if e["is_program"] and not e["needs_service"]]


def export_examples(git_dir: str, rev: str, dest: Path) -> None:
    """Write upstream's ``docs/examples`` tree at ``rev`` under ``dest``."""
    archive = subprocess.run(
        ["git", "--git-dir", git_dir, "archive", rev, "docs/examples"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def unresolved_names(example: dict) -> list[str]:
    """The ``module[.name]`` imports of ``example`` that do not resolve in our package."""
    missing = []
    for item in example["imports"]:
        module, name = item["module"], item["name"]
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            missing.append(module)
            continue
        if name is not None and not hasattr(loaded, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    return missing


_ERROR_LINE = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit|Interrupt)\b.*)$", re.M)


# Causes recognised in a failed run's output, each with what it means here.
KNOWN_CAUSES = [
    (
        re.compile(r"EOF while parsing"),
        "the model's JSON answer was cut short by the new-token limit",
    ),
    (
        re.compile(r"Expected tool_calls but got None"),
        "the model made no tool call in its tries, and the example requires one",
    ),
    (
        re.compile(r"assert .* in code\b"),
        "the example's check of the code the model wrote failed",
    ),
    (
        re.compile(r"Graph was not created"),
        "the model's code did not draw the graph the example checks for",
    ),
]


def failure_reason(stderr: str, stdout: str = "") -> str:
    """The last exception line of a traceback in ``stderr`` (else the last line the
    program printed), with its cause when it is a known one."""
    found = _ERROR_LINE.findall(stderr)
    if found:
        reason = found[-1].strip()[:200]
    else:
        lines = [
            line.strip() for line in (stderr.strip() or stdout).strip().splitlines() if line.strip()
        ]
        reason = (
            f"exited non-zero after printing: {lines[-1][:160]}" if lines else "exited non-zero"
        )
    causes = [meaning for pattern, meaning in KNOWN_CAUSES if pattern.search(stderr + stdout)]
    return f"{reason} ({causes[0]})" if causes else reason


def run_one(root: Path, example: dict, timeout: float, log_dir: Path | None) -> dict:
    """Run one example as upstream's conftest does and describe the outcome."""
    env = dict(os.environ)
    # ours first (so ``mellea`` is ours), then the exported root as upstream's conftest
    # adds its repository root (examples import ``docs.examples.helper``)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH"), str(root)]))
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(root / example["path"])],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        rc, out, err, timed_out = done.returncode, done.stdout, done.stderr, False
    except subprocess.TimeoutExpired as expired:
        rc, timed_out = None, True
        out = _text(expired.stdout)
        err = _text(expired.stderr)
    seconds = round(time.monotonic() - started, 1)
    if log_dir is not None:
        log = log_dir / (example["path"].replace("/", "__") + ".log")
        log.write_text(f"$ python {example['path']}\n--- stdout\n{out}\n--- stderr\n{err}\n")
    if timed_out:
        reason = f"did not finish within {timeout:.0f} s"
    elif rc != 0:
        reason = failure_reason(err, out)
    else:
        reason = ""
    return {
        "ran": rc == 0,
        "seconds": seconds,
        "timeout": timeout,
        "max_new_tokens": os.environ.get("MELLEA_MAX_NEW_TOKENS") or "default",
        "reason": reason,
        "import_error": bool(re.search(r"\b(ImportError|ModuleNotFoundError)\b", err or "")),
    }


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def render_table(corpus: dict, results: dict) -> str:
    """The Markdown page of recorded results, one row per runnable example."""
    rows = []
    ran = imports = 0
    examples = runnable_examples(corpus)
    for example in examples:
        path = example["path"].removeprefix("docs/examples/")
        record = results.get(example["path"])
        if record is None:
            rows.append(f"| `{path}` | ? | not run yet | | | |")
            continue
        imports += record["imports"]
        ran += record["ran"]
        rows.append(
            f"| `{path}` | {'yes' if record['imports'] else 'no'} | "
            f"{'yes' if record['ran'] else 'no'} | {record['seconds']:.0f} s | "
            f"{record['timeout']:.0f} s, {record.get('max_new_tokens', 'default')} | "
            f"{record['reason'].replace('|', '/')} |"
        )
    header = [
        "# Upstream mellea's examples, run unchanged",
        "",
        f"Upstream's `docs/examples` at commit `{corpus['commit'][:12]}` holds "
        f"{corpus['counts']['programs']} programs; {len(examples)} of them need no outside "
        "service (the rule is in `tests/compat/upstream_examples/collect.py`). Each was run "
        "unchanged with `python FILE`, as upstream's own `docs/examples/conftest.py` runs "
        "them, against this package and its bundled model (SmolLM2-135M-Instruct on the "
        "local engine), with the wall-time bound given per row.",
        "",
        f"**{imports} of {len(examples)} import; {ran} of {len(examples)} ran to completion.**"
        + _failure_summary(results, examples),
        "",
        "Regenerate (needs a fetched copy of upstream; takes long on a CPU):",
        "",
        "```",
        "python tests/compat/upstream_examples/run_examples.py GIT_DIR --timeout 600",
        "```",
        "",
        '"ran" means the program exited 0. The bundled model is a 135M-parameter model: '
        "answers are often poor and requirements often fail after the retry budget, which "
        "upstream's examples report and carry on from; only a crash or the time bound "
        "counts as not running. `imports` is whether every `mellea`/`cli` name the example "
        "imports resolves here.",
        "",
        "The bound is the wall time allowed and the new-token limit of each generation "
        "whose program names none (`MELLEA_MAX_NEW_TOKENS`; `default` is the library's "
        "1024, see docs/library.md). A limit of 128 is what a shared 2-core machine can "
        "run the whole corpus under; it is still more than upstream gives this model: "
        "upstream's local backend (`LocalHFBackend`, transformers) stops "
        "SmolLM2-135M-Instruct at transformers' default of 20 new tokens, since the "
        "model's generation config names no limit (upstream's default Ollama backend "
        "has none). An example that failed under 128 because its structured answer was "
        "cut short was run again with the default where time allowed; its row says so. "
        "Since issue 23 the engine closes a structured answer within its token limit "
        '(docs/engine.md, "Constrained decoding"), so such an answer parses whatever '
        "the limit: the generative-stub rows were run again with that.",
        "",
        "| example | imports | ran | time | bound (wall time, new tokens) | why not |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    stamp = results.get("_meta", {}).get("updated", "")
    footer = ["", f"Last recorded: {stamp}." if stamp else ""]
    return "\n".join(header + rows + footer).rstrip() + "\n"


def _failure_summary(results: dict, examples: list[dict]) -> str:
    failed = [results[e["path"]] for e in examples if e["path"] in results]
    failed = [r for r in failed if not r["ran"]]
    causes = [
        meaning
        for _, meaning in KNOWN_CAUSES
        if any(r["reason"].endswith(f"({meaning})") for r in failed)
    ]
    known = sum(1 for r in failed if any(r["reason"].endswith(f"({c})") for c in causes))
    if not known:
        return ""
    return (
        f" {known} of the {len(failed)} that did not finish failed on the model's answer "
        f"(the cause is named in its row: {'; '.join(causes)})."
    )


def main(argv: list[str] | None = None) -> int:
    """Run the selected examples, merge their results and rewrite the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", help="git directory of upstream mellea")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per example")
    parser.add_argument("--only", nargs="*", default=None, help="path substrings to run")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    parser.add_argument("--logs", type=Path, default=None, help="keep each run's output here")
    parser.add_argument(
        "--merge",
        nargs="*",
        type=Path,
        default=None,
        help="results files of other runs (e.g. run side by side) to merge in; runs nothing",
    )
    args = parser.parse_args(argv)

    corpus = json.loads(CORPUS.read_text())
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    if args.merge is not None:
        for other in args.merge:
            results.update(json.loads(other.read_text()))
        args.results.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        args.table.write_text(render_table(corpus, results))
        return 0
    chosen = [
        e
        for e in runnable_examples(corpus)
        if args.only is None or any(part in e["path"] for part in args.only)
    ]
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="upstream-examples-") as tmp:
        root = Path(tmp)
        export_examples(args.git_dir, corpus["commit"], root)
        for example in chosen:
            missing = unresolved_names(example)
            outcome = run_one(root, example, args.timeout, args.logs)
            outcome["imports"] = not missing and not outcome.pop("import_error")
            outcome.pop("import_error", None)
            if missing:
                outcome["reason"] = outcome["reason"] or f"missing {', '.join(missing)}"
            results[example["path"]] = outcome
            results["_meta"] = {"updated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
            args.results.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            args.table.write_text(render_table(corpus, results))
            status = "ran" if outcome["ran"] else f"FAILED: {outcome['reason']}"
            print(f"{example['path']}: {outcome['seconds']:.0f} s, {status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
