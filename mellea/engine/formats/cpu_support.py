"""What this CPU runs of the formats' kernels: native bf16, where a kernel beats the
GEMM (rows per input), and which exact forms of a GGUF's blocks load here."""

from __future__ import annotations

import torch

from mellea.engine import cpu_kernels
from mellea.engine.cpu_build import cpu_flags
from mellea.engine.switches import read_switches


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX), and PyTorch may
    use it (``ATEN_CPU_CAPABILITY=avx2``, the AVX2 path, says it may not)."""
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


# Up to this many rows (decode steps), the C++ kernels' multiply beats widening the
# weights for a GEMM; longer inputs (prompt chunks, wide batches) take the GEMM.
# Measured on the 2-core AVX512-BF16 CPU, one thread, 3072x576: int8 at 16 rows
# 0.70 ms against 0.71 for the bf16 GEMM, at 32 rows 1.42 against 0.90; int4 at 32
# rows 1.71 ms against 1.66 for dequantizing and the fp32 GEMM.
INT8_KERNEL_MAX_ROWS = 16
# int8 in the tiled layout (on VNNI's integer dot product), 3072x576 on 2 threads: 32
# rows 0.62 ms against 0.67 for widening to the bf16 GEMM, 128 rows 2.6 against 1.6.
# That holds where the CPU multiplies bf16 natively (AVX512-BF16, AMX); elsewhere the
# bf16 GEMM is emulated and the kernel wins at every length (see int8_vnni_max_rows).
INT8_VNNI_MAX_ROWS = 32
INT4_KERNEL_MAX_ROWS = 32
# Without the C++ kernels: up to this many rows, int8pack_mm is faster than widening
# the weights to bf16 for the bf16 GEMM (its cost grows with the rows, the widening's
# does not): on an AVX512-BF16/AMX CPU, 1536x576: 8 rows 184 us vs 260, 16 rows 357 vs 280.
INT8PACK_MAX_ROWS = 12


def bf16_gemm_is_native() -> bool:
    """Whether torch's bf16 GEMM runs on bf16 instructions here: the CPU has them
    (AVX512-BF16 or AMX) and oneDNN is not held below AVX-512 (``ONEDNN_MAX_CPU_ISA``,
    as the AVX2 path of the tests and benchmarks sets it)."""
    limit = read_switches().onednn_max_isa
    if limit and not limit.startswith(("AVX512", "AMX", "ALL", "DEFAULT")):
        return False
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def int8_vnni_max_rows() -> int:
    """The longest input the tiled int8 kernel takes before widening to the bf16 GEMM
    wins: :data:`INT8_VNNI_MAX_ROWS` with native bf16, else any length. Without bf16
    instructions the GEMM converts in software: a 6144x2048 int8 layer on the AVX2
    path took 62 ms for 256 rows in the kernel against 164 ms through bf16 (45.9
    against 15.9 ms at 64 rows; AVX-512 with AVX512-BF16: 27.8 against 29.3 at 256
    rows, 138 against 100 at 1024)."""
    return INT8_VNNI_MAX_ROWS if bf16_gemm_is_native() else 1 << 62


def byte_form_runs() -> bool:
    """Whether a GGUF's 5-8-bit layers load in the exact byte form here: wherever the
    C++ kernels run (every family has a byte tile: VNNI or ``vpmaddwd`` on x86, ``sdot``
    on NEON, plain loops in the generic build); without them they keep per-row int8."""
    return cpu_kernels.available()


def six_form_runs() -> bool:
    """Whether byte-form layers whose values fit 6 bits are held in the six-bit form
    (:func:`~mellea.engine.formats.tiles.pack_six`): every family's tiles rebuild it but NEON's."""
    return cpu_kernels.available() and cpu_kernels.family() != "neon-dotprod"
