#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#include "cpu_kernels_neon.h"
#endif
#include "cpu_kernels_bytes_dequant.h"
#include "cpu_kernels_layout.h"
#include <cmath>
#include <omp.h>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// One source, built once per CPU family (cpu_kernels.py names the flags): the
// AVX-512 build has AVX512F/BW/VL/VNNI, the AVX2 build x86-64-v3 (AVX2, FMA, F16C),
// the neon-dotprod build aarch64's NEON with the dot product (cpu_kernels_neon.h),
// the generic build plain C++ the compiler vectorizes as it can. Each registers its ops
// under a namespace of its own (MELLEA_CPU_NS), so that several builds can be loaded
// in one process (the tests run every family this CPU can execute).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)
#define MELLEA_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MELLEA_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define MELLEA_NEON 1
#endif
#ifndef MELLEA_CPU_NS
#define MELLEA_CPU_NS mellea_cpu
#endif

namespace {

using mellea_layout::xq_lo;
using mellea_layout::xq_row;

template <typename T>
inline const float* as_float(const T* src, float* buf, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(src[i]);
    return buf;
  }
}

#ifdef __AVX512F__
// exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 (ln 2 in two parts), and
// exp(r) by Cephes' expf polynomial on |r| <= ln 2 / 2: within 2 ulp of std::exp.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y =
      _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(y, k);
}

inline __mmask16 first_lanes(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
}
#elif defined(MELLEA_AVX2)
// exp_ps's polynomial on 8 lanes; 2^k built in the exponent bits (k in -126..127 after
// the clamp, so 2^k is a normal float and the product rounds as scalef's does).
inline __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y =
      _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

// The sum of 8 lanes in the order of _mm512_reduce_add_ps's last steps (halves, then
// pairs), so that sums built on it match the AVX-512 build's bit for bit.
inline float reduce_add_ps(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  const __m128 q = _mm_add_ps(h, _mm_shuffle_ps(h, h, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(q) + _mm_cvtss_f32(_mm_shuffle_ps(q, q, 1));
}
#endif

// v[i] = exp(v[i] - shift) in place (every v[i] <= shift); returns their sum.
inline float exp_shifted(float* v, int64_t n, float shift) {
  float sum = 0.f;
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512 s = _mm512_set1_ps(shift);
  __m512 total = _mm512_setzero_ps();
  for (; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, v + i), s));
    _mm512_mask_storeu_ps(v + i, mask, e);
    total = _mm512_add_ps(total, _mm512_maskz_mov_ps(mask, e));
  }
  sum = _mm512_reduce_add_ps(total);
#elif defined(MELLEA_AVX2)
  const __m256 s = _mm256_set1_ps(shift);
  __m256 total = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(v + i), s));
    _mm256_storeu_ps(v + i, e);
    total = _mm256_add_ps(total, e);
  }
  sum = reduce_add_ps(total);
#elif defined(MELLEA_NEON)
  i = mellea_neon::exp_shifted8(v, n, shift, &sum);
#endif
  for (; i < n; ++i) {
    v[i] = std::exp(v[i] - shift);
    sum += v[i];
  }
  return sum;
}

// SwiGLU's activation over a fused [gate | up] row: silu(gate) * up, [T, 2I] -> [T, I]
// (three PyTorch ops and a copy of the halves before).
at::Tensor silu_and_mul(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat &&
                  x.size(1) % 2 == 0,
              "x: [T, 2I] fp32, dense");
  const int64_t T = x.size(0), I = x.size(1) / 2;
  auto out = at::empty({T, I}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, T, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = xp + t * 2 * I;
      const float* up = gate + I;
      float* o = op + t * I;
      int64_t i = 0;
#ifdef __AVX512F__
      for (; i < I; i += 16) {
        const __mmask16 mask = first_lanes(I - i);
        const __m512 g = _mm512_maskz_loadu_ps(mask, gate + i);
        const __m512 u = _mm512_maskz_loadu_ps(mask, up + i);
        const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));  // exp(-g)
        const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.f), e));
        _mm512_mask_storeu_ps(o + i, mask, _mm512_mul_ps(silu, u));
      }
#elif defined(MELLEA_AVX2)
      for (; i + 8 <= I; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));  // exp(-g)
        const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
      }
#elif defined(MELLEA_NEON)
      i = mellea_neon::silu_mul8(gate, up, o, I);
#endif
      for (; i < I; ++i) o[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
    }
  });
  return out;
}

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
template <typename T>
void decode(const T* q, int64_t q_stride, const T* kc, const T* vc, const int32_t* tables,
            const int32_t* lens, T* out, int64_t batch, int64_t hq, int64_t hk, int64_t dim,
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
          T* o = out + (b * hq + j) * dim;
          for (int64_t d = 0; d < dim; ++d) o[d] = static_cast<T>(part[j * dim + d] * inv);
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
      T* o = out + (b * hq + j) * dim;
      for (int64_t d = 0; d < dim; ++d) {
        float v = 0.f;
        for (int64_t c = 0; c < splits; ++c) v += w[c] * first[c * piece + j * dim + d];
        o[d] = static_cast<T>(v * inv);
      }
    }
  }
}

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
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type(), "q and cache dtypes differ");
  auto out = at::empty(q.sizes(), q.options());
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
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "paged_decode", [&] {
    decode<scalar_t>(q.data_ptr<scalar_t>(), q.stride(0), k_cache.data_ptr<scalar_t>(),
                     v_cache.data_ptr<scalar_t>(), block_tables.data_ptr<int32_t>(), lens,
                     out.data_ptr<scalar_t>(), batch, hq, hk, dim, block, block_tables.size(1),
                     k_cache.stride(0), static_cast<float>(scale), window, splits);
  });
  return out;
}

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
  auto out = at::empty(x.sizes(), x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm", [&] {
    rms_rows<scalar_t>(x.data_ptr<scalar_t>(),
                       residual.has_value() ? residual->data_ptr<scalar_t>() : nullptr,
                       weight.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.size(0),
                       x.size(1), x.stride(0), static_cast<float>(eps));
  });
  return out;
}

// ---- weight-only quantized linear layers: out[M, N] = x[M, K] (fp32) @ W^T ----------
//
// The weights are widened to fp32 in registers and multiplied with fp32 activations,
// so the only rounding is the weights' own. Each task takes a run of weight rows and
// walks it in blocks of kRowBlock (which stay in cache) for every activation row, up to
// four at a time; one weight load then serves four activation rows.
//
// int8: q [N, K] int8, one scale per row: W[n, k] = q[n, k] * scale[n].
// int4: q [N, K/2] uint8, groups of 32 along K, a scale and a minimum per group (fp16):
//   W[n, 32g + j] = nibble(n, g, j) * scales[n, g] + mins[n, g], where byte g*16 + j of
//   row n holds element j (low nibble) and element j + 16 (high nibble) of group g.

constexpr int64_t kRowBlock = 64;

struct Int8Weights {
  const int8_t* q;
  const float* scale;
  int64_t K;
#ifdef __AVX512F__
  template <int MR, int NR>
  void tile(const float* x, float* out, int64_t N, int64_t n0) const {
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    const int64_t K16 = K & ~int64_t(15);
    for (int64_t k = 0; k < K16; k += 16) {
      __m512 w[NR];
      for (int j = 0; j < NR; ++j) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (n0 + j) * K + k));
        w[j] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
      }
      for (int i = 0; i < MR; ++i) {
        const __m512 xv = _mm512_loadu_ps(x + i * K + k);
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(w[j], xv, acc[i][j]);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) {
        float s = _mm512_reduce_add_ps(acc[i][j]);
        for (int64_t k = K16; k < K; ++k)
          s += x[i * K + k] * static_cast<float>(q[(n0 + j) * K + k]);
        out[i * N + n0 + j] = s * scale[n0 + j];
      }
  }
#endif
  template <int MR>
  void rows(const float* x, float* out, int64_t N, int64_t begin, int64_t end) const {
    int64_t n = begin;
#ifdef __AVX512F__
    for (; n + 4 <= end; n += 4) tile<MR, 4>(x, out, N, n);
#endif
    for (; n < end; ++n) {
      const int8_t* qn = q + n * K;
      for (int i = 0; i < MR; ++i) {
        const float* xi = x + i * K;
        float s = 0.f;
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < K; ++k) s += xi[k] * static_cast<float>(qn[k]);
        out[i * N + n] = s * scale[n];
      }
    }
  }
};

inline float half_to_float(at::Half h) {
#ifdef __F16C__
  return _cvtsh_ss(h.x);  // one instruction; c10's conversion is bit twiddling
#else
  return static_cast<float>(h);
#endif
}

struct Int4Weights {
  const uint8_t* q;
  const at::Half* scales;
  const at::Half* mins;
  int64_t K;
#ifdef __AVX512F__
  template <int MR, int NR>
  void tile(const float* x, float* out, int64_t N, int64_t n0) const {
    const int64_t G = K / 32, KB = K / 2;
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    const __m128i low = _mm_set1_epi8(0x0F);
    for (int64_t g = 0; g < G; ++g) {
      __m512 wlo[NR], whi[NR];
      for (int j = 0; j < NR; ++j) {
        const int64_t n = n0 + j;
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + n * KB + g * 16));
        const __m512 d = _mm512_set1_ps(half_to_float(scales[n * G + g]));
        const __m512 m = _mm512_set1_ps(half_to_float(mins[n * G + g]));
        const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
        wlo[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), d, m);
        whi[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), d, m);
      }
      for (int i = 0; i < MR; ++i) {
        const __m512 xl = _mm512_loadu_ps(x + i * K + g * 32);
        const __m512 xh = _mm512_loadu_ps(x + i * K + g * 32 + 16);
        for (int j = 0; j < NR; ++j) {
          acc[i][j] = _mm512_fmadd_ps(wlo[j], xl, acc[i][j]);
          acc[i][j] = _mm512_fmadd_ps(whi[j], xh, acc[i][j]);
        }
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) out[i * N + n0 + j] = _mm512_reduce_add_ps(acc[i][j]);
  }
