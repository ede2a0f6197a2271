"""Load a checkpoint (``*.safetensors``, or the GGUF file a metadata directory names)
into a :class:`DecoderModel`, one tensor at a time.

Separate q/k/v and gate/up projections are gathered into our fused ones as they come
in; checkpoints that are fused already (Phi-3) load as they are. Each linear layer is
built in the weight format being served as soon as all its pieces are in, so no
float32 copy of the whole model exists at any time, only of one layer. A GGUF tensor
whose block format our int4 groups hold (:mod:`mellea.engine.gguf_blocks`) goes into
an int4 layer without passing through float32.

Every parameter must be filled completely. A checkpoint that does not fit the family
(an unexpected or missing tensor, a wrong shape) raises ``UnsupportedModelError``,
which sends the model to the transformers fallback.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType
from safetensors import safe_open
from torch import nn

from mellea.engine import cpu_kernels
from mellea.engine.block_table import BlockTable
from mellea.engine.checkpoint_names import checkpoint_names, fused_pieces, our_name
from mellea.engine.config import ModelConfig
from mellea.engine.families import UnsupportedModelError
from mellea.engine.formats.cpu_support import byte_form_runs
from mellea.engine.formats.linear import (
    Int4Linear,
    Int8Linear,
    MinCorrectedLinear,
    StackedLinear,
    linear_layer,
)
from mellea.engine.formats.quantize import quantize_rows
from mellea.engine.gguf_blocks import (
    BYTE_TYPES,
    FLOAT_TYPES,
    SERVED_TYPES,
    SPLIT_MIN_TYPES,
    ByteBlocks,
    Q4KGroups,
    q4k_to_int4,
    split_minimums,
    stack_byte_blocks,
    to_byte_blocks,
)
from mellea.engine.gguf_file import GGUFCheckpoint, gguf_source


class _SafetensorsTensor:
    """A checkpoint tensor, read when asked for."""

    def __init__(self, handle: Any, name: str) -> None:
        self.handle, self.name = handle, name
        self.shape = tuple(handle.get_slice(name).get_shape())

    def tensor(self) -> torch.Tensor:
        return self.handle.get_tensor(self.name)

    def int4(self) -> None:
        return None  # float checkpoints hold no int4 groups

    def int8_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        return quantize_rows(self.tensor())

    def has_byte_form(self) -> bool:
        return False  # float checkpoints hold no block weights


class _GGUFTensor:
    """A GGUF tensor (see :class:`~mellea.engine.gguf_file.GGUFTensor`) as a piece."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.shape = inner, inner.shape

    def tensor(self) -> torch.Tensor:
        return torch.from_numpy(self.inner.float32())

    def int4(self) -> Any:
        """The tensor as int4 groups where its block format maps onto them, else None;
        a Q4_K tensor as the file holds it (``Q4KGroups``), in one pass of C++ where the
        kernels run (the same bytes)."""
        raw = self._raw_in_cpp(("Q4_K",))
        if raw is not None:
            return Q4KGroups(*(part.numpy() for part in cpu_kernels.q4_k_exact(raw)))
        return self.inner.int4()

    def _raw_in_cpp(self, types: tuple[str, ...]) -> torch.Tensor | None:
        """The matrix's bytes as a uint8 tensor (the file's pages, not copied) where its
        type is one of ``types`` and the C++ kernels run; else None."""
        inner = self.inner
        if inner.qtype.name not in types or len(inner.shape) != 2 or inner.offset:
            return None
        if not cpu_kernels.available():
            return None
        with warnings.catch_warnings():  # the file's bytes are read only, as they stay
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(np.ascontiguousarray(inner.raw))

    def int8_blocks(self) -> Any:
        return self.inner.int8_blocks()

    def half_table(self) -> torch.Tensor | None:
        """An F16 or BF16 table [rows, K] as the file holds it (a copy: the file's pages
        are released), else None."""
        inner = self.inner
        if inner.qtype not in _HALF or len(inner.shape) != 2 or inner.offset:
            return None
        values = np.array(inner.raw).view(np.int16).reshape(inner.shape)
        return torch.from_numpy(values).view(_HALF[inner.qtype])

    def has_byte_form(self) -> bool:
        """Whether :meth:`byte_blocks` holds this tensor: a 2-D tensor of a block format
        with a byte form, where the C++ kernels run it (:func:`~mellea.engine.formats.
        cpu_support.byte_form_runs`)."""
        inner = self.inner
        return (
            (inner.qtype in BYTE_TYPES or inner.qtype in SPLIT_MIN_TYPES)
            and len(inner.shape) == 2
            and not inner.offset
            and byte_form_runs()
        )

    def byte_blocks(self) -> tuple[ByteBlocks, np.ndarray | None]:
        """The tensor exactly, in the byte form (:class:`~mellea.engine.gguf_blocks.
        ByteBlocks`; see :meth:`has_byte_form`), and for a type with minimums per 16
        (Q2_K) each sub-block's minimum [rows, K/16] (else None). Q6_K, Q8_0, Q4_K and
        Q5_K in one pass of C++ (the same arrays), the rest in NumPy a chunk of rows at
        a time."""
        raw = self._raw_in_cpp(_BYTES_IN_CPP)
        if raw is not None:
            parts = cpu_kernels.gguf_byte_rows(raw, self.inner.qtype.name)
            return ByteBlocks(*(part.numpy() for part in parts)), None
        source, rows, qtype = self.inner.raw, _BYTE_CHUNK_ROWS, self.inner.qtype
        split = qtype in SPLIT_MIN_TYPES
        chunks = [
            split_minimums(source[i : i + rows], qtype)
            if split
            else (to_byte_blocks(source[i : i + rows], qtype), None)
            for i in range(0, len(source), rows)
        ]
        lows = np.concatenate([low for _, low in chunks]) if split else None
        if len(chunks) == 1:
            return chunks[0][0], lows
        held = [blocks for blocks, _ in chunks]
        return ByteBlocks(*(np.concatenate(arrays) for arrays in zip(*held, strict=True))), lows

    def int8_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`~mellea.engine.formats.quantize.quantize_rows` of the float32 values, computed a
        chunk of rows at a time (rows are quantized independently, so the result is the
        same bytes as for the whole float32 tensor, which never exists)."""
        if len(self.shape) != 2 or self.inner.offset:
            return quantize_rows(self.tensor())
        raw = self._raw_in_cpp(_ONE_PRODUCT)
        if raw is not None:
            return cpu_kernels.gguf_int8_rows(raw, self.inner.qtype.name == "Q6_K")
        rows, cols = self.shape
        q = torch.empty(rows, cols, dtype=torch.int8)
        scale = torch.empty(rows, dtype=torch.float32)
        first = 0
        for chunk in self.inner.float32_chunks(_chunk_rows(cols)):
            end = first + len(chunk)
            q[first:end], scale[first:end] = quantize_rows(torch.from_numpy(chunk))
            first = end
        return q, scale

    def copy_into(self, dest: torch.Tensor) -> None:
        self.inner.copy_into(dest)

    def release(self) -> None:
        self.inner.release()


# Float tables kept as the file holds them (BlockTable), and their torch dtypes.
_HALF = {GGMLQuantizationType.F16: torch.float16, GGMLQuantizationType.BF16: torch.bfloat16}
# Block formats whose values are one product (no offset): C++ requantizes them per row.
_ONE_PRODUCT = ("Q6_K", "Q8_0")
# Block formats C++ converts to the byte form (Q4_0, the rest, in NumPy).
_BYTES_IN_CPP = ("Q6_K", "Q8_0", "Q4_K", "Q5_K")
# Rows of a tensor converted to the byte form at a time in NumPy (its temporaries are a
# few int16 copies of a chunk).
_BYTE_CHUNK_ROWS = 1024

# Rows widened to float32 at a time for requantizing: about 1 MB of float32 (a chunk
# and its temporaries stay in the CPU's caches, and fresh memory is not page-faulted in
# for a whole tensor).
_CHUNK_ELEMENTS = 1 << 18


def _chunk_rows(cols: int) -> int:
    return max(1, _CHUNK_ELEMENTS // cols)


def _to_empty(module: nn.Module, device: torch.device) -> nn.Module:
    """``module.to_empty(device=device)`` without its meta-tensor path (torch's Python
    reference of ``empty_like``, which imports sympy: 1.3 s of every start)."""
    return module._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))


def _checkpoint(model_dir: Path, hf_names: list[str], cfg: ModelConfig) -> Iterator[tuple]:
    """(checkpoint name, piece) for every tensor of the checkpoint in ``model_dir``."""
    source = gguf_source(model_dir)
    if source is not None:
        checkpoint = GGUFCheckpoint(source)
        names = checkpoint.gguf_names(hf_names, cfg.num_layers)
        for name, tensor in checkpoint.items(names):
            yield name, _GGUFTensor(tensor)
        return
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_dir}")
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (not a dict)
                yield name, _SafetensorsTensor(handle, name)


@dataclass
class _Pending:
    """A linear layer waiting for its pieces: (first row, piece) per parameter."""

    module: nn.Linear
    pieces: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    def complete(self) -> bool:
        wanted = {"weight": self.module.out_features}
        if self.module.bias is not None:
            wanted["bias"] = self.module.out_features
        return all(self.rows.get(kind, 0) == rows for kind, rows in wanted.items())


def load_weights(
    model: nn.Module,
    cfg: ModelConfig,
    model_dir: str | Path,
    device: torch.device | None = None,
    fmt: str = "float32",
    qkv_rows: torch.Tensor | None = None,
    built: Callable[[nn.Module], None] | None = None,
    table_built: Callable[[str, nn.Module], None] | None = None,
) -> None:
    """Fill ``model`` (built on the meta device; placed on ``device`` here) from the
    checkpoint in ``model_dir``, its linear layers (all but an untied LM head) built in
    the weight format ``fmt`` (see :mod:`mellea.engine.formats`; on CPU). ``qkv_rows``
    reorders the first rows of each fused q/k/v projection (the CPU path's rotary order).
    ``built`` is handed each linear layer as it is built and put in place (e.g.
    :meth:`~mellea.engine.huge_pages.HugePageMover.submit`), ``table_built`` the name
    and module of each table kept in the file's blocks (e.g.
    :meth:`~mellea.engine.formats.head.HeadScorer.submit`).
    """
    model_dir = Path(model_dir)
    device = device or torch.device("cpu")
    hf_names = checkpoint_names([name for name, _ in model.named_parameters()], cfg)
    deferred = {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name != "lm_head"
    }
    for name in deferred:
        model.set_submodule(name, nn.Identity())
    _to_empty(model, device)
    pending = {name: _Pending(module) for name, module in deferred.items()}
    params = dict(model.named_parameters())
    filled = dict.fromkeys(params, 0)  # rows loaded per parameter
    fused = fused_pieces(cfg)
    quantized = device.type == "cpu" and fmt in ("bfloat16", "int8", "int4")
    is_gguf = gguf_source(model_dir) is not None

    def build(name: str, job: _Pending) -> nn.Module:
        rows = qkv_rows if name.endswith("self_attn.qkv_proj") else None
        groups = [piece.int4() for _, piece in sorted(job.pieces["weight"], key=_first)]
        if fmt == "int4" and quantized and all(g is not None for g in groups):
            bias = _assemble(job, "bias", rows)
            return Int4Linear(None, bias, groups=_int4_groups(groups, rows))
        bias = _assemble(job, "bias", rows)
        if fmt == "int4" and quantized and is_gguf and bias is None:
            stacked = _int4_then_bytes(job, groups, rows)
            if stacked is not None:
                return stacked
        # A GGUF tensor that int4 cannot hold (Q6_K, Q8_0, Q5_0, ...) keeps its bits: the
        # file's own values in the byte form where every piece has one. At int4 (what
        # auto serves a quantized GGUF in) a layer with an F16, BF16 or F32 piece stays
        # exact in float32; else (a type of no exact form, no C++ kernels, or int8 asked
        # for) per-row int8.
        if quantized and (fmt == "int8" or (fmt == "int4" and is_gguf)):
            exact = _byte_layer(job, rows, bias)
            if exact is not None:
                return exact
            if fmt == "int8" or not _float_piece(job):
                return Int8Linear(None, bias, rows=_int8_rows(job, rows))
        elif quantized:
            return linear_layer(_assemble(job, "weight", rows), bias, fmt)
        weight = _assemble(job, "weight", rows)
        module = _to_empty(job.module, device)
        module.weight.copy_(weight)
        if bias is not None:
            module.bias.copy_(bias)
        return module

    with torch.no_grad():
        for hf_name, piece in _checkpoint(model_dir, hf_names, cfg):
            target, first, rows = our_name(hf_name, cfg.family.renames), 0, None
            for part, (ours, offset, count) in fused.items():
                if f".{part}." in target:
                    target, first, rows = target.replace(part, ours), offset, count
                    break
            module_name, _, kind = target.rpartition(".")
            if module_name in pending:
                job = pending[module_name]
                expected = getattr(job.module, kind).shape
                if rows is not None:
                    expected = (rows, *expected[1:])
                _check_shape(hf_name, piece.shape, expected)
                job.pieces.setdefault(kind, []).append((first, piece))
                job.rows[kind] = job.rows.get(kind, 0) + expected[0]
                if job.complete():
                    layer = build(module_name, pending.pop(module_name))
                    model.set_submodule(module_name, layer)
                    if built is not None:
                        built(layer)
                    for _, done in (p for pieces in job.pieces.values() for p in pieces):
                        if hasattr(done, "release"):
                            done.release()  # the file's pages read again to build it
                continue
            if target not in params:
                if "rotary_emb" in target or "rope_freqs" in target or target == "lm_head.weight":
                    continue  # recomputed (RoPE) / tied to the embedding
                raise UnsupportedModelError(f"unexpected weight {hf_name}")
            in_blocks = quantized and target in _TABLES
            table = _table_from_blocks(model, target, piece) if in_blocks else None
            if table is not None:
                filled[target] = params[target].shape[0]
                piece.release()
                if table_built is not None:
                    table_built(target, table)
                continue
            dest = params[target]
            if rows is not None:
                dest = dest.narrow(0, first, rows)
            _check_shape(hf_name, piece.shape, dest.shape)
            if isinstance(piece, _GGUFTensor):
                piece.copy_into(dest)  # in row chunks: no float32 copy of a large table
            else:
                dest.copy_(piece.tensor())
            filled[target] += dest.shape[0]
    missing = [name for name, rows in filled.items() if rows != params[name].shape[0]]
    missing += [f"{name}.weight" for name in pending]
    if missing:
        raise UnsupportedModelError(f"weights missing from the checkpoint: {missing[:5]}")


# Tables read by rows, kept in a GGUF's block form when served in a compact format.
_TABLES = ("embed_tokens.weight", "lm_head.weight")


def _table_from_blocks(model: nn.Module, target: str, piece: Any) -> nn.Module | None:
    """Put a :class:`BlockTable` of ``piece`` (a GGUF tensor whose block format has an
    exact int8 form, or an F16/BF16 table, kept so) in place of the table ``target`` and
    return it; None where it has none."""
    if not isinstance(piece, _GGUFTensor):
        return None
    half = piece.half_table()
    held = piece.int8_blocks() if half is None else None
    if half is not None:
        table = BlockTable(half, None, None, half.shape[1])
    elif held is None:
        return None
    else:
        offsets = None if held.offsets is None else torch.from_numpy(held.offsets)
        q, scales = torch.from_numpy(held.q), torch.from_numpy(held.scales)
        table = BlockTable(q, scales, offsets, held.block)
    model.set_submodule(target.removesuffix(".weight"), table)
    return table


def _first(entry: tuple[int, Any]) -> int:
    return entry[0]


def _check_shape(hf_name: str, shape: tuple, expected: tuple) -> None:
    if tuple(shape) != tuple(expected):
        raise UnsupportedModelError(f"{hf_name}: shape {tuple(shape)}, expected {tuple(expected)}")


def _assemble(job: _Pending, kind: str, rows: torch.Tensor | None) -> torch.Tensor | None:
    """One parameter of a pending layer from its pieces, float32, ``rows`` reordered."""
    if kind not in job.pieces:
        return None
    parts = [piece.tensor().float() for _, piece in sorted(job.pieces[kind], key=_first)]
    whole = parts[0] if len(parts) == 1 else torch.cat(parts)
    if rows is not None:
        whole[: rows.numel()] = whole[rows]
    return whole


def _int8_rows(job: _Pending, rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A pending layer's weight as per-row int8 (``quantize_rows``' output for the whole
    weight, ``rows`` reordered), each piece quantized on its own: no float32 copy of it."""
    parts = [piece.int8_rows() for _, piece in sorted(job.pieces["weight"], key=_first)]
    q, scale = (
        parts[0] if len(parts) == 1 else tuple(torch.cat(p) for p in zip(*parts, strict=True))
    )
    if rows is not None:
        q[: rows.numel()] = q[rows]
        scale[: rows.numel()] = scale[rows]
    return q, scale


