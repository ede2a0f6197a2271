// Each kernel of mellea/engine/cpu_ops/neon.h against a scalar reference written
// here from the layouts' description, on random inputs: bit for bit where the NEON
// code takes the x86 builds' roundings in their order, and the int4 and int8 linears
// also against the exact product (in double) within the activations' bound. Built by
// tests/engine/test_cpu_kernels_neon.py with aarch64-linux-gnu-g++ and run under
// qemu-aarch64 (-cpu max, for the dot product); prints one line per kernel and exits 1
// on the first kernel that differs.
//
// Given `bytes IN OUT`, it runs the neon-dotprod build's bytes_linear and
// bytes_dequantize (the two-part activations, the byte tile in row blocks of 4, the
// dequantizer of cpu_ops/bytes_dequant.h) on the operands in file IN and writes
// their results to OUT, for the test to compare with the x86 builds' bits.
#include "bytes_dequant.h"
#include "neon.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

namespace {

namespace nk = mellea_neon;
using mellea_layout::xq_lo;
using mellea_layout::xq_row;

std::mt19937 rng(20261125);
int failures = 0;

float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

bool same(float a, float b) { return bits_of(a) == bits_of(b); }

void fail(const char* what, const char* detail, double got, double want) {
  if (failures < 20) std::printf("FAIL %s: %s: got %.9g, want %.9g\n", what, detail, got, want);
  ++failures;
}

void report(const char* what, int cases, int before) {
  std::printf("%s %s: %d cases\n", failures == before ? "ok" : "FAIL", what, cases);
}

// ---- the scalar references ----------------------------------------------------------

// exp_ps step by step, each fused multiply-add as fmaf.
float ref_exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float k = std::nearbyint(x * 1.44269504f);
  float r = std::fma(-k, 0.693359375f, x);
  r = std::fma(-k, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                  5.0000001201e-1f})
    p = std::fma(p, r, c);
  const float y = std::fma(p, r * r, r) + 1.f;
  return y * std::ldexp(1.f, static_cast<int>(k));
}

// 8 lanes summed as the AVX2 build's reduce_add_ps: halves, lanes 2 apart, the last two.
float ref_reduce8(const float* l) {
  float h[4];
  for (int j = 0; j < 4; ++j) h[j] = l[j + 4] + l[j];
  return (h[0] + h[2]) + (h[1] + h[3]);
}

// The two-part steps of a group whose |x| max is top (cpu_ops/tiles.h's GroupSteps).
struct Steps {
  float unit, inv, inv_lo;
};
Steps steps_of(float top) {
  return {top / 127.f, top > 0.f ? 127.f / top : 0.f, top > 0.f ? 256.f * 127.f / top : 0.f};
}

int8_t saturate8(float v) { return static_cast<int8_t>(std::min(std::max(v, -128.f), 127.f)); }

// A group's |x| max and its sum in _mm512_reduce_add_ps's order over v[j] + v[j + 16].
void ref_top_and_sum(const float* v, float* top, float* sum) {
  float t = 0.f, s16[16], s8[8];
  for (int j = 0; j < 32; ++j) t = std::max(t, std::fabs(v[j]));
  for (int j = 0; j < 16; ++j) s16[j] = v[j] + v[j + 16];
  for (int j = 0; j < 8; ++j) s8[j] = s16[j + 8] + s16[j];
  *top = t;
  *sum = ref_reduce8(s8);
}

void ref_split(const float* v, const Steps& s, int8_t* hi, int8_t* lo) {
  for (int j = 0; j < 32; ++j) {
    const float a = std::nearbyint(v[j] * s.inv);
    const float rest = std::fma(-a, s.unit, v[j]);
    hi[j] = saturate8(a);
    lo[j] = static_cast<int8_t>(std::min(std::max(std::nearbyint(rest * s.inv_lo), -127.f), 127.f));
  }
}