#endif
  template <int MR>
  void rows(const float* x, float* out, int64_t N, int64_t begin, int64_t end) const {
    int64_t n = begin;
#ifdef __AVX512F__
    for (; n + 4 <= end; n += 4) tile<MR, 4>(x, out, N, n);
#endif
    const int64_t G = K / 32, KB = K / 2;
    float w[32];
    for (; n < end; ++n) {
      float s[MR] = {};
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* b = q + n * KB + g * 16;
        const float d = half_to_float(scales[n * G + g]), m = half_to_float(mins[n * G + g]);
        for (int j = 0; j < 16; ++j) {
          w[j] = static_cast<float>(b[j] & 0x0F) * d + m;
          w[j + 16] = static_cast<float>(b[j] >> 4) * d + m;
        }
        for (int i = 0; i < MR; ++i) {
          const float* xi = x + i * K + g * 32;
          float t = 0.f;
#pragma omp simd reduction(+ : t)
          for (int j = 0; j < 32; ++j) t += w[j] * xi[j];
          s[i] += t;
        }
      }
      for (int i = 0; i < MR; ++i) out[i * N + n] = s[i];
    }
  }
};

template <typename Weights>
at::Tensor quantized_linear(const at::Tensor& x, int64_t N, const Weights& w) {
  const int64_t M = x.size(0), K = x.size(1);
  auto out = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, N, kRowBlock, [&](int64_t begin, int64_t end) {
    for (int64_t nb = begin; nb < end; nb += kRowBlock) {
      const int64_t ne = std::min(end, nb + kRowBlock);
      int64_t m = 0;
      for (; m + 4 <= M; m += 4) w.template rows<4>(xp + m * K, op + m * N, N, nb, ne);
      switch (M - m) {
        case 3: w.template rows<3>(xp + m * K, op + m * N, N, nb, ne); break;
        case 2: w.template rows<2>(xp + m * K, op + m * N, N, nb, ne); break;
        case 1: w.template rows<1>(xp + m * K, op + m * N, N, nb, ne); break;
        default: break;
      }
    }
  });
  return out;
}

void check_activations(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat,
              "x: [M, K] fp32, dense");
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scale) {
  check_activations(x);
  TORCH_CHECK(qweight.dim() == 2 && qweight.is_contiguous() && qweight.scalar_type() == at::kChar &&
                  qweight.size(1) == x.size(1),
              "qweight: [N, K] int8, dense");
  TORCH_CHECK(scale.is_contiguous() && scale.scalar_type() == at::kFloat &&
                  scale.numel() == qweight.size(0),
              "scale: [N] fp32");
  const Int8Weights w{qweight.data_ptr<int8_t>(), scale.data_ptr<float>(), x.size(1)};
  return quantized_linear(x, qweight.size(0), w);
}

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                       const at::Tensor& mins) {
  check_activations(x);
  const int64_t K = x.size(1), N = qweight.size(0);
  TORCH_CHECK(K % 32 == 0 && qweight.dim() == 2 && qweight.size(1) * 2 == K &&
                  qweight.scalar_type() == at::kByte && qweight.is_contiguous(),
              "qweight: [N, K/2] uint8, dense, K a multiple of 32");
  for (const auto* t : {&scales, &mins})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == at::kHalf && t->numel() == N * (K / 32),
                "scales, mins: [N, K/32] fp16, dense");
  const Int4Weights w{qweight.data_ptr<uint8_t>(), scales.data_ptr<at::Half>(),
                      mins.data_ptr<at::Half>(), K};
  return quantized_linear(x, N, w);
}

// The fp32 weight [N, K] of int4_linear's layout (for inputs too long for the kernel).
at::Tensor int4_dequantize(const at::Tensor& qweight, const at::Tensor& scales,
                           const at::Tensor& mins) {
  TORCH_CHECK(qweight.dim() == 2 && qweight.scalar_type() == at::kByte && qweight.is_contiguous(),
              "qweight: [N, K/2] uint8, dense");
  const int64_t N = qweight.size(0), K = qweight.size(1) * 2, G = K / 32;
  TORCH_CHECK(K % 32 == 0, "K a multiple of 32");
  for (const auto* t : {&scales, &mins})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == at::kHalf && t->numel() == N * G,
                "scales, mins: [N, K/32] fp16, dense");
  auto out = at::empty({N, K}, scales.options().dtype(at::kFloat));
  const uint8_t* q = qweight.data_ptr<uint8_t>();
  const at::Half* sc = scales.data_ptr<at::Half>();
  const at::Half* mn = mins.data_ptr<at::Half>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, N * G, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {  // i: a group of a row (row-major: n * G + g)
      const uint8_t* b = q + i * 16;
      float* w = o + i * 32;
      const float d = half_to_float(sc[i]), m = half_to_float(mn[i]);
#pragma omp simd
      for (int j = 0; j < 16; ++j) {
        w[j] = static_cast<float>(b[j] & 0x0F) * d + m;
        w[j + 16] = static_cast<float>(b[j] >> 4) * d + m;
      }
    }
  });
  return out;
}

// ---- the tiled int4 and int8 layouts, on each family's integer dot product ---------
//
// Both layouts are the same in every build (loaded weights do not depend on the CPU),
// and every build computes the same integer dot products; only the instructions
// differ: vpdpbusd on AVX512-VNNI (16 lanes), vpmaddubsw + vpmaddwd on AVX2 (8 lanes,
// each tile in two halves of 8 rows), sdot on NEON (4 lanes, four vectors a tile),
// plain loops in the generic build.
//
// Activations: each group of 32 becomes two int8 parts with its own step, x ~= step *
// (256 hi + lo) (about 16 bits: finer than bf16), hi and lo in -127..127.
//
// int4 (tile_groups in quant.py): the grid of int4_linear (groups of 32 along K,
// w = q * scale + min, q in 0..15). Each lane sums one weight row's group, so the 16
// lanes of a tile hold 16 output rows and no horizontal sum is needed:
//   sum_k w[n, k] x[k] = sum_g scale[n, g] * step[g] * (256 sum_j q xhi + sum_j q xlo)
//                        + min[n, g] * sum_j x[g, j]   (the exact sum, in fp32)
// qweight [T, G, 4, 64] uint8, T = ceil(N / 16) tiles of 16 rows: byte 4 j + b of
// part s of (tile t, group g) holds element 8 s + b of row 16 t + j's group g in its
// low nibble and element 8 s + 4 + b in its high nibble; scales, mins [T, G, 16] fp16.
// Rows past N are zero. About 4x fewer instructions than widening to fp32.
//
// int8 (tile_rows in quant.py): per-row symmetric int8 weights, q in -127..127 (never
// -128, which the bounds below assume), W[n, k] = q[n, k] * scale[n].
// qweight [T, G, 8, 64] int8: part u holds bytes 4 u .. 4 u + 3 of each of the tile's
// 16 rows' group g (4 bytes per lane, row j in lane j); wsum [T, G, 16] int32, the sum
// of each row's group (VNNI's correction for its unsigned operand); scale [T * 16]
// fp32 (zero past N).

constexpr int64_t kTile = 16;
// How far ahead of the group being multiplied its weights are prefetched: the
// hardware's stream prefetch alone leaves a batch-1 step's int4 linears 14 % slower
// (4.52 against 3.90 ms, 2048 bytes ahead; 1024: 4.05 ms; alternating in one process).
constexpr int64_t kPrefetch = 2048;

inline void prefetch(const void* p) {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
#else
  __builtin_prefetch(p);
#endif
}

// The two-part steps of a group whose |x| max is top: hi's unit, and the factors
// that take x to hi's and lo's grids (0 for an all-zero group).
struct GroupSteps {
  float unit, inv, inv_lo;
  explicit GroupSteps(float top)
      : unit(top / 127.f),
        inv(top > 0.f ? 127.f / top : 0.f),
        inv_lo(top > 0.f ? 256.f * 127.f / top : 0.f) {}
};

// Where an int4 tile's per-group factors come from: each family's tile is one template
// over these two, so the exact Q4_K form runs the fp16 form's arithmetic.
//  - HalfScales (quant.tile_groups): scale and min per (tile, group), fp16 [T, G, 16] each.
//  - Q4KScales (quant.tile_q4k, a GGUF's Q4_K blocks as they are): per (tile, group) the
//    6-bit sc and m as uint8 [T, G, 2, 16] (sc's 16 rows, then m's), per (tile, super-block
//    of 8 groups) d and -dmin as the file's fp16 [T, G / 8, 2, 16]; the group's scale is
//    d * sc and its min -dmin * m, both formed in fp32, where they are exact (11 bits
//    times 6), as ggml's dequantizer forms them: the file's weights exactly. 48 bytes of
//    factors per group and tile where HalfScales has 64 (40 with d and dmin in fp16).
// group_scales(s, t, G, g, j) gives row j's (scale, min) for the scalar loops; each
// family below loads a vector of them.
struct HalfScales {
  const at::Half* sc;
  const at::Half* mn;
};
struct Q4KScales {
  const uint8_t* sub;
  const at::Half* super;
};

// One tile's factors formed ahead in fp32 (from Q4KScales, for inputs of several row
// blocks, which would each form them again): d [G][16] then m [G][16] per group, the
// tile index ignored (the buffer holds one tile).
struct FloatScales {
  const float* dm;
};

inline std::pair<float, float> group_scales(const FloatScales& s, int64_t, int64_t, int64_t g,
                                            int64_t j) {
  return {s.dm[g * 2 * kTile + j], s.dm[g * 2 * kTile + kTile + j]};
}

inline std::pair<float, float> group_scales(const HalfScales& s, int64_t t, int64_t G,
                                            int64_t g, int64_t j) {
  const int64_t at = (t * G + g) * kTile + j;
  return {half_to_float(s.sc[at]), half_to_float(s.mn[at])};
}

inline std::pair<float, float> group_scales(const Q4KScales& s, int64_t t, int64_t G,
                                            int64_t g, int64_t j) {
  const uint8_t* sub = s.sub + (t * G + g) * 2 * kTile;
  const at::Half* sup = s.super + (t * (G / 8) + g / 8) * 2 * kTile;
  return {half_to_float(sup[j]) * static_cast<float>(sub[j]),
          half_to_float(sup[kTile + j]) * static_cast<float>(sub[kTile + j])};
}

