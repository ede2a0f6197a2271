// The inner kernels of the neon-dotprod build (aarch64: NEON and the Armv8.2 dot
// product, `sdot`): what the AVX2 build specialises, on 4-lane vectors. Free of ATen,
// so that tests/engine/neon_kernels_check.cpp can run each one against its scalar
// reference under qemu-aarch64 on an x86 machine; simd.h, tiles_neon.cpp and
// bytes_tiles_neon.cpp wrap them.
//
// Every kernel takes the x86 builds' roundings in their order (fused multiply-adds
// where they fuse, sums in their order), so its results are their bits: the
// activations' two int8 parts, the int4 and int8 tiles and the byte form's the AVX-512
// build's (and so the AVX2 build's), exp, silu and the softmax sums the AVX2 build's.
// The layouts are those described in tiles.h (the tiled int4 and int8 layouts) and
// linear_bytes.cpp (the byte form).
#pragma once

#if !defined(__aarch64__) || !defined(__ARM_NEON) || !defined(__ARM_FEATURE_DOTPROD)
#error "neon.h needs aarch64 with the dot product (-march=armv8.2-a+dotprod)"
#endif

#include <arm_neon.h>

#include "layout.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace mellea_neon {

using mellea_layout::xq_lo;
using mellea_layout::xq_row;

// Output rows per tile of the int4 and int8 layouts: four vectors of 4 lanes.
constexpr int64_t kRows = 16;
// How far ahead of the group being multiplied its weights are prefetched (the x86
// builds' distance; unmeasured on ARM).
constexpr int64_t kAhead = 2048;

// exp(x) as the x86 builds' exp_ps: 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 (ln
// 2 in two parts), exp(r) by Cephes' expf polynomial; 2^k built in the exponent bits.
inline float32x4_t exp_ps(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
  const float32x4_t k = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
  float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, k, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
  p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  const float32x4_t y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.f));
  const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k), vdupq_n_s32(127)), 23);
  return vmulq_f32(y, vreinterpretq_f32_s32(bits));
}

// The sum of 8 lanes (lo: 0-3, hi: 4-7) in the order the AVX2 build's reduce_add_ps
// takes them: halves, then lanes 2 apart, then the last two.
inline float reduce_add8(float32x4_t lo, float32x4_t hi) {
  const float32x4_t h = vaddq_f32(hi, lo);
  const float32x2_t q = vadd_f32(vget_low_f32(h), vget_high_f32(h));
  return vget_lane_f32(q, 0) + vget_lane_f32(q, 1);
}

// v[i] = exp(v[i] - shift) for the first n rounded down to 8, summed as the AVX2 build
// sums them (8 lanes) into *sum; returns how many it did (the caller does the rest).
inline int64_t exp_shifted8(float* v, int64_t n, float shift, float* sum) {
  const float32x4_t s = vdupq_n_f32(shift);
  float32x4_t lo = vdupq_n_f32(0.f), hi = vdupq_n_f32(0.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t a = exp_ps(vsubq_f32(vld1q_f32(v + i), s));
    const float32x4_t b = exp_ps(vsubq_f32(vld1q_f32(v + i + 4), s));
    vst1q_f32(v + i, a);
    vst1q_f32(v + i + 4, b);
    lo = vaddq_f32(lo, a);
    hi = vaddq_f32(hi, b);
  }
  *sum = reduce_add8(lo, hi);
  return i;
}

// o[i] = silu(gate[i]) * up[i] for the first n rounded down to 8 (the AVX2 build's
// vector part, so that the scalar tail covers the same elements); returns how many.
inline int64_t silu_mul8(const float* gate, const float* up, float* o, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int h = 0; h < 8; h += 4) {
      const float32x4_t g = vld1q_f32(gate + i + h);
      const float32x4_t e = exp_ps(vsubq_f32(vdupq_n_f32(0.f), g));  // exp(-g)
      const float32x4_t silu = vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.f), e));
      vst1q_f32(o + i + h, vmulq_f32(silu, vld1q_f32(up + i + h)));
    }
  return i;
}

