// int8 and int4 linear layers on weights widened to fp32 (int8_linear, int4_linear,
// int4_dequantize). Checked against PyTorch's matmul of the dequantized weights by
// tests/engine/test_cpu_kernels.py (test_int8_linear_*, test_int4_linear_*).
#include <ATen/Parallel.h>

#include <algorithm>

#include "ops.h"
#include "simd.h"

namespace MELLEA_CPU_NS {

namespace {

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
  auto out = empty({M, N}, x.options());
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

}  // namespace

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
  auto out = empty({N, K}, scales.options().dtype(at::kFloat));
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

}  // namespace MELLEA_CPU_NS