#if defined(MELLEA_AVX512)
// Each row's groups of 32 in two int8 parts, x ~= step * (256 hi + lo): hi rounds x to
// 255 levels of the group's |x| max, lo the remainder to 1/256 of hi's step, so the
// activations keep about 16 bits. xq: each row's hi parts, then its lo parts
// (cpu_kernels_layout.h); step and xsum [M, G].
void quantize_activations(const float* x, int64_t rows, int64_t K, int8_t* xq, float* step,
                          float* xsum) {
  const int64_t G = K / 32;
  const __m512 lo_max = _mm512_set1_ps(127.f), lo_min = _mm512_set1_ps(-127.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = r * G + g;
      const float* v = x + i * 32;
      int8_t* hi = xq + r * xq_row(K) + g * 32;
      int8_t* lo = hi + xq_lo(K);
      const __m512 a = _mm512_loadu_ps(v), b = _mm512_loadu_ps(v + 16);
      const float top = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
      xsum[i] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
      const GroupSteps gs(top);
      step[i] = gs.unit / 256.f;
      const __m512 inv = _mm512_set1_ps(gs.inv), inv_lo = _mm512_set1_ps(gs.inv_lo);
      const __m512 u = _mm512_set1_ps(gs.unit);
      for (int h = 0; h < 2; ++h) {
        const __m512 xv = h == 0 ? a : b;
        const __m512 qh = _mm512_roundscale_ps(_mm512_mul_ps(xv, inv), _MM_FROUND_TO_NEAREST_INT);
        const __m512 rest = _mm512_fnmadd_ps(qh, u, xv);  // x - qh * unit
        const __m512 ql = _mm512_min_ps(
            _mm512_max_ps(_mm512_roundscale_ps(_mm512_mul_ps(rest, inv_lo),
                                               _MM_FROUND_TO_NEAREST_INT),
                          lo_min),
            lo_max);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + 16 * h),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(qh)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + 16 * h),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(ql)));
      }
    }
}

// The 16 rows' scale and min of tile t's groups, load(g) asked in order of g:
// Q4_K's d and -dmin are widened once per block of 8 groups.
template <class S>
struct Scales16;

template <>
struct Scales16<HalfScales> {
  const HalfScales& s;
  int64_t t, G;
  void load(int64_t g, __m512& d, __m512& m) {
    const int64_t i = (t * G + g) * kTile;
    d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.sc + i)));
    m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.mn + i)));
  }
};

template <>
struct Scales16<FloatScales> {
  const FloatScales& s;
  int64_t t, G;
  void load(int64_t g, __m512& d, __m512& m) {
    d = _mm512_loadu_ps(s.dm + g * 2 * kTile);
    m = _mm512_loadu_ps(s.dm + g * 2 * kTile + kTile);
  }
};

template <>
struct Scales16<Q4KScales> {
  const Q4KScales& s;
  int64_t t, G;
  __m512 block_d = _mm512_setzero_ps(), block_m = _mm512_setzero_ps();
  void load(int64_t g, __m512& d, __m512& m) {
    if ((g & 7) == 0) {
      const at::Half* sup = s.super + (t * (G / 8) + g / 8) * 2 * kTile;
      block_d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sup)));
      block_m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sup + kTile)));
    }
    const uint8_t* sub = s.sub + (t * G + g) * 2 * kTile;
    auto widen = [](const uint8_t* p) {
      return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    };
    d = _mm512_mul_ps(block_d, widen(sub));  // exact: 11 bits times 6
    m = _mm512_mul_ps(block_m, widen(sub + kTile));
  }
};

// Tile t's factors from Q4KScales in fp32 (FloatScales' layout), once for all row blocks.
void form_q4k_factors(const Q4KScales& s, int64_t t, int64_t G, float* dm) {
  Scales16<Q4KScales> factors{s, t, G};
  for (int64_t g = 0; g < G; ++g) {
    __m512 d, m;
    factors.load(g, d, m);
    _mm512_storeu_ps(dm + g * 2 * kTile, d);
    _mm512_storeu_ps(dm + g * 2 * kTile + kTile, m);
  }
}

// Output rows [16 t, 16 t + 16) for MR activation rows.
template <int MR, class S>
void vnni_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  const uint8_t* w = qw + t * G * 256;
  Scales16<S> factors{scales, t, G};
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int line = 0; line < 256; line += 64)  // (a prefetch past the end is harmless)
      prefetch(w + kPrefetch + line);
    __m512i wv[8];
    for (int s = 0; s < 4; ++s) {
      const __m512i v = _mm512_loadu_si512(w + 64 * s);
      wv[2 * s] = _mm512_and_si512(v, low);
      wv[2 * s + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    __m512 d, m;
    factors.load(g, d, m);
    for (int i = 0; i < MR; ++i) {
      const int32_t* xh = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + g * 32);
      const int32_t* xl = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + xq_lo(K) + g * 32);
      __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
      for (int u = 0; u < 8; ++u) {
        hi = _mm512_dpbusd_epi32(hi, wv[u], _mm512_set1_epi32(xh[u]));
        lo = _mm512_dpbusd_epi32(lo, wv[u], _mm512_set1_epi32(xl[u]));
      }
      // |hi| <= 32 * 15 * 127, so 256 hi + lo stays below 2^24: exact in fp32.
      const __m512i dot = _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo);
      const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(xscale[i * G + g]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[i]);
      acc[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(xsum[i * G + g]), acc[i]);
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(out + i * N + n0, keep, acc[i]);
}

// int8: vpdpbusd takes unsigned bytes on one side: the activation parts, shifted by 128
// to u8, and the int8 weights as they are. The shift adds 128 * sum_j w to each group's
// dot product; that sum is wsum, so
//   sum_k w[n, k] x[k] = scale[n] * sum_g step[g] * (256 hi + lo - 128 * 257 * wsum[n, g])
// with hi, lo the dot products of the shifted parts.
template <int MR>
void vnni8_tile(const int8_t* qw, const int32_t* wsum, const float* wscale, const int8_t* xq,
                const float* xscale, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32;
  const __m512i shift = _mm512_set1_epi32(128 * 257);
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  const int8_t* w = qw + t * G * 512;
  for (int64_t g = 0; g < G; ++g, w += 512) {
    for (int line = 0; line < 512; line += 64)  // as many groups ahead as int4's
      prefetch(w + 2 * kPrefetch + line);
    __m512i wv[8];
    for (int u = 0; u < 8; ++u) wv[u] = _mm512_loadu_si512(w + 64 * u);
    const __m512i bias = _mm512_mullo_epi32(
        _mm512_loadu_si512(wsum + (t * G + g) * kTile), shift);
    for (int i = 0; i < MR; ++i) {
      const int32_t* xh = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + g * 32);
      const int32_t* xl = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + xq_lo(K) + g * 32);
      __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
      for (int u = 0; u < 8; ++u) {  // xor 0x80 in each byte: s8 + 128 as u8
        hi = _mm512_dpbusd_epi32(hi, _mm512_set1_epi32(xh[u] ^ 0x80808080), wv[u]);
        lo = _mm512_dpbusd_epi32(lo, _mm512_set1_epi32(xl[u] ^ 0x80808080), wv[u]);
      }
      // |256 hi| <= 256 * 32 * 255 * 127 < 2^29: the sum stays in int32.
      const __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo), bias);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(xscale[i * G + g]), acc[i]);
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
  const __m512 rows = _mm512_loadu_ps(wscale + n0);
  for (int i = 0; i < MR; ++i)
    _mm512_mask_storeu_ps(out + i * N + n0, keep, _mm512_mul_ps(acc[i], rows));
}

#elif defined(MELLEA_AVX2)
// 32 int32 lanes (4 vectors, in order) to int8 with saturation, in order.
inline __m256i pack_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  // packs works within 128-bit halves: put the 4-byte runs back in order.
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// quantize_activations of the AVX-512 build on 8 lanes, the same roundings in the same
// order (the sum as _mm512_reduce_add_ps takes it), so the parts match bit for bit.
void quantize_activations(const float* x, int64_t rows, int64_t K, int8_t* xq, float* step,
                          float* xsum) {
  const int64_t G = K / 32;
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 lo_max = _mm256_set1_ps(127.f), lo_min = _mm256_set1_ps(-127.f);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = r * G + g;
      const float* v = x + i * 32;
      int8_t* hi = xq + r * xq_row(K) + g * 32;
      int8_t* lo = hi + xq_lo(K);
      __m256 xv[4];
      for (int j = 0; j < 4; ++j) xv[j] = _mm256_loadu_ps(v + 8 * j);
      const __m256 top8 = _mm256_max_ps(
          _mm256_max_ps(_mm256_andnot_ps(sign, xv[0]), _mm256_andnot_ps(sign, xv[1])),
          _mm256_max_ps(_mm256_andnot_ps(sign, xv[2]), _mm256_andnot_ps(sign, xv[3])));
      __m128 t4 = _mm_max_ps(_mm256_extractf128_ps(top8, 1), _mm256_castps256_ps128(top8));
      t4 = _mm_max_ps(t4, _mm_shuffle_ps(t4, t4, _MM_SHUFFLE(1, 0, 3, 2)));
      const float top = std::max(_mm_cvtss_f32(t4), _mm_cvtss_f32(_mm_shuffle_ps(t4, t4, 1)));
      // (a + b) of the AVX-512 build's two 16-lane halves is (xv0 + xv2 | xv1 + xv3);
      // its reduction adds the upper 8 to the lower 8 first.
      xsum[i] = reduce_add_ps(
          _mm256_add_ps(_mm256_add_ps(xv[1], xv[3]), _mm256_add_ps(xv[0], xv[2])));
      const GroupSteps gs(top);
      step[i] = gs.unit / 256.f;
      const __m256 inv = _mm256_set1_ps(gs.inv), inv_lo = _mm256_set1_ps(gs.inv_lo);
      const __m256 u = _mm256_set1_ps(gs.unit);
      __m256i qh[4], ql[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 h = _mm256_round_ps(_mm256_mul_ps(xv[j], inv), kNearest);
        const __m256 rest = _mm256_fnmadd_ps(h, u, xv[j]);  // x - h * unit
        const __m256 l = _mm256_min_ps(
            _mm256_max_ps(_mm256_round_ps(_mm256_mul_ps(rest, inv_lo), kNearest), lo_min),
            lo_max);
        qh[j] = _mm256_cvtps_epi32(h);
        ql[j] = _mm256_cvtps_epi32(l);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), pack_bytes(qh[0], qh[1], qh[2], qh[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), pack_bytes(ql[0], ql[1], ql[2], ql[3]));
    }
}

// Output rows [16 t, 16 t + 16) for MR activation rows, as two halves of 8 rows. The
// nibbles (u8, <= 15) times the parts (s8, |.| <= 127) by vpmaddubsw: a pair sums to at
// most 3810 and all 8 parts' pairs to 30480, so they add up in int16 before one
// vpmaddwd widens them; the dot products are the AVX-512 build's exactly.
// Above one row, each half runs over all groups before the other half (int4_half_rows):
// with both halves in one pass the compiler kept each row's 16 activation words for the
// second half in scalar spills on the stack, and the pass ran at 33 G multiply-adds/s a
// core against 43 this way (2048 x 2048, 4-32 rows, one thread); the second pass finds
// the tile's weights in cache. One row is bound by reading the weights, so it takes both
// halves in one pass (int4_one_row; two passes: 4.5-5.3 against 3.4-3.7 ms for 49152
// x 2048).
// The scale and min of rows [8 half, 8 half + 8) of tile t's groups, asked for in order
// of g (also by the VNNI-256 tiles of cpu_kernels_vnni256.inc): Q4_K's d and -dmin are
// widened once per block of 8 groups.
template <class S>
struct Scales8;

