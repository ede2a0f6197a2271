// Vector helpers the ops share, free of ATen: exp on vectors (the softmax, SiLU), the
// AVX2 build's 8-lane sum, fp16 to fp32, rows of a KV cache to and from fp32, prefetching.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "family.h"

namespace MELLEA_CPU_NS {

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

inline float half_to_float(c10::Half h) {
#ifdef __F16C__
  return _cvtsh_ss(h.x);  // one instruction; c10's conversion is bit twiddling
#else
  return static_cast<float>(h);
#endif
}

inline void prefetch(const void* p) {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
#else
  __builtin_prefetch(p);
#endif
}

// n values as fp32: src itself when it is fp32, else converted into buf (8 lanes at a
// time with F16C for fp16, 16 with AVX-512; the same values as c10's conversion).
template <typename T>
inline const float* as_float(const T* src, float* buf, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    int64_t i = 0;
#ifdef __AVX512F__
    if constexpr (std::is_same_v<T, c10::Half>) {
      for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(buf + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(src + i))));
    }
#endif
#ifdef __F16C__
    if constexpr (std::is_same_v<T, c10::Half>) {
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(buf + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(src + i))));
    }
#endif
    for (; i < n; ++i) buf[i] = static_cast<float>(src[i]);
    return buf;
  }
}

// n fp32 values into a cache row of T, rounded to nearest even as c10 rounds.
template <typename T>
inline void store_row(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::copy(src, src + n, dst);
  } else {
    int64_t i = 0;
#ifdef __F16C__
    if constexpr (std::is_same_v<T, c10::Half>) {
      for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    }
#endif
    for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
  }
}

}  // namespace MELLEA_CPU_NS
