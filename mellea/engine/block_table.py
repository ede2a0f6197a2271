"""A table read by rows (a token embedding, an LM head's exact rows) kept in a GGUF
file's own block form: int8 values with an fp32 scale, and offset, per block; or an
F16/BF16 table as the file holds it.

A 49k x 2048 vocabulary is 400 MB in float32 and about 125 MB this way, and a lookup
widens only the rows it reads, to exactly the values the ``gguf`` package's
dequantizer gives (:class:`mellea.engine.gguf_blocks.Int8Blocks`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn


class BlockTable(nn.Module):
    """int8 values [rows, K] with fp32 scales (and offsets) per block of ``block`` along
    each row, or fp16/bf16 values [rows, K] with no scales (``block`` K); called with
    token ids, returns their rows in float32 (an embedding), exactly."""

    read_by_rows = True  # a step reads a few rows: huge pages would not pay (huge_pages.py)

    def __init__(
        self,
        q: torch.Tensor,
        scales: torch.Tensor | None,
        offsets: torch.Tensor | None,
        block: int,
    ) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = q.shape
        self.block = block
        self.register_buffer("q", q)
        self.register_buffer("scales", scales)
        self.register_buffer("offsets", offsets)

    def _widen(
        self, q: torch.Tensor, scales: torch.Tensor | None, offsets: torch.Tensor | None
    ) -> torch.Tensor:
        """Rows of values and their blocks' scales (and offsets) -> float32 [n, K]."""
        values = q.float().view(q.shape[0], -1, self.block)
        if scales is None:  # fp16/bf16 values: widened exactly
            return values.view(q.shape[0], self.embedding_dim)
        # Two roundings, multiply then add, as the reference dequantizer does them.
        values.mul_(scales.unsqueeze(-1))
        if offsets is not None:
            values.add_(offsets.unsqueeze(-1))
        return values.view(q.shape[0], self.embedding_dim)

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        """The float32 rows at ``index`` (any shape) -> [*index.shape, K]."""
        flat = index.reshape(-1)
        scales = None if self.scales is None else self.scales[flat]
        offsets = None if self.offsets is None else self.offsets[flat]
        values = self._widen(self.q[flat], scales, offsets)
        return values.view(*index.shape, self.embedding_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> their float32 rows (an embedding lookup)."""
        return self.rows(ids)

    def chunks(self, size: int = 4096) -> Iterator[torch.Tensor]:
        """The whole table in float32, ``size`` rows at a time."""
        for first in range(0, self.num_embeddings, size):
            part = slice(first, first + size)  # slices: no gather of the rows
            scales = None if self.scales is None else self.scales[part]
            offsets = None if self.offsets is None else self.offsets[part]
            yield self._widen(self.q[part], scales, offsets)

    def dequantized(self) -> torch.Tensor:
        """The whole table in float32 (tests and small models)."""
        return torch.cat(list(self.chunks()))