float half_bits_to_float(uint16_t b) {
  __fp16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

uint16_t float_to_half_bits(float f) {
  const __fp16 h = static_cast<__fp16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// Element e (0..31) of row j's group in a tile group's 256 bytes of the int4 layout.
int int4_element(const uint8_t* w, int j, int e) {
  const int s = e / 8, b = e % 8;
  const uint8_t byte = w[64 * s + 4 * j + (b % 4)];
  return b < 4 ? (byte & 0x0F) : (byte >> 4);
}

// Element e of row j's group in a tile group's 512 bytes of the int8 layout.
int int8_element(const int8_t* w, int j, int e) { return w[64 * (e / 4) + 4 * j + e % 4]; }

// Activations in their two parts, [rows, 2, K], with steps and sums [rows, G].
struct Parts {
  std::vector<int8_t> q;
  std::vector<float> step, sum;
};

Parts ref_parts(const std::vector<float>& x, int rows, int K) {
  const int G = K / 32;
  Parts p{std::vector<int8_t>(rows * xq_row(K)), std::vector<float>(rows * G),
          std::vector<float>(rows * G)};
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < G; ++g) {
      const float* v = x.data() + r * K + g * 32;
      float top;
      ref_top_and_sum(v, &top, &p.sum[r * G + g]);
      const Steps s = steps_of(top);
      p.step[r * G + g] = s.unit / 256.f;
      ref_split(v, s, p.q.data() + r * xq_row(K) + g * 32, p.q.data() + r * xq_row(K) + xq_lo(K) + g * 32);
    }
  return p;
}

// Activations with groups of very different sizes, some all zero, some at one value.
std::vector<float> activations(int rows, int K) {
  std::vector<float> x(rows * K);
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < K / 32; ++g) {
      const int kind = integer(0, 9);
      const float size = std::pow(10.f, uniform(-4.f, 4.f));
      for (int j = 0; j < 32; ++j) {
        float& v = x[r * K + g * 32 + j];
        v = kind == 0 ? 0.f : kind == 1 ? size : uniform(-size, size);
      }
    }
  return x;
}

// ---- the checks -------------------------------------------------------------------

void check_exp() {
  const int before = failures;
  int cases = 0;
  float x[4];
  for (int n = 0; n < 20000; n += 4) {
    for (int l = 0; l < 4; ++l) x[l] = n < 40 ? -100.f + 5.f * (n + l) : uniform(-95.f, 95.f);
    float got[4];
    vst1q_f32(got, nk::exp_ps(vld1q_f32(x)));
    for (int l = 0; l < 4; ++l, ++cases) {
      if (!same(got[l], ref_exp(x[l]))) fail("exp_ps", "bits", got[l], ref_exp(x[l]));
      // And within 2 ulp of the library's exp where neither clamps nor goes subnormal.
      const float lib = std::exp(x[l]);
      if (x[l] > -87.f && x[l] < 88.f && std::fabs(got[l] - lib) > 2.f * std::fabs(lib) * 0x1p-23f)
        fail("exp_ps", "against std::exp", got[l], lib);
    }
  }
  report("exp_ps", cases, before);
}

void check_exp_shifted() {
  const int before = failures;
  int cases = 0;
  for (int n : {0, 3, 8, 13, 16, 31, 64, 257}) {
    std::vector<float> v(n), want(n);
    float shift = 0.f;
    for (auto& e : v) shift = std::max(shift, e = uniform(-30.f, 10.f));
    float lanes[8] = {};
    const int64_t whole = n / 8 * 8;
    for (int64_t i = 0; i < whole; ++i) lanes[i % 8] += want[i] = ref_exp(v[i] - shift);
    float sum = -1.f;
    const int64_t did = nk::exp_shifted8(v.data(), n, shift, &sum);
    ++cases;
    if (did != whole) fail("exp_shifted8", "count", did, whole);
    if (!same(sum, ref_reduce8(lanes))) fail("exp_shifted8", "sum", sum, ref_reduce8(lanes));
    for (int64_t i = 0; i < whole; ++i)
      if (!same(v[i], want[i])) fail("exp_shifted8", "value", v[i], want[i]);
  }
  report("exp_shifted8", cases, before);
}