// Bit j set where x[j] > threshold, for j in 0..7.
inline unsigned above8(const float* x, float threshold) {
  static const uint32_t kBits[8] = {1, 2, 4, 8, 16, 32, 64, 128};
  const float32x4_t t = vdupq_n_f32(threshold);
  const uint32x4_t a = vandq_u32(vcgtq_f32(vld1q_f32(x), t), vld1q_u32(kBits));
  const uint32x4_t b = vandq_u32(vcgtq_f32(vld1q_f32(x + 4), t), vld1q_u32(kBits + 4));
  return vaddvq_u32(vorrq_u32(a, b));
}

// A group of 32 activations' |x| max and sum (the sum in _mm512_reduce_add_ps's order
// over the 16 lanes v[j] + v[j + 16], as the x86 builds take it).
inline void group_top_and_sum(const float* v, float* top, float* sum) {
  float32x4_t xv[8];
  for (int j = 0; j < 8; ++j) xv[j] = vld1q_f32(v + 4 * j);
  float32x4_t m = vabsq_f32(xv[0]);
  for (int j = 1; j < 8; ++j) m = vmaxq_f32(m, vabsq_f32(xv[j]));
  *top = vmaxvq_f32(m);
  float32x4_t s[4];
  for (int j = 0; j < 4; ++j) s[j] = vaddq_f32(xv[j], xv[j + 4]);  // lanes 4 j .. 4 j + 3
  // 16 lanes to 8 (upper + lower), then 8 to 4, 2 and 1 as reduce_add8.
  *sum = reduce_add8(vaddq_f32(s[2], s[0]), vaddq_f32(s[3], s[1]));
}

// A group of 32 activations in two int8 parts, x ~= unit / 256 * (256 hi + lo): hi =
// round(x inv), lo = round((x - hi unit) inv_lo) within -127..127 (the steps are the
// caller's GroupSteps).
inline void split_group(const float* v, float unit, float inv, float inv_lo, int8_t* hi,
                        int8_t* lo) {
  const float32x4_t vinv = vdupq_n_f32(inv), vinv_lo = vdupq_n_f32(inv_lo);
  const float32x4_t u = vdupq_n_f32(unit);
  const float32x4_t lo_max = vdupq_n_f32(127.f), lo_min = vdupq_n_f32(-127.f);
  for (int j = 0; j < 32; j += 8) {
    int32x4_t qh[2], ql[2];
    for (int h = 0; h < 2; ++h) {
      const float32x4_t x = vld1q_f32(v + j + 4 * h);
      const float32x4_t a = vrndnq_f32(vmulq_f32(x, vinv));
      const float32x4_t rest = vfmsq_f32(x, a, u);  // x - a * unit, rounded once
      const float32x4_t b =
          vminq_f32(vmaxq_f32(vrndnq_f32(vmulq_f32(rest, vinv_lo)), lo_min), lo_max);
      qh[h] = vcvtq_s32_f32(a);
      ql[h] = vcvtq_s32_f32(b);
    }
    // Saturating narrowing, as _mm512_cvtsepi32_epi8.
    vst1_s8(hi + j, vqmovn_s16(vcombine_s16(vqmovn_s32(qh[0]), vqmovn_s32(qh[1]))));
    vst1_s8(lo + j, vqmovn_s16(vcombine_s16(vqmovn_s32(ql[0]), vqmovn_s32(ql[1]))));
  }
}

// sum_u w[u] . x[u] on sdot, w[u] a vector of 4 rows' 4 bytes each and x[u] 4 bytes
// of the activation part broadcast: x's bytes 0-15 in x0, 16-31 in x1.
inline int32x4_t dot8(const int8x16_t* w, int8x16_t x0, int8x16_t x1) {
  int32x4_t acc = vdupq_n_s32(0);
  acc = vdotq_laneq_s32(acc, w[0], x0, 0);
  acc = vdotq_laneq_s32(acc, w[1], x0, 1);
  acc = vdotq_laneq_s32(acc, w[2], x0, 2);
  acc = vdotq_laneq_s32(acc, w[3], x0, 3);
  acc = vdotq_laneq_s32(acc, w[4], x1, 0);
  acc = vdotq_laneq_s32(acc, w[5], x1, 1);
  acc = vdotq_laneq_s32(acc, w[6], x1, 2);
  acc = vdotq_laneq_s32(acc, w[7], x1, 3);
  return acc;
}

