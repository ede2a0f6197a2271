// The AVX2 build's vector pieces that its tiles (tiles_avx2.cpp, bytes_tiles_avx2.cpp)
// share with its 8-lane vpdpbusd tiles (tiles_vnni256.h): a tile's factors 8 rows at a
// time, and the byte form's parts and scales. Empty in the other builds.
#pragma once

#include "bytes_tiles.h"
#include "tiles.h"

#if defined(MELLEA_AVX2)
namespace MELLEA_CPU_NS {

// The scale and min of rows [8 half, 8 half + 8) of tile t's groups, asked for in order
// of g (also by the VNNI-256 tiles of tiles_vnni256.h): Q4_K's d and -dmin are
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

// 8 int8 lanes widened to fp32, in the rows' order 0 1 4 5 2 3 6 7 when `paired` (the
// order the maddwd tile's vphaddd leaves its sums in).
inline __m256 widen8(const int8_t* p, bool paired) {
  const __m256 v = _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  return paired ? _mm256_castsi256_ps(_mm256_permute4x64_epi64(_mm256_castps_si256(v), 0xD8))
                : v;
}

inline __m256 paired_ps(const float* p) {
  return _mm256_castsi256_ps(
      _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_loadu_ps(p)), 0xD8));
}

// Half `half` (bytes 32 half .. 32 half + 31) of a group's 8 parts (q + 128), read as
// they are or rebuilt from the six-bit form (load_parts' steps on 32 bytes).
template <bool SIX>
inline void load_parts256(const uint8_t* w, int half, __m256i wv[8]) {
  auto at = [&](int part) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * part + 32 * half));
  };
  if constexpr (!SIX) {
    for (int u = 0; u < 8; ++u) wv[u] = at(u);
  } else {
    const __m256i low4 = _mm256_set1_epi8(0x0F), high2 = _mm256_set1_epi8(0x30),
                  base = _mm256_set1_epi8(96);
    for (int p = 0; p < 4; ++p) {
      const __m256i nib = at(p);
      wv[p] = _mm256_and_si256(nib, low4);
      wv[p + 4] = _mm256_and_si256(_mm256_srli_epi16(nib, 4), low4);
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i hb = at(4 + h);
      const __m256i at4[4] = {_mm256_slli_epi16(hb, 4), _mm256_slli_epi16(hb, 2), hb,
                              _mm256_srli_epi16(hb, 2)};
      for (int k = 0; k < 4; ++k) {
        const int u = 4 * h + k;
        wv[u] = _mm256_add_epi8(_mm256_or_si256(wv[u], _mm256_and_si256(at4[k], high2)), base);
      }
    }
  }
}


}  // namespace MELLEA_CPU_NS

#endif
