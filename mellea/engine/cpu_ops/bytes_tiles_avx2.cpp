// The AVX2 build's byte-form tiles on vpmaddwd (the 8-lane vpdpbusd ones:
// tiles_vnni256.h). Checked by tests/engine/test_cpu_kernels.py (test_bytes_linear_*,
// and bit for bit against the AVX-512 build:
// test_the_simd_families_compute_the_same_bits).
#include "family.h"

#if defined(MELLEA_AVX2)
#include <algorithm>

#include "bytes_tiles.h"
#include "tiles.h"
#include "tiles_avx2.h"

namespace MELLEA_CPU_NS {

namespace {
// unpack_six_group in AVX2 registers.
inline void rebuild_six_group(const uint8_t* w, uint8_t* out) {
  for (int half = 0; half < 2; ++half) {
    __m256i wv[8];
    load_parts256<true>(w, half, wv);
    for (int u = 0; u < 8; ++u)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64 * u + 32 * half), wv[u]);
  }
}
}  // namespace

// vpmaddubsw would saturate on the bytes (up to 255 times parts up to 127): as int8's
// tile without VNNI, the bytes widen to int16 (as they are, q + 128) and meet the joined
// activations 256 hi + lo on vpmaddwd (a pair at most 2 * 255 * 32639, a sub-block
// 16 * 255 * 32639 < 2^31); the sums of parts u < 4 and u >= 4, less corr, are the two
// sub-blocks' dot products, the VNNI tiles' integers exactly.
template <int MR, bool MINS, bool SIX>
void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers, int64_t S,
                const int8_t* xq, const float* xscale, const float* xsum, const int32_t* corr,
                float* out, int64_t N, int64_t K, int64_t t) {
  constexpr int P = MINS ? 3 : 2;
  constexpr int64_t B = SIX ? kSixGroup : 512;
  const int64_t G = K / 32;
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const uint8_t* next = qw + t * G * B;
  const int8_t* sb = subs + t * G * P * kTile;
  const float* sp = supers + t * (G / S) * (P - 1) * kTile;
  const int s_shift = __builtin_ctzll(S);  // S is a power of two (check_bytes)
  alignas(32) int16_t wide[8][4][16];
  alignas(32) int16_t joined[MR][32];
  alignas(32) uint8_t rebuilt[512];  // a six-bit group's bytes
  for (int64_t g = 0; g < G; ++g, next += B, sb += P * kTile) {
    for (int line = 0; line < B; line += 64) prefetch(next + 2 * kPrefetch + line);
    prefetch(sb + 8 * P * kTile);  // the scales as far ahead as the weights
    const uint8_t* w = next;
    if constexpr (SIX && MR == 1) {
      rebuild_six_group(next, rebuilt);
      w = rebuilt;
    }
    // The widened bytes of part u, rows 4 q .. 4 q + 3: kept for the rows after the first
    // (one row widens them in registers as it goes: the round trip through memory was
    // a sixth of a batch-1 tile's instructions).
    auto widened = [&](int u, int q) {
      if constexpr (MR == 1)
        return _mm256_cvtepu8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 64 * u + 16 * q)));
      else
        return _mm256_load_si256(reinterpret_cast<const __m256i*>(wide[u][q]));
    };
    if constexpr (MR > 1 && SIX) {  // rebuilt in registers, widened from there
      for (int half = 0; half < 2; ++half) {
        __m256i wv[8];
        load_parts256<true>(next, half, wv);
        for (int u = 0; u < 8; ++u) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(wide[u][2 * half]),
                             _mm256_cvtepu8_epi16(_mm256_castsi256_si128(wv[u])));
          _mm256_store_si256(reinterpret_cast<__m256i*>(wide[u][2 * half + 1]),
                             _mm256_cvtepu8_epi16(_mm256_extracti128_si256(wv[u], 1)));
        }
      }
    } else if constexpr (MR > 1) {
      for (int u = 0; u < 8; ++u)
        for (int q = 0; q < 4; ++q)
          _mm256_store_si256(reinterpret_cast<__m256i*>(wide[u][q]),
                             _mm256_cvtepu8_epi16(_mm_loadu_si128(
                                 reinterpret_cast<const __m128i*>(w + 64 * u + 16 * q))));
    }
    for (int i = 0; i < MR; ++i)
      for (int h = 0; h < 2; ++h) {
        const int8_t* xh = xq + i * xq_row(K) + g * 32 + 16 * h;
        const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xh)));
        const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xh + xq_lo(K))));
        _mm256_store_si256(reinterpret_cast<__m256i*>(joined[i] + 16 * h),
                           _mm256_add_epi16(_mm256_slli_epi16(hi, 8), lo));
      }
    const float* dp = sp + (g >> s_shift) * (P - 1) * kTile;  // g / S
    __m256 scale0[2], scale1[2], offset[2];
    for (int half = 0; half < 2; ++half) {
      const __m256 d = paired_ps(dp + 8 * half);
      scale0[half] = _mm256_mul_ps(d, widen8(sb + 8 * half, true));
      scale1[half] = _mm256_mul_ps(d, widen8(sb + kTile + 8 * half, true));
      offset[half] = _mm256_setzero_ps();
      if constexpr (MINS)
        offset[half] = _mm256_sub_ps(
            _mm256_setzero_ps(),
            _mm256_mul_ps(paired_ps(dp + kTile + 8 * half), widen8(sb + 2 * kTile + 8 * half, true)));
    }
    for (int i = 0; i < MR; ++i) {
      __m256i sum[2][4];
      for (int s = 0; s < 2; ++s)
        for (int q = 0; q < 4; ++q) sum[s][q] = _mm256_setzero_si256();
      for (int u = 0; u < 8; ++u) {
        const __m256i b = _mm256_broadcastq_epi64(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(joined[i] + 4 * u)));
        for (int q = 0; q < 4; ++q)
          sum[u / 4][q] = _mm256_add_epi32(sum[u / 4][q], _mm256_madd_epi16(b, widened(u, q)));
      }
      const __m256 step = _mm256_set1_ps(xscale[i * G + g]);
      const int32_t* c = corr + (i * G + g) * 2;
      const __m256i c0 = _mm256_set1_epi32(c[0]), c1 = _mm256_set1_epi32(c[1]);
      for (int half = 0; half < 2; ++half) {
        const __m256i dot0 =
            _mm256_sub_epi32(_mm256_hadd_epi32(sum[0][2 * half], sum[0][2 * half + 1]), c0);
        const __m256i dot1 =
            _mm256_sub_epi32(_mm256_hadd_epi32(sum[1][2 * half], sum[1][2 * half + 1]), c1);
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(dot0), scale0[half]);
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), scale1[half], f);
        acc[i][half] = _mm256_fmadd_ps(f, step, acc[i][half]);
        if constexpr (MINS)
          acc[i][half] = _mm256_fmadd_ps(offset[half], _mm256_set1_ps(xsum[i * G + g]), acc[i][half]);
      }
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  for (int i = 0; i < MR; ++i) {
    alignas(32) float row[kTile];
    for (int half = 0; half < 2; ++half)  // rows 0 1 4 5 2 3 6 7 -> 0 .. 7
      _mm256_store_ps(row + 8 * half, _mm256_castsi256_ps(_mm256_permute4x64_epi64(
                                          _mm256_castps_si256(acc[i][half]), 0xD8)));
    std::copy(row, row + valid, out + i * N + n0);
  }
}

MELLEA_INSTANTIATE_BYTES_TILES(1)
MELLEA_INSTANTIATE_BYTES_TILES(2)
MELLEA_INSTANTIATE_BYTES_TILES(3)
MELLEA_INSTANTIATE_BYTES_TILES(4)
// bytes_linear's 8 rows at a time in six bits without VNNI.
MELLEA_BYTES_TILE(8, true, true)
MELLEA_BYTES_TILE(8, false, true)

}  // namespace MELLEA_CPU_NS

#endif