void check_silu() {
  const int before = failures;
  int cases = 0;
  for (int n : {0, 5, 8, 12, 64, 100}) {
    std::vector<float> gate(n), up(n), out(n, -7.f);
    for (int i = 0; i < n; ++i) gate[i] = uniform(-20.f, 20.f), up[i] = uniform(-3.f, 3.f);
    const int64_t did = nk::silu_mul8(gate.data(), up.data(), out.data(), n);
    ++cases;
    if (did != n / 8 * 8) fail("silu_mul8", "count", did, n / 8 * 8);
    for (int i = 0; i < n; ++i) {
      const float want = i < did ? gate[i] / (1.f + ref_exp(0.f - gate[i])) * up[i] : -7.f;
      if (!same(out[i], want)) fail("silu_mul8", "value", out[i], want);
    }
  }
  report("silu_mul8", cases, before);
}

void check_above() {
  const int before = failures;
  int cases = 0;
  for (int n = 0; n < 2000; ++n, ++cases) {
    float x[8];
    for (float& v : x) v = static_cast<float>(integer(-3, 3));  // ties with the threshold
    const float t = static_cast<float>(integer(-3, 3));
    unsigned want = 0;
    for (int j = 0; j < 8; ++j) want |= (x[j] > t ? 1u : 0u) << j;
    if (nk::above8(x, t) != want) fail("above8", "mask", nk::above8(x, t), want);
  }
  report("above8", cases, before);
}

void check_activation_parts() {
  const int before = failures;
  int cases = 0;
  const int K = 32 * 8192;  // enough that a rounding differing in 1 in 10^4 shows
  std::vector<float> x = activations(1, K);
  // A group of ties (top 127: a step of 1 for hi, 1/256 for lo), which round to even.
  x[0] = 127.f;
  for (int j = 1; j < 16; ++j) x[j] = static_cast<float>(j - 8) + 0.5f;
  for (int j = 16; j < 32; ++j) x[j] = 3.f + (static_cast<float>(j - 24) + 0.5f) / 256.f;
  for (int g = 0; g < K / 32; ++g, ++cases) {
    const float* v = x.data() + g * 32;
    float top, sum, want_top, want_sum;
    nk::group_top_and_sum(v, &top, &sum);
    ref_top_and_sum(v, &want_top, &want_sum);
    if (!same(top, want_top)) fail("group_top_and_sum", "top", top, want_top);
    if (!same(sum, want_sum)) fail("group_top_and_sum", "sum", sum, want_sum);
    const Steps s = steps_of(want_top);
    int8_t hi[32], lo[32], want_hi[32], want_lo[32];
    nk::split_group(v, s.unit, s.inv, s.inv_lo, hi, lo);
    ref_split(v, s, want_hi, want_lo);
    for (int j = 0; j < 32; ++j) {
      if (hi[j] != want_hi[j]) fail("split_group", "hi", hi[j], want_hi[j]);
      if (lo[j] != want_lo[j]) fail("split_group", "lo", lo[j], want_lo[j]);
    }
  }
  report("group_top_and_sum + split_group", cases, before);
}

