"""Which weight format a ``dtype`` setting means, and what ``auto`` picks for a checkpoint.

The names the engine takes (:data:`FORMATS` and the spellings it has accepted), the
format they mean on a device (:func:`resolve_format`), the dtype the forward pass then
computes in (:func:`compute_dtype`) and the start-up line naming the faster opt-in
(:func:`faster_opt_in`). What the rest of the engine and the runtime import to name a
format; the layers themselves are in :mod:`mellea.engine.formats.linear`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from mellea.engine import cpu_kernels
from mellea.engine.formats.cpu_support import cpu_has_native_bf16
from mellea.engine.formats.detect import checkpoint_is_4bit, gguf_is_quantized, stored_dtype
from mellea.engine.gguf_file import gguf_source

log = logging.getLogger(__name__)

FORMATS = ("auto", "float32", "bfloat16", "int8", "int4")
# Other spellings the engine has accepted for its ``dtype`` argument.
_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
}
_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_format(
    dtype: str | torch.dtype | None, device: torch.device, model_path: str | Path | None = None
) -> str:
    """The weight format a ``dtype`` setting means on ``device`` (for the checkpoint at
    ``model_path``, which ``auto`` reads).

    ``None`` is ``float32`` on CPU (the exact path, the library's default) and
    ``bfloat16`` on a GPU. ``"auto"`` on a GPU is ``bfloat16``; on a CPU it is
    :func:`auto_cpu_format`: the checkpoint as it is stored, never a rounding of its
    weights. ``ValueError`` for an unknown name, or a format the device cannot run
    (int8 and int4 are CPU-only).
    """
    if isinstance(dtype, torch.dtype):
        names = {v: k for k, v in _TORCH.items()}
        if dtype not in names:
            raise ValueError(f"unsupported dtype {dtype}")
        fmt = names[dtype]
    elif dtype is None:
        fmt = "bfloat16" if device.type == "cuda" else "float32"
    else:
        fmt = _ALIASES.get(dtype, dtype)
        if fmt not in (*FORMATS, "float16"):
            raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(FORMATS)}")
    if fmt == "auto":
        return "bfloat16" if device.type != "cpu" else auto_cpu_format(model_path)
    if fmt in ("int8", "int4") and device.type != "cpu":
        raise ValueError(f"dtype {fmt!r} runs on CPU only")
    return fmt


_logged: set[str] = set()


def auto_cpu_format(model_path: str | Path | None) -> str:
    """What ``--dtype auto`` serves the checkpoint at ``model_path`` in on a CPU: what
    the file holds, so that the answers are the checkpoint's own, in the fastest way
    this CPU's kernel family (:func:`cpu_kernels.family`) runs it.

    ``int4`` for a quantized GGUF wherever the C++ kernels run: each tensor in its own
    bits, exactly (4-bit types in int4, the others in the byte or six-bit form, float
    ones in float32; docs/engine.md, "Loading"), never the whole model widened to
    float32 for one type int4 cannot hold (a file with a type of no exact form raises
    :class:`~mellea.engine.formats.detect.UnservableTypeError`). Also ``int4`` when
    every linear weight of a safetensors checkpoint is 4-bit already (dequantized from
    a Q4 GGUF) and the AVX-512, AVX2 or NEON dot-product kernels run here:
    int4 holds those weights exactly and is the fastest format on both x86 families
    (benchmarks/README.md); on NEON that is unmeasured (the same integer dot products on
    ``sdot``, no ARM machine here to time them).
    Otherwise the checkpoint's own dtype: ``bfloat16`` for a bf16 checkpoint where the
    CPU multiplies bf16 natively (:func:`cpu_has_native_bf16`), ``float32`` for the
    rest (fp32 holds fp16 and bf16 weights exactly; the generic kernels' int4 is slower
    than float32's GEMM). Faster formats that round trained weights (``int8``) are an
    opt-in: see :func:`faster_opt_in`. Logs the choice for a model, the kernel family
    and why, once.
    """
    if model_path is None:
        return "float32"
    path = Path(model_path)
    family = cpu_kernels.family()
    source = gguf_source(path)
    four_bit = checkpoint_is_4bit(path)
    if source is not None and cpu_kernels.available() and gguf_is_quantized(source):
        fmt, why = "int4", "a quantized GGUF, each tensor served exactly in its own bits"
        if four_bit:
            why = "the checkpoint's weights are 4-bit already: int4 holds them exactly"
    elif four_bit and family in ("avx512-vnni", "avx2", "neon-dotprod"):
        fmt, why = "int4", "the checkpoint's weights are 4-bit already: int4 holds them exactly"
    elif stored_dtype(path) == "bfloat16" and cpu_has_native_bf16():
        fmt, why = "bfloat16", "the checkpoint's own dtype, which this CPU multiplies natively"
    elif four_bit:
        fmt, why = "float32", "4-bit weights, but on generic kernels int4 is slower than float32"
    else:
        fmt, why = "float32", "the checkpoint's own weights, exactly"
    line = f"weight format {fmt} (dtype auto), CPU kernels {family}: {why}"
    if line not in _logged:
        _logged.add(line)
        log.info("%s", line)
    return fmt


# int8's decode step at batch 1 against each format's on the default model, and how
# often its greedy text stays the checkpoint's own (docs/engine.md, weight formats:
# 9.1 ms against 51.9 for float32 and 31.9 for bfloat16; 7 of 12 identical; measured
# on an AVX512-VNNI CPU).
_INT8_SPEEDUP = {"float32": "5.7x", "bfloat16": "3.5x"}
_INT8_AGREEMENT = "7 of 12"


def faster_opt_in(fmt: str) -> str | None:
    """The start-up line that names the faster format ``auto`` did not pick for an
    unquantized checkpoint served in ``fmt``, with what it costs (None for int4)."""
    if fmt not in _INT8_SPEEDUP:
        return None
    return (
        f"weights: {fmt}, the checkpoint's own (--dtype auto). --dtype int8 is faster "
        f"(a decode step {_INT8_SPEEDUP[fmt]} as fast on the default model) but rounds the "
        f"weights: greedy text the checkpoint's own on {_INT8_AGREEMENT} of our quality "
        "prompts (docs/engine.md, weight formats)"
    )


def compute_dtype(fmt: str, device: torch.device) -> torch.dtype:
    """The dtype the forward pass and KV cache use for a resolved format."""
    if fmt in ("int8", "int4") or (device.type == "cpu" and fmt == "bfloat16"):
        return torch.float32  # weights converted after load (convert_weights)
    return _TORCH[fmt]
