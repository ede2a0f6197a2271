// Decode attention straight from the paged KV cache (paged_decode), over an fp32, bf16
// or fp16 cache. Checked against PyTorch's attention by tests/engine/test_cpu_kernels.py
// (test_paged_decode_*).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.h"
#include "simd.h"

namespace MELLEA_CPU_NS {

namespace {

// Decode attention of one sequence's queries over cached positions [t0, t1), all heads
// together, so each cached token's K (and V) row of Hk * D values is read once and in
// order. Leaves the unnormalized result: top[h] (the scores' max), sums[h] (of
// exp(score - top)) and acc[h * D + d] (the exp-weighted sum of V).
template <typename T>
void attend_span(const float* qf, const T* kc, const T* vc, const int32_t* table, int64_t t0,
                 int64_t t1, int64_t hq, int64_t hk, int64_t dim, int64_t block,
                 int64_t kv_block_stride, std::vector<float>& scores, std::vector<float>& buf,
                 float* top, float* sums, float* acc) {
  const int64_t groups = hq / hk, row_size = hk * dim, n = t1 - t0;
  // The cached row of position t0 + t, as fp32 (in buf unless the cache is fp32).
  auto cached = [&](const T* cache, int64_t t) {
    const int64_t pos = t0 + t;
    return as_float(cache + table[pos / block] * kv_block_stride + (pos % block) * row_size,
                    buf.data(), row_size);
  };
  scores.resize(hq * n);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = cached(kc, t);
    for (int64_t j = 0; j < hq; ++j) {
      const float* qj = qf + j * dim;
      const float* k = row + (j / groups) * dim;
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t d = 0; d < dim; ++d) s += qj[d] * k[d];
      scores[j * n + t] = s;
    }
  }
  for (int64_t j = 0; j < hq; ++j) {
    float* sc = scores.data() + j * n;
    float m = -INFINITY;
    for (int64_t t = 0; t < n; ++t) m = std::max(m, sc[t]);
    top[j] = m;
    sums[j] = exp_shifted(sc, n, m);
  }
  std::fill(acc, acc + hq * dim, 0.f);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = cached(vc, t);
    for (int64_t j = 0; j < hq; ++j) {
      const float p = scores[j * n + t];
      const float* v = row + (j / groups) * dim;
      float* a = acc + j * dim;
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) a[d] += p * v[d];
    }
  }
}

// Below this many positions per piece, a sequence is not split between threads.
constexpr int64_t kMinSpan = 48;

// Each sequence's positions go to `splits` tasks (more than one only when there are
// fewer sequences than threads: one long context then still uses every core); the
// pieces are merged by their maxima, as flash-decoding does.
// Q is the queries' (and the output's) type, C the cache's.
template <typename Q, typename C>
void decode(const Q* q, int64_t q_stride, const C* kc, const C* vc, const int32_t* tables,
            const int32_t* lens, Q* out, int64_t batch, int64_t hq, int64_t hk, int64_t dim,
            int64_t block, int64_t width, int64_t kv_block_stride, float scale, int64_t window,
            int64_t splits) {
  const int64_t hd = hq * dim, piece = hq * (dim + 2);  // one piece: acc, top, sums
  std::vector<float> parts(batch * splits * piece);
  at::parallel_for(0, batch * splits, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(hd), scores, buf(hk * dim);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / splits, c = item % splits;
      const int64_t len = lens[b];
      const int64_t first = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      const int64_t n = len - first;
      for (int64_t j = 0; j < hd; ++j) qf[j] = static_cast<float>(q[b * q_stride + j]) * scale;
      float* part = parts.data() + item * piece;
      attend_span(qf.data(), kc, vc, tables + b * width, first + n * c / splits,
                  first + n * (c + 1) / splits, hq, hk, dim, block, kv_block_stride, scores, buf,
                  part + hd, part + hd + hq, part);
      if (splits == 1) {
        for (int64_t j = 0; j < hq; ++j) {
          const float inv = 1.f / part[hd + hq + j];
          Q* o = out + (b * hq + j) * dim;
          for (int64_t d = 0; d < dim; ++d) o[d] = static_cast<Q>(part[j * dim + d] * inv);
        }
      }
    }
  });
  if (splits == 1) return;
  for (int64_t b = 0; b < batch; ++b) {
    const float* first = parts.data() + b * splits * piece;
    for (int64_t j = 0; j < hq; ++j) {
      float m = -INFINITY;
      for (int64_t c = 0; c < splits; ++c) m = std::max(m, first[c * piece + hd + j]);
      float sum = 0.f, w[64];
      for (int64_t c = 0; c < splits; ++c) {
        const float* part = first + c * piece;
        w[c] = part[hd + j] == -INFINITY ? 0.f : std::exp(part[hd + j] - m);
        sum += w[c] * part[hd + hq + j];
      }
      const float inv = 1.f / sum;
      Q* o = out + (b * hq + j) * dim;
      for (int64_t d = 0; d < dim; ++d) {
        float v = 0.f;
        for (int64_t c = 0; c < splits; ++c) v += w[c] * first[c * piece + j * dim + d];
        o[d] = static_cast<Q>(v * inv);
      }
    }
  }
}

}  // namespace

