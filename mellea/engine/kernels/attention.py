"""Attention over the paged KV cache: decode (one query per sequence) and prefill."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mellea.engine.kernels._dispatch import use_triton


def _gather(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """[length, Hk, D] of one sequence, read through its block table."""
    block_size = cache.shape[1]
    n_blocks = (length + block_size - 1) // block_size
    return cache[block_table[:n_blocks].long()].flatten(0, 1)[:length]


def paged_attention_decode_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int = 0,
) -> torch.Tensor:
    """PyTorch reference for decode.

    ``q``: [B, Hq, D] (the newest token of each sequence, already in the cache);
    caches: [num_blocks, block_size, Hk, D]; ``block_tables``: [B, max_blocks] int32;
    ``context_lens``: [B] int32 (tokens in the cache, including the newest).
    Returns [B, Hq, D]. Grouped-query attention: Hq is a multiple of Hk. A
    ``window`` > 0 limits each query to the last ``window`` positions (itself included).
    """
    batch, n_heads, head_dim = q.shape
    n_kv = k_cache.shape[2]
    block_size = k_cache.shape[1]
    max_len = int(context_lens.max())
    n_blocks = (max_len + block_size - 1) // block_size
    tables = block_tables[:, :n_blocks].long()
    # [B, n_blocks * block_size, Hk, D], padded past each sequence's length.
    keys = k_cache[tables].flatten(1, 2)[:, :max_len]
    values = v_cache[tables].flatten(1, 2)[:, :max_len]
    group = n_heads // n_kv
    qg = q.view(batch, n_kv, group, head_dim)
    scores = torch.einsum("bkgd,btkd->bkgt", qg.float(), keys.float()) * scale
    positions = torch.arange(max_len, device=q.device)
    pad = positions[None, :] >= context_lens[:, None].long()
    if window > 0:
        pad |= positions[None, :] < context_lens[:, None].long() - window
    scores.masked_fill_(pad[:, None, None, :], float("-inf"))
    probs = scores.softmax(dim=-1)
    out = torch.einsum("bkgt,btkd->bkgd", probs, values.float())
    return out.reshape(batch, n_heads, head_dim).to(q.dtype)


def paged_attention_prefill_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int = 0,
) -> torch.Tensor:
    """PyTorch reference for (chunked) prefill over ragged sequences.

    ``q``: [T, Hq, D], the new tokens of all sequences back to back, their keys and
    values already stored in the cache; ``cu_seqlens_q``: [B + 1] offsets into ``q``;
    ``context_lens``: [B] total tokens of each sequence in the cache (cached prefix +
    new). New token i of sequence b sits at position ``context_lens[b] - q_len + i``
    and attends causally to everything up to it, or to its last ``window`` positions
    when ``window`` > 0. Returns [T, Hq, D].
    """
    n_heads = q.shape[1]
    n_kv = k_cache.shape[2]
    out = torch.empty_like(q)
    starts = cu_seqlens_q.tolist()
    for b, total in enumerate(context_lens.tolist()):
        lo, hi = starts[b], starts[b + 1]
        q_len = hi - lo
        if q_len == 0:
            continue
        keys = _gather(k_cache, block_tables[b], total).to(q.dtype)
        values = _gather(v_cache, block_tables[b], total).to(q.dtype)
        if n_heads != n_kv:
            keys = keys.repeat_interleave(n_heads // n_kv, dim=1)
            values = values.repeat_interleave(n_heads // n_kv, dim=1)
        qb = q[lo:hi].transpose(0, 1)
        offset = total - q_len
        mask = torch.ones(q_len, total, dtype=torch.bool, device=q.device).tril(offset)
        if window > 0:
            mask = mask.triu(offset - window + 1)
        out[lo:hi] = F.scaled_dot_product_attention(
            qb, keys.transpose(0, 1), values.transpose(0, 1), attn_mask=mask, scale=scale
        ).transpose(0, 1)
    return out


def paged_attention_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int = 0,
) -> torch.Tensor:
    """Decode attention; Triton on CUDA, reference elsewhere."""
    args = (q, k_cache, v_cache, block_tables, context_lens, scale, window)
    if use_triton(q):
        from mellea.engine.kernels.attention_triton import paged_attention_decode_triton

        return paged_attention_decode_triton(*args)
    return paged_attention_decode_ref(*args)


def paged_attention_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int = 0,
) -> torch.Tensor:
    """Prefill attention over the paged cache; Triton on CUDA, reference elsewhere."""
    args = (q, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale, window)
    if use_triton(q):
        from mellea.engine.kernels.attention_triton import paged_attention_prefill_triton

        return paged_attention_prefill_triton(*args)
    return paged_attention_prefill_ref(*args)