// Runs tile(rows, t) on MR rows for every tile; out [MR, N], untouched past N. q4k: the
// factors as a GGUF's Q4_K holds them (6-bit sc and m per group, fp16 d and -dmin per 8
// groups), whose products the reference forms in fp32; else fp16 scales and mins.
template <int MR>
void check_int4(int N, int K, bool q4k) {
  const int G = K / 32, T = (N + 15) / 16;
  std::vector<uint8_t> qw(T * G * 256);
  std::vector<uint16_t> sc(T * G * 16), mn(T * G * 16);
  std::vector<uint8_t> sub(T * G * 32);
  std::vector<uint16_t> super(T * (G / 8) * 32);
  for (auto& b : qw) b = static_cast<uint8_t>(integer(0, 255));
  for (int i = 0; i < T * G * 16; ++i) {
    sc[i] = float_to_half_bits(uniform(0.f, 0.05f));
    mn[i] = float_to_half_bits(uniform(-0.4f, 0.f));
  }
  for (auto& b : sub) b = static_cast<uint8_t>(integer(0, 63));
  for (int i = 0; i < T * (G / 8); ++i)
    for (int j = 0; j < 16; ++j) {
      super[i * 32 + j] = float_to_half_bits(uniform(1e-4f, 2e-3f));
      super[i * 32 + 16 + j] = float_to_half_bits(-uniform(1e-4f, 2e-3f));
    }
  auto factors = [&](int t, int g, int j, float& d, float& m) {
    if (!q4k) {
      const int at = (t * G + g) * 16 + j;
      d = half_bits_to_float(sc[at]);
      m = half_bits_to_float(mn[at]);
      return;
    }
    const uint8_t* s = sub.data() + (t * G + g) * 32;
    const uint16_t* h = super.data() + (t * (G / 8) + g / 8) * 32;
    d = half_bits_to_float(h[j]) * static_cast<float>(s[j]);
    m = half_bits_to_float(h[16 + j]) * static_cast<float>(s[16 + j]);
  };
  for (int g = 0; g < G; ++g) std::fill_n(&qw[g * 256 + 64 * (g % 4)], 64, uint8_t{0xFF});
  const std::vector<float> x = activations(MR, K);
  const Parts p = ref_parts(x, MR, K);
  std::vector<float> got(MR * N + 1, 0.f);
  got[MR * N] = -1.f;  // a sentinel past the end
  for (int t = 0; t < T; ++t)
    if (q4k)
      nk::int4_tile<MR>(qw.data(), nk::Q4KScales{sub.data(), super.data()}, p.q.data(),
                        p.step.data(), p.sum.data(), got.data(), N, K, t);
    else
      nk::int4_tile<MR>(qw.data(), nk::HalfScales{sc.data(), mn.data()}, p.q.data(),
                        p.step.data(), p.sum.data(), got.data(), N, K, t);
  char what[64];
  std::snprintf(what, sizeof what, "int4_tile<%d>%s N=%d K=%d", MR, q4k ? " Q4_K" : "", N, K);
  if (got[MR * N] != -1.f) fail(what, "wrote past the end", got[MR * N], -1.f);
  if (q4k) {  // the same factors formed ahead per tile (FloatScales): the same bits
    std::vector<float> ahead(MR * N, 0.f), dm(G * 32);
    for (int t = 0; t < T; ++t) {
      for (int g = 0; g < G; ++g)
        for (int j = 0; j < 16; ++j) factors(t, g, j, dm[g * 32 + j], dm[g * 32 + 16 + j]);
      nk::int4_tile<MR>(qw.data(), nk::FloatScales{dm.data()}, p.q.data(), p.step.data(),
                        p.sum.data(), ahead.data(), N, K, t);
    }
    for (int e = 0; e < MR * N; ++e)
      if (!same(ahead[e], got[e])) fail(what, "FloatScales against Q4KScales", ahead[e], got[e]);
  }
  for (int i = 0; i < MR; ++i)
    for (int n = 0; n < N; ++n) {
      const int t = n / 16, j = n % 16;
      float acc = 0.f;
      double exact = 0.0, bound = 0.0, mag = 0.0;
      for (int g = 0; g < G; ++g) {
        const uint8_t* w = qw.data() + (t * G + g) * 256;
        const int8_t* xh = p.q.data() + i * xq_row(K) + g * 32;
        float d, m;
        factors(t, g, j, d, m);
        int32_t hi = 0, lo = 0;
        for (int e = 0; e < 32; ++e) {
          const int q = int4_element(w, j, e);
          hi += q * xh[e];
          lo += q * xh[xq_lo(K) + e];
          const double wk = static_cast<double>(q) * d + m;
          exact += wk * x[i * K + g * 32 + e];
          // The parts' error: half a step (lo's rounding), a whole one where lo clamps.
          bound += std::fabs(wk) * p.step[i * G + g];
          mag += (std::fabs(q * d) + std::fabs(m)) * std::fabs(x[i * K + g * 32 + e]);
        }
        const float step = p.step[i * G + g], sum = p.sum[i * G + g];
        acc = std::fma(static_cast<float>(256 * hi + lo), d * step, acc);
        acc = std::fma(m, sum, acc);
      }
      const float out = got[i * N + n];
      if (!same(out, acc)) fail(what, "bits", out, acc);
      if (std::fabs(out - exact) > bound + 1e-5 * mag)
        fail(what, "against the exact product", out, exact);
    }
}