inline float32x4_t half4(const uint16_t* bits) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(bits)));
}

// acc's 16 lanes (rows n0 .. n0 + 15, times `scale` where given) into out, the first
// `valid` of them.
inline void store_rows(const float32x4_t* acc, const float* scale, float* out, int64_t valid) {
  float row[kRows];
  for (int q = 0; q < 4; ++q)
    vst1q_f32(row + 4 * q, scale ? vmulq_f32(acc[q], vld1q_f32(scale + 4 * q)) : acc[q]);
  std::copy(row, row + valid, out);
}

// An int4 tile's per-group factors (tiles.h's HalfScales and Q4KScales, fp16 as
// its bits): load(t, G, g, q, d, m) gives rows 4 q .. 4 q + 3's scale and min of (tile t,
// group g).
struct HalfScales {  // scale and min, fp16 [T, G, 16] each
  const uint16_t* sc;
  const uint16_t* mn;
  void load(int64_t t, int64_t G, int64_t g, int q, float32x4_t& d, float32x4_t& m) const {
    const int64_t at = (t * G + g) * kRows + 4 * q;
    d = half4(sc + at);
    m = half4(mn + at);
  }
};

struct FloatScales {  // one tile's factors formed ahead: d [G][16], then m [G][16] per group
  const float* dm;
  void load(int64_t, int64_t, int64_t g, int q, float32x4_t& d, float32x4_t& m) const {
    d = vld1q_f32(dm + g * 2 * kRows + 4 * q);
    m = vld1q_f32(dm + g * 2 * kRows + kRows + 4 * q);
  }
};

struct Q4KScales {  // a GGUF's Q4_K: sc, m uint8 [T, G, 2, 16]; d, -dmin fp16 [T, G/8, 2, 16]
  const uint8_t* sub;
  const uint16_t* super;
  void load(int64_t t, int64_t G, int64_t g, int q, float32x4_t& d, float32x4_t& m) const {
    const uint8_t* s = sub + (t * G + g) * 2 * kRows + 4 * q;
    const uint16_t* h = super + (t * (G / 8) + g / 8) * 2 * kRows + 4 * q;
    auto widen = [](const uint8_t* p) {  // 4 bytes -> 4 floats
      uint32_t word;
      std::memcpy(&word, p, 4);
      const uint16x4_t wide = vget_low_u16(vmovl_u8(vcreate_u8(word)));
      return vcvtq_f32_u32(vmovl_u16(wide));
    };
    d = vmulq_f32(half4(h), widen(s));  // exact: 11 bits times 6
    m = vmulq_f32(half4(h + kRows), widen(s + kRows));
  }
};

// int4: output rows [16 t, 16 t + 16) for MR activation rows (xq: MR rows of hi, then
// lo parts, layout.h; xscale, xsum [MR, K / 32]); the factors from S
// (above). Part s's nibbles, 16 bytes at a time, are 4 rows' elements 8 s .. 8 s + 3
// (low) and 8 s + 4 .. + 7 (high): signed dot products of them (0..15) with the parts'
// bytes are exact.
template <int MR, class S>
void int4_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32;
  const uint8x16_t low = vdupq_n_u8(0x0F);
  float32x4_t acc[MR][4];
  for (int i = 0; i < MR; ++i)
    for (int q = 0; q < 4; ++q) acc[i][q] = vdupq_n_f32(0.f);
  const uint8_t* w = qw + t * G * 256;
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int line = 0; line < 256; line += 64) __builtin_prefetch(w + kAhead + line);
    for (int q = 0; q < 4; ++q) {  // rows 4 q .. 4 q + 3
      int8x16_t wv[8];
      for (int s = 0; s < 4; ++s) {
        const uint8x16_t v = vld1q_u8(w + 64 * s + 16 * q);
        wv[2 * s] = vreinterpretq_s8_u8(vandq_u8(v, low));
        wv[2 * s + 1] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
      }
      float32x4_t d, m;
      scales.load(t, G, g, q, d, m);
      for (int i = 0; i < MR; ++i) {
        const int8_t* xh = xq + i * xq_row(K) + g * 32;
        const int8_t* xl = xh + xq_lo(K);
        const int32x4_t hi = dot8(wv, vld1q_s8(xh), vld1q_s8(xh + 16));
        const int32x4_t lo = dot8(wv, vld1q_s8(xl), vld1q_s8(xl + 16));
        // |hi| <= 32 * 15 * 127, so 256 hi + lo stays below 2^24: exact in fp32.
        const int32x4_t dot = vaddq_s32(vshlq_n_s32(hi, 8), lo);
        const float32x4_t scale = vmulq_n_f32(d, xscale[i * G + g]);
        acc[i][q] = vfmaq_f32(acc[i][q], vcvtq_f32_s32(dot), scale);
        acc[i][q] = vfmaq_f32(acc[i][q], m, vdupq_n_f32(xsum[i * G + g]));
      }
    }
  }
  const int64_t n0 = t * kRows, valid = std::min<int64_t>(kRows, N - n0);
  for (int i = 0; i < MR; ++i) store_rows(acc[i], nullptr, out + i * N + n0, valid);
}

