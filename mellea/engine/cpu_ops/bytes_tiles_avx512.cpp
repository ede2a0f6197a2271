// The AVX-512 build's byte-form tiles on vpdpbusd (16 lanes). Checked by
// tests/engine/test_cpu_kernels.py (test_bytes_linear_*) against the blocks' dequantized
// weights, and tests/engine/test_gguf_models.py.
#include "family.h"

#if defined(MELLEA_AVX512)
#include <algorithm>

#include "bytes_tiles.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

namespace {
// A group's 8 parts of 64 bytes (q + 128), read as they are or rebuilt from the
// six-bit form.
template <bool SIX>
inline void load_parts(const uint8_t* w, __m512i wv[8]) {
  if constexpr (!SIX) {
    for (int u = 0; u < 8; ++u) wv[u] = _mm512_loadu_si512(w + 64 * u);
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F), high2 = _mm512_set1_epi8(0x30),
                  base = _mm512_set1_epi8(96);
    const __m512i h0 = _mm512_loadu_si512(w + 256), h1 = _mm512_loadu_si512(w + 320);
    for (int p = 0; p < 4; ++p) {
      const __m512i nib = _mm512_loadu_si512(w + 64 * p);
      wv[p] = _mm512_and_si512(nib, low4);
      wv[p + 4] = _mm512_and_si512(_mm512_srli_epi16(nib, 4), low4);
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i hb = h ? h1 : h0;
      const __m512i at4[4] = {_mm512_slli_epi16(hb, 4), _mm512_slli_epi16(hb, 2), hb,
                              _mm512_srli_epi16(hb, 2)};
      for (int k = 0; k < 4; ++k) {
        const int u = 4 * h + k;
        wv[u] = _mm512_add_epi8(_mm512_or_si512(wv[u], _mm512_and_si512(at4[k], high2)), base);
      }
    }
  }
}

}  // namespace

// Output rows [16 t, 16 t + 16) for MR activation rows.
template <int MR, bool MINS, bool SIX>
void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers, int64_t S,
                const int8_t* xq, const float* xscale, const float* xsum, const int32_t* corr,
                float* out, int64_t N, int64_t K, int64_t t) {
  constexpr int P = MINS ? 3 : 2;
  const int64_t G = K / 32;
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  constexpr int64_t B = SIX ? kSixGroup : 512;
  const uint8_t* w = qw + t * G * B;
  const int8_t* sb = subs + t * G * P * kTile;
  const float* sp = supers + t * (G / S) * (P - 1) * kTile;
  const int s_shift = __builtin_ctzll(S);  // S is a power of two (check_bytes)
  for (int64_t g = 0; g < G; ++g, w += B, sb += P * kTile) {
    for (int line = 0; line < B; line += 64) prefetch(w + 2 * kPrefetch + line);
    prefetch(sb + 8 * P * kTile);  // the scales as far ahead as the weights
    __m512i wv[8];
    load_parts<SIX>(w, wv);
    const __m512 sc0 = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb))));
    const __m512 sc1 = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kTile))));
    const float* dp = sp + (g >> s_shift) * (P - 1) * kTile;  // g / S
    const __m512 d = _mm512_loadu_ps(dp);
    const __m512 scale0 = _mm512_mul_ps(d, sc0), scale1 = _mm512_mul_ps(d, sc1);  // exact
    __m512 offset = _mm512_setzero_ps();
    if constexpr (MINS) {
      const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 2 * kTile))));
      offset = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(_mm512_loadu_ps(dp + kTile), m));
    }
    for (int i = 0; i < MR; ++i) {
      const int32_t* xh = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + g * 32);
      const int32_t* xl = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + xq_lo(K) + g * 32);
      __m512i hi[2], lo[2];
      for (int s = 0; s < 2; ++s) hi[s] = lo[s] = _mm512_setzero_si512();
      for (int u = 0; u < 8; ++u) {
        hi[u / 4] = _mm512_dpbusd_epi32(hi[u / 4], wv[u], _mm512_set1_epi32(xh[u]));
        lo[u / 4] = _mm512_dpbusd_epi32(lo[u / 4], wv[u], _mm512_set1_epi32(xl[u]));
      }
      const int32_t* c = corr + (i * G + g) * 2;
      const __m512i dot0 = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi[0], 8), lo[0]),
                                            _mm512_set1_epi32(c[0]));
      const __m512i dot1 = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi[1], 8), lo[1]),
                                            _mm512_set1_epi32(c[1]));
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(dot0), scale0);
      f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot1), scale1, f);
      acc[i] = _mm512_fmadd_ps(f, _mm512_set1_ps(xscale[i * G + g]), acc[i]);
      if constexpr (MINS) acc[i] = _mm512_fmadd_ps(offset, _mm512_set1_ps(xsum[i * G + g]), acc[i]);
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(out + i * N + n0, keep, acc[i]);
}

MELLEA_INSTANTIATE_BYTES_TILES(1)
MELLEA_INSTANTIATE_BYTES_TILES(2)
MELLEA_INSTANTIATE_BYTES_TILES(3)
MELLEA_INSTANTIATE_BYTES_TILES(4)

}  // namespace MELLEA_CPU_NS

#endif
