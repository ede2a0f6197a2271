"""Triton attention over the paged KV cache: decode and (chunked) prefill.

Both kernels walk a sequence's keys in tiles of ``BLOCK_N`` positions, finding each
position's physical cache block through the block table, so any cache block size
works. Softmax is online (running max and sum) with fp32 accumulation.

``tl.dot`` operands keep the input dtype (fp32 at full "ieee" precision, to match the
reference). Under the interpreter, which cannot do bf16 arithmetic, bf16 operands are
upcast to fp32 instead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class LaunchConfig:
    """Tile sizes and launch options of one attention kernel specialisation."""

    block_m: int  # query rows per program (decode: query heads of a group, padded)
    block_n: int  # key positions per loop step
    block_d: int  # head_dim rounded up to a power of 2
    num_warps: int
    num_stages: int = 2


def decode_config(dtype: torch.dtype, head_dim: int, group: int) -> LaunchConfig:
    """Launch config for decode; chosen so sm_80 compiles without register spills."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    return LaunchConfig(
        block_m=max(16, triton.next_power_of_2(group)),
        block_n=32,
        block_d=block_d,
        num_warps=4 if block_d <= 64 else 8,
    )


def prefill_config(dtype: torch.dtype, head_dim: int) -> LaunchConfig:
    """Launch config for prefill; chosen so sm_80 compiles without register spills."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    if block_d > 128:  # Gemma 3's 256: narrower key tiles, or half precision spills
        return LaunchConfig(block_m=32, block_n=16, block_d=block_d, num_warps=8)
    return LaunchConfig(
        block_m=32 if dtype == torch.float32 else 64,
        block_n=32,
        block_d=block_d,
        num_warps=4 if block_d <= 64 else 8,
    )


@triton.jit
def _tile_kv(
    cache_ptr,
    tables_ptr,
    pos,
    valid,
    dims,
    kv_head,
    block_size,
    head_dim,
    stride_b,
    stride_s,
    stride_h,
    DOT_TY: tl.constexpr,
):
    """[BLOCK_N, BLOCK_D] of one kv head at positions ``pos``, zeros where invalid."""
    phys = tl.load(tables_ptr + pos // block_size, mask=valid, other=0).to(tl.int64)
    rows = phys * stride_b + (pos % block_size).to(tl.int64) * stride_s + kv_head * stride_h
    mask = valid[:, None] & (dims < head_dim)[None, :]
    tile = tl.load(cache_ptr + rows[:, None] + dims[None, :], mask=mask, other=0.0)
    return tile.to(DOT_TY)


@triton.jit
def _online_softmax_step(s, v, m_i, l_i, acc, PRECISION: tl.constexpr):
    """Fold one tile of masked scores ``s`` (log2 scale) and its values ``v`` into the
    running max ``m_i``, denominator ``l_i`` and output ``acc``; returns all three."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    # A row with no visible key yet (sliding window) keeps m = -inf: shift by 0 instead.
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def _decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    tables_ptr,
    lens_ptr,
    out_ptr,
    stride_q_b,
    stride_q_h,
    stride_kc_b,
    stride_kc_s,
    stride_kc_h,
    stride_vc_b,
    stride_vc_s,
    stride_vc_h,
    stride_tab,
    stride_o_b,
    stride_o_h,
    group,
    block_size,
    head_dim,
    qk_scale,
    window,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_TY: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # One program per (sequence, kv head): the group's query heads share each K/V tile.
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    ctx = tl.load(lens_ptr + seq)
    g = tl.arange(0, BLOCK_G)
    dims = tl.arange(0, BLOCK_D)
    heads = kv_head * group + g
    q_mask = (g < group)[:, None] & (dims < head_dim)[None, :]
    q_ptrs = q_ptr + seq * stride_q_b + heads[:, None] * stride_q_h + dims[None, :]
    q = tl.load(q_ptrs, mask=q_mask, other=0.0).to(DOT_TY)
    tables = tables_ptr + seq * stride_tab

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    # With a sliding window (> 0) only the last ``window`` positions are visible.
    lo = tl.where(window > 0, tl.maximum(ctx - window, 0), 0)
    for start in range((lo // BLOCK_N) * BLOCK_N, ctx, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        valid = (pos < ctx) & (pos >= lo)
        k = _tile_kv(
            k_cache_ptr, tables, pos, valid, dims, kv_head, block_size, head_dim,
            stride_kc_b, stride_kc_s, stride_kc_h, DOT_TY,
        )  # fmt: skip
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        v = _tile_kv(
            v_cache_ptr, tables, pos, valid, dims, kv_head, block_size, head_dim,
            stride_vc_b, stride_vc_s, stride_vc_h, DOT_TY,
        )  # fmt: skip
        m_i, l_i, acc = _online_softmax_step(s, v, m_i, l_i, acc, PRECISION)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_ptrs = out_ptr + seq * stride_o_b + heads[:, None] * stride_o_h + dims[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=q_mask)


@triton.jit
def _decode_split_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    tables_ptr,
    lens_ptr,
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    stride_q_b,
    stride_q_h,
    stride_kc_b,
    stride_kc_s,
    stride_kc_h,
    stride_vc_b,
    stride_vc_s,
    stride_vc_h,
    stride_tab,
    group,
    block_size,
    head_dim,
    qk_scale,
    window,
    num_splits,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_TY: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # One program per (sequence, kv head, split): each split walks its share of the
    # visible tiles and leaves its running max, sum and unnormalised output behind.
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    ctx = tl.load(lens_ptr + seq)
    g = tl.arange(0, BLOCK_G)
    dims = tl.arange(0, BLOCK_D)
    heads = kv_head * group + g
    q_mask = (g < group)[:, None] & (dims < head_dim)[None, :]
    q_ptrs = q_ptr + seq * stride_q_b + heads[:, None] * stride_q_h + dims[None, :]
    q = tl.load(q_ptrs, mask=q_mask, other=0.0).to(DOT_TY)
    tables = tables_ptr + seq * stride_tab

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    lo = tl.where(window > 0, tl.maximum(ctx - window, 0), 0)
    first = (lo // BLOCK_N) * BLOCK_N
    per_split = tl.cdiv(tl.cdiv(ctx - first, BLOCK_N), num_splits) * BLOCK_N
    begin = first + split * per_split
    end = tl.minimum(begin + per_split, ctx)
    for start in range(begin, end, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        valid = (pos < ctx) & (pos >= lo)
        k = _tile_kv(
            k_cache_ptr, tables, pos, valid, dims, kv_head, block_size, head_dim,
            stride_kc_b, stride_kc_s, stride_kc_h, DOT_TY,
        )  # fmt: skip
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        v = _tile_kv(
            v_cache_ptr, tables, pos, valid, dims, kv_head, block_size, head_dim,
            stride_vc_b, stride_vc_s, stride_vc_h, DOT_TY,
        )  # fmt: skip
        m_i, l_i, acc = _online_softmax_step(s, v, m_i, l_i, acc, PRECISION)

    # Partials are [B, Hq, num_splits] (and [..., BLOCK_D] for the output), contiguous.
    row = (seq * (tl.num_programs(1) * group) + heads) * num_splits + split
    tl.store(part_m_ptr + row, m_i, mask=g < group)
    tl.store(part_l_ptr + row, l_i, mask=g < group)
    tl.store(part_acc_ptr + row[:, None] * BLOCK_D + dims[None, :], acc, mask=q_mask)


@triton.jit
def _decode_reduce_kernel(
    part_acc_ptr,
    part_m_ptr,
    part_l_ptr,
    out_ptr,
    stride_o_b,
    stride_o_h,
    n_heads,
    head_dim,
    num_splits,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # One program per (sequence, query head): merge the splits by their maxima.
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, BLOCK_S)
    dims = tl.arange(0, BLOCK_D)
    live = splits < num_splits
    row = (seq * n_heads + head) * num_splits + splits
    m = tl.load(part_m_ptr + row, mask=live, other=float("-inf"))
    sums = tl.load(part_l_ptr + row, mask=live, other=0.0)
    m_max = tl.max(m, axis=0)
    weight = tl.exp2(m - tl.where(m_max == float("-inf"), 0.0, m_max))
    total = tl.sum(sums * weight, axis=0)
    acc = tl.load(
        part_acc_ptr + row[:, None] * BLOCK_D + dims[None, :],
        mask=live[:, None] & (dims < head_dim)[None, :],
        other=0.0,
    )
    out = tl.sum(acc * weight[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    o_ptrs = out_ptr + seq * stride_o_b + head * stride_o_h + dims
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=dims < head_dim)


@triton.jit
def _prefill_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    tables_ptr,
    cu_q_ptr,
    lens_ptr,
    out_ptr,
    stride_q_t,
    stride_q_h,
    stride_kc_b,
    stride_kc_s,
    stride_kc_h,
    stride_vc_b,
    stride_vc_s,
    stride_vc_h,
    stride_tab,
    stride_o_t,
    stride_o_h,
    group,
    block_size,
    head_dim,
    qk_scale,
    window,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_TY: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # One program per (query tile, sequence, query head).
    m_block = tl.program_id(0)
    seq = tl.program_id(1).to(tl.int64)
    head = tl.program_id(2)
    q_start = tl.load(cu_q_ptr + seq).to(tl.int64)
    q_len = (tl.load(cu_q_ptr + seq + 1) - q_start).to(tl.int32)
    if m_block * BLOCK_M >= q_len:
        return
    ctx = tl.load(lens_ptr + seq).to(tl.int32)
    kv_head = head // group
    # New token i sits at position ctx - q_len + i, after the cached prefix.
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    q_pos = ctx - q_len + offs_m
    dims = tl.arange(0, BLOCK_D)
    q_mask = (offs_m < q_len)[:, None] & (dims < head_dim)[None, :]
    rows = (q_start + offs_m).to(tl.int64)
    q_ptrs = q_ptr + rows[:, None] * stride_q_t + head * stride_q_h + dims[None, :]
    q = tl.load(q_ptrs, mask=q_mask, other=0.0).to(DOT_TY)
    tables = tables_ptr + seq * stride_tab

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # Keys past the tile's last query position are causally masked for every row.
    hi = tl.minimum(ctx, ctx - q_len + (m_block + 1) * BLOCK_M)
    # With a sliding window, keys before the tile's first row's window are masked for all.
    lo = tl.where(window > 0, tl.maximum(ctx - q_len + m_block * BLOCK_M - window + 1, 0), 0)
    for start in range((lo // BLOCK_N) * BLOCK_N, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        valid = pos < ctx
        k = _tile_kv(
            k_cache_ptr, tables, pos, valid, dims, kv_head, block_size, head_dim,
            stride_kc_b, stride_kc_s, stride_kc_h, DOT_TY,
        )  # fmt: skip
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        keep = valid[None, :] & (pos[None, :] <= q_pos[:, None])
        keep = keep & ((pos[None, :] > q_pos[:, None] - window) | (window <= 0))
        s = tl.where(keep, s, float("-inf"))
        v = _tile_kv(
            v_cache_ptr, tables, pos, valid, dims, kv_head, block_size, head_dim,
            stride_vc_b, stride_vc_s, stride_vc_h, DOT_TY,
        )  # fmt: skip
        m_i, l_i, acc = _online_softmax_step(s, v, m_i, l_i, acc, PRECISION)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_ptrs = out_ptr + rows[:, None] * stride_o_t + head * stride_o_h + dims[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=q_mask)


def dot_config(dtype: torch.dtype, interpret: bool | None = None) -> tuple[tl.dtype, str]:
    """(tl.dot operand dtype, input_precision) for an input dtype."""
    if interpret is None:
        # With TRITON_INTERPRET=1 at import time, @triton.jit made interpreter functions.
        interpret = not isinstance(_decode_kernel, triton.runtime.JITFunction)
    if dtype == torch.float16:
        return tl.float16, "tf32"
    if dtype == torch.bfloat16 and not interpret:
        return tl.bfloat16, "tf32"
    return tl.float32, "ieee"


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, n_heads: int) -> None:
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("KV caches need unit stride along the head dim")
    if n_heads % k_cache.shape[2]:
        raise ValueError(f"{n_heads} query heads are not a multiple of {k_cache.shape[2]}")


def _shared_args(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    out: torch.Tensor,
    group: int,
    scale: float,
    window: int,
) -> tuple[int | float, ...]:
    """The arguments both kernels take after their tensors: strides, sizes, scale, window."""
    return (
        *q.stride()[:2],
        *k_cache.stride()[:3],
        *v_cache.stride()[:3],
        tables.stride(0),
        *out.stride()[:2],
        group,
        k_cache.shape[1],
        q.shape[-1],
        scale * _LOG2E,
        window,
    )


def _shared_meta(dtype: torch.dtype, cfg: LaunchConfig) -> dict[str, object]:
    """The compile-time settings both kernels take, besides their query tile size."""
    dot_ty, precision = dot_config(dtype)
    return {
        "BLOCK_N": cfg.block_n,
        "BLOCK_D": cfg.block_d,
        "DOT_TY": dot_ty,
        "PRECISION": precision,
        "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
    }


MAX_SPLITS = 16


@functools.cache
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def decode_splits(batch: int, n_kv: int, device: torch.device) -> int:
    """How many pieces decode attention cuts each context into.

    One program per (sequence, KV head) leaves a GPU short of loads in flight when
    there are fewer of them than about two per multiprocessor (one stream, a few KV
    heads, or a few dozen streams of a model with 3 KV heads), each walking its whole
    context alone; then each context is split so that there are about four programs
    per multiprocessor, and a second kernel merges the pieces. The count depends on
    the batch only, never on the lengths, so a captured CUDA graph stays valid for any
    context. (On an H100 a single stream's step got faster with it at 192 tokens of
    context as at 2k: benchmarks/README.md, GPU.)
    """
    if device.type != "cuda":
        return 1
    programs = batch * n_kv
    sms = _multiprocessors(device.index if device.index is not None else 0)
    if programs >= 2 * sms:
        return 1
    return min(MAX_SPLITS, triton.cdiv(4 * sms, programs))


def paged_attention_decode_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int = 0,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Triton twin of ``paged_attention_decode_ref``: ``q`` [B, Hq, D] -> [B, Hq, D].

    Grid (B, Hk); each program handles the Hq // Hk query heads of one kv head. With
    ``num_splits`` > 1 (default: :func:`decode_splits`) each context is cut into that
    many pieces, grid (B, Hk, splits), merged by a second kernel.
    """
    batch, n_heads, head_dim = q.shape
    _check_cache(k_cache, v_cache, n_heads)
    n_kv = k_cache.shape[2]
    group = n_heads // n_kv
    q = _unit_last(q)
    tables = _unit_last(block_tables)
    lens = context_lens.contiguous()
    out = torch.empty((batch, n_heads, head_dim), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    cfg = decode_config(q.dtype, head_dim, group)
    if num_splits is None:
        num_splits = decode_splits(batch, n_kv, q.device)
    if num_splits <= 1:
        _decode_kernel[(batch, n_kv)](
            q,
            k_cache,
            v_cache,
            tables,
            lens,
            out,
            *_shared_args(q, k_cache, v_cache, tables, out, group, scale, window),
            BLOCK_G=cfg.block_m,
            **_shared_meta(q.dtype, cfg),
        )
        return out
    part_m = torch.empty((batch, n_heads, num_splits), dtype=torch.float32, device=q.device)
    part_l = torch.empty_like(part_m)
    part_acc = torch.empty(
        (batch, n_heads, num_splits, cfg.block_d), dtype=torch.float32, device=q.device
    )
    shared = _shared_args(q, k_cache, v_cache, tables, out, group, scale, window)
    # The shared arguments without the output's strides (the partials are contiguous).
    args = (*shared[:9], *shared[11:])
    _decode_split_kernel[(batch, n_kv, num_splits)](
        q,
        k_cache,
        v_cache,
        tables,
        lens,
        part_acc,
        part_m,
        part_l,
        *args,
        num_splits,
        BLOCK_G=cfg.block_m,
        **_shared_meta(q.dtype, cfg),
    )
    _decode_reduce_kernel[(batch, n_heads)](
        part_acc,
        part_m,
        part_l,
        out,
        out.stride(0),
        out.stride(1),
        n_heads,
        head_dim,
        num_splits,
        BLOCK_S=triton.next_power_of_2(num_splits),
        BLOCK_D=cfg.block_d,
        num_warps=4,
    )
    return out


def paged_attention_prefill_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int = 0,
) -> torch.Tensor:
    """Triton twin of ``paged_attention_prefill_ref``: ``q`` [T, Hq, D] -> [T, Hq, D].

    Causal over ragged sequences whose new tokens follow a cached prefix of
    ``context_lens[b] - q_len`` tokens. Grid (query tiles, B, Hq).
    """
    n_tokens, n_heads, head_dim = q.shape
    _check_cache(k_cache, v_cache, n_heads)
    group = n_heads // k_cache.shape[2]
    q = _unit_last(q)
    tables = _unit_last(block_tables)
    cu = cu_seqlens_q.contiguous()
    lens = context_lens.contiguous()
    out = torch.empty((n_tokens, n_heads, head_dim), dtype=q.dtype, device=q.device)
    batch = lens.shape[0]
    if n_tokens == 0 or batch == 0:
        return out
    max_q_len = int((cu[1:] - cu[:-1]).max())  # one host sync, as in the reference
    cfg = prefill_config(q.dtype, head_dim)
    grid = (triton.cdiv(max_q_len, cfg.block_m), batch, n_heads)
    _prefill_kernel[grid](
        q,
        k_cache,
        v_cache,
        tables,
        cu,
        lens,
        out,
        *_shared_args(q, k_cache, v_cache, tables, out, group, scale, window),
        BLOCK_M=cfg.block_m,
        **_shared_meta(q.dtype, cfg),
    )
    return out