template <>
struct Scales8<HalfScales> {
  const HalfScales& s;
  int64_t t, G;
  void load(int64_t g, int half, __m256& d, __m256& m) {
    const int64_t i = (t * G + g) * kTile + 8 * half;
    d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.sc + i)));
    m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.mn + i)));
  }
};

template <>
struct Scales8<FloatScales> {
  const FloatScales& s;
  int64_t t, G;
  void load(int64_t g, int half, __m256& d, __m256& m) {
    d = _mm256_loadu_ps(s.dm + g * 2 * kTile + 8 * half);
    m = _mm256_loadu_ps(s.dm + g * 2 * kTile + kTile + 8 * half);
  }
};

template <>
struct Scales8<Q4KScales> {
  const Q4KScales& s;
  int64_t t, G;
  __m256 block_d[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 block_m[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  void load(int64_t g, int half, __m256& d, __m256& m) {
    if ((g & 7) == 0) {
      const at::Half* sup = s.super + (t * (G / 8) + g / 8) * 2 * kTile + 8 * half;
      block_d[half] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sup)));
      block_m[half] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sup + kTile)));
    }
    const uint8_t* sub = s.sub + (t * G + g) * 2 * kTile + 8 * half;
    auto widen = [](const uint8_t* p) {
      return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    };
    d = _mm256_mul_ps(block_d[half], widen(sub));  // exact: 11 bits times 6
    m = _mm256_mul_ps(block_m[half], widen(sub + kTile));
  }
};

// Tile t's factors from Q4KScales in fp32 (FloatScales' layout), once for all row blocks.
void form_q4k_factors(const Q4KScales& s, int64_t t, int64_t G, float* dm) {
  Scales8<Q4KScales> factors{s, t, G};
  for (int64_t g = 0; g < G; ++g)
    for (int half = 0; half < 2; ++half) {
      __m256 d, m;
      factors.load(g, half, d, m);
      _mm256_storeu_ps(dm + g * 2 * kTile + 8 * half, d);
      _mm256_storeu_ps(dm + g * 2 * kTile + kTile + 8 * half, m);
    }
}

// One group's term of a half's 8 rows: the int16 sums of the high and low activation
// parts joined (256 hi + lo, widened by vpmaddwd), scaled by the weights' factor and the
// activations' step, plus the minimum times the activations' sum (both tiles below).
inline __m256 add_group(__m256 acc, __m256i hi, __m256i lo, __m256 d, __m256 m, float step,
                        float sum) {
  const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(hi, _mm256_set1_epi16(256)),
                                       _mm256_madd_epi16(lo, _mm256_set1_epi16(1)));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(step)), acc);
  return _mm256_fmadd_ps(m, _mm256_set1_ps(sum), acc);
}

// Half H of tile t's rows for MR > 1 activation rows, into rows[i][8 H ..], each weight
// vector unpacked just before its products. Unpacking a half's 8 vectors first and then
// running the rows (as the VNNI tiles do) took, with 4 rows' sums, more than AVX2's 16
// vector registers: 86 spills and reloads a group in the compiled loop, and 37-41 G
// multiply-adds/s a core against 47-49 this way (8192 x 2048 Q4_K, 4-32 rows, one
// thread). A row's two sums are its only registers; the float accumulators stay in
// rows[] (L1) between groups.
template <int MR, int H, class S>
void int4_half_rows(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
                    const float* xsum, int64_t K, int64_t t, float (*rows)[kTile]) {
  const int64_t G = K / 32;
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int i = 0; i < MR; ++i) _mm256_store_ps(rows[i] + 8 * H, _mm256_setzero_ps());
  const uint8_t* w = qw + t * G * 256;
  Scales8<S> factors{scales, t, G};
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int line = 0; line < 256; line += 64) prefetch(w + kPrefetch + line);
    const int8_t* x = xq + g * 32;
    __m256i hi[MR], lo[MR];
    for (int s = 0; s < 4; ++s) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * s + 32 * H));
      for (int n = 0; n < 2; ++n) {
        const int u = 2 * s + n;
        const __m256i wv = _mm256_and_si256(n == 0 ? v : _mm256_srli_epi16(v, 4), low);
        for (int i = 0; i < MR; ++i) {
          int32_t xh, xl;
          std::memcpy(&xh, x + i * xq_row(K) + 4 * u, 4);
          std::memcpy(&xl, x + i * xq_row(K) + xq_lo(K) + 4 * u, 4);
          const __m256i ph = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(xh));
          const __m256i pl = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(xl));
          hi[i] = u == 0 ? ph : _mm256_add_epi16(hi[i], ph);
          lo[i] = u == 0 ? pl : _mm256_add_epi16(lo[i], pl);
        }
      }
    }
    __m256 d, m;
    factors.load(g, H, d, m);
    for (int i = 0; i < MR; ++i)
      _mm256_store_ps(rows[i] + 8 * H, add_group(_mm256_load_ps(rows[i] + 8 * H), hi[i], lo[i], d,
                                                 m, xscale[i * G + g], xsum[i * G + g]));
  }
}

// Both halves of tile t's rows for one activation row, into row[0 .. 16): each of the
// row's activation words is broadcast once and meets both halves' weights at once. Run
// half after half, the compiler kept the first half's 16 broadcasts for the second in
// stack spills (16 stores and 16 reloads a group): 30-34 against 37-39 G multiply-adds/s
// a core from cache (8192 x 2048, one thread), 1.00-1.07x as fast from memory (2 threads).
template <class S>
void int4_one_row(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
                  const float* xsum, int64_t K, int64_t t, float* row) {
  const int64_t G = K / 32;
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const uint8_t* w = qw + t * G * 256;
  Scales8<S> factors{scales, t, G};
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int line = 0; line < 256; line += 64) prefetch(w + kPrefetch + line);
    const int8_t* x = xq + g * 32;
    __m256i hi[2], lo[2];
    for (int s = 0; s < 4; ++s) {
      const __m256i v[2] = {
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * s)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * s + 32))};
      for (int n = 0; n < 2; ++n) {
        const int u = 2 * s + n;
        int32_t xh, xl;
        std::memcpy(&xh, x + 4 * u, 4);
        std::memcpy(&xl, x + xq_lo(K) + 4 * u, 4);
        const __m256i bh = _mm256_set1_epi32(xh), bl = _mm256_set1_epi32(xl);
        for (int h = 0; h < 2; ++h) {
          const __m256i wv = _mm256_and_si256(n == 0 ? v[h] : _mm256_srli_epi16(v[h], 4), low);
          const __m256i ph = _mm256_maddubs_epi16(wv, bh), pl = _mm256_maddubs_epi16(wv, bl);
          hi[h] = u == 0 ? ph : _mm256_add_epi16(hi[h], ph);
          lo[h] = u == 0 ? pl : _mm256_add_epi16(lo[h], pl);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      __m256 d, m;
      factors.load(g, h, d, m);
      acc[h] = add_group(acc[h], hi[h], lo[h], d, m, xscale[g], xsum[g]);
    }
  }
  _mm256_storeu_ps(row, acc[0]);
  _mm256_storeu_ps(row + 8, acc[1]);
}

template <int MR, class S>
void vnni_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  alignas(32) float rows[MR][kTile];
  if constexpr (MR == 1) {
    int4_one_row(qw, scales, xq, xscale, xsum, K, t, rows[0]);
  } else {
    int4_half_rows<MR, 0>(qw, scales, xq, xscale, xsum, K, t, rows);
    int4_half_rows<MR, 1>(qw, scales, xq, xscale, xsum, K, t, rows);
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  for (int i = 0; i < MR; ++i) std::copy(rows[i], rows[i] + valid, out + i * N + n0);
}

// int8 without VNNI: vpmaddubsw needs an unsigned side, and the shifted parts (up to
// 255) times weights (up to 127) would saturate its int16 pairs. Instead each
// activation's two parts are joined into one int16, 256 hi + lo (|.| <= 32639), and
// multiplied by the weights widened to int16 on vpmaddwd: a pair is at most 2 * 127 *
// 32639 and a group's sum 32 * 127 * 32639 < 2^31, so the integer sums are exact and
// equal to 256 sum(w hi) + sum(w lo), the AVX-512 build's dot products; no shift, so no
// wsum. One vpmaddwd and one add per 2 x 8 products, where the former way (|x| times
// sign(x) * w on vpmaddubsw, then vpmaddwd) took five instructions per 4 x 8 products
// and part: 26 -> 37 G multiply-adds/s a core (2048 x 2048, 4-32 rows, one thread).
// Each vector of widened weights holds 4 rows' 4 products of one part u, so the sums come
// as pairs of a row's halves; vphaddd adds them with the rows in the order 0 1 4 5 2 3
// 6 7 of each 8, put back once at the end.
template <int MR>
void vnni8_tile(const int8_t* qw, const int32_t*, const float* wscale, const int8_t* xq,
                const float* xscale, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32;
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const int8_t* w = qw + t * G * 512;
  alignas(32) int16_t wide[8][4][16];  // [part u][rows 4 q .. 4 q + 3][row, then k]
  alignas(32) int16_t joined[MR][32];  // [row][k of the group]: 256 hi + lo
  for (int64_t g = 0; g < G; ++g, w += 512) {
    for (int line = 0; line < 512; line += 64) prefetch(w + 2 * kPrefetch + line);
    for (int u = 0; u < 8; ++u)
      for (int q = 0; q < 4; ++q)
        _mm256_store_si256(reinterpret_cast<__m256i*>(wide[u][q]),
                           _mm256_cvtepi8_epi16(_mm_loadu_si128(
                               reinterpret_cast<const __m128i*>(w + 64 * u + 16 * q))));
    for (int i = 0; i < MR; ++i)
      for (int h = 0; h < 2; ++h) {
        const int8_t* xh = xq + i * xq_row(K) + g * 32 + 16 * h;
        const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xh)));
        const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xh + xq_lo(K))));
        _mm256_store_si256(reinterpret_cast<__m256i*>(joined[i] + 16 * h),
                           _mm256_add_epi16(_mm256_slli_epi16(hi, 8), lo));
      }
    for (int i = 0; i < MR; ++i) {
      __m256i sum[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
      for (int u = 0; u < 8; ++u) {
        const __m256i b = _mm256_broadcastq_epi64(  // the 4 joined activations of part u
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(joined[i] + 4 * u)));
        for (int q = 0; q < 4; ++q)
          sum[q] = _mm256_add_epi32(
              sum[q], _mm256_madd_epi16(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(wide[u][q]))));
      }
      const __m256 step = _mm256_set1_ps(xscale[i * G + g]);
      for (int half = 0; half < 2; ++half) {
        const __m256i dot = _mm256_hadd_epi32(sum[2 * half], sum[2 * half + 1]);
        acc[i][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), step, acc[i][half]);
      }
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  const __m256 r0 = _mm256_loadu_ps(wscale + n0), r1 = _mm256_loadu_ps(wscale + n0 + 8);
  for (int i = 0; i < MR; ++i) {
    alignas(32) float row[kTile];
    for (int half = 0; half < 2; ++half) {  // rows 0 1 4 5 2 3 6 7 -> 0 .. 7
      const __m256 in_order = _mm256_castsi256_ps(
          _mm256_permute4x64_epi64(_mm256_castps_si256(acc[i][half]), 0xD8));
      _mm256_store_ps(row + 8 * half, _mm256_mul_ps(in_order, half == 0 ? r0 : r1));
    }
    std::copy(row, row + valid, out + i * N + n0);
  }
}

