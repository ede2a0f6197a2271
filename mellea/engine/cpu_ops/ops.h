// Every op of the CPU path (but tiles.h's avx2_dot), by the file that defines it: what
// register.cpp registers and decode_layer.cpp calls. The ops take ATen tensors; the
// kernels under them take raw pointers (tiles.h, bytes_tiles.h, simd.h, neon.h: free of
// ATen).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <tuple>

#include "family.h"

namespace MELLEA_CPU_NS {

// at::empty, at::zeros and at::cat, compiled once (register.cpp): their headers cost
// every file that includes them a few seconds per family.
at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options);
at::Tensor zeros(at::IntArrayRef sizes, const at::TensorOptions& options);
at::Tensor cat(at::TensorList tensors, int64_t dim);

// The activations of a linear layer: [M, K] fp32, dense.
inline void check_activations(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat,
              "x: [M, K] fp32, dense");
}

// register.cpp
std::string family();

// attention.cpp
at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& block_tables, const at::Tensor& context_lens,
                        double scale, int64_t window);

// norms_rotary.cpp
at::Tensor rms_norm(const at::Tensor& x, const c10::optional<at::Tensor>& residual,
                    const at::Tensor& weight, double eps);
void rope_store_kv(const at::Tensor& qkv, const at::Tensor& rope, const at::Tensor& k_cache,
                   const at::Tensor& v_cache, const at::Tensor& slots, int64_t hq, int64_t hk);

// activation.cpp
at::Tensor silu_and_mul(const at::Tensor& x);

// linear_fp32.cpp
at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scale);
at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                       const at::Tensor& mins);
at::Tensor int4_dequantize(const at::Tensor& qweight, const at::Tensor& scales,
                           const at::Tensor& mins);

// linear_int4.cpp
at::Tensor int4_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                            const at::Tensor& mins, int64_t N);
at::Tensor q4k_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& sub,
                           const at::Tensor& super, int64_t N);
at::Tensor int4_vnni_dequantize(const at::Tensor& qweight, const at::Tensor& scales,
                                const at::Tensor& mins, int64_t N);
at::Tensor q4k_vnni_dequantize(const at::Tensor& qweight, const at::Tensor& sub,
                               const at::Tensor& super, int64_t N);

// linear_int8.cpp
at::Tensor int8_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& wsum,
                            const at::Tensor& scale, int64_t N);

// linear_bytes.cpp
at::Tensor bytes_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& subs,
                        const at::Tensor& supers, int64_t N);
at::Tensor six_to_bytes(const at::Tensor& qweight);
at::Tensor bytes_to_six(const at::Tensor& qweight, int64_t n);
at::Tensor bytes_dequantize(const at::Tensor& qweight, const at::Tensor& subs,
                            const at::Tensor& supers, int64_t N);

// sampling.cpp
std::tuple<at::Tensor, at::Tensor> top_k(const at::Tensor& x, int64_t k);

// lora.cpp
void lora_add(const at::Tensor& out, const at::Tensor& x, const at::Tensor& a,
              const at::Tensor& bt, const at::Tensor& segs, const at::Tensor& lora_slots);

// decode_layer.cpp
at::Tensor decode_layer(const at::Tensor& x, const at::Tensor& residual,
                        const at::Tensor& attn_norm, const at::Tensor& mlp_norm,
                        at::TensorList weights, at::IntArrayRef out_features,
                        const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& rope, const at::Tensor& slots,
                        const at::Tensor& block_tables, const at::Tensor& context_lens,
                        int64_t heads, int64_t kv_heads, double eps, double scale,
                        int64_t window, at::TensorList lora,
                        const c10::optional<at::Tensor>& lora_slots);

// repack.cpp
std::tuple<at::Tensor, at::Tensor, at::Tensor> tile_int4_weights(const at::Tensor& packed,
                                                                 const at::Tensor& scales,
                                                                 const at::Tensor& mins);
std::tuple<at::Tensor, at::Tensor, at::Tensor> tile_q4k_weights(const at::Tensor& packed,
                                                                const at::Tensor& sub,
                                                                const at::Tensor& super);
std::tuple<at::Tensor, at::Tensor, at::Tensor> tile_int8_weights(const at::Tensor& q,
                                                                 const at::Tensor& scale);
std::tuple<at::Tensor, at::Tensor, at::Tensor> q4_k_groups(const at::Tensor& raw);
std::tuple<at::Tensor, at::Tensor, at::Tensor> q4_k_exact(const at::Tensor& raw);
std::tuple<at::Tensor, at::Tensor> gguf_int8_rows(const at::Tensor& raw, int64_t k_quant);
std::tuple<at::Tensor, at::Tensor, at::Tensor> gguf_byte_rows(const at::Tensor& raw,
                                                              const std::string& qtype);

}  // namespace MELLEA_CPU_NS