// int8: output rows [16 t, 16 t + 16), weights [T, G, 8, 64] (part u: bytes 4 u .. 4 u + 3
// of each row's group, row j in lane j), scale [T * 16]. sdot multiplies signed bytes by
// signed bytes, so no shift and no correction (the x86 builds' wsum) is needed; the dot
// products are theirs: |256 hi + lo| <= 257 * 32 * 127 * 127 < 2^31.
template <int MR>
void int8_tile(const int8_t* qw, const float* wscale, const int8_t* xq, const float* xscale,
               float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32;
  float32x4_t acc[MR][4];
  for (int i = 0; i < MR; ++i)
    for (int q = 0; q < 4; ++q) acc[i][q] = vdupq_n_f32(0.f);
  const int8_t* w = qw + t * G * 512;
  for (int64_t g = 0; g < G; ++g, w += 512) {
    for (int line = 0; line < 512; line += 64) __builtin_prefetch(w + 2 * kAhead + line);
    for (int q = 0; q < 4; ++q) {
      int8x16_t wv[8];
      for (int u = 0; u < 8; ++u) wv[u] = vld1q_s8(w + 64 * u + 16 * q);
      for (int i = 0; i < MR; ++i) {
        const int8_t* xh = xq + i * xq_row(K) + g * 32;
        const int8_t* xl = xh + xq_lo(K);
        const int32x4_t hi = dot8(wv, vld1q_s8(xh), vld1q_s8(xh + 16));
        const int32x4_t lo = dot8(wv, vld1q_s8(xl), vld1q_s8(xl + 16));
        const int32x4_t dot = vaddq_s32(vshlq_n_s32(hi, 8), lo);
        acc[i][q] = vfmaq_f32(acc[i][q], vcvtq_f32_s32(dot), vdupq_n_f32(xscale[i * G + g]));
      }
    }
  }
  const int64_t n0 = t * kRows, valid = std::min<int64_t>(kRows, N - n0);
  for (int i = 0; i < MR; ++i) store_rows(acc[i], wscale + n0, out + i * N + n0, valid);
}

// The exact byte form of a GGUF's blocks (linear_bytes.cpp: qweight [T, G, 8, 64]
// uint8 holding q + 128 in int8_tile's layout, subs [T, G, P, 16] int8 with each row's sc
// of the group's two sub-blocks of 16 and, where MINS (P == 3), its minimum m, supers
// [T, G / S, P - 1, 16] fp32 with d (and dmin) per S groups): output rows [16 t, 16 t + 16)
// for MR activation rows. Flipping a stored byte's top bit gives q as a signed byte ((q +
// 128) ^ 0x80 is q in two's complement), which sdot multiplies as it is: each sub-block's
// sum q (256 hi + lo) comes out directly, with no correction for the 128 (the x86 tiles'
// corr), and it is their integer exactly (|sum q hi| <= 16 * 128 * 127, so 256 of it
// stays below 2^27). The floats are the AVX-512 build's in its order: d * sc per
// sub-block (exact), dot0 * scale0, then + dot1 * scale1 fused, then the group's step
// fused into the sum, then -(dmin * m) times the group's activation sum fused.
inline float32x4_t widen_s8x4(const int8_t* p) {  // 4 signed bytes -> 4 floats
  int32_t word;
  std::memcpy(&word, p, 4);
  const int16x8_t wide = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(word)));
  return vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)));
}