// The same tiles on 8-lane vpdpbusd, where the CPU has it (see the included file).
#pragma GCC push_options
#pragma GCC target("avxvnni")
#define DPBUSD _mm256_dpbusd_avx_epi32
#define VNNI256 avx_vnni
#include "cpu_kernels_vnni256.inc"
#undef DPBUSD
#undef VNNI256
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512vl,avx512vnni")
#define DPBUSD _mm256_dpbusd_epi32
#define VNNI256 evex_vnni
#include "cpu_kernels_vnni256.inc"
#undef DPBUSD
#undef VNNI256
#pragma GCC pop_options

#elif defined(MELLEA_NEON)
// The neon-dotprod build: the AVX-512 build's arithmetic on sdot, 4 rows per vector
// (cpu_kernels_neon.h, where each kernel is tested against its scalar reference under
// qemu-aarch64); the same bits as that build.
static_assert(mellea_neon::kRows == kTile, "the NEON tiles are the layouts' 16 rows");

void quantize_activations(const float* x, int64_t rows, int64_t K, int8_t* xq, float* step,
                          float* xsum) {
  const int64_t G = K / 32;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = r * G + g;
      int8_t* hi = xq + r * xq_row(K) + g * 32;
      float top;
      mellea_neon::group_top_and_sum(x + i * 32, &top, &xsum[i]);
      const GroupSteps gs(top);
      step[i] = gs.unit / 256.f;
      mellea_neon::split_group(x + i * 32, gs.unit, gs.inv, gs.inv_lo, hi, hi + xq_lo(K));
    }
}

template <int MR>
void vnni_tile(const uint8_t* qw, const HalfScales& s, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  mellea_neon::int4_tile<MR>(qw, mellea_neon::HalfScales{reinterpret_cast<const uint16_t*>(s.sc),
                                                         reinterpret_cast<const uint16_t*>(s.mn)},
                             xq, xscale, xsum, out, N, K, t);
}

template <int MR>
void vnni_tile(const uint8_t* qw, const FloatScales& s, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  mellea_neon::int4_tile<MR>(qw, mellea_neon::FloatScales{s.dm}, xq, xscale, xsum, out, N, K, t);
}

template <int MR>
void vnni_tile(const uint8_t* qw, const Q4KScales& s, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  mellea_neon::int4_tile<MR>(
      qw, mellea_neon::Q4KScales{s.sub, reinterpret_cast<const uint16_t*>(s.super)}, xq, xscale,
      xsum, out, N, K, t);
}

template <int MR>
void vnni8_tile(const int8_t* qw, const int32_t*, const float* wscale, const int8_t* xq,
                const float* xscale, float* out, int64_t N, int64_t K, int64_t t) {
  mellea_neon::int8_tile<MR>(qw, wscale, xq, xscale, out, N, K, t);
}

#else
// The generic build: the same arithmetic in plain loops (the compiler vectorizes what it
// can). Within the stated bound of the exact product, not bit for bit the SIMD builds'.
void quantize_activations(const float* x, int64_t rows, int64_t K, int8_t* xq, float* step,
                          float* xsum) {
  const int64_t G = K / 32;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = r * G + g;
      const float* v = x + i * 32;
      int8_t* hi = xq + r * xq_row(K) + g * 32;
      int8_t* lo = hi + xq_lo(K);
      float top = 0.f, sum = 0.f;
      for (int j = 0; j < 32; ++j) {
        top = std::max(top, std::fabs(v[j]));
        sum += v[j];
      }
      xsum[i] = sum;
      const GroupSteps gs(top);
      step[i] = gs.unit / 256.f;
      for (int j = 0; j < 32; ++j) {
        const float h = std::nearbyint(v[j] * gs.inv);
        const float l = std::nearbyint((v[j] - h * gs.unit) * gs.inv_lo);
        hi[j] = static_cast<int8_t>(h);
        lo[j] = static_cast<int8_t>(std::clamp(l, -127.f, 127.f));
      }
    }
}

template <int MR, class S>
void vnni_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32, n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  float acc[MR][kTile] = {};
  const uint8_t* w = qw + t * G * 256;
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int i = 0; i < MR; ++i) {
      const int8_t* xh = xq + i * xq_row(K) + g * 32;
      const int8_t* xl = xh + xq_lo(K);
      for (int j = 0; j < kTile; ++j) {
        int32_t hi = 0, lo = 0;
        for (int s = 0; s < 4; ++s)
          for (int b = 0; b < 4; ++b) {
            const uint8_t byte = w[64 * s + 4 * j + b];
            const int e0 = 8 * s + b, e1 = 8 * s + 4 + b;  // the low and high nibble's
            hi += (byte & 0x0F) * xh[e0] + (byte >> 4) * xh[e1];
            lo += (byte & 0x0F) * xl[e0] + (byte >> 4) * xl[e1];
          }
        const auto [d, m] = group_scales(scales, t, G, g, j);
        acc[i][j] += static_cast<float>(256 * hi + lo) * (d * xscale[i * G + g]);
        acc[i][j] += m * xsum[i * G + g];
      }
    }
  }
  for (int i = 0; i < MR; ++i) std::copy(acc[i], acc[i] + valid, out + i * N + n0);
}

template <int MR>
void vnni8_tile(const int8_t* qw, const int32_t*, const float* wscale, const int8_t* xq,
                const float* xscale, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32, n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  float acc[MR][kTile] = {};
  const int8_t* w = qw + t * G * 512;
  for (int64_t g = 0; g < G; ++g, w += 512)
    for (int i = 0; i < MR; ++i) {
      const int8_t* xh = xq + i * xq_row(K) + g * 32;
      const int8_t* xl = xh + xq_lo(K);
      for (int j = 0; j < kTile; ++j) {
        int32_t hi = 0, lo = 0;
        for (int u = 0; u < 8; ++u)
          for (int b = 0; b < 4; ++b) {
            const int32_t q = w[64 * u + 4 * j + b];
            hi += q * xh[4 * u + b];
            lo += q * xl[4 * u + b];
          }
        acc[i][j] += static_cast<float>(256 * hi + lo) * xscale[i * G + g];
      }
    }
  for (int i = 0; i < MR; ++i)
    for (int64_t j = 0; j < valid; ++j) out[i * N + n0 + j] = acc[i][j] * wscale[n0 + j];
}
#endif

// Which integer dot product the AVX2 build's tiles use: vpmaddubsw + vpmaddwd (any
// AVX2 CPU), or vpdpbusd on 8 lanes: AVX-VNNI where the CPU has it (the default there),
// AVX512-VL VNNI when a test asks for it. Other builds have one way each.
enum Dot : int { kMaddubs = 0, kAvxVnni = 1, kEvexVnni = 2 };
const char* const kDotNames[] = {"maddubs", "avx-vnni", "avx512vl-vnni"};

bool cpu_has_dot(int dot) {
#if defined(MELLEA_AVX2)
  if (dot == kAvxVnni) return __builtin_cpu_supports("avxvnni");
  if (dot == kEvexVnni)
    return __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return dot == kMaddubs;
#else
  return false;
#endif
}

std::atomic<int> g_dot{cpu_has_dot(kAvxVnni) ? kAvxVnni : kMaddubs};

// The AVX2 build's dot product: `kind` ("" to keep it) becomes it where the CPU runs
// it; returns the one in use (the family's own name in the other builds).
std::string avx2_dot(const std::string& kind) {
#if defined(MELLEA_AVX2)
  if (!kind.empty()) {
    int wanted = -1;
    for (int i = 0; i < 3; ++i)
      if (kind == kDotNames[i]) wanted = i;
    TORCH_CHECK(wanted >= 0, "dot product: maddubs, avx-vnni or avx512vl-vnni");
    TORCH_CHECK(cpu_has_dot(wanted), "this CPU lacks ", kind);
    g_dot = wanted;
  }
  return kDotNames[g_dot.load()];
#else
  TORCH_CHECK(kind.empty(), "the dot product is chosen in the AVX2 build only");
  return "native";
#endif
}

template <int MR, class S>
using Int4Tile = void (*)(const uint8_t*, const S&, const int8_t*, const float*, const float*,
                          float*, int64_t, int64_t, int64_t);
template <int MR>
using Int8Tile = void (*)(const int8_t*, const int32_t*, const float*, const int8_t*,
                          const float*, float*, int64_t, int64_t, int64_t);

template <int MR, class S>
Int4Tile<MR, S> int4_tile(int dot) {
#if defined(MELLEA_AVX2)
  if (dot == kAvxVnni) return &avx_vnni::int4_tile<MR, S>;
  if (dot == kEvexVnni) return &evex_vnni::int4_tile<MR, S>;
#endif
  return &vnni_tile<MR>;
}

template <int MR>
Int8Tile<MR> int8_tile(int dot) {
#if defined(MELLEA_AVX2)
  if (dot == kAvxVnni) return &avx_vnni::int8_tile<MR>;
  if (dot == kEvexVnni) return &evex_vnni::int8_tile<MR>;
#endif
  return &vnni8_tile<MR>;
}

