// A whole Llama-shaped decoder layer for a decode-only step (decode_layer), from the
// other files' ops. Checked bit for bit against the layer's Python path by
// tests/engine/test_dtypes.py (test_fused_decode_layers_*), tests/engine/test_q4k.py
// (test_fused_q4_k_m_layers_*) and tests/engine/test_lora.py
// (test_fused_layer_adds_the_deltas_*).
#include "ops.h"

namespace MELLEA_CPU_NS {

// A whole decoder layer of the Llama shape for a decode-only step, with int4 or int8
// weights on VNNI: RMSNorm (with the residual add), fused QKV, RoPE and the cache write,
// paged decode attention, the output projection, RMSNorm, gate|up, SiLU-and-mul, down.
// The same ops as the layer's Python path, called from C++: a decode step of a small
// model spends about as long in Python between ops as in some of the ops. weights: per
// projection (qkv, o, gate_up, down), int4 (qweight uint8, scales, mins) or int8
// (qweight int8, wsum, scale), a GGUF's Q4_K exactly (qweight uint8 [T, G, 4, 64], sub
// uint8, super fp16: q4k_vnni_linear), or the exact byte form of a GGUF's blocks (qweight
// uint8 [T, G, 8, 64], or [T, G, 6, 64] in six bits, subs int8, supers fp32:
// linear_bytes.cpp), told apart by qweight's dtype, then the second tensor's dtype
// (int8 for bytes, uint8 for Q4_K; a Q4_K_M GGUF mixes them: its Q6_K tensors are
// bytes); out_features: their sizes.
// residual becomes x + residual; returns the MLP's output (before its residual add).
// The qkv projection may come in two parts (15 weights, 5 out_features: qkv's leading
// rows, its other rows, then o, gate|up, down), each in its own form: a Q4_K_M file's
// Q4_K q and k beside its Q6_K v, which would otherwise all take the byte form's 8.6
// bits a weight where q and k need Q4_K's 4.5.
// lora: empty, or (a, bt, segs) of each of the four projections (empty tensors where
// no adapter has a pair), whose deltas join each projection's output for the rows'
// adapters in lora_slots ([T] int32), as lora_add adds them.
at::Tensor decode_layer(const at::Tensor& x, const at::Tensor& residual,
                        const at::Tensor& attn_norm, const at::Tensor& mlp_norm,
                        at::TensorList weights, at::IntArrayRef out_features,
                        const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& rope, const at::Tensor& slots,
                        const at::Tensor& block_tables, const at::Tensor& context_lens,
                        int64_t heads, int64_t kv_heads, double eps, double scale,
                        int64_t window, at::TensorList lora,
                        const c10::optional<at::Tensor>& lora_slots) {
  TORCH_CHECK((out_features.size() == 4 || out_features.size() == 5) &&
                  weights.size() == 3 * out_features.size(),
              "four int4 or int8 layers (the first in one or two parts)");
  TORCH_CHECK(lora.empty() || (lora.size() == 12 && lora_slots.has_value()),
              "lora: (a, bt, segs) of the four projections, and lora_slots");
  const int64_t qkv_parts = static_cast<int64_t>(out_features.size()) - 3;
  auto part = [&](const at::Tensor& in, int64_t i) {
    const at::Tensor& qweight = weights[3 * i];
    const at::Tensor &second = weights[3 * i + 1], &third = weights[3 * i + 2];
    at::Tensor out;
    if (qweight.scalar_type() == at::kChar)
      out = int8_vnni_linear(in, qweight, second, third, out_features[i]);
    else if (qweight.dim() == 4 && second.scalar_type() == at::kChar)  // bytes, six bits
      out = bytes_linear(in, qweight, second, third, out_features[i]);
    else if (second.scalar_type() == at::kByte && qweight.size(2) == 4)  // Q4_K
      out = q4k_vnni_linear(in, qweight, second, third, out_features[i]);
    else
      out = int4_vnni_linear(in, qweight, second, third, out_features[i]);
    return out;
  };
  // Projection p (0 qkv, 1 o, 2 gate|up, 3 down) with its adapters' deltas.
  auto linear = [&](const at::Tensor& in, int64_t p) {
    at::Tensor out = p > 0 ? part(in, p + qkv_parts - 1)
                     : qkv_parts == 1 ? part(in, 0)
                                      : cat({part(in, 0), part(in, 1)}, 1);
    if (!lora.empty()) lora_add(out, in, lora[3 * p], lora[3 * p + 1], lora[3 * p + 2], *lora_slots);
    return out;
  };
  const int64_t qkv_rows = qkv_parts == 1 ? out_features[0] : out_features[0] + out_features[1];
  const int64_t T = x.size(0), dim = qkv_rows / (heads + 2 * kv_heads);
  at::Tensor h = rms_norm(x, residual, attn_norm, eps);
  at::Tensor qkv = linear(h, 0);
  rope_store_kv(qkv, rope, k_cache, v_cache, slots, heads, kv_heads);
  at::Tensor q = qkv.narrow(1, 0, heads * dim).view({T, heads, dim});
  at::Tensor attn = paged_decode(q, k_cache, v_cache, block_tables, context_lens, scale, window);
  h = rms_norm(linear(attn.view({T, heads * dim}), 1), residual, mlp_norm, eps);
  return linear(silu_and_mul(linear(h, 2)), 3);
}

}  // namespace MELLEA_CPU_NS