// sum_u w[u] . x[u] over one sub-block (4 parts): x's 16 bytes, 4 per part.
inline int32x4_t dot4(const int8x16_t* w, int8x16_t x) {
  int32x4_t acc = vdupq_n_s32(0);
  acc = vdotq_laneq_s32(acc, w[0], x, 0);
  acc = vdotq_laneq_s32(acc, w[1], x, 1);
  acc = vdotq_laneq_s32(acc, w[2], x, 2);
  acc = vdotq_laneq_s32(acc, w[3], x, 3);
  return acc;
}

template <int MR, bool MINS>
void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers, int64_t S,
                const int8_t* xq, const float* xscale, const float* xsum, float* out, int64_t N,
                int64_t K, int64_t t) {
  constexpr int P = MINS ? 3 : 2;
  const int64_t G = K / 32;
  const uint8x16_t flip = vdupq_n_u8(0x80);
  float32x4_t acc[MR][4];
  for (int i = 0; i < MR; ++i)
    for (int q = 0; q < 4; ++q) acc[i][q] = vdupq_n_f32(0.f);
  const uint8_t* w = qw + t * G * 512;
  const int8_t* sb = subs + t * G * P * kRows;
  const float* sp = supers + t * (G / S) * (P - 1) * kRows;
  const int s_shift = __builtin_ctzll(S);  // S is a power of two (check_bytes)
  for (int64_t g = 0; g < G; ++g, w += 512, sb += P * kRows) {
    for (int line = 0; line < 512; line += 64) __builtin_prefetch(w + 2 * kAhead + line);
    __builtin_prefetch(sb + 8 * P * kRows);  // the scales as far ahead as the weights
    const float* dp = sp + (g >> s_shift) * (P - 1) * kRows;  // g / S
    for (int q = 0; q < 4; ++q) {  // rows 4 q .. 4 q + 3
      int8x16_t wv[8];
      for (int u = 0; u < 8; ++u)
        wv[u] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(w + 64 * u + 16 * q), flip));
      const float32x4_t d = vld1q_f32(dp + 4 * q);
      const float32x4_t scale0 = vmulq_f32(d, widen_s8x4(sb + 4 * q));  // exact
      const float32x4_t scale1 = vmulq_f32(d, widen_s8x4(sb + kRows + 4 * q));
      float32x4_t offset = vdupq_n_f32(0.f);
      if constexpr (MINS)
        offset = vsubq_f32(vdupq_n_f32(0.f), vmulq_f32(vld1q_f32(dp + kRows + 4 * q),
                                                        widen_s8x4(sb + 2 * kRows + 4 * q)));
      for (int i = 0; i < MR; ++i) {
        const int8_t* xh = xq + i * xq_row(K) + g * 32;
        const int8_t* xl = xh + xq_lo(K);
        const int32x4_t dot0 = vaddq_s32(vshlq_n_s32(dot4(wv, vld1q_s8(xh)), 8),
                                         dot4(wv, vld1q_s8(xl)));
        const int32x4_t dot1 = vaddq_s32(vshlq_n_s32(dot4(wv + 4, vld1q_s8(xh + 16)), 8),
                                         dot4(wv + 4, vld1q_s8(xl + 16)));
        float32x4_t f = vmulq_f32(vcvtq_f32_s32(dot0), scale0);
        f = vfmaq_f32(f, vcvtq_f32_s32(dot1), scale1);
        acc[i][q] = vfmaq_f32(acc[i][q], f, vdupq_n_f32(xscale[i * G + g]));
        if constexpr (MINS)
          acc[i][q] = vfmaq_f32(acc[i][q], offset, vdupq_n_f32(xsum[i * G + g]));
      }
    }
  }
  const int64_t n0 = t * kRows, valid = std::min<int64_t>(kRows, N - n0);
  for (int i = 0; i < MR; ++i) store_rows(acc[i], nullptr, out + i * N + n0, valid);
}

}  // namespace mellea_neon
