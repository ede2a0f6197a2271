"""A handful of upstream mellea's example programs, run unchanged on the bundled model.

The examples are upstream's and are not copied into this repository: the test reads
them from a git copy of github.com/generative-computing/mellea named by
``MELLEA_UPSTREAM_GIT`` (a git directory holding the commit ``examples.json`` was
collected from) and is skipped without one. Each runs as upstream's own
``docs/examples/conftest.py`` runs it (``python FILE``, see ``run_examples.py``) with
``MELLEA_MAX_NEW_TOKENS=64`` so a looping answer stays short; its output is checked
for what the example prints when our library behaves as upstream's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.compat.upstream_examples import run_examples

GIT_DIR = os.environ.get("MELLEA_UPSTREAM_GIT")
CORPUS = json.loads(run_examples.CORPUS.read_text())
TIMEOUT = 900.0  # seconds per example; generous, the machine may be busy

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(GIT_DIR is None, reason="set MELLEA_UPSTREAM_GIT to a git copy of upstream"),
]

# example -> what its output must contain (each proves one behaviour of ours)
EXPECTED = {
    # a session on the bundled model; the default token limit ends the reply
    "docs/examples/hello_world.py": [],
    # a custom backend written upstream's way (_generate_from_context) drives ReACT
    "docs/examples/context/react_compaction.py": [
        "per_add_compaction:    ('done', True",
        "per_turn_compaction:   ('done', True)",
        "llm_summarize_compact: ('done', True)",
    ],
    # SamplingResult.sample_contexts / result_ctx, validation contexts
    "docs/examples/context/contexts_with_sampling.py": [
        "Total Generation Attempts:",
        "Previous step in generating this result was: Instruction(",
    ],
    # MelleaSession.last_prompt after a rejection-sampled instruct
    "docs/examples/instruct_validate_repair/101_email.py": ["***** email ****"],
    "docs/examples/as_generic_chat_history.py": ["user: What is 2+2?", "[Formatted: dict]"],
    # generative stubs: each structured answer the token limit cuts is closed into
    # valid JSON of its schema by the engine's budget-aware closing (issue 23)
    "docs/examples/generative_stubs/generative_stubs.py": [
        "Output sentiment is : ",
        "Generated summary is :",
    ],
    "docs/examples/generative_stubs/inter_module_composition/summarize_and_decide.py": [],
    "docs/examples/tutorial/compositionality_with_generative_stubs.py": [],
}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    try:
        run_examples.export_examples(str(GIT_DIR), CORPUS["commit"], root)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"cannot read commit {CORPUS['commit']} from {GIT_DIR}: {exc.stderr!r}")
    return root


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_the_example_runs_unchanged(
    path: str, upstream: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    example = next(e for e in CORPUS["examples"] if e["path"] == path)
    assert not example["needs_service"] and not run_examples.unresolved_names(example)
    monkeypatch.setenv("MELLEA_MAX_NEW_TOKENS", "64")
    outcome = run_examples.run_one(upstream, example, TIMEOUT, tmp_path)
    log = (tmp_path / (path.replace("/", "__") + ".log")).read_text()
    assert outcome["ran"], f"{path}: {outcome['reason']}\n{log[-3000:]}"
    stdout = log.split("--- stdout\n", 1)[1].split("\n--- stderr\n", 1)[0]
    assert stdout.strip(), f"{path} printed nothing"
    for expected in EXPECTED[path]:
        assert expected in stdout, f"{path}: {expected!r} not in its output:\n{stdout[-2000:]}"
