"""Attention on the CPU fast path: few, large PyTorch ops over the paged KV cache.

Same maths as the kernels of :mod:`mellea.engine.kernels.attention` (which the
reference path and GPUs run), including sliding windows (``window``: each query sees
its last ``window`` positions; ``None``: all).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    """Where each token's K/V goes and what each query attends to.

    The first ``num_decode`` tokens are one query per decoding sequence; the rest are
    prefill chunks, ``prefill_cu_seqlens`` giving their offsets (relative to
    ``num_decode``). Context lengths count every token of the sequence in the cache,
    including the ones computed in this step.
    """

    slot_mapping: torch.Tensor  # [T] int64
    num_decode: int = 0
    decode_block_tables: torch.Tensor | None = None  # [Bd, max_blocks] int32
    decode_context_lens: torch.Tensor | None = None  # [Bd] int32
    decode_max_len: int = 0
    decode_block_index: torch.Tensor | None = None  # [Bd * max_blocks] int64, flattened tables
    decode_attn_mask: torch.Tensor | None = None  # [Bd, 1, 1, max_len], False past the end
    prefill_block_tables: torch.Tensor | None = None  # [Bp, max_blocks] int32
    prefill_cu_seqlens: torch.Tensor | None = None  # [Bp + 1] int32
    prefill_context_lens: torch.Tensor | None = None  # [Bp] int32
    prefill_query_lens: tuple[int, ...] = ()
    prefill_total_lens: tuple[int, ...] = ()  # prefill_context_lens as Python ints
    prefill_has_context: bool = False  # some chunk attends to tokens of earlier steps
    _window_masks: dict[int, torch.Tensor | None] = field(default_factory=dict, repr=False)

    def decode_mask(self, window: int | None) -> torch.Tensor | None:
        """The decode mask for layers with this window (built once per step)."""
        if window is None or self.decode_max_len <= window:
            return self.decode_attn_mask
        if window not in self._window_masks:
            span = torch.arange(self.decode_max_len, device=self.decode_context_lens.device)
            lens = self.decode_context_lens[:, None]
            keep = (span[None, :] < lens) & (span[None, :] >= lens - window)
            self._window_masks[window] = keep[:, None, None, :]
        return self._window_masks[window]


def _causal(rows: int, cols: int, window: int | None, device: torch.device) -> torch.Tensor:
    """[rows, cols] mask of the last ``rows`` positions of ``cols`` attending causally."""
    offset = cols - rows
    mask = torch.ones(rows, cols, dtype=torch.bool, device=device).tril(offset)
    return mask if window is None else mask.triu(offset - window + 1)


def cpu_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """Decode attention: one block gather per layer and one fused SDPA call.

    The query heads of a KV group are laid out as SDPA's query-length axis, so each
    group is one small attention against its shared K/V and no K/V is repeated.
    ``q``: [B, Hq, D] -> [B, Hq * D].
    """
    batch, n_heads, head_dim = q.shape
    n_kv, block_size = k_cache.shape[2], k_cache.shape[1]
    width = meta.decode_block_index.shape[0] // batch * block_size
    max_len = meta.decode_max_len
    # A half-width cache is read back as q's dtype (.to is a no-op for a cache of it).
    keys = k_cache.index_select(0, meta.decode_block_index).view(batch, width, n_kv, head_dim)
    keys = keys.to(q.dtype)
    values = v_cache.index_select(0, meta.decode_block_index).view(batch, width, n_kv, head_dim)
    values = values.to(q.dtype)
    out = F.scaled_dot_product_attention(
        q.reshape(batch, n_kv, n_heads // n_kv, head_dim),
        keys[:, :max_len].transpose(1, 2),
        values[:, :max_len].transpose(1, 2),
        attn_mask=meta.decode_mask(window),
        scale=scale,
    )
    return out.reshape(batch, n_heads * head_dim)


def causal_prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    query_lens: tuple[int, ...],
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """Attention of whole fresh prompts over their own K/V (no cache read).

    ``q``: [T, Hq, D], ``k``/``v``: [T, Hk, D], prompts back to back -> [T, Hq * D].
    """
    gqa = q.shape[1] != k.shape[1]
    outs = []
    start = 0
    for length in query_lens:
        end = start + length
        mask = None
        if window is not None and length > window:
            mask = _causal(length, length, window, q.device)
        # 4-D inputs: with 3-D ones SDPA falls back to its slow math path on CPU.
        out = F.scaled_dot_product_attention(
            q[start:end].transpose(0, 1)[None],
            k[start:end].transpose(0, 1)[None],
            v[start:end].transpose(0, 1)[None],
            attn_mask=mask,
            is_causal=mask is None,
            scale=scale,
            enable_gqa=gqa,
        )
        outs.append(out[0].transpose(0, 1).reshape(length, -1))
        start = end
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def cpu_paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """Prefill chunks that also attend to tokens already in the cache (a cached prefix
    or an earlier chunk), read through the block tables, with GQA inside SDPA.
    ``q``: [T, Hq, D] -> [T, Hq * D]."""
    block_size, n_kv, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    gqa = q.shape[1] != n_kv
    outs = []
    start = 0
    for b, (length, total) in enumerate(
        zip(meta.prefill_query_lens, meta.prefill_total_lens, strict=True)
    ):
        blocks = meta.prefill_block_tables[b, : -(-total // block_size)].long()
        keys = k_cache.index_select(0, blocks).view(-1, n_kv, head_dim)[:total].to(q.dtype)
        values = v_cache.index_select(0, blocks).view(-1, n_kv, head_dim)[:total].to(q.dtype)
        # New token i sits at position total - length + i and sees everything up to it.
        mask = None
        if total > length or (window is not None and total > window):
            mask = _causal(length, total, window, q.device)
        out = F.scaled_dot_product_attention(
            q[start : start + length].transpose(0, 1)[None],
            keys.transpose(0, 1)[None],
            values.transpose(0, 1)[None],
            attn_mask=mask,
            is_causal=mask is None,
            scale=scale,
            enable_gqa=gqa,
        )
        outs.append(out[0].transpose(0, 1).reshape(length, -1))
        start += length
    return outs[0] if len(outs) == 1 else torch.cat(outs)