def _byte_layer(job: _Pending, rows: torch.Tensor | None, bias: torch.Tensor | None) -> Any:
    """A pending layer's weight in the exact byte form (its pieces stacked, ``rows``
    reordered; see :func:`_pieces_in_bytes`); None where a piece has no byte form."""
    pieces = [piece for _, piece in sorted(job.pieces["weight"], key=_first)]
    held = _pieces_in_bytes(pieces, rows)
    return None if held is None else _bytes_layer(*held, bias)


def _bytes_layer(
    blocks: tuple[torch.Tensor, ...], lows: torch.Tensor | None, bias: torch.Tensor | None
) -> nn.Module:
    """The byte form's layer over ``blocks``, with minimums per 16 where ``lows``."""
    if lows is None:
        return Int8Linear(None, bias, blocks=blocks)
    return MinCorrectedLinear(Int8Linear(None, None, blocks=blocks), lows, bias)


def _float_piece(job: _Pending) -> bool:
    """Whether a pending GGUF layer has an F16, BF16 or F32 piece and every piece an
    exact widening (so that float32 holds the layer as the file has it)."""
    types = [piece.inner.qtype for _, piece in job.pieces["weight"]]
    return any(t in FLOAT_TYPES for t in types) and all(t in SERVED_TYPES for t in types)