template <int MR>
void check_int8(int N, int K) {
  const int G = K / 32, T = (N + 15) / 16;
  std::vector<int8_t> qw(T * G * 512);
  std::vector<float> scale(T * 16);
  for (auto& b : qw) b = static_cast<int8_t>(integer(-127, 127));
  for (int g = 0; g < G; g += 3) std::fill_n(&qw[g * 512], 512, int8_t{-127});
  for (auto& s : scale) s = uniform(1e-4f, 1e-2f);
  const std::vector<float> x = activations(MR, K);
  const Parts p = ref_parts(x, MR, K);
  std::vector<float> got(MR * N + 1, 0.f);
  got[MR * N] = -1.f;
  for (int t = 0; t < T; ++t)
    nk::int8_tile<MR>(qw.data(), scale.data(), p.q.data(), p.step.data(), got.data(), N, K, t);
  char what[64];
  std::snprintf(what, sizeof what, "int8_tile<%d> N=%d K=%d", MR, N, K);
  if (got[MR * N] != -1.f) fail(what, "wrote past the end", got[MR * N], -1.f);
  for (int i = 0; i < MR; ++i)
    for (int n = 0; n < N; ++n) {
      const int t = n / 16, j = n % 16;
      float acc = 0.f;
      double exact = 0.0, bound = 0.0, mag = 0.0;
      for (int g = 0; g < G; ++g) {
        const int8_t* w = qw.data() + (t * G + g) * 512;
        const int8_t* xh = p.q.data() + i * xq_row(K) + g * 32;
        int32_t hi = 0, lo = 0;
        for (int e = 0; e < 32; ++e) {
          const int q = int8_element(w, j, e);
          hi += q * xh[e];
          lo += q * xh[xq_lo(K) + e];
          const double wk = static_cast<double>(q) * scale[n];
          exact += wk * x[i * K + g * 32 + e];
          bound += std::fabs(wk) * p.step[i * G + g];
          mag += std::fabs(wk * x[i * K + g * 32 + e]);
        }
        acc = std::fma(static_cast<float>(256 * hi + lo), p.step[i * G + g], acc);
      }
      const float want = acc * scale[n], out = got[i * N + n];
      if (!same(out, want)) fail(what, "bits", out, want);
      if (std::fabs(out - exact) > bound + 1e-5 * mag)
        fail(what, "against the exact product", out, exact);
    }
}

template <int MR>
void check_tiles(int& cases) {
  for (int N : {16, 5, 37, 64})
    for (int K : {32, 96, 512}) {
      check_int4<MR>(N, K, false);
      check_int8<MR>(N, K);
      cases += 2;
      if (K % 256 == 0) {  // Q4_K's blocks of 8 groups
        check_int4<MR>(N, K, true);
        ++cases;
      }
    }
}

