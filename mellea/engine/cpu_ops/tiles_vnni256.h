// The AVX2 build's tiled int4, int8 and byte-form linears on 8-lane vpdpbusd: the
// arithmetic of the AVX-512 build on two halves of 8 rows per tile (see the layouts in
// tiles.h and linear_bytes.cpp). The body of two translation units, each of which
// defines before including it
//   MELLEA_VNNI256  the namespace (avx_vnni, evex_vnni: tiles.h declares both),
//   MELLEA_DPBUSD   the instruction: _mm256_dpbusd_avx_epi32 (AVX-VNNI, the VEX form:
//                   Alder Lake and later, Zen 5) or _mm256_dpbusd_epi32 (AVX512-VL VNNI,
//                   the EVEX form of the same operation: how the tests run this code on
//                   a CPU that lacks AVX-VNNI),
//   MELLEA_TARGET   the matching target attribute (tiles.h's MELLEA_AVX_VNNI or
//                   MELLEA_EVEX_VNNI), which every tile here carries.
// Empty in the other builds. Checked by tests/engine/test_cpu_kernels.py
// (test_the_avx2_builds_vnni_tiles_match_its_maddubs_ones: bit for bit).
#include "family.h"

#if defined(MELLEA_AVX2)
#include <algorithm>

#include "bytes_tiles.h"
#include "tiles.h"
#include "tiles_avx2.h"

namespace MELLEA_CPU_NS {
namespace MELLEA_VNNI256 {

template <int MR, class S>
MELLEA_TARGET void int4_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32;
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const uint8_t* w = qw + t * G * 256;
  Scales8<S> factors{scales, t, G};
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int line = 0; line < 256; line += 64) prefetch(w + kPrefetch + line);
    for (int half = 0; half < 2; ++half) {
      __m256i wv[8];
      for (int s = 0; s < 4; ++s) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * s + 32 * half));
        wv[2 * s] = _mm256_and_si256(v, low);
        wv[2 * s + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      }
      __m256 d, m;
      factors.load(g, half, d, m);
      for (int i = 0; i < MR; ++i) {
        const int32_t* xh = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + g * 32);
        const int32_t* xl = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + xq_lo(K) + g * 32);
        __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
        for (int u = 0; u < 8; ++u) {
          hi = MELLEA_DPBUSD(hi, wv[u], _mm256_set1_epi32(xh[u]));
          lo = MELLEA_DPBUSD(lo, wv[u], _mm256_set1_epi32(xl[u]));
        }
        const __m256i dot = _mm256_add_epi32(_mm256_slli_epi32(hi, 8), lo);
        const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(xscale[i * G + g]));
        acc[i][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[i][half]);
        acc[i][half] = _mm256_fmadd_ps(m, _mm256_set1_ps(xsum[i * G + g]), acc[i][half]);
      }
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  for (int i = 0; i < MR; ++i) {
    alignas(32) float row[kTile];
    _mm256_store_ps(row, acc[i][0]);
    _mm256_store_ps(row + 8, acc[i][1]);
    std::copy(row, row + valid, out + i * N + n0);
  }
}

template <int MR>
MELLEA_TARGET void int8_tile(const int8_t* qw, const int32_t* wsum, const float* wscale, const int8_t* xq,
               const float* xscale, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32;
  const __m256i shift = _mm256_set1_epi32(128 * 257);
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const int8_t* w = qw + t * G * 512;
  for (int64_t g = 0; g < G; ++g, w += 512) {
    for (int line = 0; line < 512; line += 64) prefetch(w + 2 * kPrefetch + line);
    for (int half = 0; half < 2; ++half) {
      __m256i wv[8];
      for (int u = 0; u < 8; ++u)
        wv[u] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * u + 32 * half));
      const __m256i bias = _mm256_mullo_epi32(
          _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(wsum + (t * G + g) * kTile + 8 * half)),
          shift);
      for (int i = 0; i < MR; ++i) {
        const int32_t* xh = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + g * 32);
        const int32_t* xl = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + xq_lo(K) + g * 32);
        __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
        for (int u = 0; u < 8; ++u) {  // xor 0x80 in each byte: s8 + 128 as u8
          hi = MELLEA_DPBUSD(hi, _mm256_set1_epi32(xh[u] ^ 0x80808080), wv[u]);
          lo = MELLEA_DPBUSD(lo, _mm256_set1_epi32(xl[u] ^ 0x80808080), wv[u]);
        }
        const __m256i dot =
            _mm256_sub_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi, 8), lo), bias);
        acc[i][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                       _mm256_set1_ps(xscale[i * G + g]), acc[i][half]);
      }
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  const __m256 r0 = _mm256_loadu_ps(wscale + n0), r1 = _mm256_loadu_ps(wscale + n0 + 8);
  for (int i = 0; i < MR; ++i) {
    alignas(32) float row[kTile];
    _mm256_store_ps(row, _mm256_mul_ps(acc[i][0], r0));
    _mm256_store_ps(row + 8, _mm256_mul_ps(acc[i][1], r1));
    std::copy(row, row + valid, out + i * N + n0);
  }
}

