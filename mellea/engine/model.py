"""A decoder of any of the engine's families over a flat batch and a paged KV cache.

Tokens of all scheduled sequences are packed back to back (no padding): first one
token per decoding sequence, then the prompt chunks of prefilling sequences. Linear
layers see the whole flat batch at once; only attention looks at sequence borders.

What differs between families (which norms surround attention and the MLP, q/k
norms, multipliers, windows, RoPE per layer kind, activation) comes from
:class:`~mellea.engine.config.ModelConfig` and its :class:`~mellea.engine.families.Family`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from mellea.engine import cpu_kernels, kernels
from mellea.engine.compute_path import ComputePath, choose_compute_path
from mellea.engine.config import ModelConfig
from mellea.engine.cpu_attention import (
    AttentionMetadata,
    causal_prefill_attention,
    cpu_decode_attention,
    cpu_paged_prefill_attention,
)
from mellea.engine.formats.head import RefinedHead
from mellea.engine.formats.linear import Int4Linear, Int8Linear, StackedLinear
from mellea.engine.rope import interleaved_order, rope_tables, rotations
from mellea.engine.switches import read_switches
from mellea.engine.weights import load_weights

if TYPE_CHECKING:
    from mellea.engine.lora import AdapterSet, LoraStep

__all__ = ["AttentionMetadata", "ComputePath", "DecoderModel", "build_model"]


def _fused_operands(
    linear: Int4Linear | Int8Linear,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What :func:`cpu_kernels.decode_layer` takes for one tiled projection: int4
    (qweight, scales, mins), a GGUF's Q4_K exactly (qweight, uint8 sub-scales, fp16
    super-scales), int8 (qweight, wsum, scale) or a GGUF's blocks in the byte form
    (qweight uint8 [T, G, 8, 64], subs, supers); the op tells them apart by dtypes and
    qweight's shape."""
    if getattr(linear, "exact", False):
        return linear.qweight, linear.subs, linear.supers
    if linear.qweight.dtype == torch.int8:
        return linear.qweight, linear.wsum, linear.tiled_scale
    return linear.qweight, *linear.factors


