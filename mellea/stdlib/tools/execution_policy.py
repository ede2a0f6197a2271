"""Execution tiers and capability policies for running generated code.

Tiers: ``static`` (parse and check imports, never run), ``local_unsafe`` (a plain
subprocess with a timeout), ``local`` (our sandbox, :mod:`.sandbox`: timeout,
memory cap, no network, own directory), ``docker_unsafe`` / ``docker`` (a container
through the ``llm-sandbox`` package and a Docker daemon).

A :class:`CapabilityPolicy` declares what code may do; its ``ENFORCED_*`` class
flags say which declarations the ``local`` tier enforces here. Unlike upstream's
local tier, ours enforces ``network_access`` (no network unless True) and
``memory_mb`` (ours), on top of the timeout and output limits.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

ExecutionTier = Literal["static", "local_unsafe", "local", "docker_unsafe", "docker"]
TIERS: tuple[str, ...] = ("static", "local_unsafe", "local", "docker_unsafe", "docker")


@dataclass
class Artifact:
    """A file the executed code wrote: where it is, its size and its type."""

    path: Path
    size_bytes: int | None = None
    content_type: str | None = None


@dataclass
class CapabilityPolicy:
    """What executed code may do, and its resource limits.

    ``timeout`` (seconds), ``stdout_max_bytes`` / ``stderr_max_bytes`` (truncation),
    ``artifact_export_paths``, ``packages`` (installed before running, into a
    directory of the tool's own), ``network_access`` and ``memory_mb`` are enforced by
    the ``local`` tier; the file-system roots, ``subprocess_execution`` and
    ``env_var_access`` are declarations only (a warning says so for the roots).
    """

    filesystem_read_roots: list[Path] | None = None
    filesystem_write_roots: list[Path] | None = None
    network_access: bool = False
    package_installation: bool = False
    subprocess_execution: bool = False
    env_var_access: bool = True
    timeout: int = 30
    stdout_max_bytes: int | None = None
    stderr_max_bytes: int | None = None
    artifact_export_paths: list[Path] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    memory_mb: int | None = 1024

    ENFORCED_filesystem_read_roots: ClassVar[bool] = False
    ENFORCED_filesystem_write_roots: ClassVar[bool] = False
    ENFORCED_network_access: ClassVar[bool] = True
    ENFORCED_package_installation: ClassVar[bool] = False
    ENFORCED_subprocess_execution: ClassVar[bool] = False
    ENFORCED_env_var_access: ClassVar[bool] = False
    ENFORCED_timeout: ClassVar[bool] = True
    ENFORCED_stdout_max_bytes: ClassVar[bool] = True
    ENFORCED_stderr_max_bytes: ClassVar[bool] = True
    ENFORCED_artifact_export_paths: ClassVar[bool] = True
    ENFORCED_packages: ClassVar[bool] = True
    ENFORCED_memory_mb: ClassVar[bool] = True

    def __post_init__(self) -> None:
        roots = [
            name
            for name in ("filesystem_read_roots", "filesystem_write_roots")
            if getattr(self, name) is not None
        ]
        if roots:
            warnings.warn(
                f"CapabilityPolicy {', '.join(roots)} are declared but not enforced: "
                "the code can still reach the rest of the file system",
                UserWarning,
                stacklevel=3,
            )

    def _flags(self) -> dict[str, bool]:
        flags: dict[str, bool] = {}
        for klass in reversed(type(self).__mro__):
            for name, value in vars(klass).items():
                if name.startswith("ENFORCED_") and isinstance(value, bool):
                    flags[name.removeprefix("ENFORCED_")] = value
        return flags

    def unenforced_capabilities(self) -> list[str]:
        """The fields that are declarations only."""
        return [k for k, v in self._flags().items() if not v]

    def enforced_capabilities(self) -> list[str]:
        """The fields the ``local`` tier enforces."""
        return [k for k, v in self._flags().items() if v]


LOCAL_POLICY = CapabilityPolicy(
    network_access=False,
    package_installation=False,
    subprocess_execution=True,
    env_var_access=True,
    timeout=30,
)
DOCKER_POLICY = CapabilityPolicy(
    network_access=False,
    package_installation=True,
    subprocess_execution=True,
    env_var_access=True,
    timeout=60,
)


def _row(run: bool, policy: bool, docker: bool) -> dict[str, bool]:
    return {
        "execute_code": run,
        "timeout_enforcement": run,
        "import_allowlist": True,
        "policy_applied": policy,
        "copy_in": docker,
        "copy_out": docker,
        "package_installation": run,
        "docker_isolation": docker,
    }


COMPATIBILITY_MATRIX: dict[str, dict[str, bool]] = {
    "static": _row(False, False, False),
    "local_unsafe": _row(True, False, False),
    "local": _row(True, True, False),
    "docker_unsafe": _row(True, False, True),
    "docker": _row(True, True, True),
}
"""What each tier does (upstream's table; ours adds no rows)."""


class ExecutionTierError(ValueError):
    """An unknown execution tier."""


def check_tier(tier: str) -> str:
    """``tier`` if it is one of :data:`TIERS`, else a ValueError naming them."""
    if tier not in TIERS:
        raise ExecutionTierError(f"unknown execution tier {tier!r}; use one of {', '.join(TIERS)}")
    return tier


__all__ = [
    "COMPATIBILITY_MATRIX",
    "DOCKER_POLICY",
    "LOCAL_POLICY",
    "Artifact",
    "CapabilityPolicy",
    "ExecutionTier",
]
