"""The skip check of tests/conftest.py: the reasons it allows, and a run it fails."""

from __future__ import annotations

import pytest

from tests.skip_policy import (
    ALLOWED,
    OUTSIDE_CI_ONLY,
    SERVICE_PREFIX,
    SkipLedger,
    category,
    in_ci,
    reason_of,
)

pytest_plugins = ["pytester"]

ALLOWED_REASONS = {
    "needs a CUDA GPU": "no CUDA GPU",
    "this CPU cannot run the avx512-vnni kernels": "CPU family this machine cannot execute",
    "this ARM CPU has no dot product": "CPU family this machine cannot execute",
    "no C++ kernels here": "C++ CPU kernels not built or switched off",
    SERVICE_PREFIX + "nginx is not installed": "service not installed (outside CI)",
    "could not import 'triton': No module named 'triton'": "optional package not installed",
    "docling is installed": "optional package installed (the test is of life without it)",
    "no user/network namespaces here": "operating system lacks a feature",
    "opt-in: make test-gemma3": "opt-in",
    "set M_PLAYGROUND_SCREENSHOT=PATH to regenerate": "opt-in",
    "set MELLEA_UPSTREAM_GIT to a git copy of upstream": "opt-in",
}

NOT_ALLOWED = [
    "could not import 'mellea.engine.lora': No module named 'mellea.engine.lora'",
    "could not import 'cli.serve': boom",
    "the engine has no LoRA support yet",
    "runs under the avx2 family",
    "no suitable token boundary in this output",
    "",
]


@pytest.mark.parametrize(("reason", "expected"), ALLOWED_REASONS.items())
def test_each_environmental_reason_falls_in_its_category(reason: str, expected: str) -> None:
    assert category(reason, ci=False) == expected


@pytest.mark.parametrize("reason", NOT_ALLOWED)
def test_other_reasons_are_not_allowed(reason: str) -> None:
    assert category(reason, ci=False) is None


def test_a_missing_service_is_allowed_only_outside_ci() -> None:
    reason = SERVICE_PREFIX + "PostgreSQL is not installed"
    assert category(reason, ci=False) in OUTSIDE_CI_ONLY
    assert category(reason, ci=True) is None
    assert category("needs a CUDA GPU", ci=True) == "no CUDA GPU"


def test_ci_is_read_from_the_environment() -> None:
    assert in_ci({"CI": "true"}) and in_ci({"CI": "1"})
    assert not in_ci({}) and not in_ci({"CI": "false"})


def test_the_ledger_counts_per_category_and_keeps_the_offenders() -> None:
    ledger = SkipLedger(ci=False)
    for reason in ["needs a CUDA GPU", "needs a CUDA GPU", "opt-in: make test-gemma3"]:
        ledger.add("t.py::ok", reason)
    ledger.add("t.py::bad", "the engine has no LoRA support yet")
    assert ledger.counts == {"no CUDA GPU": 2, "opt-in": 1}
    assert ledger.offenders == [("t.py::bad", "the engine has no LoRA support yet")]
    lines = ledger.table()
    assert lines[0].split() == ["2", "no", "CUDA", "GPU"]
    assert lines[-2].split() == ["1", "NOT", "ALLOWED"]
    assert lines[-1].split() == ["4", "all", "skips"]


def test_every_category_has_a_pattern_and_the_report_reason_is_unwrapped() -> None:
    assert all(ALLOWED.values()) and ALLOWED.keys() >= OUTSIDE_CI_ONLY
    assert reason_of(("t.py", 3, "Skipped: needs a CUDA GPU")) == "needs a CUDA GPU"


INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

CONFTEST = """
from tests.conftest import pytest_configure  # noqa: F401
"""

TESTS = """
import pytest

def test_runs():
    pass

def test_gpu():
    pytest.skip("needs a CUDA GPU")

@pytest.mark.xfail(reason="an expected failure is no skip")
def test_xfail():
    assert False
"""


def test_a_run_with_only_allowed_skips_passes_and_prints_the_table(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(test_fine=TESTS)
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*skips by reason*", "*1  no CUDA GPU", "*1  all skips"])
    assert "not allowed" not in result.stdout.str()


def test_a_run_that_skips_for_another_reason_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(
        test_fine=TESTS,
        test_own_module=(
            "import pytest\n"
            "pytest.importorskip('mellea.no_such_module')\n"
            "def test_never():\n    pass\n"
        ),
    )
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*skips for a reason not allowed*",
            "test_own_module.py: could not import 'mellea.no_such_module'*",
        ]
    )