// x's groups quantized by quantize_activations on the caller's thread, before the
// parallel region, into buffers that outlive the call (two allocations fewer on a
// path that runs ~120 times a decode step).
struct TwoPartActivations {
  const int8_t* q;     // M rows of hi, then lo parts (cpu_kernels_layout.h)
  const float* step;   // [M, G]
  const float* sum;    // [M, G]
};

TwoPartActivations two_part(const at::Tensor& x) {
  const int64_t M = x.size(0), K = x.size(1), G = K / 32;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  xq.resize(M * xq_row(K));
  xs.resize(2 * M * G);
  quantize_activations(x.data_ptr<float>(), M, K, xq.data(), xs.data(), xs.data() + M * G);
  return {xq.data(), xs.data(), xs.data() + M * G};
}

// tile(std::integral_constant<int, MR>, m) for the blocks of M rows: 4 at a time,
// then the 1-3 left.
template <typename Tile>
void for_row_blocks(int64_t M, const Tile& tile) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) tile(std::integral_constant<int, 4>{}, m);
  switch (M - m) {
    case 3: tile(std::integral_constant<int, 3>{}, m); break;
    case 2: tile(std::integral_constant<int, 2>{}, m); break;
    case 1: tile(std::integral_constant<int, 1>{}, m); break;
    default: break;
  }
}

#if !defined(MELLEA_AVX512) && !defined(MELLEA_AVX2)
// Tile t's factors from Q4KScales in fp32 (FloatScales' layout): the products the tiles
// form, once for all row blocks (the x86 families form them with their own vectors).
void form_q4k_factors(const Q4KScales& s, int64_t t, int64_t G, float* dm) {
  for (int64_t g = 0; g < G; ++g)
    for (int64_t j = 0; j < kTile; ++j) {
      const auto [d, m] = group_scales(s, t, G, g, j);
      dm[g * 2 * kTile + j] = d;
      dm[g * 2 * kTile + kTile + j] = m;
    }
}
#endif

// The tiled int4 linear over either form of factors (see HalfScales, Q4KScales). Above
// one block of rows, Q4_K's factors are formed once per tile (FloatScales): each block
// would form them again (2-3 % of a 32-row step of the 1.7B model).
template <class S>
at::Tensor int4_tiles_linear(const at::Tensor& x, const at::Tensor& qweight, const S& scales,
                             int64_t N) {
  const int64_t M = x.size(0), K = x.size(1), G = K / 32, T = (N + kTile - 1) / kTile;
  const TwoPartActivations a = two_part(x);
  auto out = at::empty({M, N}, x.options());
  const uint8_t* qw = qweight.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  const int dot = g_dot.load();
  constexpr bool kQ4K = std::is_same_v<S, Q4KScales>;
  at::parallel_for(0, T, 4, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> formed;
    for (int64_t t = begin; t < end; ++t) {
      if constexpr (kQ4K) {
        if (M > 4) {
          formed.resize(G * 2 * kTile);
          form_q4k_factors(scales, t, G, formed.data());
          const FloatScales ahead{formed.data()};
          for_row_blocks(M, [&](auto rows, int64_t m) {
            int4_tile<decltype(rows)::value, FloatScales>(dot)(
                qw, ahead, a.q + m * xq_row(K), a.step + m * G, a.sum + m * G, op + m * N, N, K, t);
          });
          continue;
        }
      }
      for_row_blocks(M, [&](auto rows, int64_t m) {
        int4_tile<decltype(rows)::value, S>(dot)(qw, scales, a.q + m * xq_row(K), a.step + m * G,
                                                 a.sum + m * G, op + m * N, N, K, t);
      });
    }
  });
  return out;
}

void check_int4_tiles(const at::Tensor& x, const at::Tensor& qweight, int64_t N) {
  check_activations(x);
  const int64_t K = x.size(1), G = K / 32, T = (N + kTile - 1) / kTile;
  TORCH_CHECK(K % 32 == 0 && qweight.scalar_type() == at::kByte && qweight.is_contiguous() &&
                  qweight.numel() == T * G * 256,
              "qweight: [ceil(N / 16), K / 32, 4, 64] uint8, dense");
}

at::Tensor int4_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                       const at::Tensor& mins, int64_t N) {
  check_int4_tiles(x, qweight, N);
  const int64_t G = x.size(1) / 32, T = (N + kTile - 1) / kTile;
  for (const auto* s : {&scales, &mins})
    TORCH_CHECK(s->is_contiguous() && s->scalar_type() == at::kHalf && s->numel() == T * G * kTile,
                "scales, mins: [ceil(N / 16), K / 32, 16] fp16, dense");
  return int4_tiles_linear(x, qweight, HalfScales{scales.data_ptr<at::Half>(), mins.data_ptr<at::Half>()},
                           N);
}

void check_q4k_factors(const at::Tensor& sub, const at::Tensor& super, int64_t T, int64_t G) {
  TORCH_CHECK(G % 8 == 0, "Q4_K: K must be a multiple of 256");
  TORCH_CHECK(sub.is_contiguous() && sub.scalar_type() == at::kByte && sub.numel() == T * G * 2 * kTile,
              "sub: [ceil(N / 16), K / 32, 2, 16] uint8 (sc, m), dense");
  TORCH_CHECK(super.is_contiguous() && super.scalar_type() == at::kHalf &&
                  super.numel() == T * (G / 8) * 2 * kTile,
              "super: [ceil(N / 16), K / 256, 2, 16] fp16 (d, -dmin), dense");
}

// A GGUF's Q4_K weights exactly: int4_vnni_linear's nibbles, the factors of Q4KScales.
at::Tensor q4k_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& sub,
                           const at::Tensor& super, int64_t N) {
  check_int4_tiles(x, qweight, N);
  check_q4k_factors(sub, super, (N + kTile - 1) / kTile, x.size(1) / 32);
  return int4_tiles_linear(x, qweight, Q4KScales{sub.data_ptr<uint8_t>(), super.data_ptr<at::Half>()},
                           N);
}

at::Tensor int8_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& wsum,
                            const at::Tensor& scale, int64_t N) {
  check_activations(x);
  const int64_t M = x.size(0), K = x.size(1), G = K / 32, T = (N + kTile - 1) / kTile;
  TORCH_CHECK(K % 32 == 0 && qweight.scalar_type() == at::kChar && qweight.is_contiguous() &&
                  qweight.numel() == T * G * 512,
              "qweight: [ceil(N / 16), K / 32, 8, 64] int8, dense");
  TORCH_CHECK(wsum.is_contiguous() && wsum.scalar_type() == at::kInt && wsum.numel() == T * G * kTile,
              "wsum: [ceil(N / 16), K / 32, 16] int32, dense");
  TORCH_CHECK(scale.is_contiguous() && scale.scalar_type() == at::kFloat && scale.numel() == T * kTile,
              "scale: [ceil(N / 16) * 16] fp32");
  const TwoPartActivations a = two_part(x);
  auto out = at::empty({M, N}, x.options());
  const int8_t* qw = qweight.data_ptr<int8_t>();
  const int32_t* ws = wsum.data_ptr<int32_t>();
  const float* sc = scale.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int dot = g_dot.load();
  at::parallel_for(0, T, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for_row_blocks(M, [&](auto rows, int64_t m) {
        int8_tile<decltype(rows)::value>(dot)(qw, ws, sc, a.q + m * xq_row(K), a.step + m * G,
                                              op + m * N, N, K, t);
      });
  });
  return out;
}

// The exact byte form of a GGUF's blocks (bytes_linear, bytes_dequantize).
#include "cpu_kernels_bytes.inc"

// Which build this is, as cpu_build.py names the families.
std::string family() {
#if defined(MELLEA_AVX512)
  return "avx512-vnni";
#elif defined(MELLEA_AVX2)
  return "avx2";
#elif defined(MELLEA_NEON)
  return "neon-dotprod";
#else
  return "generic";
#endif
}

// The fp32 weight [N, K] that tiled int4 weights stand for (for inputs too long for
// the kernel, and the tests): q * scale + min, the product exact (4 bits times 17).
template <class S>
at::Tensor int4_tiles_dequantize(const uint8_t* q, const S& scales, int64_t T, int64_t G,
                                 int64_t N, const at::TensorOptions& options) {
  const int64_t K = G * 32;
  TORCH_CHECK(N <= T * kTile, "N within the tiles");
  auto out = at::empty({N, K}, options.dtype(at::kFloat));
  float* o = out.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t t = n / kTile, j = n % kTile;
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* w = q + (t * G + g) * 256;
        const auto [d, m] = group_scales(scales, t, G, g, j);
        float* row = o + n * K + g * 32;
        for (int s = 0; s < 4; ++s)
          for (int b = 0; b < 4; ++b) {
            const uint8_t byte = w[64 * s + 4 * j + b];
            row[8 * s + b] = static_cast<float>(byte & 0x0F) * d + m;
            row[8 * s + 4 + b] = static_cast<float>(byte >> 4) * d + m;
          }
      }
    }
  });
  return out;
}

void check_int4_qweight(const at::Tensor& qweight) {
  TORCH_CHECK(qweight.dim() == 4 && qweight.scalar_type() == at::kByte &&
                  qweight.is_contiguous() && qweight.size(2) == 4 && qweight.size(3) == 64,
              "qweight: [T, G, 4, 64] uint8, dense");
}

at::Tensor int4_vnni_dequantize(const at::Tensor& qweight, const at::Tensor& scales,
                           const at::Tensor& mins, int64_t N) {
  check_int4_qweight(qweight);
  const int64_t T = qweight.size(0), G = qweight.size(1);
  for (const auto* s : {&scales, &mins})
    TORCH_CHECK(s->is_contiguous() && s->scalar_type() == at::kHalf && s->numel() == T * G * kTile,
                "scales, mins: [T, G, 16] fp16, dense");
  return int4_tiles_dequantize(qweight.data_ptr<uint8_t>(),
                               HalfScales{scales.data_ptr<at::Half>(), mins.data_ptr<at::Half>()},
                               T, G, N, scales.options());
}

at::Tensor q4k_vnni_dequantize(const at::Tensor& qweight, const at::Tensor& sub,
                               const at::Tensor& super, int64_t N) {
  check_int4_qweight(qweight);
  const int64_t T = qweight.size(0), G = qweight.size(1);
  check_q4k_factors(sub, super, T, G);
  return int4_tiles_dequantize(qweight.data_ptr<uint8_t>(),
                               Q4KScales{sub.data_ptr<uint8_t>(), super.data_ptr<at::Half>()}, T, G,
                               N, super.options());
}