template <int MR, bool MINS, bool SIX>
MELLEA_TARGET void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers, int64_t S,
                const int8_t* xq, const float* xscale, const float* xsum, const int32_t* corr,
                float* out, int64_t N, int64_t K, int64_t t) {
  constexpr int P = MINS ? 3 : 2;
  constexpr int64_t B = SIX ? kSixGroup : 512;
  const int64_t G = K / 32;
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const uint8_t* w = qw + t * G * B;
  const int8_t* sb = subs + t * G * P * kTile;
  const float* sp = supers + t * (G / S) * (P - 1) * kTile;
  const int s_shift = __builtin_ctzll(S);  // S is a power of two (check_bytes)
  for (int64_t g = 0; g < G; ++g, w += B, sb += P * kTile) {
    for (int line = 0; line < B; line += 64) prefetch(w + 2 * kPrefetch + line);
    prefetch(sb + 8 * P * kTile);  // the scales as far ahead as the weights
    const float* dp = sp + (g >> s_shift) * (P - 1) * kTile;  // g / S
    for (int half = 0; half < 2; ++half) {
      __m256i wv[8];
      load_parts256<SIX>(w, half, wv);
      const __m256 d = _mm256_loadu_ps(dp + 8 * half);
      const __m256 scale0 = _mm256_mul_ps(d, widen8(sb + 8 * half, false));
      const __m256 scale1 = _mm256_mul_ps(d, widen8(sb + kTile + 8 * half, false));
      __m256 offset = _mm256_setzero_ps();
      if constexpr (MINS)
        offset = _mm256_sub_ps(_mm256_setzero_ps(),
                               _mm256_mul_ps(_mm256_loadu_ps(dp + kTile + 8 * half),
                                             widen8(sb + 2 * kTile + 8 * half, false)));
      for (int i = 0; i < MR; ++i) {
        const int32_t* xh = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + g * 32);
        const int32_t* xl = reinterpret_cast<const int32_t*>(xq + i * xq_row(K) + xq_lo(K) + g * 32);
        __m256i hi[2], lo[2];
        for (int s = 0; s < 2; ++s) hi[s] = lo[s] = _mm256_setzero_si256();
        for (int u = 0; u < 8; ++u) {
          hi[u / 4] = MELLEA_DPBUSD(hi[u / 4], wv[u], _mm256_set1_epi32(xh[u]));
          lo[u / 4] = MELLEA_DPBUSD(lo[u / 4], wv[u], _mm256_set1_epi32(xl[u]));
        }
        const int32_t* c = corr + (i * G + g) * 2;
        const __m256i dot0 = _mm256_sub_epi32(
            _mm256_add_epi32(_mm256_slli_epi32(hi[0], 8), lo[0]), _mm256_set1_epi32(c[0]));
        const __m256i dot1 = _mm256_sub_epi32(
            _mm256_add_epi32(_mm256_slli_epi32(hi[1], 8), lo[1]), _mm256_set1_epi32(c[1]));
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(dot0), scale0);
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), scale1, f);
        acc[i][half] = _mm256_fmadd_ps(f, _mm256_set1_ps(xscale[i * G + g]), acc[i][half]);
        if constexpr (MINS)
          acc[i][half] = _mm256_fmadd_ps(offset, _mm256_set1_ps(xsum[i * G + g]), acc[i][half]);
      }
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  for (int i = 0; i < MR; ++i) {
    alignas(32) float row[kTile];
    _mm256_store_ps(row, acc[i][0]);
    _mm256_store_ps(row + 8, acc[i][1]);
    std::copy(row, row + valid, out + i * N + n0);
  }
}

MELLEA_INSTANTIATE_TILES(1)
MELLEA_INSTANTIATE_TILES(2)
MELLEA_INSTANTIATE_TILES(3)
MELLEA_INSTANTIATE_TILES(4)
MELLEA_INSTANTIATE_BYTES_TILES(1)
MELLEA_INSTANTIATE_BYTES_TILES(2)
MELLEA_INSTANTIATE_BYTES_TILES(3)
MELLEA_INSTANTIATE_BYTES_TILES(4)

}  // namespace MELLEA_VNNI256
}  // namespace MELLEA_CPU_NS

#endif
