"""A GGUF file served as it is: its metadata as a small model directory, its tensors
read one at a time from the memory-mapped file.

The directory (``config.json``, ``generation_config.json``, the tokenizer and chat
template: see :mod:`mellea.engine.gguf_metadata`) names the file in :data:`SOURCE`;
:func:`mellea.engine.weights.load_weights` then reads the tensors from the file
itself. Names follow the ``gguf`` package's map from Hugging Face names to GGUF ones,
and two things llama.cpp's converter does to a checkpoint are undone on the way: the
q/k row order of Llama-architecture files (permuted for interleaved rotary pairs) and
the +1 on Gemma's RMSNorm weights.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SOURCE = "gguf_source.json"  # in a metadata directory: which GGUF file holds the weights

# The GGUF architectures whose q/k rows llama.cpp's converter permutes, and those whose
# norm weights it stores plus one (as transformers' GGUF loader undoes them).
_PERMUTED_QK = ("llama",)
_NORM_PLUS_ONE = ("gemma2", "gemma3", "nemotron")


def gguf_source(model_dir: str | Path) -> Path | None:
    """The GGUF file whose weights ``model_dir`` (a metadata directory) stands for."""
    pointer = Path(model_dir) / SOURCE
    if not pointer.is_file():
        return None
    return Path(json.loads(pointer.read_text())["path"])


@dataclass
class GGUFTensor:
    """One tensor of the file: its type, torch-order shape and bytes (a view of the
    memory map; rows gathered where the q/k order is undone)."""

    name: str
    qtype: object  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    raw: np.ndarray
    offset: float = 0.0  # added to the values (Gemma's norms: -1)
    release: Any = None  # drops the tensor's file pages from the process (see items)

    def float32(self) -> np.ndarray:
        """The values, widened exactly to float32 (a new array)."""
        from mellea.engine.gguf_blocks import to_float32

        values = to_float32(self.raw, self.qtype)
        if values is self.raw or values.base is not None:  # F32: a view of the file
            values = values.copy()
        if self.offset:
            values += np.float32(self.offset)
        return values.reshape(self.shape)

    def float32_chunks(self, rows: int = 4096) -> Iterator[np.ndarray]:
        """The values of a matrix widened exactly to float32, ``rows`` rows at a time
        (writable arrays): no float32 copy of the whole tensor at once. Through
        :class:`~mellea.engine.gguf_blocks.Int8Blocks` where the type has that form
        (the same values as the reference dequantizer, fewer temporaries)."""
        from mellea.engine.gguf_blocks import INT8_BLOCK_TYPES, to_float32, to_int8_blocks, widen

        assert len(self.shape) == 2 and not self.offset, "a matrix, as the file holds it"
        for first in range(0, self.shape[0], rows):
            raw = self.raw[first : first + rows]
            if self.qtype in INT8_BLOCK_TYPES:
                chunk = widen(to_int8_blocks(raw, self.qtype))
            else:
                chunk = to_float32(raw, self.qtype)
                if not chunk.flags.writeable:  # F32: a view of the file
                    chunk = chunk.copy()
            yield chunk

    def copy_into(self, dest: Any, rows: int = 4096) -> None:
        """Widen the values into the float tensor ``dest`` (of this shape), ``rows`` at
        a time, so that a large table (the embedding) needs no whole float32 copy."""
        import torch

        if len(self.shape) != 2 or self.offset:
            dest.copy_(torch.from_numpy(self.float32()))
            return
        first = 0
        for chunk in self.float32_chunks(rows):
            dest[first : first + len(chunk)].copy_(torch.from_numpy(chunk))
            first += len(chunk)

    def int8_blocks(self, rows: int = 4096):  # -> gguf_blocks.Int8Blocks | None
        """The tensor as int8 blocks (exact) where its block format has that form, else
        None; converted ``rows`` at a time (the temporaries are several copies of a chunk)."""
        from mellea.engine.gguf_blocks import INT8_BLOCK_TYPES, Int8Blocks, to_int8_blocks

        if self.qtype not in INT8_BLOCK_TYPES or len(self.shape) != 2 or self.offset:
            return None
        total = self.shape[0]
        first = to_int8_blocks(self.raw[:rows], self.qtype)
        q = np.empty((total, first.q.shape[1]), np.int8)
        scales = np.empty((total, first.scales.shape[1]), np.float32)
        offsets = None if first.offsets is None else np.empty_like(scales)
        for start in range(0, total, rows):
            part = (
                first if start == 0 else to_int8_blocks(self.raw[start : start + rows], self.qtype)
            )
            q[start : start + rows], scales[start : start + rows] = part.q, part.scales
            if offsets is not None:
                offsets[start : start + rows] = part.offsets
        return Int8Blocks(q, scales, offsets, first.block)

    def int4(self):  # -> gguf_blocks.Int4Groups | gguf_blocks.Q4KGroups | None
        """The tensor as int4 groups where its block format maps onto them (Q4_K as the
        file holds it, ``Q4KGroups``), else None."""
        from mellea.engine.gguf_blocks import INT4_TYPES, to_int4, to_q4k

        if self.qtype not in INT4_TYPES or len(self.shape) != 2 or self.offset:
            return None
        if getattr(self.qtype, "name", None) == "Q4_K":
            return to_q4k(self.raw)
        return to_int4(self.raw, self.qtype)


# GGUF value types (gguf.GGUFValueType) -> struct format of a scalar; 8 is a string
# (u64 length + bytes), 9 an array (u32 type + u64 count + items).
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


@dataclass
class TensorEntry:
    """One row of a GGUF file's tensor table."""

    name: str
    dims: tuple[int, ...]  # GGUF order: the row length first
    qtype: object  # gguf.GGMLQuantizationType
    offset: int  # from the start of the file