at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& block_tables, const at::Tensor& context_lens,
                        double scale, int64_t window) {
  TORCH_CHECK(q.dim() == 3 && q.stride(2) == 1 && q.stride(1) == q.size(2), "q: [B, Hq, D], heads dense");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.stride(3) == 1 && k_cache.stride(2) == k_cache.size(3)
                  && k_cache.stride(1) == k_cache.size(2) * k_cache.size(3),
              "k_cache: [blocks, block_size, Hk, D], dense within a block");
  TORCH_CHECK(v_cache.strides() == k_cache.strides() && v_cache.sizes() == k_cache.sizes(),
              "v_cache laid out as k_cache");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && block_tables.is_contiguous(), "tables");
  TORCH_CHECK(context_lens.scalar_type() == at::kInt && context_lens.is_contiguous(), "lens");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type() || q.scalar_type() == at::kFloat,
              "q: the cache's dtype, or fp32");
  TORCH_CHECK(v_cache.scalar_type() == k_cache.scalar_type(), "k and v cache dtypes differ");
  auto out = empty(q.sizes(), q.options());
  const int64_t batch = q.size(0), hq = q.size(1), dim = q.size(2);
  const int64_t block = k_cache.size(1), hk = k_cache.size(2);
  TORCH_CHECK(hq % hk == 0 && dim == k_cache.size(3), "head shapes");
  const int32_t* lens = context_lens.data_ptr<int32_t>();
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) longest = std::max<int64_t>(longest, lens[b]);
  if (window > 0) longest = std::min(longest, window);
  // The split follows the CPUs, not the threads in use, so that a step's result does
  // not depend on how many threads the engine's tuner gives it (cpu_threads.py).
  const int64_t threads = std::max<int64_t>(omp_get_num_procs(), at::get_num_threads());
  const int64_t splits = batch >= threads ? 1
                                          : std::clamp<int64_t>(longest / kMinSpan, 1,
                                                                std::min<int64_t>(64, (threads + batch - 1) / batch));
  // An fp32 forward pass may read a half-width cache (q fp32, the cache bf16 or fp16).
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, k_cache.scalar_type(), "paged_decode", [&] {
    auto run = [&](auto* q_data, auto* out_data) {
      decode(q_data, q.stride(0), k_cache.data_ptr<scalar_t>(), v_cache.data_ptr<scalar_t>(),
             block_tables.data_ptr<int32_t>(), lens, out_data, batch, hq, hk, dim, block,
             block_tables.size(1), k_cache.stride(0), static_cast<float>(scale), window, splits);
    };
    if (q.scalar_type() == k_cache.scalar_type())
      run(q.data_ptr<scalar_t>(), out.data_ptr<scalar_t>());
    else
      run(q.data_ptr<float>(), out.data_ptr<float>());
  });
  return out;
}

}  // namespace MELLEA_CPU_NS
