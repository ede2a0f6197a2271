"""Compile every engine Triton kernel ahead of time for CUDA targets, without a GPU.

Run as a script (by ``test_aot_compile.py``, in a subprocess whose environment has no
``TRITON_INTERPRET``); prints one JSON record per compiled kernel.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.tools.disasm import get_sass

from mellea.engine.kernels import (
    activation_triton,
    attention_triton,
    kv_cache_triton,
    rms_norm_triton,
    rotary_triton,
)

_FLOAT_ARGS = {"eps", "qk_scale"}


@dataclass
class Case:
    """One kernel specialisation to compile."""

    name: str
    fn: Any
    dtype: str
    constexprs: dict[str, Any]
    ptr_types: dict[str, str] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 2


def _signature(case: Case) -> tuple[dict[str, str], dict[tuple[int, ...], list]]:
    """Triton signature of ``case.fn`` plus the 16-byte alignment hints a launch would add."""
    sig: dict[str, str] = {}
    attrs: dict[tuple[int, ...], list] = {}
    for i, param in enumerate(case.fn.params):
        if param.is_constexpr:
            sig[param.name] = "constexpr"
        elif param.name.endswith("_ptr"):
            sig[param.name] = "*" + case.ptr_types.get(param.name, case.dtype)
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[param.name] = "fp32" if param.name in _FLOAT_ARGS else "i32"
    return sig, attrs


def cases() -> list[Case]:
    """The specialisations the engine launches for a SmolLM2-like model (and head_dims 128
    and 256, Gemma 3's)."""
    out: list[Case] = []
    for dt in ("fp16", "bf16"):
        out += [
            Case("rms_norm", rms_norm_triton._rms_norm_kernel, dt,
                 {"HAS_RESIDUAL": True, "BLOCK": 1024}),
            Case("rms_norm_nores", rms_norm_triton._rms_norm_kernel, dt,
                 {"HAS_RESIDUAL": False, "BLOCK": 8192}, num_warps=8),
            Case("rotary", rotary_triton._rotary_kernel, dt,
                 {"BLOCK_HQ": 16, "BLOCK_HK": 4, "BLOCK_HALF": 32},
                 {"pos_ptr": "i64", "cache_ptr": "fp32"}),
            Case("silu_and_mul", activation_triton._act_and_mul_kernel, dt,
                 {"GELU": False, "BLOCK": 1024}),
            Case("gelu_tanh_and_mul", activation_triton._act_and_mul_kernel, dt,
                 {"GELU": True, "BLOCK": 1024}),
            Case("store_kv", kv_cache_triton._store_kv_kernel, dt, {"BLOCK": 256},
                 {"slot_ptr": "i64"}),
        ]  # fmt: skip
    attn = attention_triton
    idx = {"tables_ptr": "i32", "lens_ptr": "i32", "cu_q_ptr": "i32"}
    for dt, torch_dt in (
        ("fp16", torch.float16),
        ("bf16", torch.bfloat16),
        ("fp32", torch.float32),
    ):
        dot_ty, precision = attn.dot_config(torch_dt, interpret=False)
        flags = {"DOT_TY": dot_ty, "PRECISION": precision}
        for head_dim in (64, 128, 256):
            dec = attn.decode_config(torch_dt, head_dim, group=3)
            pre = attn.prefill_config(torch_dt, head_dim)
            out += [
                Case(f"decode_d{head_dim}", attn._decode_kernel, dt,
                     {"BLOCK_G": dec.block_m, "BLOCK_N": dec.block_n, "BLOCK_D": dec.block_d,
                      **flags}, idx, dec.num_warps, dec.num_stages),
                Case(f"prefill_d{head_dim}", attn._prefill_kernel, dt,
                     {"BLOCK_M": pre.block_m, "BLOCK_N": pre.block_n, "BLOCK_D": pre.block_d,
                      **flags}, idx, pre.num_warps, pre.num_stages),
            ]  # fmt: skip
    return out


def compile_case(case: Case, arch: int) -> dict[str, Any]:
    """Compile one case for ``sm_<arch>`` and summarise what came out."""
    sig, attrs = _signature(case)
    src = triton.compiler.ASTSource(
        fn=case.fn, signature=sig, constexprs=case.constexprs, attrs=attrs
    )
    compiled = triton.compile(
        src,
        target=GPUTarget("cuda", arch, 32),
        options={"num_warps": case.num_warps, "num_stages": case.num_stages},
    )
    ptx = compiled.asm.get("ptx", "")
    sass = get_sass(compiled.asm["cubin"]) if "cubin" in compiled.asm else ""
    return {
        "name": f"{case.name}[{case.dtype}]",
        "arch": arch,
        "stages": sorted(compiled.asm.keys()),
        "ptx_target": f".target sm_{arch}" in ptx,
        "cubin_bytes": len(compiled.asm.get("cubin", b"")),
        "shared": compiled.metadata.shared,
        "spill_stores": sass.count("STL"),
    }


def main(archs: list[int]) -> None:
    for arch in archs:
        for case in cases():
            print(json.dumps(compile_case(case, arch)), flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [80, 90])