def read_table(path: Path, arrays: bool = False) -> tuple[dict[str, object], list[TensorEntry]]:
    """A GGUF file's metadata and tensor table: arrays as lists with ``arrays`` (the
    vocabulary, merges, scores), else skipped (``None``).

    Written for speed: ``gguf.GGUFReader`` builds an object per array item, which for a
    49k-token vocabulary takes seconds; this reads the same header in milliseconds, and
    a 151k-token vocabulary with its merges in a fraction of a second.
    """
    import struct

    from gguf import GGMLQuantizationType

    with open(path, "rb") as f:
        data = f.read(1 << 20)
        pos = 0

        def need(count: int) -> None:
            nonlocal data
            while pos + count > len(data):
                more = f.read(max(1 << 20, count))
                if not more:
                    raise ValueError(f"{path} ends inside its header")
                data += more

        def take(fmt: str) -> object:
            nonlocal pos
            size = struct.calcsize(fmt)
            need(size)
            (value,) = struct.unpack_from("<" + fmt, data, pos)
            pos += size
            return value

        def string() -> str:
            nonlocal pos
            length = take("Q")
            need(length)
            value = data[pos : pos + length].decode("utf-8", errors="replace")
            pos += length
            return value

        def value(kind: int) -> object:
            nonlocal pos
            if kind == 8:
                return string()
            if kind == 9:
                sub, count = take("I"), take("Q")
                if sub in _SCALARS:
                    size = struct.calcsize(_SCALARS[sub]) * count
                    need(size)
                    items = None
                    if arrays:
                        items = np.frombuffer(data, "<" + _SCALARS[sub], count, pos).tolist()
                    pos += size
                    return items
                if sub == 8:  # strings (a vocabulary): decoded only when asked for
                    strings = [] if arrays else None
                    for _ in range(count):  # need() only near the end of what is read
                        if pos + 8 > len(data):
                            need(8)
                        (length,) = unpack_length(data, pos)
                        end = pos + 8 + length
                        if end > len(data):
                            need(8 + length)
                        if strings is not None:
                            strings.append(data[pos + 8 : end].decode(errors="replace"))
                        pos = end
                    return strings
                nested = [value(sub) for _ in range(count)]
                return nested if arrays else None
            return take(_SCALARS[kind])

        unpack_length = struct.Struct("<Q").unpack_from
        if data[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        pos = 4
        take("I")  # version
        n_tensors, n_fields = take("Q"), take("Q")
        fields = {}
        for _ in range(n_fields):
            key = string()
            fields[key] = value(take("I"))
        entries = []
        for _ in range(n_tensors):
            name = string()
            dims = tuple(take("Q") for _ in range(take("I")))
            qtype = GGMLQuantizationType(take("I"))
            entries.append(TensorEntry(name, dims, qtype, take("Q")))
    align = int(fields.get("general.alignment") or 32)
    start = -(-pos // align) * align
    for entry in entries:
        entry.offset += start
    return fields, entries


class GGUFCheckpoint:
    """The tensors of a GGUF file under their Hugging Face names."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fields, entries = read_table(path)
        self.arch = str(self.fields.get("general.architecture"))
        self.tensors = {entry.name: entry for entry in entries}
        self.memory = np.memmap(path, mode="r")

    def release(self, entry: TensorEntry) -> None:
        """Drop the file's pages of ``entry`` from this process (they stay in the page
        cache, and come back if read again): otherwise every page read while loading
        counts in the process's resident memory on top of the converted weights."""
        import mmap

        page = mmap.PAGESIZE
        first = entry.offset // page * page
        end = entry.offset + self.data(entry).nbytes
        with contextlib.suppress(AttributeError, OSError, ValueError):
            self.memory._mmap.madvise(mmap.MADV_DONTNEED, first, end - first)

    def _head_counts(self) -> tuple[int, int]:
        heads = int(self.fields[f"{self.arch}.attention.head_count"])
        kv = self.fields.get(f"{self.arch}.attention.head_count_kv")
        return heads, int(kv if kv is not None else heads)

    def data(self, entry: TensorEntry) -> np.ndarray:
        """A tensor's bytes as the ``gguf`` package's dequantizer takes them (a view of
        the memory map): F32/F16 as their elements, others as bytes [rows, row bytes]."""
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        block, size = GGML_QUANT_SIZES[entry.qtype]
        rows = int(np.prod(entry.dims[1:], dtype=np.int64))
        row_bytes = entry.dims[0] // block * size
        raw = self.memory[entry.offset : entry.offset + rows * row_bytes]
        if entry.qtype == GGMLQuantizationType.F32:
            raw = raw.view(np.float32)
        elif entry.qtype == GGMLQuantizationType.F16:
            raw = raw.view(np.float16)
        else:
            return raw.reshape(rows, row_bytes)
        return raw.reshape(rows, -1) if len(entry.dims) > 1 else raw

    def gguf_names(self, hf_names: Iterable[str], layers: int) -> dict[str, str]:
        """GGUF tensor name -> Hugging Face name, for the given HF parameter names
        (``model.layers.0.self_attn.q_proj.weight``, ...)."""
        from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

        arch = next((k for k, v in MODEL_ARCH_NAMES.items() if v == self.arch), None)
        if arch is None:
            return {}
        name_map = get_tensor_name_map(arch, layers)
        names = {}
        for hf_name in hf_names:
            base, _, suffix = hf_name.rpartition(".")
            gguf_name = name_map.get_name(base)
            if gguf_name is not None and f"{gguf_name}.{suffix}" in self.tensors:
                names[f"{gguf_name}.{suffix}"] = hf_name
        return names

    def items(self, names: dict[str, str]) -> Iterator[tuple[str, GGUFTensor]]:
        """(HF name, tensor) for every tensor of the file, in file order; a tensor the
        map does not name comes under its GGUF name."""
        heads, kv_heads = self._head_counts() if self.arch in _PERMUTED_QK else (0, 0)
        for gguf_name, entry in self.tensors.items():
            raw = self.data(entry)
            shape = tuple(int(d) for d in reversed(entry.dims))
            if heads and (".attn_q." in gguf_name or ".attn_k." in gguf_name):
                count = heads if ".attn_q." in gguf_name else kv_heads
                raw = raw[_unpermuted_rows(shape[0], count)]
            offset = -1.0 if self.arch in _NORM_PLUS_ONE and "norm.weight" in gguf_name else 0.0
            yield (
                names.get(gguf_name, gguf_name),
                GGUFTensor(
                    gguf_name,
                    entry.qtype,
                    shape,
                    raw,
                    offset,
                    functools.partial(self.release, entry),
                ),
            )
            self.release(entry)  # read again later (a fused layer's pieces): released again


def _unpermuted_rows(rows: int, heads: int) -> np.ndarray:
    """For each row in Hugging Face's (rotate-half) order, the row of the GGUF file
    that holds it: llama.cpp stores each head's two halves interleaved, row ``2 j + t``
    of a head being row ``t * half + j`` of the original."""
    half = rows // heads // 2
    return np.arange(rows).reshape(heads, half, 2).transpose(0, 2, 1).reshape(-1)


def transformers_weights(model_dir: str | Path) -> tuple[Path, dict[str, str]]:
    """Where transformers' ``from_pretrained`` finds ``model_dir``'s weights: the
    directory and extra arguments (``gguf_file`` for a GGUF's metadata directory, which
    transformers then dequantizes to float)."""
    source = gguf_source(model_dir)
    if source is None:
        return Path(model_dir), {}
    return source.parent, {"gguf_file": source.name}
