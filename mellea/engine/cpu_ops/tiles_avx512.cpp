// The AVX-512 build's int4 and int8 tiles on vpdpbusd (16 lanes), and its two-part
// activations. Checked by tests/engine/test_cpu_kernels.py (test_int4_vnni_*,
// test_int8_vnni_*) and tests/engine/test_q4k.py, against PyTorch's matmul.
#include "family.h"

#if defined(MELLEA_AVX512)
#include <algorithm>
#include <cstring>

#include "tiles.h"

namespace MELLEA_CPU_NS {

// Each row's groups of 32 in two int8 parts, x ~= step * (256 hi + lo): hi rounds x to
// 255 levels of the group's |x| max, lo the remainder to 1/256 of hi's step, so the
// activations keep about 16 bits. xq: each row's hi parts, then its lo parts
// (layout.h); step and xsum [M, G].
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
namespace {
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
}  // namespace

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
void int4_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
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
void int8_tile(const int8_t* qw, const int32_t* wsum, const float* wscale, const int8_t* xq,
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

MELLEA_INSTANTIATE_TILES(1)
MELLEA_INSTANTIATE_TILES(2)
MELLEA_INSTANTIATE_TILES(3)
MELLEA_INSTANTIATE_TILES(4)

}  // namespace MELLEA_CPU_NS

#endif
