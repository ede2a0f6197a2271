"""The LM head in a compact format: its scoring layer built from a table kept in a
GGUF's blocks (:func:`table_layer`, on a thread of its own while the model loads:
:class:`HeadScorer`), and the head whose best logits are recomputed in fp32
(:class:`RefinedHead`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import nn

from mellea.engine import cpu_kernels
from mellea.engine.formats.linear import Bf16Linear, Int4Linear, Int8Linear
from mellea.engine.formats.quantize import GROUP, quantize_groups, quantize_rows
from mellea.engine.formats.tiles import TILE, tile_groups
from mellea.engine.heap import trim_malloc

# How many of the best logits the LM head recomputes in fp32 (see RefinedHead).
HEAD_REFINE = 32


class RefinedHead(nn.Module):
    """An LM head whose candidates come from bf16 or int8 weights and whose best logits
    are exact fp32.

    The fast kernel scores the whole vocabulary (reading a half or a quarter of fp32's
    bytes); the :data:`HEAD_REFINE` best of each row are then recomputed from the fp32
    hidden state and ``exact``, the fp32 weight rows (a few dozen rows: cheap). That
    takes the weights' rounding out of the greedy choice and the top logprobs, and the
    output rounding of the bf16 kernels too (a logit near 20 in bf16 has steps of 1/8,
    which makes ties that fp32 tells apart).
    """

    def __init__(self, inner: nn.Module, exact: torch.Tensor | nn.Module) -> None:
        """``exact``: the fp32 weight [vocab, hidden], or a module whose ``rows(index)``
        widens rows of it (a :class:`~mellea.engine.block_table.BlockTable`)."""
        super().__init__()
        self.inner = inner
        if isinstance(exact, torch.Tensor):
            self.register_buffer("exact", exact.detach().float())
            self.table = None
        else:
            self.exact = None
            self.table = exact

    def forward(self, hidden: torch.Tensor, also: torch.Tensor | None = None) -> torch.Tensor:
        """[N, hidden] -> fp32 logits [N, vocab]; ``also`` [N, m]: more columns of each
        row to recompute in fp32 (a scored prompt's own tokens)."""
        logits = self.inner(hidden).float()
        k = min(HEAD_REFINE, logits.shape[-1])
        if logits.device.type == "cpu" and cpu_kernels.available():
            top = cpu_kernels.top_k(logits, k)[1]
        else:
            top = logits.topk(k, dim=-1).indices
        if also is not None:  # a column twice gets the same value twice
            top = torch.cat([top, also.to(top.dtype)], dim=1)
        rows = self.exact[top] if self.table is None else self.table.rows(top)
        exact = torch.bmm(rows, hidden.float().unsqueeze(-1)).squeeze(-1)
        if self.inner.bias is not None:
            exact = exact + self.inner.bias[top]
        return logits.scatter_(-1, top, exact)


def table_layer(table: Any, fmt: str) -> nn.Module:
    """A ``fmt`` layer scoring against every row of ``table`` (a
    :class:`~mellea.engine.block_table.BlockTable`), built 1024 rows at a time: no
    float32 copy of the whole table, and each chunk's results written into the whole
    outputs (no second copy of them to concatenate)."""
    if fmt == "bfloat16":
        (weight,) = _by_table_chunks(table, lambda c: (c.to(torch.bfloat16),))
        return Bf16Linear(weight, None)
    if fmt == "int4" and table.embedding_dim % GROUP == 0:
        if cpu_kernels.available():  # each chunk tiled as it is quantized (whole tiles)
            tiles = -(-table.num_embeddings // TILE)
            tiled = _by_table_chunks(table, lambda c: tile_groups(*quantize_groups(c)), tiles)
            return Int4Linear(None, None, groups=tiled, tiled_rows=table.num_embeddings)
        return Int4Linear(None, None, groups=_by_table_chunks(table, quantize_groups))
    return Int8Linear(None, None, rows=_by_table_chunks(table, quantize_rows))


def _by_table_chunks(table: Any, convert: Any, length: int = 0) -> tuple[torch.Tensor, ...]:
    """``convert`` (rows -> a tuple of results along a first dimension, ``length`` long
    for the whole table: its rows by default) of each 1024-row chunk of ``table``,
    written into tensors for the whole table. The heap is trimmed after each chunk: a
    chunk's temporaries (about 6 copies of it) would otherwise stay resident between the
    small results (0.15 GB more at the peak of a 1.7B model's load)."""
    whole: tuple[torch.Tensor, ...] = ()
    first = 0
    for chunk in table.chunks(1024):
        parts = convert(chunk)
        if not whole:
            rows = length or table.num_embeddings
            whole = tuple(torch.empty((rows, *p.shape[1:]), dtype=p.dtype) for p in parts)
        for out, part in zip(whole, parts, strict=True):
            out[first : first + part.shape[0]].copy_(part)
        first += parts[0].shape[0]
        del chunk, parts
        trim_malloc()
    return whole


class HeadScorer:
    """Builds the LM head's scoring layer (:func:`table_layer`) in a thread of its own,
    on one torch thread, as soon as the loader hands over the head's table (a GGUF's
    ``output`` or, tied, ``token_embd``), while the loader builds the decoder layers.
    An 8B-shaped Q4_K_M file's 128256 x 4096 head took 4.2 s of a 17 s load on one
    thread, after all the layers. Use as a context manager: leaving it waits for the
    thread."""

    def __init__(self, fmt: str, tied: bool) -> None:
        self.fmt = fmt
        self.table_name = "embed_tokens.weight" if tied else "lm_head.weight"
        self._pool: Any = None
        self._future: Any = None
        self._table: nn.Module | None = None

    def submit(self, name: str, table: nn.Module) -> None:
        """Start building the scoring layer if ``name`` is the head's table (the loader
        keeps tables in their blocks only for the compact formats)."""
        if name != self.table_name:
            return
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mellea-head")
        self._table = table
        self._future = self._pool.submit(_on_one_thread, table_layer, table, self.fmt)

    def result(self, table: nn.Module) -> nn.Module | None:
        """The scoring layer built for ``table`` (waiting for it); None if none was
        started for that table. Raises what building it raised."""
        if self._future is None or table is not self._table:
            return None
        return self._future.result()

    def __enter__(self) -> HeadScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _on_one_thread(fn: Any, *args: Any) -> Any:
    torch.set_num_threads(1)  # this thread's own count: the loader keeps the other core
    return fn(*args)


def scoring_layer(table: nn.Module, fmt: str, scorer: HeadScorer | None) -> nn.Module:
    """The ``fmt`` scoring layer of ``table``: the one ``scorer`` built while the model
    loaded, else :func:`table_layer` built now."""
    built = scorer.result(table) if scorer is not None else None
    return built if built is not None else table_layer(table, fmt)