def _int4_then_bytes(
    job: _Pending, groups: list[Any], rows: torch.Tensor | None
) -> nn.Module | None:
    """A fused layer whose leading pieces int4 holds and whose others only the byte form
    does (a Q4_K_M file's Q4_K ``attn_q``, ``attn_k`` and Q6_K ``attn_v``) as the two
    parts side by side (:class:`~mellea.engine.formats.linear.StackedLinear`), each exactly the
    file's; None for any other mix (then the whole layer takes the byte form)."""
    pieces = [piece for _, piece in sorted(job.pieces["weight"], key=_first)]
    lead = next((i for i, g in enumerate(groups) if g is None), len(groups))
    if not 0 < lead < len(groups) or any(g is not None for g in groups[lead:]):
        return None
    lead_rows = sum(piece.shape[0] for piece in pieces[:lead])
    if rows is not None and rows.numel() > lead_rows:
        return None  # the reordered q/k rows would reach into the byte-form part
    tail = _pieces_in_bytes(pieces[lead:], None)
    if tail is None:
        return None
    head = Int4Linear(None, None, groups=_int4_groups(groups[:lead], rows))
    return StackedLinear([head, _bytes_layer(*tail, None)])


def _pieces_in_bytes(
    pieces: list[Any], rows: torch.Tensor | None
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None] | None:
    """``pieces`` (GGUF tensors, in row order) stacked in the exact byte form, and where
    a piece has minimums per 16 (Q2_K) each row's [rows, K/16] (zeros for the other
    pieces), ``rows`` reordered; None where a piece has no byte form."""
    if not all(piece.has_byte_form() for piece in pieces):
        return None
    held = [piece.byte_blocks() for piece in pieces]
    tensors = tuple(
        torch.from_numpy(np.ascontiguousarray(part))
        for part in stack_byte_blocks([blocks for blocks, _ in held])
    )
    lows = None
    if any(low is not None for _, low in held):
        lows = torch.from_numpy(
            np.concatenate(
                [
                    np.zeros((blocks.values.shape[0], blocks.values.shape[1] // 16), np.float32)
                    if low is None
                    else low
                    for blocks, low in held
                ]
            )
        )
    if rows is not None:
        for t in (*tensors, *([] if lows is None else [lows])):
            t[: rows.numel()] = t[rows]
    return tensors, lows


def _int4_groups(groups: list[Any], rows: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """Pieces' int4 groups stacked along the rows (``rows`` reordered) as torch tensors.
    Q4_K pieces keep their own form (``Q4KGroups``) unless another piece of the layer is
    Q4_0 or Q4_1: then they take the fp16 form, which holds both."""
    exact = [isinstance(g, Q4KGroups) for g in groups]
    if any(exact) and not all(exact):
        groups = [q4k_to_int4(g) if is_q4k else g for g, is_q4k in zip(groups, exact, strict=True)]
    # One piece is used as it is: concatenate would copy it.
    stacked = [
        parts[0] if len(parts) == 1 else np.concatenate(parts)
        for parts in zip(*groups, strict=True)
    ]
    tensors = tuple(torch.from_numpy(np.ascontiguousarray(part)) for part in stacked)
    if rows is not None:
        for t in tensors:
            t[: rows.numel()] = t[rows]
    return tensors