// Runs bytes_tile on MR rows for every tile: the byte form's operands with the ranges'
// ends (bytes 0 and 255, sc -128, minimums up to 63), d (and dmin) fp16 values per S
// groups. The reference takes the AVX-512 build's steps (cpu_ops/bytes_tiles_avx512.cpp) one by
// one: the sub-blocks' integer sums, d * sc, dot0 * scale0, + dot1 * scale1 fused, the
// step fused into the sum, then -(dmin * m) times the group's sum fused.
template <int MR>
void check_bytes(int N, int K, int S, bool mins) {
  const int G = K / 32, T = (N + 15) / 16, P = mins ? 3 : 2;
  std::vector<uint8_t> qw(T * G * 512);
  std::vector<int8_t> subs(T * G * P * 16);
  std::vector<float> supers(T * (G / S) * (P - 1) * 16);
  for (auto& b : qw) b = static_cast<uint8_t>(integer(0, 255));
  for (int g = 0; g < G; g += 3) std::fill_n(&qw[g * 512], 512, static_cast<uint8_t>(g % 2 ? 255 : 0));
  for (int tg = 0; tg < T * G; ++tg)
    for (int p = 0; p < P; ++p)
      for (int j = 0; j < 16; ++j)
        subs[(tg * P + p) * 16 + j] =
            static_cast<int8_t>(p == 2 ? integer(0, 63) : tg % 5 == 0 ? -128 : integer(-128, 127));
  for (auto& f : supers) f = half_bits_to_float(float_to_half_bits(uniform(1e-5f, 2e-3f)));
  const std::vector<float> x = activations(MR, K);
  const Parts p = ref_parts(x, MR, K);
  std::vector<float> got(MR * N + 1, 0.f);
  got[MR * N] = -1.f;  // a sentinel past the end
  for (int t = 0; t < T; ++t)
    if (mins)
      nk::bytes_tile<MR, true>(qw.data(), subs.data(), supers.data(), S, p.q.data(),
                               p.step.data(), p.sum.data(), got.data(), N, K, t);
    else
      nk::bytes_tile<MR, false>(qw.data(), subs.data(), supers.data(), S, p.q.data(),
                                p.step.data(), p.sum.data(), got.data(), N, K, t);
  char what[80];
  std::snprintf(what, sizeof what, "bytes_tile<%d>%s N=%d K=%d S=%d", MR, mins ? " mins" : "", N,
                K, S);
  if (got[MR * N] != -1.f) fail(what, "wrote past the end", got[MR * N], -1.f);
  std::vector<float> row(K);
  for (int i = 0; i < MR; ++i)
    for (int n = 0; n < N; ++n) {
      const int t = n / 16, j = n % 16;
      mellea_bytes::dequantize_row(qw.data(), subs.data(), supers.data(), G, S, P, t, j,
                                   row.data());
      float acc = 0.f;
      double exact = 0.0, bound = 0.0, mag = 0.0;
      for (int g = 0; g < G; ++g) {
        const uint8_t* w = qw.data() + (t * G + g) * 512;
        const int8_t* sb = subs.data() + (t * G + g) * P * 16;
        const float* dp = supers.data() + (t * (G / S) + g / S) * (P - 1) * 16;
        const int8_t* xh = p.q.data() + i * xq_row(K) + g * 32;
        int32_t dot[2] = {0, 0};
        for (int e = 0; e < 32; ++e) {
          const int q = static_cast<int>(w[64 * (e / 4) + 4 * j + e % 4]) - 128;
          dot[e / 16] += q * (256 * xh[e] + xh[xq_lo(K) + e]);
        }
        const float scale0 = dp[j] * static_cast<float>(sb[j]);
        const float scale1 = dp[j] * static_cast<float>(sb[16 + j]);
        const float offset = mins ? 0.f - dp[16 + j] * static_cast<float>(sb[32 + j]) : 0.f;
        float f = static_cast<float>(dot[0]) * scale0;
        f = std::fma(static_cast<float>(dot[1]), scale1, f);
        acc = std::fma(f, p.step[i * G + g], acc);
        if (mins) acc = std::fma(offset, p.sum[i * G + g], acc);
        for (int e = 0; e < 32; ++e) {
          const int q = static_cast<int>(w[64 * (e / 4) + 4 * j + e % 4]) - 128;
          // The dequantizer's weight: (d sc) q, then + -(dmin m), each rounded (its
          // -(dmin m) is the tile's 0 - dmin m but for the sign of a zero).
          const float product = (e < 16 ? scale0 : scale1) * static_cast<float>(q);
          const float wk =
              mins ? product + -(dp[16 + j] * static_cast<float>(sb[32 + j])) : product;
          if (!same(row[g * 32 + e], wk)) fail(what, "dequantize_row", row[g * 32 + e], wk);
          exact += static_cast<double>(wk) * x[i * K + g * 32 + e];
          bound += std::fabs(wk) * p.step[i * G + g];
          mag += (std::fabs(product) + std::fabs(offset)) * std::fabs(x[i * K + g * 32 + e]);
        }
      }
      const float out = got[i * N + n];
      if (!same(out, acc)) fail(what, "bits", out, acc);
      if (std::fabs(out - exact) > bound + 1e-5 * mag)
        fail(what, "against the exact product", out, exact);
    }
}

template <int MR>
void check_byte_tiles(int& cases) {
  for (int N : {16, 5, 37})
    for (int K : {32, 96, 512})
      for (bool mins : {false, true}) {
        check_bytes<MR>(N, K, 1, mins);
        ++cases;
        if (K % 256 == 0) {  // the K-quants' super-blocks of 8 groups
          check_bytes<MR>(N, K, 8, mins);
          ++cases;
        }
      }
}

