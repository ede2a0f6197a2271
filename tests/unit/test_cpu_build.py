"""Which builds of the C++ CPU kernels a machine makes and runs, from what its CPU
reports: x86-64's ``flags`` and aarch64 Linux's ``Features`` in /proc/cpuinfo, and macOS
arm64, which has no /proc/cpuinfo. Each machine is pretended (its architecture, its
system and a cpuinfo file), so these run anywhere."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from mellea.engine import cpu_build, cpu_kernels

# The lines that matter of real /proc/cpuinfo files (one CPU each).
GRAVITON2 = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid \
asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd0c
"""
RASPBERRY_PI_4 = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU part\t: 0xd08
"""
X86_AVX2 = """processor\t: 0
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 \
clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc \
rep_good nopl xtopology nonstop_tsc cpuid extd_apicid pni pclmulqdq ssse3 fma cx16 \
sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm \
cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext bmi1 avx2 smep \
bmi2 rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves clzero
vmx flags\t: vnmi
"""

Pretend = Callable[..., None]


@pytest.fixture
def pretend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Pretend:
    """pretend(machine, cpuinfo=None, system="linux"): this process runs there (no
    /proc/cpuinfo where ``cpuinfo`` is None)."""

    def on(machine: str, cpuinfo: str | None = None, system: str = "linux") -> None:
        path = tmp_path / "cpuinfo"
        if cpuinfo is not None:
            path.write_text(cpuinfo)
        monkeypatch.setattr(cpu_build.platform, "machine", lambda: machine)
        monkeypatch.setattr(cpu_build.sys, "platform", system)
        monkeypatch.setattr(cpu_build, "CPUINFO", str(path))
        monkeypatch.delenv(cpu_kernels.ISA_ENV, raising=False)

    return on


def test_an_arm_cpu_with_the_dot_product_runs_the_neon_build(pretend: Pretend) -> None:
    pretend("aarch64", GRAVITON2)
    assert {"asimd", "asimddp"} <= cpu_build.cpu_flags()
    assert cpu_build.platform_families() == ["neon-dotprod", "generic"]
    assert cpu_kernels.runnable_families() == ["neon-dotprod", "generic"]
    assert cpu_kernels._chosen() == "neon-dotprod"
    assert not cpu_build.cpu_runs("avx2") and not cpu_build.cpu_runs("avx512-vnni")


def test_an_arm_cpu_without_the_dot_product_runs_generic(pretend: Pretend) -> None:
    pretend("aarch64", RASPBERRY_PI_4)
    assert cpu_build.platform_families() == ["neon-dotprod", "generic"]  # built, not run
    assert cpu_kernels.runnable_families() == ["generic"]


def test_macos_on_apple_silicon_runs_the_neon_build(pretend: Pretend) -> None:
    pretend("arm64", None, system="darwin")
    assert cpu_kernels.runnable_families() == ["neon-dotprod", "generic"]


def test_an_arm_machine_without_cpuinfo_runs_generic(pretend: Pretend) -> None:
    pretend("aarch64", None)
    assert cpu_build.cpu_flags() == set()
    assert cpu_kernels.runnable_families() == ["generic"]


def test_x86_cpus_keep_their_families(pretend: Pretend) -> None:
    pretend("x86_64", X86_AVX2)
    assert cpu_build.platform_families() == ["avx512-vnni", "avx2", "generic"]
    assert cpu_kernels.runnable_families() == ["avx2", "generic"]
    assert not cpu_build.cpu_runs("neon-dotprod")


def test_other_machines_build_generic_alone(pretend: Pretend) -> None:
    pretend("riscv64", "isa\t\t: rv64imafdc\n")
    assert cpu_build.platform_families() == ["generic"]
    assert cpu_kernels.runnable_families() == ["generic"]


def test_mellea_cpu_isa_neon_picks_the_neon_build_where_it_runs(
    pretend: Pretend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pretend("aarch64", GRAVITON2)
    monkeypatch.setenv(cpu_kernels.ISA_ENV, "generic")
    assert cpu_kernels._chosen() == "generic"
    monkeypatch.setenv(cpu_kernels.ISA_ENV, "neon")
    assert cpu_kernels._chosen() == "neon-dotprod"
    pretend("aarch64", RASPBERRY_PI_4)
    monkeypatch.setenv(cpu_kernels.ISA_ENV, "neon")
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert cpu_kernels._chosen() == "generic"
    assert "this CPU cannot run it" in caplog.text


def test_the_neon_build_targets_the_dot_product_in_its_own_namespace() -> None:
    flags = cpu_build.compile_flags("neon-dotprod")
    assert "-march=armv8.2-a+dotprod" in flags
    assert f"-DMELLEA_CPU_NS={cpu_build.namespace('neon-dotprod')}" in flags
    assert cpu_build.namespace("neon-dotprod") == "mellea_cpu_neon_dotprod"
    assert not any(f.startswith("-march") for f in cpu_build.compile_flags("generic"))


def test_a_change_to_the_neon_kernels_renames_every_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A prebuilt library of an older cpu_ops/neon.h is never loaded."""
    neon = next(p for p in cpu_build.HEADERS if p.name == "neon.h")
    before = {f: cpu_build.build_name(f) for f in cpu_build.FAMILIES}
    changed = tmp_path / neon.name
    changed.write_text(neon.read_text() + "\n// changed\n")
    monkeypatch.setattr(
        cpu_build, "HEADERS", [changed if p == neon else p for p in cpu_build.HEADERS]
    )
    after = {f: cpu_build.build_name(f) for f in cpu_build.FAMILIES}
    assert all(before[f] != after[f] for f in cpu_build.FAMILIES)
    assert len(set(before.values())) == len(cpu_build.FAMILIES)