def _norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None,
    path: ComputePath,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RMSNorm(x + residual), returning the new residual too (None in -> None out).

    On the C++ path the residual is updated in place.
    """
    if path.cpp:
        return cpu_kernels.rms_norm(x, weight, eps, residual), residual
    if path.kernels:
        return kernels.rms_norm(x, weight, eps, residual)
    if residual is not None:
        x = x + residual
    return F.rms_norm(x, weight.shape, weight, eps), (x if residual is not None else None)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float, path: ComputePath) -> torch.Tensor:
    """RMSNorm over the last dim of ``x`` (any shape) with ``weight`` of that size."""
    if path is ComputePath.TORCH:
        return F.rms_norm(x, weight.shape, weight, eps)
    flat = x.reshape(-1, weight.shape[0])
    if path.cpp:
        return cpu_kernels.rms_norm(flat, weight, eps).view(x.shape)
    return kernels.rms_norm(flat, weight, eps)[0].view(x.shape)


class Attention(nn.Module):
    """Self-attention with fused QKV, optional q/k norms, RoPE and a paged KV cache.

    Each :class:`ComputePath` has its own forward function, with the same maths; the
    one that runs (and its prefill attention) is chosen when the path is set.
    """

    def __init__(self, cfg: ModelConfig, layer: int, path: ComputePath) -> None:
        super().__init__()
        self.path = path.layer_path  # see DecoderModel.set_path
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.scale = cfg.attn_scale
        self.eps = cfg.rms_norm_eps
        self.rope_kind = cfg.layer_kinds[layer]
        self.window = cfg.layer_windows[layer]
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, cfg.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, cfg.o_bias)
        self.qk_norm = cfg.family.qk_norm
        if self.qk_norm is not None:
            per_head = self.qk_norm == "head"
            self.q_norm = nn.Parameter(torch.ones(cfg.head_dim if per_head else self.q_size))
            self.k_norm = nn.Parameter(torch.ones(cfg.head_dim if per_head else self.kv_size))

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        rope: dict[str, torch.Tensor],
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """``x``: [T, hidden] -> [T, hidden]; writes this step's K/V into the cache.

        ``rope`` maps a layer kind to its cos|sin table on the kernel path and to this
        step's complex rotations [T, 1, D/2] on the CPU path.
        """
        qkv = self.qkv_proj(x)
        out = self._forward_path(self, qkv, positions, rope, k_cache, v_cache, meta)
        return self.o_proj(out)

    @property
    def path(self) -> ComputePath:
        """The path this layer runs (see :meth:`DecoderModel.set_path`)."""
        return self._path

    @path.setter
    def path(self, path: ComputePath) -> None:
        self._path = path
        if path.kernels:
            self._forward_path, self._prefill = (
                Attention._forward_kernels,
                Attention._prefill_kernels,
            )
        elif path is ComputePath.CPP:
            self._forward_path, self._prefill = Attention._forward_cpp, Attention._prefill_cpu
        else:
            self._forward_path, self._prefill = Attention._forward_torch, Attention._prefill_cpu

    def _split_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [T, Hq, D], k and v [T, Hk, D] of the fused projection, q and k normed."""
        n_tokens = qkv.shape[0]
        v = qkv[:, self.q_size + self.kv_size :].view(n_tokens, self.num_kv_heads, self.head_dim)
        q, k = qkv[:, : self.q_size + self.kv_size].split([self.q_size, self.kv_size], -1)
        q = q.reshape(n_tokens, self.num_heads, self.head_dim)
        k = k.reshape(n_tokens, self.num_kv_heads, self.head_dim)
        if self.qk_norm is not None:
            q, k = self._norm_qk(q, k)
        return q, k, v

    def _forward_kernels(
        self,
        qkv: torch.Tensor,
        positions: torch.Tensor,
        rope: dict[str, torch.Tensor],
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """The kernels' path: RoPE from the cos|sin table, KV store and paged attention."""
        q, k, v = self._split_qkv(qkv)
        q, k = kernels.rotary_embedding(positions, q, k, rope[self.rope_kind])
        kernels.store_kv_cache(k, v, k_cache, v_cache, meta.slot_mapping)
        return self._attend(q, k, v, k_cache, v_cache, meta, self._decode_kernels)

    def _forward_torch(
        self,
        qkv: torch.Tensor,
        positions: torch.Tensor,
        rope: dict[str, torch.Tensor],
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        decode: Callable[..., torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The CPU path in PyTorch ops (``decode``: its decode attention, by default
        :func:`cpu_decode_attention`); ``positions`` are in ``rope``'s rotations."""
        n_tokens, n_heads, n_kv = qkv.shape[0], self.num_heads, self.num_kv_heads
        q, k, v = self._split_qkv(qkv)
        # q/k dims were permuted at load time so that each rotary pair is adjacent:
        # RoPE on q and k together is then a single complex multiply.
        if self.qk_norm is None:
            qk = qkv[:, : self.q_size + self.kv_size].view(n_tokens, n_heads + n_kv, -1, 2)
        else:
            qk = torch.cat([q, k], dim=1).view(n_tokens, n_heads + n_kv, -1, 2)
        qk = torch.view_as_real(torch.view_as_complex(qk) * rope[self.rope_kind])
        qk = qk.view(n_tokens, n_heads + n_kv, self.head_dim)
        q, k = qk[:, :n_heads], qk[:, n_heads:]
        # Rounded to the cache's dtype (a no-op for an fp32 cache).
        k_cache.view(-1, n_kv, self.head_dim).index_copy_(0, meta.slot_mapping, k.to(k_cache.dtype))
        v_cache.view(-1, n_kv, self.head_dim).index_copy_(0, meta.slot_mapping, v.to(v_cache.dtype))
        return self._attend(q, k, v, k_cache, v_cache, meta, decode or self._decode_torch)

    def _forward_cpp(
        self,
        qkv: torch.Tensor,
        positions: torch.Tensor,
        rope: dict[str, torch.Tensor],
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """The CPU path with C++ ops: one op for RoPE and the KV store where it applies
        (no q/k norms), C++ decode attention, PyTorch prefill."""
        if self.qk_norm is not None:
            return self._forward_torch(
                qkv, positions, rope, k_cache, v_cache, meta, self._decode_cpp
            )
        n_tokens, n_heads, n_kv, head_dim = (
            qkv.shape[0],
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
        )
        # One C++ op rotates q and k in place and writes K and V into the cache.
        cpu_kernels.rope_store_kv(
            qkv, rope[self.rope_kind], k_cache, v_cache, meta.slot_mapping, n_heads, n_kv
        )
        q = qkv[:, : self.q_size].view(n_tokens, n_heads, head_dim)
        if meta.num_decode == n_tokens:  # decodes only: k and v are in the cache now
            return self._decode_cpp(q, k_cache, v_cache, meta)
        k = qkv[:, self.q_size : self.q_size + self.kv_size].view(n_tokens, n_kv, head_dim)
        v = qkv[:, self.q_size + self.kv_size :].view(n_tokens, n_kv, head_dim)
        return self._attend(q, k, v, k_cache, v_cache, meta, self._decode_cpp)

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        decode: Callable[..., torch.Tensor],
    ) -> torch.Tensor:
        """Attention of this step's queries: decodes over the cache with ``decode``,
        prefills as they can."""
        nd = meta.num_decode
        if nd == q.shape[0]:
            return decode(q, k_cache, v_cache, meta)
        if nd == 0:
            return self._prefill(self, q, k, v, k_cache, v_cache, meta)
        return torch.cat(
            [
                decode(q[:nd], k_cache, v_cache, meta),
                self._prefill(self, q[nd:], k[nd:], v[nd:], k_cache, v_cache, meta),
            ]
        )

    def _norm_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RMSNorm of q and k, per head (Qwen3, Gemma 3) or over all heads (OLMo 2)."""
        if self.qk_norm == "head":
            return (
                _rms(q, self.q_norm, self.eps, self.path),
                _rms(k, self.k_norm, self.eps, self.path),
            )
        q = _rms(q.reshape(q.shape[0], -1), self.q_norm, self.eps, self.path)
        k = _rms(k.reshape(k.shape[0], -1), self.k_norm, self.eps, self.path)
        return q.view(q.shape[0], self.num_heads, -1), k.view(k.shape[0], self.num_kv_heads, -1)

    def _decode_cpp(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        out = cpu_kernels.paged_decode(
            q,
            k_cache,
            v_cache,
            meta.decode_block_tables,
            meta.decode_context_lens,
            self.scale,
            self.window,
        )
        return out.view(q.shape[0], self.q_size)

    def _decode_torch(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        return cpu_decode_attention(q, k_cache, v_cache, meta, self.scale, self.window)

    def _decode_kernels(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        out = kernels.paged_attention_decode(
            q,
            k_cache,
            v_cache,
            meta.decode_block_tables,
            meta.decode_context_lens,
            self.scale,
            self.window or 0,
        )
        return out.reshape(q.shape[0], self.q_size)

    def _prefill_cpu(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        if not meta.prefill_has_context:
            # Whole fresh prompts: attend over this step's K/V, no cache read-back.
            return causal_prefill_attention(
                q, k, v, meta.prefill_query_lens, self.scale, self.window
            )
        return cpu_paged_prefill_attention(q, k_cache, v_cache, meta, self.scale, self.window)

    def _prefill_kernels(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        out = kernels.paged_attention_prefill(
            q.contiguous(),
            k_cache,
            v_cache,
            meta.prefill_block_tables,
            meta.prefill_cu_seqlens,
            meta.prefill_context_lens,
            self.scale,
            self.window or 0,
        )
        return out.reshape(q.shape[0], self.q_size)


class MLP(nn.Module):
    """Gated feed-forward (SwiGLU, or GELU-tanh for Gemma) with a fused gate/up projection."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, cfg.mlp_bias)
        self.silu = cfg.activation == "silu"
        self.act = kernels.silu_and_mul if self.silu else kernels.gelu_tanh_and_mul
        self.path = ComputePath.REFERENCE  # only CPP differs; see DecoderModel.set_path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[T, hidden] -> [T, hidden]."""
        h = self.gate_up_proj(x)
        if self.path is ComputePath.CPP and self.silu and h.dtype == torch.float32:
            return self.down_proj(cpu_kernels.silu_and_mul(h))
        return self.down_proj(self.act(h))


class DecoderLayer(nn.Module):
    """Attention then MLP, each with the norms its family puts around it.

    A layer returns its MLP output before the residual add; the next layer (or the
    final norm) adds it, fused into its first norm where it has one.
    """

    def __init__(self, cfg: ModelConfig, layer: int, path: ComputePath) -> None:
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.path = path.layer_path  # see DecoderModel.set_path
        self.residual_multiplier = cfg.residual_multiplier
        fam = cfg.family
        self.norms = (fam.attn_in_norm, fam.attn_out_norm, fam.mlp_in_norm, fam.mlp_out_norm)
        for name in self.norms:
            if name is not None:
                self.register_parameter(name, nn.Parameter(torch.ones(cfg.hidden_size)))
        self.self_attn = Attention(cfg, layer, path)
        self.mlp = MLP(cfg)
        self.mlp.path = self.path

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        positions: torch.Tensor,
        rope: dict[str, torch.Tensor],
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (output before the residual add, residual)."""
        attn_in, attn_out, mlp_in, mlp_out = self.norms
        h, residual = self._add_norm(x, residual, attn_in)
        h = self._finish(self.self_attn(h, positions, rope, k_cache, v_cache, meta), attn_out)
        h, residual = self._add_norm(h, residual, mlp_in)
        return self._finish(self.mlp(h), mlp_out), residual

    def _add_norm(
        self, x: torch.Tensor, residual: torch.Tensor | None, norm: str | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual); without a norm, the sum twice."""
        if norm is None:
            total = x if residual is None else x + residual
            return total, total
        h, total = _norm(x, getattr(self, norm), self.eps, residual, self.path)
        return h, (x if total is None else total)

    def _finish(self, h: torch.Tensor, norm: str | None) -> torch.Tensor:
        """A sublayer's output as it joins the residual: normed and scaled if so configured."""
        if norm is not None:
            h = _rms(h, getattr(self, norm), self.eps, self.path)
        if self.residual_multiplier != 1.0:
            h = h * self.residual_multiplier
        return h


class DecoderModel(nn.Module):
    """Embedding, decoder layers, final norm and LM head.

    ``path`` is the :class:`ComputePath` it runs; the CPU fast path stores q/k head
    dimensions in interleaved rotary order, so the family of paths is fixed when the
    model is built.
    """

    def __init__(
        self, cfg: ModelConfig, max_positions: int, path: ComputePath = ComputePath.REFERENCE
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.path = path
        self.fast_cpu = not path.kernels
        # Given its (uninitialised) weight, the embedding skips its random init: on the
        # meta device normal_ runs through torch._refs, which imports torch._dynamo and
        # with it Triton, whose nanobind objects then print "leaked" lines at every exit.
        table = torch.empty(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, _weight=table)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, path) for i in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        if cfg.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.max_positions = max_positions
        self.embed_scale = cfg.embed_scale
        self.rope: dict[str, torch.Tensor] = {}
        self._fused: list[tuple] | None = None  # see plan_fused_decode
        self.adapters: AdapterSet | None = None  # LoRA deltas, hooked on the projections

    def set_path(self, path: ComputePath) -> None:
        """Run ``path`` from now on: within the family the model was built for (the CPU
        fast path or the kernels'), :attr:`~ComputePath.CPP_FUSED` only once
        :meth:`plan_fused_decode` found it possible. For tests and benchmarks that
        compare paths on one model; :func:`build_model` sets it once otherwise."""
        if path.kernels == self.fast_cpu:
            raise ValueError(f"a model built for {self.path.value} cannot run {path.value}")
        if path is ComputePath.CPP_FUSED and self._fused is None:
            raise ValueError("this model's layers cannot run fused")
        self.path = path
        for layer in self.layers:
            layer.path = layer.self_attn.path = layer.mlp.path = path.layer_path

    def init_rope(self, device: torch.device) -> None:
        """Build the rotary tables (kept out of the state dict)."""
        tables = rope_tables(self.cfg, self.max_positions)
        if self.fast_cpu:
            tables = {k: rotations(t, self.cfg.head_dim) for k, t in tables.items()}
        self.rope = {kind: table.to(device) for kind, table in tables.items()}

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """Hidden states [T, hidden] of a flat batch of tokens."""
        x = self.embed_tokens(input_ids)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        rope = self.rope
        if self.fast_cpu:
            rope = {kind: table[positions].unsqueeze(1) for kind, table in rope.items()}
        # A step with adapter tokens runs fused only with the adapters' packs for it
        # (AdapterSet.install makes them); the layers' path adds them by hooks.
        lora = self.adapters.current if self.adapters is not None else None
        if (
            self.path is ComputePath.CPP_FUSED
            and meta.num_decode == x.shape[0]
            and (lora is None or (self.adapters.fused is not None and lora.row_slots is not None))
        ):
            x, residual = self._forward_fused(x, rope, kv_caches, meta, lora)
        else:
            x, residual = self._forward_layers(x, positions, rope, kv_caches, meta)
        x, _ = _norm(x, self.norm, self.cfg.rms_norm_eps, residual, self.path)
        return x

    def _forward_layers(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        rope: dict[str, torch.Tensor],
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each layer's own forward, on its path; (last output, residual)."""
        residual = None
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches, strict=True):
            x, residual = layer(x, residual, positions, rope, k_cache, v_cache, meta)
        return x, residual

    def _forward_fused(
        self,
        x: torch.Tensor,
        rope: dict[str, torch.Tensor],
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        lora: LoraStep | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A decode-only step, each layer one C++ op (with the LoRA deltas of ``lora``'s
        rows); (last output, residual)."""
        residual, x = x, torch.zeros_like(x)  # the first norm adds x to the residual
        packs = self.adapters.fused if lora is not None else None
        slots = lora.row_slots if lora is not None else None
        for i, (args, kind, (k_cache, v_cache)) in enumerate(
            zip(self._fused, self._kinds, kv_caches, strict=True)
        ):
            pack = packs[i] if packs is not None else None
            x = cpu_kernels.decode_layer(
                x, residual, k_cache, v_cache, rope[kind], meta, *args, lora=pack, lora_slots=slots
            )
        return x, residual

    @property
    def has_fused_plan(self) -> bool:
        """Whether :meth:`plan_fused_decode` found every layer fit for the fused C++ op
        (its decode-only steps run fused while :attr:`path` is
        :attr:`~ComputePath.CPP_FUSED`)."""
        return bool(self._fused)

    def plan_fused_decode(self) -> ComputePath:
        """Switch a :attr:`~ComputePath.CPP` model to :attr:`~ComputePath.CPP_FUSED` when
        every layer has the shape :func:`cpu_kernels.decode_layer` runs (a Llama-like
        layer: norms before attention and MLP only, no q/k norms, biases or multipliers,
        SiLU, int4 or int8 weights in the VNNI layout); returns the path. Call it once
        the weights have their final format."""
        if self.path is ComputePath.CPP and self._fused is None:
            plans = []
            for layer in self.layers:
                attn, mlp = layer.self_attn, layer.mlp
                qkv = attn.qkv_proj  # in two parts where its pieces' formats differ
                parts = list(qkv.parts) if isinstance(qkv, StackedLinear) else [qkv]
                linears = (*parts, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
                attn_in, attn_out, mlp_in, mlp_out = layer.norms
                if not (
                    attn_in is not None
                    and mlp_in is not None
                    and attn_out is None
                    and mlp_out is None
                    and layer.residual_multiplier == 1.0
                    and attn.qk_norm is None
                    and mlp.silu
                    and all(isinstance(m, Int4Linear | Int8Linear) and m.tiled for m in linears)
                    and all(m.bias is None for m in linears)
                ):
                    return self.path
                weights = [t for m in linears for t in _fused_operands(m)]
                plans.append(
                    (
                        getattr(layer, attn_in),
                        getattr(layer, mlp_in),
                        weights,
                        [m.out_features for m in linears],
                        attn.num_heads,
                        attn.num_kv_heads,
                        layer.eps,
                        attn.scale,
                        attn.window or 0,
                    )
                )
            self._kinds = [layer.self_attn.rope_kind for layer in self.layers]
            self._fused = plans
            self.path = ComputePath.CPP_FUSED
        return self.path

    def compute_logits(
        self, hidden: torch.Tensor, exact: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[N, hidden] -> fp32 logits [N, vocab] (scaled and soft-capped as configured).

        ``exact`` [N, m]: token ids whose logits must be fp32-exact even where the head
        scores in a compact format (:class:`RefinedHead` recomputes them too)."""
        if self.lm_head is None:
            logits = F.linear(hidden, self.embed_tokens.weight).float()
        elif exact is not None and isinstance(self.lm_head, RefinedHead):
            logits = self.lm_head(hidden, exact)
        else:  # its own layer, or one convert_weights put over the tied table
            logits = self.lm_head(hidden).float()
        if self.cfg.logits_multiplier != 1.0:
            logits = logits * self.cfg.logits_multiplier
        if self.cfg.final_softcap:
            cap = self.cfg.final_softcap
            logits = torch.tanh(logits / cap) * cap
        return logits

    def prepare_loaded(self) -> None:
        """Adjust freshly loaded weights: norm offsets, and the CPU path's q/k order."""
        cfg = self.cfg
        with torch.no_grad():
            if cfg.family.norm_offset:
                for name, param in self.named_parameters():
                    if name == "norm" or name.endswith("norm"):
                        param += cfg.family.norm_offset
            if self.fast_cpu:
                self._interleave_rotary()
            if self.embed_scale != 1.0:  # applied in the weights' dtype, as transformers does
                table = getattr(self.embed_tokens, "weight", None)  # none: a BlockTable
                dtype = torch.float32 if table is None else table.dtype
                self.embed_scale = float(torch.tensor(self.embed_scale, dtype=dtype))

    def _interleave_rotary(self) -> None:
        """Reorder the q/k norm weights as :func:`qkv_row_order` reorders q and k (the
        loader reorders the projections' rows)."""
        cfg = self.cfg
        order = interleaved_order(cfg.head_dim, cfg.rotary_dim)
        rows = qkv_row_order(cfg)
        q_rows = rows[: cfg.num_heads * cfg.head_dim]
        k_rows = rows[cfg.num_heads * cfg.head_dim :] - cfg.num_heads * cfg.head_dim
        for layer in self.layers:
            attn = layer.self_attn
            if attn.qk_norm == "head":
                attn.q_norm.copy_(attn.q_norm[order])
                attn.k_norm.copy_(attn.k_norm[order])
            elif attn.qk_norm == "proj":
                attn.q_norm.copy_(attn.q_norm[q_rows])
                attn.k_norm.copy_(attn.k_norm[k_rows])


def qkv_row_order(cfg: ModelConfig) -> torch.Tensor:
    """The CPU path's order of a fused q/k/v projection's q and k rows: each head's dims
    from rotate-half to interleaved pairs.

    Attention scores are dot products within a head, so permuting q and k the same
    way leaves them unchanged; only RoPE sees the order, and the interleaved one
    lets it be a complex multiply. q/k norm weights follow the same order.
    """
    order = interleaved_order(cfg.head_dim, cfg.rotary_dim)
    heads = cfg.num_heads + cfg.num_kv_heads
    return (torch.arange(heads)[:, None] * cfg.head_dim + order).flatten()


def build_model(
    cfg: ModelConfig,
    model_dir: str | Path,
    max_positions: int,
    dtype: torch.dtype,
    device: torch.device,
    path: ComputePath | None = None,
    weights: str = "float32",
    built: Callable[[nn.Module], None] | None = None,
    table_built: Callable[[str, nn.Module], None] | None = None,
) -> DecoderModel:
    """Create the model without random init, load its weights (linear layers in the
    format ``weights``, see :func:`load_weights`, which hands each to ``built`` and each
    table kept in a GGUF's blocks to ``table_built``) and set it to eval.

    ``path`` defaults to :func:`choose_compute_path` under the environment's switches.
    """
    if path is None:
        path = choose_compute_path(device, dtype, read_switches())
    with torch.device("meta"):
        model = DecoderModel(cfg, max_positions, path).to(dtype)
    rows = None if path.kernels else qkv_row_order(cfg)
    load_weights(model, cfg, model_dir, device, weights, rows, built, table_built)
    model.prepare_loaded()
    model.init_rope(device)
    return model.eval().requires_grad_(False)