// ---- bytes_linear and bytes_dequantize on a file's operands --------------------------

template <typename V>
bool read_into(std::ifstream& in, V& v, size_t n) {
  v.resize(n);
  return static_cast<bool>(
      in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(v[0]))));
}

// IN: int64 M, N, K, P, S; x fp32 [M, K]; qweight uint8 [T, G, 8, 64]; subs int8 [T, G,
// P, 16]; supers fp32 [T, G / S, P - 1, 16]. OUT: out fp32 [M, N], then the weight fp32
// [N, K]. The activations as the NEON build's quantize_activations forms them.
int run_bytes(const char* in_path, const char* out_path) {
  std::ifstream in(in_path, std::ios::binary);
  int64_t head[5];
  if (!in.read(reinterpret_cast<char*>(head), sizeof head)) return 2;
  const int64_t M = head[0], N = head[1], K = head[2], P = head[3], S = head[4];
  const int64_t G = K / 32, T = (N + 15) / 16;
  std::vector<float> x, supers;
  std::vector<uint8_t> qw;
  std::vector<int8_t> subs;
  if (!read_into(in, x, M * K) || !read_into(in, qw, T * G * 512) ||
      !read_into(in, subs, T * G * P * 16) || !read_into(in, supers, T * (G / S) * (P - 1) * 16))
    return 2;
  std::vector<int8_t> xq(M * xq_row(K));
  std::vector<float> step(M * G), xsum(M * G);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t g = 0; g < G; ++g) {
      float top;
      nk::group_top_and_sum(x.data() + r * K + g * 32, &top, &xsum[r * G + g]);
      const Steps s = steps_of(top);
      step[r * G + g] = s.unit / 256.f;
      int8_t* hi = xq.data() + r * xq_row(K) + g * 32;
      nk::split_group(x.data() + r * K + g * 32, s.unit, s.inv, s.inv_lo, hi, hi + xq_lo(K));
    }
  std::vector<float> out(M * N + N * K);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t m = 0; m < M;) {  // row blocks of 4, then the 1-3 left
      const int64_t rows = std::min<int64_t>(4, M - m);
      auto tile = [&](auto rows_c) {
        constexpr int MR = decltype(rows_c)::value;
        auto run = P == 3 ? &nk::bytes_tile<MR, true> : &nk::bytes_tile<MR, false>;
        run(qw.data(), subs.data(), supers.data(), S, xq.data() + m * xq_row(K), step.data() + m * G,
            xsum.data() + m * G, out.data() + m * N, N, K, t);
      };
      if (rows == 4) tile(std::integral_constant<int, 4>{});
      if (rows == 3) tile(std::integral_constant<int, 3>{});
      if (rows == 2) tile(std::integral_constant<int, 2>{});
      if (rows == 1) tile(std::integral_constant<int, 1>{});
      m += rows;
    }
  for (int64_t n = 0; n < N; ++n)
    mellea_bytes::dequantize_row(qw.data(), subs.data(), supers.data(), G, S, P, n / 16, n % 16,
                                 out.data() + M * N + n * K);
  std::ofstream o(out_path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()),
          static_cast<std::streamsize>(out.size() * sizeof(float)));
  return o ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "bytes") == 0) return run_bytes(argv[2], argv[3]);
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // each line out before a crash, if one comes
  check_exp();
  check_exp_shifted();
  check_silu();
  check_above();
  check_activation_parts();
  int before = failures, cases = 0;
  check_tiles<1>(cases);
  check_tiles<2>(cases);
  check_tiles<3>(cases);
  check_tiles<4>(cases);
  report("int4_tile (fp16 and Q4_K factors) and int8_tile, 1-4 rows", cases, before);
  before = failures, cases = 0;
  check_byte_tiles<1>(cases);
  check_byte_tiles<2>(cases);
  check_byte_tiles<3>(cases);
  check_byte_tiles<4>(cases);
  report("bytes_tile and dequantize_row, 1-4 rows", cases, before);
  if (failures) {
    std::printf("%d mismatches\n", failures);
    return 1;
  }
  std::printf("all NEON kernels match their references\n");
  return 0;
}
