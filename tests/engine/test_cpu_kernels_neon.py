"""The neon-dotprod build on an x86 machine: its kernels (mellea/engine/cpu_ops/neon.h)
cross-compiled for aarch64 and run under qemu-user against their scalar references
(neon_kernels_check.cpp, bit for bit), its byte form (GGUF blocks served exactly)
against the x86 builds' bits, and the whole C++ source compiled for aarch64 as each
aarch64 family builds it.

Needs Debian's ``g++-aarch64-linux-gnu`` and ``qemu-user`` (``make cross`` installs
them); without them the tests skip, saying so, but fail under ``CI=true``. On an
aarch64 machine the native compiler builds the check and it runs as it is."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mellea.engine import cpu_build, cpu_kernels
from tests.conftest import missing_service
from tests.engine.test_cpu_kernels import BYTE_CASES, byte_blocks_weight, random_byte_blocks

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
    "bytes_tile and dequantize_row, 1-4 rows",
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


def _build_check(program: Path, optimize: list[str]) -> Path:
    """neon_kernels_check.cpp, built static for aarch64 with the NEON build's -march."""
    command = [
        _tool(*CXX),
        "-std=c++17",
        *optimize,
        "-Wall",
        "-Werror",
        *_arch_flags("neon-dotprod"),
        "-static",
        f"-I{cpu_build.SOURCE_DIR}",
        str(CHECK),
        "-o",
        str(program),
    ]
    built = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]
    return program


@pytest.fixture(scope="module")
def check_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The check with the references' roundings as written (no contraction anywhere)."""
    return _build_check(
        tmp_path_factory.mktemp("neon") / "neon_kernels_check", ["-O2", "-ffp-contract=off"]
    )


@pytest.fixture(scope="module")
def extension_check_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The check optimized as the extension's build optimizes its source (its -O level,
    the compiler's default contraction of multiplies and adds): what the kernels'
    own code, not the references', must survive to give the x86 builds' bits."""
    level = [f for f in cpu_build.compile_flags("neon-dotprod") if f.startswith("-O")]
    return _build_check(tmp_path_factory.mktemp("neon-ext") / "neon_kernels_check", level)


def _qemu(program: Path, cpu: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The program on qemu's ``cpu`` (natively, this machine's CPU, on aarch64)."""
    command = [str(program)] if NATIVE else [_tool(*QEMU), "-cpu", cpu, str(program)]
    command += args
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


def _neon_bytes(
    program: Path, x: torch.Tensor, tiled: tuple[torch.Tensor, ...], n: int, tmp: Path
) -> tuple[torch.Tensor, torch.Tensor]:
    """The NEON build's bytes_linear(x, *tiled, n) and bytes_dequantize(*tiled, n), as
    the check program computes them from a file of the operands."""
    qweight, subs, supers = tiled
    rows, k = x.shape
    per_super = qweight.shape[1] // supers.shape[1]
    head = torch.tensor([rows, n, k, subs.shape[2], per_super], dtype=torch.int64)
    operands = tmp / "bytes.in"
    operands.write_bytes(
        b"".join(t.contiguous().numpy().tobytes() for t in (head, x, qweight, subs, supers))
    )
    ran = _qemu(program, "max", "bytes", str(operands), str(tmp / "bytes.out"))
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    out = torch.frombuffer(bytearray((tmp / "bytes.out").read_bytes()), dtype=torch.float32)
    assert out.numel() == rows * n + n * k
    return out[: rows * n].view(rows, n), out[rows * n :].view(n, k)


@pytest.mark.parametrize("kernel_family", ["avx512-vnni", "avx2"], indirect=True)
def test_the_neon_byte_form_gives_the_x86_builds_bits(
    kernel_family: str, extension_check_program: Path, tmp_path: Path
) -> None:
    """A GGUF's blocks in the byte form (Q6_K/Q8_0-like without minimums, Q4_K/Q5_K-like
    with them; d per group or per super-block of 8): the NEON build's bytes_linear gives
    the AVX-512 and AVX2 builds' bits at 1-33 activation rows (the row blocks of 4 and
    each remainder), and its dequantizer the file's weights bit for bit."""
    from mellea.engine.formats.tiles import tile_bytes

    if NATIVE:
        pytest.skip("no x86 build to compare with on aarch64")
    for case, (n, k, mins, per_super) in enumerate(BYTE_CASES):
        blocks = random_byte_blocks(n, k, mins, per_super, seed=case)
        tiled = tile_bytes(*blocks)
        weight = byte_blocks_weight(blocks)
        for rows in (1, 2, 3, 4, 5, 9, 33):
            torch.manual_seed(rows)
            x = torch.randn(rows, k) * torch.logspace(-3, 3, k)  # groups of very different sizes
            x[0, :32] = torch.tensor([127.0, -127.0] * 16)  # the activation parts' extremes
            if k > 32:
                x[-1, 32:64] = 0.0  # a group with no step at all
            out, dequantized = _neon_bytes(extension_check_program, x, tiled, n, tmp_path)
            assert torch.equal(out, cpu_kernels.bytes_linear(x, *tiled, n)), (n, k, mins, rows)
            assert torch.equal(dequantized, weight) and torch.equal(
                dequantized, cpu_kernels.bytes_dequantize(*tiled, n)
            )


@pytest.mark.slow  # about 15 s of compiling per family
@pytest.mark.parametrize("family", ["neon-dotprod", "generic"])
def test_the_cpu_kernels_source_compiles_for_aarch64(family: str, tmp_path: Path) -> None:
    """Every source of cpu_ops/ with torch's headers (the x86 wheel's: they are the same
    C++), as the aarch64 family builds it: object files, not a loadable library (no
    aarch64 torch here to link against or run)."""
    from torch.utils import cpp_extension

    cxx = _tool(*CXX)
    flags = [f for f in cpu_build.compile_flags(family) if f != "-O3"]
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    # As cpp_extension compiles them, at -O0 (the check is of the sources, not their speed).
    command = [cxx, "-std=c++20", "-O0", "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    command += [*flags, *includes]
    data = b""
    for source in cpu_build.SOURCES:
        obj = tmp_path / f"{source.stem}.o"
        built = subprocess.run(
            [*command, "-c", str(source), "-o", str(obj)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert built.returncode == 0, (source.name, built.stderr[-4000:])
        data += obj.read_bytes()
    # The build is the family it says: the op `family` returns this string, and only it.
    others = {"neon-dotprod": "generic", "generic": "neon-dotprod"}
    assert b"\0" + family.encode() + b"\0" in data
    assert b"\0" + others[family].encode() + b"\0" not in data
    # The NEON build's byte form (bytes_linear, and so the fused decode layer) runs the
    # sdot tile of cpu_ops/neon.h, not the generic loops.
    assert (b"mellea_neon10bytes_tile" in data) == (family == "neon-dotprod")
