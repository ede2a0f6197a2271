"""The neon-dotprod build on an x86 machine: its kernels (mellea/engine/cpu_kernels_neon.h)
cross-compiled for aarch64 and run under qemu-user against their scalar references
(neon_kernels_check.cpp, bit for bit), and the whole C++ source compiled for aarch64
as each aarch64 family builds it.

Needs Debian's ``g++-aarch64-linux-gnu`` and ``qemu-user`` (``make cross`` installs
them); without them the tests skip, saying so, but fail under ``CI=true``. On an
aarch64 machine the native compiler builds the check and it runs as it is."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from mellea.engine import cpu_build
from tests.conftest import missing_service

CHECK = Path(__file__).with_name("neon_kernels_check.cpp")
NATIVE = platform.machine().lower() in ("aarch64", "arm64")
CXX = ("aarch64-linux-gnu-g++", "g++") if NATIVE else ("aarch64-linux-gnu-g++",)
QEMU = ("qemu-aarch64", "qemu-aarch64-static")
INSTALL = "`make cross` (.ci/install-cross.sh) installs it"
KERNELS = [
    "exp_ps",
    "exp_shifted8",
    "silu_mul8",
    "above8",
    "group_top_and_sum + split_group",
    "int4_tile (fp16 and Q4_K factors) and int8_tile, 1-4 rows",
]


def _tool(*names: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    missing_service(f"{' or '.join(names)} is not installed: {INSTALL}")
    raise AssertionError("unreachable")


def _arch_flags(family: str) -> list[str]:
    """The -march flag of ``family``'s build, as cpu_build passes it."""
    return [f for f in cpu_build.compile_flags(family) if f.startswith("-march")]


@pytest.fixture(scope="module")
def check_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """neon_kernels_check.cpp, built static for aarch64 with the NEON build's -march."""
    cxx = _tool(*CXX)
    program = tmp_path_factory.mktemp("neon") / "neon_kernels_check"
    command = [
        cxx,
        "-std=c++17",
        "-O2",
        "-ffp-contract=off",  # the references' roundings as written
        "-Wall",
        "-Werror",
        *_arch_flags("neon-dotprod"),
        "-static",
        f"-I{cpu_build.SOURCE.parent}",
        str(CHECK),
        "-o",
        str(program),
    ]
    built = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]
    return program


def _qemu(program: Path, cpu: str) -> subprocess.CompletedProcess[str]:
    """The program on qemu's ``cpu`` (natively, this machine's CPU, on aarch64)."""
    command = [str(program)] if NATIVE else [_tool(*QEMU), "-cpu", cpu, str(program)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_each_neon_kernel_matches_its_scalar_reference_under_qemu(check_program: Path) -> None:
    if NATIVE and not cpu_build.cpu_runs("neon-dotprod"):
        pytest.skip("this ARM CPU has no dot product")
    ran = _qemu(check_program, "max")  # qemu's "max" CPU has the dot product
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    for kernel in KERNELS:
        assert f"ok {kernel}:" in ran.stdout, ran.stdout
    assert "all NEON kernels match their references" in ran.stdout


def test_the_tiles_run_the_dot_product_instruction(check_program: Path) -> None:
    """On an Armv8.0 CPU (Cortex-A53, no dot product) the float kernels run and the
    int4/int8 tiles die on their first sdot: the check runs the instructions it is
    about, not a fallback."""
    if NATIVE:
        pytest.skip("natively, the CPU is what it is: this needs qemu's choice of CPU")
    ran = _qemu(check_program, "cortex-a53")
    assert ran.returncode != 0
    assert "ok exp_ps:" in ran.stdout
    assert "int4_tile" not in ran.stdout and "all NEON kernels match" not in ran.stdout


@pytest.mark.slow  # about 15 s of compiling per family
@pytest.mark.parametrize("family", ["neon-dotprod", "generic"])
def test_the_cpu_kernels_source_compiles_for_aarch64(family: str, tmp_path: Path) -> None:
    """cpu_kernels.cpp with torch's headers (the x86 wheel's: they are the same C++), as
    the aarch64 family builds it: an object file, not a loadable library (no aarch64
    torch here to link against or run)."""
    from torch.utils import cpp_extension

    cxx = _tool(*CXX)
    flags = [f for f in cpu_build.compile_flags(family) if f != "-O3"]
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    # As cpp_extension compiles it, at -O0 (the check is of the source, not its speed).
    command = [cxx, "-std=c++20", "-O0", "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    command += [*flags, *includes]
    command += ["-c", str(cpu_build.SOURCE), "-o", str(tmp_path / "cpu_kernels.o")]
    built = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-4000:]
    # The build is the family it says: the op `family` returns this string, and only it.
    data = (tmp_path / "cpu_kernels.o").read_bytes()
    others = {"neon-dotprod": "generic", "generic": "neon-dotprod"}
    assert b"\0" + family.encode() + b"\0" in data
    assert b"\0" + others[family].encode() + b"\0" not in data
