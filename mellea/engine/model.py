"""A Llama-family decoder over a flat batch of tokens and a paged KV cache.

Tokens of all scheduled sequences are packed back to back (no padding): first one
token per decoding sequence, then the prompt chunks of prefilling sequences. Linear
layers see the whole flat batch at once; only attention looks at sequence borders.

Covers Llama / SmolLM (optionally tied embeddings), Mistral (treated as full
attention) and Qwen2 (bias on q/k/v) through :class:`ModelConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mellea.engine import kernels
from mellea.engine.config import ModelConfig


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


def cpu_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Decode attention on CPU: one block gather per layer and one fused SDPA call.

    Same maths as ``kernels.paged_attention_decode``. The query heads of a KV group
    are laid out as SDPA's query-length axis, so each group is one small attention
    against its shared K/V and no K/V is repeated. ``q``: [B, Hq, D] -> [B, Hq * D].
    """
    batch, n_heads, head_dim = q.shape
    n_kv, block_size = k_cache.shape[2], k_cache.shape[1]
    width = meta.decode_block_index.shape[0] // batch * block_size
    max_len = meta.decode_max_len
    keys = k_cache.index_select(0, meta.decode_block_index).view(batch, width, n_kv, head_dim)
    values = v_cache.index_select(0, meta.decode_block_index).view(batch, width, n_kv, head_dim)
    out = F.scaled_dot_product_attention(
        q.reshape(batch, n_kv, n_heads // n_kv, head_dim),
        keys[:, :max_len].transpose(1, 2),
        values[:, :max_len].transpose(1, 2),
        attn_mask=meta.decode_attn_mask,
        scale=scale,
    )
    return out.reshape(batch, n_heads * head_dim)


def causal_prefill_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_lens: tuple[int, ...], scale: float
) -> torch.Tensor:
    """Attention of whole fresh prompts over their own K/V (no cache read).

    ``q``: [T, Hq, D], ``k``/``v``: [T, Hk, D], prompts back to back -> [T, Hq * D].
    """
    gqa = q.shape[1] != k.shape[1]
    outs = []
    start = 0
    for length in query_lens:
        end = start + length
        # 4-D inputs: with 3-D ones SDPA falls back to its slow math path on CPU.
        out = F.scaled_dot_product_attention(
            q[start:end].transpose(0, 1)[None],
            k[start:end].transpose(0, 1)[None],
            v[start:end].transpose(0, 1)[None],
            is_causal=True,
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
) -> torch.Tensor:
    """Prefill chunks that also attend to tokens already in the cache (a cached prefix
    or an earlier chunk), read through the block tables. Same maths as
    ``kernels.paged_attention_prefill``, with GQA inside SDPA instead of repeated K/V.
    ``q``: [T, Hq, D] -> [T, Hq * D]."""
    block_size, n_kv, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    gqa = q.shape[1] != n_kv
    outs = []
    start = 0
    for b, (length, total) in enumerate(
        zip(meta.prefill_query_lens, meta.prefill_total_lens, strict=True)
    ):
        blocks = meta.prefill_block_tables[b, : -(-total // block_size)].long()
        keys = k_cache.index_select(0, blocks).view(-1, n_kv, head_dim)[:total]
        values = v_cache.index_select(0, blocks).view(-1, n_kv, head_dim)[:total]
        # New token i sits at position total - length + i and sees everything up to it.
        mask = None
        if total > length:
            mask = torch.ones(length, total, dtype=torch.bool, device=q.device).tril(total - length)
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


class Attention(nn.Module):
    """Self-attention with fused QKV, rotary embedding and a paged KV cache.

    Two paths with the same maths: the kernels of :mod:`mellea.engine.kernels`
    (Triton on GPU), and a CPU path that does each step in as few PyTorch ops as it
    can, since per-op overhead is a good part of a small model's decode step there.
    """

    def __init__(self, cfg: ModelConfig, fast_cpu: bool) -> None:
        super().__init__()
        self.fast_cpu = fast_cpu
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, cfg.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, cfg.o_bias)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        rope: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """``x``: [T, hidden] -> [T, hidden]; writes this step's K/V into the cache.

        ``rope`` is the cos|sin table on the kernel path and this step's complex
        rotations [T, 1, D/2] on the CPU path.
        """
        n_tokens = x.shape[0]
        n_heads, n_kv, head_dim = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x)
        v = qkv[:, self.q_size + self.kv_size :].view(n_tokens, n_kv, head_dim)
        if self.fast_cpu:
            # q/k rows were permuted at load time so that each rotary pair is adjacent:
            # RoPE on q and k together is then a single complex multiply.
            qk = qkv[:, : self.q_size + self.kv_size].view(n_tokens, n_heads + n_kv, -1, 2)
            qk = torch.view_as_real(torch.view_as_complex(qk) * rope)
            qk = qk.view(n_tokens, n_heads + n_kv, head_dim)
            q, k = qk[:, :n_heads], qk[:, n_heads:]
            k_cache.view(-1, n_kv, head_dim).index_copy_(0, meta.slot_mapping, k)
            v_cache.view(-1, n_kv, head_dim).index_copy_(0, meta.slot_mapping, v)
        else:
            q, k = qkv[:, : self.q_size + self.kv_size].split([self.q_size, self.kv_size], -1)
            q, k = kernels.rotary_embedding(
                positions,
                q.reshape(n_tokens, n_heads, head_dim),
                k.reshape(n_tokens, n_kv, head_dim),
                rope,
            )
            kernels.store_kv_cache(k, v, k_cache, v_cache, meta.slot_mapping)

        nd = meta.num_decode
        if nd == n_tokens:
            out = self._decode(q, k_cache, v_cache, meta)
        elif nd == 0:
            out = self._prefill(q, k, v, k_cache, v_cache, meta)
        else:
            out = torch.cat(
                [
                    self._decode(q[:nd], k_cache, v_cache, meta),
                    self._prefill(q[nd:], k[nd:], v[nd:], k_cache, v_cache, meta),
                ]
            )
        return self.o_proj(out)

    def _decode(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        if self.fast_cpu:
            return cpu_decode_attention(q, k_cache, v_cache, meta, self.scale)
        out = kernels.paged_attention_decode(
            q, k_cache, v_cache, meta.decode_block_tables, meta.decode_context_lens, self.scale
        )
        return out.reshape(q.shape[0], self.q_size)

    def _prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        if self.fast_cpu and not meta.prefill_has_context:
            # Whole fresh prompts: attend over this step's K/V, no cache read-back.
            return causal_prefill_attention(q, k, v, meta.prefill_query_lens, self.scale)
        if self.fast_cpu:
            return cpu_paged_prefill_attention(q, k_cache, v_cache, meta, self.scale)
        out = kernels.paged_attention_prefill(
            q.contiguous(),
            k_cache,
            v_cache,
            meta.prefill_block_tables,
            meta.prefill_cu_seqlens,
            meta.prefill_context_lens,
            self.scale,
        )
        return out.reshape(q.shape[0], self.q_size)


class MLP(nn.Module):
    """SwiGLU feed-forward with a fused gate/up projection."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[T, hidden] -> [T, hidden]."""
        return self.down_proj(kernels.silu_and_mul(self.gate_up_proj(x)))


def _norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None, fast: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RMSNorm(x + residual), returning the new residual too (None in -> x out)."""
    if not fast:
        return kernels.rms_norm(x, weight, eps, residual)
    if residual is not None:
        x = x + residual
    return F.rms_norm(x, weight.shape, weight, eps), x


class DecoderLayer(nn.Module):
    """Pre-norm attention + MLP; the residual add is fused into the next norm."""

    def __init__(self, cfg: ModelConfig, fast_cpu: bool) -> None:
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.fast_cpu = fast_cpu
        self.self_attn = Attention(cfg, fast_cpu)
        self.mlp = MLP(cfg)
        self.input_layernorm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.post_attention_layernorm = nn.Parameter(torch.ones(cfg.hidden_size))

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        positions: torch.Tensor,
        rope: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (output before the residual add, residual)."""
        h, residual = _norm(x, self.input_layernorm, self.eps, residual, self.fast_cpu)
        if residual is None:
            residual = x
        h = self.self_attn(h, positions, rope, k_cache, v_cache, meta)
        h, residual = _norm(h, self.post_attention_layernorm, self.eps, residual, self.fast_cpu)
        return self.mlp(h), residual


class LlamaModel(nn.Module):
    """Embedding, decoder layers, final norm and LM head.

    ``fast_cpu`` selects the CPU path (see :class:`Attention`); it stores q/k head
    dimensions in interleaved rotary order, so it is fixed when the model is built.
    """

    def __init__(self, cfg: ModelConfig, max_positions: int, fast_cpu: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.fast_cpu = fast_cpu
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, fast_cpu) for _ in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        if cfg.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.max_positions = max_positions
        self.cos_sin = torch.empty(0)
        self.rotations = torch.empty(0)

    def init_rope(self, device: torch.device) -> None:
        """Build the rotary tables (kept out of the state dict)."""
        cos_sin = rope_cache(self.cfg, self.max_positions)
        half = self.cfg.head_dim // 2
        if self.fast_cpu:
            self.rotations = torch.complex(cos_sin[:, :half], cos_sin[:, half:]).to(device)
        else:
            self.cos_sin = cos_sin.to(device)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """Hidden states [T, hidden] of a flat batch of tokens."""
        x = self.embed_tokens(input_ids)
        rope = self.rotations[positions].unsqueeze(1) if self.fast_cpu else self.cos_sin
        residual = None
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches, strict=True):
            x, residual = layer(x, residual, positions, rope, k_cache, v_cache, meta)
        x, _ = _norm(x, self.norm, self.cfg.rms_norm_eps, residual, self.fast_cpu)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> fp32 logits [N, vocab]."""
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()

    def interleave_rotary_rows(self) -> None:
        """Reorder q/k output rows of each head from rotate-half to interleaved pairs.

        Attention scores are dot products within a head, so permuting q and k the same
        way leaves them unchanged; only RoPE sees the order, and the interleaved one
        lets it be a complex multiply.
        """
        cfg = self.cfg
        half = cfg.head_dim // 2
        order = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
        heads = cfg.num_heads + cfg.num_kv_heads
        rows = (torch.arange(heads)[:, None] * cfg.head_dim + order).flatten()
        with torch.no_grad():
            for layer in self.layers:
                proj = layer.self_attn.qkv_proj
                n = rows.numel()
                proj.weight[:n] = proj.weight[:n][rows.to(proj.weight.device)]
                if proj.bias is not None:
                    proj.bias[:n] = proj.bias[:n][rows.to(proj.bias.device)]

    def load_weights(self, model_dir: str | Path) -> None:
        """Load Hugging Face safetensors, fusing q/k/v and gate/up as they come in."""
        from safetensors import safe_open

        files = sorted(Path(model_dir).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors files in {model_dir}")
        params = dict(self.named_parameters())
        cfg = self.cfg
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        inter = cfg.intermediate_size
        # HF module name -> (our fused module, first row, rows).
        fused = {
            "self_attn.q_proj": ("self_attn.qkv_proj", 0, q),
            "self_attn.k_proj": ("self_attn.qkv_proj", q, kv),
            "self_attn.v_proj": ("self_attn.qkv_proj", q + kv, kv),
            "mlp.gate_proj": ("mlp.gate_up_proj", 0, inter),
            "mlp.up_proj": ("mlp.gate_up_proj", inter, inter),
        }
        expected = set()
        for name in params:
            if ".qkv_proj." in name:
                expected |= {(name, 0), (name, q), (name, q + kv)}
            elif ".gate_up_proj." in name:
                expected |= {(name, 0), (name, inter)}
            else:
                expected.add((name, 0))
        loaded = set()
        with torch.no_grad():
            for file in files:
                with safe_open(str(file), framework="pt") as handle:
                    for hf_name in handle.keys():  # noqa: SIM118 (not a dict)
                        target, first, rows = _our_name(hf_name), 0, None
                        for piece, (ours, offset, count) in fused.items():
                            if f".{piece}." in target:
                                target, first, rows = target.replace(piece, ours), offset, count
                                break
                        if target not in params:
                            if "rotary_emb" in target or target == "lm_head.weight":
                                continue  # recomputed / tied to the embedding
                            raise KeyError(f"unexpected weight {hf_name} in {file.name}")
                        dest = params[target]
                        if rows is not None:
                            dest = dest.narrow(0, first, rows)
                        tensor = handle.get_tensor(hf_name)
                        if dest.shape != tensor.shape:
                            raise ValueError(
                                f"{hf_name}: shape {tuple(tensor.shape)}, "
                                f"expected {tuple(dest.shape)}"
                            )
                        dest.copy_(tensor)
                        loaded.add((target, first))
        missing = expected - loaded
        if missing:
            raise ValueError(f"weights missing from {model_dir}: {sorted(missing)[:5]}")


def _our_name(hf_name: str) -> str:
    name = hf_name.removeprefix("model.")
    if name == "norm.weight" or name.endswith("layernorm.weight"):
        return name.removesuffix(".weight")
    return name


def build_model(
    cfg: ModelConfig,
    model_dir: str | Path,
    max_positions: int,
    dtype: torch.dtype,
    device: torch.device,
    fast_cpu: bool | None = None,
) -> LlamaModel:
    """Create the model without random init, load its weights and set it to eval.

    ``fast_cpu`` defaults to whether this is fp32 on the CPU.
    """
    if fast_cpu is None:
        fast_cpu = device.type == "cpu" and dtype == torch.float32
    with torch.device("meta"):
        model = LlamaModel(cfg, max_positions, fast_cpu).to(dtype)
    model = model.to_empty(device=device)
    model.load_weights(model_dir)
    if fast_cpu:
        model.interleave_rotary_rows()
    model.init_rope(device)
    return model.eval().requires_grad_(False)


def rope_cache(cfg: ModelConfig, max_positions: int) -> torch.Tensor:
    """[max_positions, head_dim] fp32 cos|sin table, honouring HF rope scaling types."""
    if cfg.rope_type == "default":
        return kernels.build_cos_sin_cache(cfg.head_dim, max_positions, cfg.rope_theta)
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = AutoConfig.for_model(**cfg.hf_config)
    inv_freq, factor = ROPE_INIT_FUNCTIONS[cfg.rope_type](hf, torch.device("cpu"))
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq.double())
    return (torch.cat([freqs.cos(), freqs.sin()], dim=-1) * factor).float()