// ---- the best logits of a row -----------------------------------------------------
//
// torch.topk and max(dim) walk a 50k-wide row one element at a time (~90 and ~45 us on
// the default model's vocabulary). Here a row is scanned 16 at a time against the
// k-th best value so far; only the few elements above it are inserted, by hand, into
// the sorted best k. Among equal values the first index ranks first, as in torch.

// The k best of x[0, n) (k <= n), best first, into vals and idx.
void best_of_row(const float* x, int64_t n, int64_t k, float* vals, int64_t* idx) {
  int64_t have = 0;
  auto insert = [&](float v, int64_t i) {
    int64_t at = have < k ? have : k - 1;  // where it lands before shifting up
    if (have == k && !(v > vals[k - 1])) return;
    while (at > 0 && v > vals[at - 1]) {  // strictly greater: an earlier equal stays first
      if (at < k) {
        vals[at] = vals[at - 1];
        idx[at] = idx[at - 1];
      }
      --at;
    }
    vals[at] = v;
    idx[at] = i;
    if (have < k) ++have;
  };
  int64_t i = 0;
  for (; i < std::min(n, k); ++i) {
    // Insert as the last of have + 1 and shift it up (have < k here).
    int64_t at = have++;
    while (at > 0 && x[i] > vals[at - 1]) {
      vals[at] = vals[at - 1];
      idx[at] = idx[at - 1];
      --at;
    }
    vals[at] = x[i];
    idx[at] = i;
  }
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {
    __mmask16 above = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), _mm512_set1_ps(vals[k - 1]),
                                         _CMP_GT_OQ);
    while (above) {
      const int lane = __builtin_ctz(above);
      above &= above - 1;
      insert(x[i + lane], i + lane);
    }
  }
#elif defined(MELLEA_AVX2)
  for (; i + 8 <= n; i += 8) {
    unsigned above = static_cast<unsigned>(_mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(vals[k - 1]), _CMP_GT_OQ)));
    while (above) {
      const int lane = __builtin_ctz(above);
      above &= above - 1;
      insert(x[i + lane], i + lane);
    }
  }
#elif defined(MELLEA_NEON)
  for (; i + 8 <= n; i += 8) {
    unsigned above = mellea_neon::above8(x + i, vals[k - 1]);
    while (above) {
      const int lane = __builtin_ctz(above);
      above &= above - 1;
      insert(x[i + lane], i + lane);
    }
  }
#endif
  for (; i < n; ++i) insert(x[i], i);
}

std::tuple<at::Tensor, at::Tensor> top_k(const at::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat,
              "x: [M, N] fp32, dense");
  const int64_t M = x.size(0), N = x.size(1);
  TORCH_CHECK(k >= 1 && k <= N, "k in 1..N");
  auto vals = at::empty({M, k}, x.options());
  auto idx = at::empty({M, k}, x.options().dtype(at::kLong));
  const float* xp = x.data_ptr<float>();
  float* vp = vals.data_ptr<float>();
  int64_t* ip = idx.data_ptr<int64_t>();
  at::parallel_for(0, M, 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) best_of_row(xp + r * N, N, k, vp + r * k, ip + r * k);
  });
  return {vals, idx};
}

// RoPE on q and k, in place in the fused qkv rows, and this step's K and V rows
// written into the paged cache (what took the PyTorch path eight ops per layer).
// qkv: [T, (hq + 2 hk) * dim] fp32, rows dense; rope: [T, ..., dim / 2, 2] fp32 (cos, sin
// of each adjacent pair: the CPU path stores q/k dims pairwise); caches [blocks,
// block_size, hk, dim] fp32, dense; slots: [T] int64, a token's row in the flat cache.
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
    TORCH_CHECK(c->is_contiguous() && c->scalar_type() == at::kFloat && c->size(-1) == dim &&
                    c->size(-2) == hk,
                "caches: [blocks, block_size, hk, dim] fp32, dense");
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.is_contiguous() && slots.numel() == T,
              "slots: [T] int64");
  float* rows = qkv.data_ptr<float>();
  const float* cs = rope.data_ptr<float>();
  float* kc = k_cache.data_ptr<float>();
  float* vc = v_cache.data_ptr<float>();
  const int64_t* slot = slots.data_ptr<int64_t>();
  const int64_t width = qkv.stride(0), rope_stride = rope.stride(0), kv = hk * dim;
  const int64_t cache_rows = k_cache.numel() / kv;
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
      std::copy(row + hq * dim, row + hq * dim + kv, kc + slot[t] * kv);
      std::copy(row + hq * dim + kv, row + hq * dim + 2 * kv, vc + slot[t] * kv);
    }
  });
}

// ---- LoRA deltas inside the fused decode layer --------------------------------------
//
// out[t] += B_s (A_s x[t]) for each row t whose adapter slot s (lora_slots[t]; -1: the
// base model) has a low-rank pair on the projection, its scale folded into B. One
// projection's pairs of every loaded adapter come packed (lora.py's pack_fused):
//   a     [C, K] fp16: each adapter's A rows (those of all its pieces) together
//   bt    [*] fp16, flat: per segment its B transposed, [c1 - c0, r1 - r0], in blocks
//         of kLoraBlock output rows: block j is [c1 - c0, its width] row-major, so the
//         products with one block read one contiguous run
//   segs  [S, 6] int64, a slot's segments together: slot, r0, r1, c0, c1, offset in bt
// A segment is one piece of a fused projection (q, k or v; gate or up; all of o or
// down): B's output rows [r0, r1) from the product with A's rows [c0, c1). The pieces
// of one projection have their own A rows, so one task takes a segment and up to 4 of
// its slot's rows through both products (h = A x, then out += B h): a call is one
// parallel region, and with one row per adapter (a mixed batch) each pair is read once.
// fp16 halves what fp32 pairs would read.

constexpr int64_t kLoraBlock = 64;  // output rows per block of bt (lora.py's LORA_BLOCK)

#ifdef __AVX512F__
constexpr int64_t kLoraChunk = 64;  // output columns per pass of lora_products: 4 vectors per row
#elif defined(MELLEA_AVX2)
constexpr int64_t kLoraChunk = 32;
#else
constexpr int64_t kLoraChunk = 64;
#endif
static_assert(kLoraBlock % kLoraChunk == 0, "a block of bt is whole passes");

// h[i][c + j] = a_j . x[i] over K, for MR rows x[i] (fp32) and NA rows a_j = a + j K of
// A (fp16): NA * MR independent sums (one would wait on its own adds), each in the order
// a single row's would take.
template <int MR, int NA>
inline void lora_dots(const at::Half* a, const float* const* x, int64_t K, float* const* h,
                      int64_t c) {
  float s[MR][NA] = {};
  int64_t k = 0;
#ifdef __AVX512F__
  __m512 acc[MR][NA];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) acc[i][j] = _mm512_setzero_ps();
  for (; k + 16 <= K; k += 16) {
    __m512 w[NA];
    for (int j = 0; j < NA; ++j)
      w[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j * K + k)));
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_loadu_ps(x[i] + k);
      for (int j = 0; j < NA; ++j) acc[i][j] = _mm512_fmadd_ps(w[j], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) s[i][j] = _mm512_reduce_add_ps(acc[i][j]);
#elif defined(MELLEA_AVX2)
  __m256 acc[MR][NA];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) acc[i][j] = _mm256_setzero_ps();
  for (; k + 8 <= K; k += 8) {
    __m256 w[NA];
    for (int j = 0; j < NA; ++j)
      w[j] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + j * K + k)));
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x[i] + k);
      for (int j = 0; j < NA; ++j) acc[i][j] = _mm256_fmadd_ps(w[j], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) s[i][j] = reduce_add_ps(acc[i][j]);
#endif
  for (; k < K; ++k)
    for (int j = 0; j < NA; ++j) {
      const float w = half_to_float(a[j * K + k]);
      for (int i = 0; i < MR; ++i) s[i][j] += w * x[i][k];
    }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) h[i][c + j] = s[i][j];
}

// out[i][0, n) += sum_c h[i][c] * bt[c * ld + (0, n)] over `cols` columns c, for MR
// rows (n <= kLoraChunk); the sums stay in registers until the one add to out.
template <int MR>
inline void lora_products(const at::Half* bt, int64_t ld, int64_t cols, const float* const* h,
                          float* const* out, int64_t n) {
#ifdef __AVX512F__
  constexpr int V = kLoraChunk / 16;
  __m512 acc[MR][V];
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v) {
    mask[v] = n > 16 * v ? first_lanes(n - 16 * v) : __mmask16(0);
    for (int i = 0; i < MR; ++i) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < cols; ++c) {
    const at::Half* row = bt + c * ld;
    __m512 w[V];
    for (int v = 0; v < V; ++v)
      w[v] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask[v], row + 16 * v));
    for (int i = 0; i < MR; ++i) {
      const __m512 hv = _mm512_set1_ps(h[i][c]);
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(w[v], hv, acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < V; ++v) {
      float* o = out[i] + 16 * v;
      _mm512_mask_storeu_ps(o, mask[v],
                            _mm512_add_ps(_mm512_maskz_loadu_ps(mask[v], o), acc[i][v]));
    }
#else
  float acc[MR][kLoraChunk] = {};
  int64_t full = 0;
#if defined(MELLEA_AVX2)
  if (n == kLoraChunk) {  // whole chunks in registers; a segment's last, shorter one below
    constexpr int V = kLoraChunk / 8;
    __m256 vacc[MR][V];
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < V; ++v) vacc[i][v] = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; ++c) {
      const at::Half* row = bt + c * ld;
      __m256 w[V];
      for (int v = 0; v < V; ++v)
        w[v] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 8 * v)));
      for (int i = 0; i < MR; ++i) {
        const __m256 hv = _mm256_set1_ps(h[i][c]);
        for (int v = 0; v < V; ++v) vacc[i][v] = _mm256_fmadd_ps(w[v], hv, vacc[i][v]);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc[i] + 8 * v, vacc[i][v]);
    full = n;
  }
#endif
  if (full == 0) {
    float w[kLoraChunk];
    for (int64_t c = 0; c < cols; ++c) {
      const at::Half* row = bt + c * ld;
      for (int64_t j = 0; j < n; ++j) w[j] = half_to_float(row[j]);
      for (int i = 0; i < MR; ++i) {
        const float hv = h[i][c];
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) acc[i][j] += w[j] * hv;
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int64_t j = 0; j < n; ++j) out[i][j] += acc[i][j];
#endif
}

