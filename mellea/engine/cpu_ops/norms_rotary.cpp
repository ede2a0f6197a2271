// RMSNorm with its residual add (rms_norm), and RoPE with the cache write
// (rope_store_kv). Checked against PyTorch by tests/engine/test_cpu_kernels.py
// (test_rms_norm_*, test_rope_store_kv_*).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.h"
#include "simd.h"

namespace MELLEA_CPU_NS {

namespace {


// out = RMSNorm(x (+ residual)) * weight, as the reference: normalized in fp32, rounded
// to x's dtype, then times the weight. With a residual, residual becomes x + residual.
template <typename T>
void rms_rows(const T* x, T* residual, const T* weight, T* out, int64_t rows, int64_t hidden,
              int64_t x_stride, float eps) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(hidden);
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * x_stride;
      float ss = 0.f;
      if (residual != nullptr) {
        T* res = residual + r * hidden;
        for (int64_t i = 0; i < hidden; ++i) {
          const T sum = static_cast<T>(static_cast<float>(xr[i]) + static_cast<float>(res[i]));
          res[i] = sum;
          buf[i] = static_cast<float>(sum);
        }
      } else {
        for (int64_t i = 0; i < hidden; ++i) buf[i] = static_cast<float>(xr[i]);
      }
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < hidden; ++i) ss += buf[i] * buf[i];
      const float inv = 1.f / std::sqrt(ss / static_cast<float>(hidden) + eps);
      T* o = out + r * hidden;
      for (int64_t i = 0; i < hidden; ++i)
        o[i] = static_cast<T>(static_cast<float>(static_cast<T>(buf[i] * inv)) *
                              static_cast<float>(weight[i]));
    }
  });
}

// rope_store_kv's work on rows whose cache holds C (see there).
template <typename C>
void rope_rows(float* rows, const float* cs, C* kc, C* vc, const int64_t* slot, int64_t T,
               int64_t width, int64_t rope_stride, int64_t hq, int64_t hk, int64_t dim,
               int64_t cache_rows) {
  const int64_t half = dim / 2, kv = hk * dim;
  for (int64_t t = 0; t < T; ++t)
    TORCH_CHECK(slot[t] >= 0 && slot[t] < cache_rows, "slot out of the cache");
  at::parallel_for(0, T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = rows + t * width;
      const float* r = cs + t * rope_stride;
      for (int64_t h = 0; h < hq + hk; ++h) {
        float* x = row + h * dim;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = x[2 * i], b = x[2 * i + 1], c = r[2 * i], s = r[2 * i + 1];
          x[2 * i] = a * c - b * s;
          x[2 * i + 1] = a * s + b * c;
        }
      }
      store_row(row + hq * dim, kc + slot[t] * kv, kv);
      store_row(row + hq * dim + kv, vc + slot[t] * kv, kv);
    }
  });
}

}  // namespace

// x: [T, H] (rows may be strided). With a residual (dense [T, H], updated in place).
at::Tensor rms_norm(const at::Tensor& x, const c10::optional<at::Tensor>& residual,
                    const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "x: [T, H], rows dense");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == x.size(1), "weight: [H]");
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "weight and x dtypes differ");
  if (residual.has_value()) {
    TORCH_CHECK(residual->is_contiguous() && residual->sizes() == x.sizes() &&
                    residual->scalar_type() == x.scalar_type(),
                "residual: dense, shaped and typed as x");
  }
  auto out = empty(x.sizes(), x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm", [&] {
    rms_rows<scalar_t>(x.data_ptr<scalar_t>(),
                       residual.has_value() ? residual->data_ptr<scalar_t>() : nullptr,
                       weight.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.size(0),
                       x.size(1), x.stride(0), static_cast<float>(eps));
  });
  return out;
}

// RoPE on q and k, in place in the fused qkv rows, and this step's K and V rows
// written into the paged cache (what took the PyTorch path eight ops per layer).
// qkv: [T, (hq + 2 hk) * dim] fp32, rows dense; rope: [T, ..., dim / 2, 2] fp32 (cos, sin
// of each adjacent pair: the CPU path stores q/k dims pairwise); caches [blocks,
// block_size, hk, dim] fp32, bf16 or fp16 (K and V rounded to it as PyTorch's .to rounds),
// dense; slots: [T] int64, a token's row in the flat cache.
void rope_store_kv(const at::Tensor& qkv, const at::Tensor& rope, const at::Tensor& k_cache,
                   const at::Tensor& v_cache, const at::Tensor& slots, int64_t hq, int64_t hk) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.stride(1) == 1 && qkv.scalar_type() == at::kFloat,
              "qkv: [T, W] fp32, rows dense");
  const int64_t T = qkv.size(0), dim = qkv.size(1) / (hq + 2 * hk), half = dim / 2;
  TORCH_CHECK(qkv.size(1) == (hq + 2 * hk) * dim && dim % 2 == 0, "qkv width");
  TORCH_CHECK(rope.scalar_type() == at::kFloat && rope.size(0) == T && rope.size(-1) == 2 &&
                  rope.size(-2) == half && rope.stride(-1) == 1 && rope.stride(-2) == 2,
              "rope: [T, ..., dim / 2, 2] fp32");
  for (const auto* c : {&k_cache, &v_cache})
    TORCH_CHECK(c->is_contiguous() && c->scalar_type() == k_cache.scalar_type() &&
                    c->size(-1) == dim && c->size(-2) == hk,
                "caches: [blocks, block_size, hk, dim] of one dtype, dense");
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.is_contiguous() && slots.numel() == T,
              "slots: [T] int64");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, k_cache.scalar_type(), "rope_store_kv", [&] {
    rope_rows(qkv.data_ptr<float>(), rope.data_ptr<float>(), k_cache.data_ptr<scalar_t>(),
              v_cache.data_ptr<scalar_t>(), slots.data_ptr<int64_t>(), T, qkv.stride(0),
              rope.stride(0), hq, hk, dim, k_cache.numel() / (hk * dim));
  });
}

}  // namespace MELLEA_CPU_NS
