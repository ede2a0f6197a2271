"""What a checkpoint stores: its float dtype, whether its weights are 4-bit already
(a safetensors checkpoint dequantized from a Q4 GGUF, or a GGUF mostly in 4-bit
blocks), and whether a GGUF is quantized in types the engine serves. Read from the
files' headers and a few rows, in NumPy, on the caller's thread.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open

from mellea.engine.formats.quantize import GROUP, dequantize_groups, quantize_groups
from mellea.engine.gguf_blocks import FLOAT_TYPES, INT4_TYPES, SERVED_TYPES
from mellea.engine.gguf_file import gguf_source, read_table

# Checkpoint tensors that are not linear layers (embeddings, norms, heads).
_NOT_LINEAR = ("embed", "lm_head", "norm", "wte", "wpe")

# safetensors dtype names of the float formats a checkpoint may store its weights in.
_STORED = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float32"}


def stored_dtype(model_dir: Path) -> str | None:
    """The float dtype the safetensors checkpoint in ``model_dir`` stores its linear
    weights in (``float32``, ``bfloat16`` or ``float16``; the widest if they differ),
    read from the files' headers; None when there is no such weight.
    """
    found: set[str] = set()
    for file in sorted(model_dir.glob("*.safetensors")) if model_dir.is_dir() else []:
        with open(file, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name == "__metadata__" or not name.endswith(".weight"):
                continue
            if any(part in name for part in _NOT_LINEAR) or len(entry["shape"]) != 2:
                continue
            if entry["dtype"] in _STORED:
                found.add(_STORED[entry["dtype"]])
    for widest in ("float32", "float16", "bfloat16"):
        if widest in found:
            return widest
    return None


# A checkpoint is 4-bit already when int4 reproduces its weights to within this
# fraction of each group's step (fp32 rounding of the stored dequantized values).
EXACT_INT4 = 1e-3


def int4_is_exact(weight: torch.Tensor) -> bool:
    """Whether :func:`quantize_groups` holds ``weight`` [N, K] without loss: true for
    weights dequantized from a Q4_0, Q4_1 or Q4_K GGUF, false for trained fp weights."""
    if weight.dim() != 2 or weight.shape[1] % GROUP:
        return False
    packed, scales, mins = quantize_groups(weight)
    error = (dequantize_groups(packed, scales, mins) - weight.float()).abs()
    step = scales.float().repeat_interleave(GROUP, dim=1)
    return bool((error <= EXACT_INT4 * step + 1e-12).all())


def checkpoint_is_4bit(model_dir: Path, rows: int = 64) -> bool:
    """Whether every linear weight of the safetensors checkpoint in ``model_dir`` is 4-bit
    already: :func:`quantize_groups` holds each tensor's first ``rows`` rows exactly
    (tensor types are per tensor, so a slice tells). For a GGUF's metadata directory,
    :func:`gguf_is_4bit` of the file.

    NumPy, not torch ops: this runs on the caller's thread, and a parallel torch op there
    would give that thread an OpenMP team of its own beside the engine thread's (see
    :class:`mellea.engine.engine.Engine`).
    """
    source = gguf_source(model_dir)
    if source is not None:
        return gguf_is_4bit(source)
    files = sorted(model_dir.glob("*.safetensors"))
    seen = 0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if not name.endswith(".weight") or any(part in name for part in _NOT_LINEAR):
                    continue
                piece = f.get_slice(name)
                shape = piece.get_shape()
                if len(shape) != 2:
                    continue
                seen += 1
                if shape[1] % GROUP or not _groups_exact(_as_float32(piece[: min(rows, shape[0])])):
                    return False
    return seen > 0


def _as_float32(rows: torch.Tensor) -> Any:
    """A float tensor as an fp32 NumPy array, widened in NumPy (bf16, which NumPy
    lacks, by its bits: a bf16 number is the top half of an fp32 one)."""
    if rows.dtype == torch.bfloat16:
        bits = rows.view(torch.int16).numpy().astype(np.uint16).astype(np.uint32)
        return (bits << 16).view(np.float32)
    return rows.numpy().astype(np.float32)


def gguf_is_4bit(path: Path) -> bool:
    """Whether most of a GGUF file's linear weights (by elements) are in a block format
    that int4 holds (Q4_0, Q4_1, Q4_K: a Q4_K_M file, whose few Q6_K tensors then keep
    8 bits). Reads only the file's tensor table."""
    four = other = 0
    for entry in read_table(path)[1]:
        name = entry.name
        if not name.startswith("blk.") or not name.endswith(".weight") or "norm" in name:
            continue
        if len(entry.dims) != 2:
            continue
        if entry.qtype in INT4_TYPES:
            four += math.prod(entry.dims)
        else:
            other += math.prod(entry.dims)
    return four > other


class UnservableTypeError(RuntimeError):
    """A quantized GGUF holds a matrix in a block type the engine has no exact form for
    (the IQ1, IQ2 and IQ3 families, TQ1_0, TQ2_0, ...): one line naming the tensor."""


def gguf_is_quantized(path: Path) -> bool:
    """Whether any matrix of a GGUF file is in a block format (not F32, F16 or BF16).
    Raises :class:`UnservableTypeError` naming the first matrix of a quantized file whose
    type has no exact form here (``gguf_blocks.SERVED_TYPES``). Reads the tensor table."""
    quantized, unserved = False, None
    for entry in read_table(path)[1]:
        if len(entry.dims) < 2:
            continue
        quantized |= entry.qtype not in FLOAT_TYPES
        if unserved is None and entry.qtype not in SERVED_TYPES:
            unserved = entry
    if quantized and unserved is not None:
        raise UnservableTypeError(
            f"{Path(path).name}: tensor {unserved.name} is {unserved.qtype.name}, a type the "
            "engine has no exact form for (IQ1, IQ2, IQ3 and TQ types are not served); "
            "--dtype float32 serves the file widened to float32"
        )
    return quantized


def _groups_exact(weight: Any) -> bool:
    """:func:`int4_is_exact` for a NumPy array (the same rounding, step by step)."""
    groups = weight.reshape(weight.shape[0], -1, GROUP)
    low = groups.min(-1).astype(np.float16).astype(np.float32)
    scale = ((groups.max(-1) - low) / 15).astype(np.float16).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.round((groups - low[..., None]) / safe[..., None]), 0, 15)
    error = np.abs(q * scale[..., None] + low[..., None] - groups)
    return bool((error <= EXACT_INT4 * scale[..., None] + 1e-12).all())