void check_lora_pack(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& segs,
                     int64_t K, int64_t N) {
  TORCH_CHECK(a.dim() == 2 && a.size(1) == K && a.is_contiguous() && a.scalar_type() == at::kHalf,
              "lora a: [C, K] fp16, dense");
  TORCH_CHECK(bt.is_contiguous() && bt.scalar_type() == at::kHalf, "lora bt: fp16, dense");
  TORCH_CHECK(segs.dim() == 2 && segs.size(1) == 6 && segs.is_contiguous() &&
                  segs.scalar_type() == at::kLong,
              "lora segs: [S, 6] int64");
  const int64_t* s = segs.data_ptr<int64_t>();
  for (int64_t i = 0; i < segs.size(0); ++i, s += 6)
    TORCH_CHECK(s[1] >= 0 && s[1] < s[2] && s[2] <= N && s[3] >= 0 && s[3] < s[4] &&
                    s[4] <= a.size(0) && s[5] >= 0 && s[5] + (s[4] - s[3]) * (s[2] - s[1]) <= bt.numel(),
                "lora segment out of its pack");
}

// out [T, N] fp32 += each row's adapter's B (A x[row]) (see the section's comment).
void lora_add(const at::Tensor& out, const at::Tensor& x, const at::Tensor& a,
              const at::Tensor& bt, const at::Tensor& segs, const at::Tensor& lora_slots) {
  TORCH_CHECK(out.dim() == 2 && out.is_contiguous() && out.scalar_type() == at::kFloat,
              "out: [T, N] fp32, dense");
  check_activations(x);
  const int64_t T = x.size(0), K = x.size(1), N = out.size(1);
  TORCH_CHECK(out.size(0) == T, "out and x rows differ");
  TORCH_CHECK(lora_slots.scalar_type() == at::kInt && lora_slots.is_contiguous() &&
                  lora_slots.numel() == T,
              "lora_slots: [T] int32");
  if (a.numel() == 0 || segs.numel() == 0) return;
  check_lora_pack(a, bt, segs, K, N);
  const int32_t* slot = lora_slots.data_ptr<int32_t>();
  const int64_t* sg = segs.data_ptr<int64_t>();
  // One task: a segment and up to 4 rows of its slot (rows[first, first + n)). A slot's
  // tasks go row block by row block, each block over all its segments, so that two
  // threads splitting the list in halves get about the same work.
  struct Task {
    int64_t seg, first, n;
  };
  std::vector<int64_t> rows;
  std::vector<Task> tasks;
  for (int64_t i = 0, S = segs.size(0); i < S;) {
    int64_t j = i;
    while (j < S && sg[6 * j] == sg[6 * i]) ++j;
    const int64_t first = rows.size();
    for (int64_t t = 0; t < T; ++t)
      if (slot[t] == sg[6 * i]) rows.push_back(t);
    const int64_t n = rows.size() - first;
    for (int64_t m = 0; m < n; m += 4)
      for (int64_t s = i; s < j; ++s) tasks.push_back({s, first + m, std::min<int64_t>(4, n - m)});
    i = j;
  }
  if (tasks.empty()) return;
  const at::Half* ap = a.data_ptr<at::Half>();
  const at::Half* bp = bt.data_ptr<at::Half>();
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> h;
    for (int64_t it = begin; it < end; ++it) {
      const Task& task = tasks[it];
      const int64_t* s = sg + 6 * task.seg;
      const int64_t r0 = s[1], width = s[2] - s[1], c0 = s[3], cols = s[4] - s[3];
      h.resize(4 * cols);
      for_row_blocks(task.n, [&](auto block, int64_t) {
        constexpr int MR = decltype(block)::value;
        const float* xr[MR];
        float* hr[MR];
        float* orow[MR];
        for (int i = 0; i < MR; ++i) {
          const int64_t t = rows[task.first + i];
          xr[i] = xp + t * K;
          hr[i] = h.data() + i * cols;
          orow[i] = op + t * N + r0;
        }
        // A's rows 4 at a time for 1 or 2 rows, 2 at a time for 3 or 4 (registers).
        constexpr int NA = MR <= 2 ? 4 : 2;
        int64_t c = 0;
        for (; c + NA <= cols; c += NA) lora_dots<MR, NA>(ap + (c0 + c) * K, xr, K, hr, c);
        for (; c < cols; ++c) lora_dots<MR, 1>(ap + (c0 + c) * K, xr, K, hr, c);
        for (int64_t o0 = 0; o0 < width; o0 += kLoraBlock) {
          const int64_t nb = std::min(kLoraBlock, width - o0);
          const at::Half* b = bp + s[5] + o0 * cols;  // this block: [cols, nb]
          for (int64_t o = 0; o < nb; o += kLoraChunk) {
            float* oc[MR];
            for (int i = 0; i < MR; ++i) oc[i] = orow[i] + o0 + o;
            lora_products<MR>(b + o, nb, cols, hr, oc, std::min(kLoraChunk, nb - o));
          }
        }
      });
    }
  });
}

// A whole decoder layer of the Llama shape for a decode-only step, with int4 or int8
// weights on VNNI: RMSNorm (with the residual add), fused QKV, RoPE and the cache write,
// paged decode attention, the output projection, RMSNorm, gate|up, SiLU-and-mul, down.
// The same ops as the layer's Python path, called from C++: a decode step of a small
// model spends about as long in Python between ops as in some of the ops. weights: per
// projection (qkv, o, gate_up, down), int4 (qweight uint8, scales, mins) or int8
// (qweight int8, wsum, scale), a GGUF's Q4_K exactly (qweight uint8 [T, G, 4, 64], sub
// uint8, super fp16: q4k_vnni_linear), or the exact byte form of a GGUF's blocks (qweight
// uint8 [T, G, 8, 64], or [T, G, 6, 64] in six bits, subs int8, supers fp32:
// cpu_kernels_bytes.inc), told apart by qweight's dtype, then the second tensor's dtype
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
                                      : at::cat({part(in, 0), part(in, 1)}, 1);
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

}  // namespace

// TORCH_LIBRARY pastes its first argument: one more macro level expands MELLEA_CPU_NS.
#define MELLEA_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
MELLEA_LIBRARY(MELLEA_CPU_NS, m) {
  m.def("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor context_lens, float scale, int window) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor(a!)? residual, Tensor weight, float eps) -> Tensor");
  m.impl("paged_decode", c10::DispatchKey::CPU, TORCH_FN(paged_decode));
  m.def("int8_linear(Tensor x, Tensor qweight, Tensor scale) -> Tensor");
  m.def("int4_linear(Tensor x, Tensor qweight, Tensor scales, Tensor mins) -> Tensor");
  m.impl("rms_norm", c10::DispatchKey::CPU, TORCH_FN(rms_norm));
  m.impl("int8_linear", c10::DispatchKey::CPU, TORCH_FN(int8_linear));
  m.def("int4_dequantize(Tensor qweight, Tensor scales, Tensor mins) -> Tensor");
  m.impl("int4_linear", c10::DispatchKey::CPU, TORCH_FN(int4_linear));
  m.impl("int4_dequantize", c10::DispatchKey::CPU, TORCH_FN(int4_dequantize));
  m.def("rope_store_kv(Tensor(a!) qkv, Tensor rope, Tensor(b!) k_cache, Tensor(c!) v_cache, "
        "Tensor slots, int heads, int kv_heads) -> ()");
  m.impl("rope_store_kv", c10::DispatchKey::CPU, TORCH_FN(rope_store_kv));
  m.def("family() -> str", &family);
  m.def("avx2_dot(str kind) -> str", &avx2_dot);
  m.def("top_k(Tensor x, int k) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("decode_layer(Tensor x, Tensor(a!) residual, Tensor attn_norm, Tensor mlp_norm, "
        "Tensor[] weights, int[] out_features, Tensor(b!) k_cache, Tensor(c!) v_cache, "
        "Tensor rope, Tensor slots, Tensor block_tables, Tensor context_lens, int heads, "
        "int kv_heads, float eps, float scale, int window, Tensor[] lora, Tensor? lora_slots) "
        "-> Tensor");
  m.def("lora_add(Tensor(a!) out, Tensor x, Tensor a, Tensor bt, Tensor segs, "
        "Tensor lora_slots) -> ()");
  m.impl("lora_add", c10::DispatchKey::CPU, TORCH_FN(lora_add));
  m.impl("decode_layer", c10::DispatchKey::CPU, TORCH_FN(decode_layer));
  m.impl("silu_and_mul", c10::DispatchKey::CPU, TORCH_FN(silu_and_mul));
  m.impl("top_k", c10::DispatchKey::CPU, TORCH_FN(top_k));
  m.def("int4_vnni_linear(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int n) -> Tensor");
  m.impl("int4_vnni_linear", c10::DispatchKey::CPU, TORCH_FN(int4_vnni_linear));
  m.def("int4_vnni_dequantize(Tensor qweight, Tensor scales, Tensor mins, int n) -> Tensor");
  m.impl("int4_vnni_dequantize", c10::DispatchKey::CPU, TORCH_FN(int4_vnni_dequantize));
  m.def("q4k_vnni_linear(Tensor x, Tensor qweight, Tensor sub, Tensor super, int n) -> Tensor");
  m.impl("q4k_vnni_linear", c10::DispatchKey::CPU, TORCH_FN(q4k_vnni_linear));
  m.def("q4k_vnni_dequantize(Tensor qweight, Tensor sub, Tensor super, int n) -> Tensor");
  m.impl("q4k_vnni_dequantize", c10::DispatchKey::CPU, TORCH_FN(q4k_vnni_dequantize));
  m.def("int8_vnni_linear(Tensor x, Tensor qweight, Tensor wsum, Tensor scale, int n) -> Tensor");
  m.impl("int8_vnni_linear", c10::DispatchKey::CPU, TORCH_FN(int8_vnni_linear));
  m.def("bytes_linear(Tensor x, Tensor qweight, Tensor subs, Tensor supers, int n) -> Tensor");
  m.impl("bytes_linear", c10::DispatchKey::CPU, TORCH_FN(bytes_linear));
  m.def("bytes_dequantize(Tensor qweight, Tensor subs, Tensor supers, int n) -> Tensor");
  m.impl("bytes_dequantize", c10::DispatchKey::CPU, TORCH_FN(bytes_dequantize));
  m.def("six_to_bytes(Tensor qweight) -> Tensor");
  m.def("bytes_to_six(Tensor qweight, int n) -> Tensor");
  m.impl("bytes_to_six", c10::DispatchKey::CPU, TORCH_FN(bytes_to_six));
  m.impl("six_to_bytes", c10::DispatchKey::CPU, TORCH_FN(six_to_bytes));
}

#include "cpu_kernels_repack.inc"
