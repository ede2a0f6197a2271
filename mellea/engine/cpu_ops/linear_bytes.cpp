// The exact byte form of a GGUF's 5-, 6- and 8-bit blocks (and 4-bit ones that share a
// layer with them), the file's
// integer values as bytes, multiplied on the integer dot product with their own scales
// per sub-block of 16, so the weights are the file's exactly (quant.tile_bytes and
// gguf_blocks.to_byte_blocks build the layout; docs/engine.md, "Loading").
//
// qweight [T, G, 8, 64] uint8: the value q + 128 (Q6_K's q in -32..31, Q8_0's in
//   -128..127, Q4_K's in 0..15, ...), in the int8 tile's order: part u holds elements
//   4 u .. 4 u + 3 of each of the tile's 16 rows' group g (row j at bytes 4 j ..).
// subs [T, G, P, 16] int8: each row's scale sc of the group's sub-block 0 (elements
//   0-15, parts u < 4) and sub-block 1 (elements 16-31), and where P == 3 the group's
//   minimum m.
// supers [T, G / S, P - 1, 16] fp32: d (and dmin) of each super-block of S groups.
//   w = (d * sc) * q  (+ -(dmin * m)), as the reference dequantizer computes it.
// So, with x ~= step * (256 hi + lo) per group (the two-part activations),
//   sum_k w x = sum_g step ((d sc0) dot0 + (d sc1) dot1) - dmin m xsum[g]
// (d * sc is exact in fp32: 11 bits of fp16 times 8 bits)
// where dot_s = sum over sub-block s of q (256 hi + lo), an exact integer: VNNI's
// unsigned operand is the stored q + 128, and the 128 it adds is taken back with the
// activations' own sum over the sub-block (corr = 128 (256 sum hi + sum lo), one number
// per row, group and sub-block, computed once per call). |dot_s| <= 16 * 128 * 32639
// < 2^27 and 256 * 16 * 255 * 127 < 2^28: no int32 overflow; Q6_K's |dot_s| < 2^24 is
// exact in fp32 too. The sums take the same roundings in the same order in the
// AVX-512, AVX2 and NEON builds (the same bits; NEON's sdot multiplies the signed q
// itself, the top bit of each byte flipped, and needs no corr); the generic build's
// within rounding.

// The six-bit form ([T, G, 6, 64] uint8: quant.pack_six): the same tiles where every q
// is in -32..31 (Q6_K, Q5_K, Q4_K, Q4_0), v = q + 32 held in 6 bits: 384 bytes a group
// of a tile against 512, 6.75 bits a weight with the scales against 8.6. Parts 0-3 hold
// the low 4 bits of v of parts u and u + 4 (u's in the low nibble), parts 4 and 5 the
// high 2 bits of v of parts 4 h .. 4 h + 3 (part 4 h + k's at bits 2 k, 2 k + 1).
// The tiles rebuild each part's bytes q + 128 = v + 96 in registers (or in a group's
// buffer, where a tile reads the bytes from memory) and go on as with the byte form:
// the same integers, the same bits.
//
// The tiles are each family's (bytes_tiles_<family>.cpp). Checked against the blocks'
// dequantized weights by tests/engine/test_cpu_kernels.py (test_bytes_linear_*,
// test_the_six_bit_form_*, test_values_outside_6_bits_*), and on a GGUF's layers by
// tests/engine/test_gguf_models.py.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "bytes_dequant.h"
#include "bytes_tiles.h"
#include "ops.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

namespace {

// corr [M, G, 2] int32 of xq (M rows, layout.h) (see above).
void subblock_corrections(const int8_t* xq, int64_t M, int64_t K, int32_t* corr) {
  for (int64_t r = 0; r < M; ++r) {
    const int8_t* hi = xq + r * xq_row(K);
    const int8_t* lo = hi + xq_lo(K);
    for (int64_t s = 0; s < K / 16; ++s) {
      int32_t sh = 0, sl = 0;
      for (int e = 0; e < 16; ++e) {
        sh += hi[16 * s + e];
        sl += lo[16 * s + e];
      }
      corr[r * (K / 16) + s] = 128 * (256 * sh + sl);
    }
  }
}

template <int MR>
using BytesTile = void (*)(const uint8_t*, const int8_t*, const float*, int64_t, const int8_t*,
                           const float*, const float*, const int32_t*, float*, int64_t, int64_t,
                           int64_t);

template <int MR, bool SIX>
BytesTile<MR> bytes_tile_for(int dot, bool mins) {
#if defined(MELLEA_AVX2)
  if (dot == kAvxVnni)
    return mins ? &avx_vnni::bytes_tile<MR, true, SIX> : &avx_vnni::bytes_tile<MR, false, SIX>;
  if (dot == kEvexVnni)
    return mins ? &evex_vnni::bytes_tile<MR, true, SIX> : &evex_vnni::bytes_tile<MR, false, SIX>;
#else
  (void)dot;
#endif
  return mins ? &bytes_tile<MR, true, SIX> : &bytes_tile<MR, false, SIX>;
}

template <int MR>
BytesTile<MR> bytes_tile_for(int dot, bool mins, bool six) {
#if defined(MELLEA_NEON)
  TORCH_CHECK(!six, "the six-bit form has no NEON tile");
  return bytes_tile_for<MR, false>(dot, mins);
#else
  return six ? bytes_tile_for<MR, true>(dot, mins) : bytes_tile_for<MR, false>(dot, mins);
#endif
}

// The operands' shapes: P (2, or 3 with minimums) and S (groups per super-block).
std::pair<int64_t, int64_t> check_bytes(const at::Tensor& qweight, const at::Tensor& subs,
                                        const at::Tensor& supers, int64_t N) {
  TORCH_CHECK(qweight.dim() == 4 && qweight.scalar_type() == at::kByte && qweight.is_contiguous() &&
                  (qweight.size(2) == 8 || qweight.size(2) == 6) && qweight.size(3) == 64,
              "qweight: [T, G, 8, 64] (bytes) or [T, G, 6, 64] (six bits) uint8, dense");
  const int64_t T = qweight.size(0), G = qweight.size(1);
  TORCH_CHECK(N > 0 && N <= T * kTile && N > (T - 1) * kTile, "n: the rows of the tiles");
  TORCH_CHECK(subs.dim() == 4 && subs.scalar_type() == at::kChar && subs.is_contiguous() &&
                  subs.size(0) == T && subs.size(1) == G && subs.size(3) == kTile &&
                  (subs.size(2) == 2 || subs.size(2) == 3),
              "subs: [T, G, 2 or 3, 16] int8, dense");
  const int64_t P = subs.size(2);
  TORCH_CHECK(supers.dim() == 4 && supers.scalar_type() == at::kFloat && supers.is_contiguous() &&
                  supers.size(0) == T && supers.size(1) > 0 && G % supers.size(1) == 0 &&
                  supers.size(2) == P - 1 && supers.size(3) == kTile,
              "supers: [T, G / S, P - 1, 16] fp32, dense");
  const int64_t S = G / supers.size(1);
  TORCH_CHECK((S & (S - 1)) == 0, "supers: groups per super-block a power of two");
  return {P, S};
}

}  // namespace

at::Tensor bytes_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& subs,
                        const at::Tensor& supers, int64_t N) {
  check_activations(x);
  const auto [P, S] = check_bytes(qweight, subs, supers, N);
  const int64_t M = x.size(0), K = x.size(1), G = K / 32, T = qweight.size(0);
  TORCH_CHECK(qweight.size(1) * 32 == K, "x: K = 32 * the tiles' groups");
  const TwoPartActivations a = two_part(x.data_ptr<float>(), M, K);
  thread_local std::vector<int32_t> corr;
  corr.resize(M * 2 * G);
  subblock_corrections(a.q, M, K, corr.data());
  auto out = empty({M, N}, x.options());
  const uint8_t* qw = qweight.data_ptr<uint8_t>();
  const int8_t* sb = subs.data_ptr<int8_t>();
  const float* sp = supers.data_ptr<float>();
  const int32_t* cp = corr.data();
  float* op = out.data_ptr<float>();
  const int dot = g_dot.load();
  const bool mins = P == 3, six = qweight.size(2) == 6;
  // vpmaddwd's six-bit tile rebuilds each group in memory once per call: 8 rows a call
  // where there are 8 (not 4) halves that work (a 40-row prompt's layer 1.15x the byte
  // form's time at 4).
  int64_t wide_rows = 0;
#if defined(MELLEA_AVX2)
  if (six && dot == kMaddubs) wide_rows = M - M % 8;
#endif
  at::parallel_for(0, T, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
#if defined(MELLEA_AVX2)
      for (int64_t m = 0; m < wide_rows; m += 8)
        (mins ? &bytes_tile<8, true, true> : &bytes_tile<8, false, true>)(
            qw, sb, sp, S, a.q + m * xq_row(K), a.step + m * G, a.sum + m * G, cp + m * 2 * G,
            op + m * N, N, K, t);
#endif
      for_row_blocks(M - wide_rows, [&](auto rows, int64_t r) {
        const int64_t m = wide_rows + r;
        bytes_tile_for<decltype(rows)::value>(dot, mins, six)(qw, sb, sp, S, a.q + m * xq_row(K),
                                                          a.step + m * G, a.sum + m * G,
                                                          cp + m * 2 * G, op + m * N, N, K, t);
      });
    }
  });
  return out;
}

// The six-bit form's qweight [T, G, 6, 64] as the byte form's [T, G, 8, 64].
at::Tensor six_to_bytes(const at::Tensor& qweight) {
  TORCH_CHECK(qweight.dim() == 4 && qweight.scalar_type() == at::kByte && qweight.is_contiguous() &&
                  qweight.size(2) == 6 && qweight.size(3) == 64,
              "qweight: [T, G, 6, 64] uint8, dense");
  const int64_t groups = qweight.size(0) * qweight.size(1);
  auto out = empty({qweight.size(0), qweight.size(1), 8, 64}, qweight.options());
  const uint8_t* w = qweight.data_ptr<uint8_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  at::parallel_for(0, groups, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) unpack_six_group(w + i * kSixGroup, o + i * 512);
  });
  return out;
}

// The byte form's qweight [T, G, 8, 64] of n rows in the six-bit form [T, G, 6, 64]
// (quant.pack_six), or an empty tensor where a real row's value is outside 96..159
// (q outside -32..31). The padding rows past n get q = 0.
at::Tensor bytes_to_six(const at::Tensor& qweight, int64_t n) {
  TORCH_CHECK(qweight.dim() == 4 && qweight.scalar_type() == at::kByte && qweight.is_contiguous() &&
                  qweight.size(2) == 8 && qweight.size(3) == 64,
              "qweight: [T, G, 8, 64] uint8, dense");
  const int64_t T = qweight.size(0), G = qweight.size(1);
  TORCH_CHECK(n > (T - 1) * kTile && n <= T * kTile, "n: the rows of the tiles");
  auto out = empty({T, G, 6, 64}, qweight.options());
  const uint8_t* w = qweight.data_ptr<uint8_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  std::atomic<bool> fits{true};
  at::parallel_for(0, T, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end && fits.load(std::memory_order_relaxed); ++t) {
      const int64_t real = std::min<int64_t>(kTile, n - t * kTile) * 4;  // bytes of real rows
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* in = w + (t * G + g) * 512;
        uint8_t* six = o + (t * G + g) * kSixGroup;
        uint8_t v[8][64];
        uint8_t bad = 0;
        for (int u = 0; u < 8; ++u) {
          for (int64_t b = 0; b < real; ++b) {
            v[u][b] = static_cast<uint8_t>(in[64 * u + b] - 96);  // wraps below 96
            bad |= v[u][b] & 0xC0;
          }
          for (int64_t b = real; b < 64; ++b) v[u][b] = 32;
        }
        if (bad) {
          fits = false;
          return;
        }
        for (int p = 0; p < 4; ++p)
          for (int b = 0; b < 64; ++b)
            six[64 * p + b] = static_cast<uint8_t>((v[p][b] & 15) | (v[p + 4][b] & 15) << 4);
        for (int h = 0; h < 2; ++h)
          for (int b = 0; b < 64; ++b)
            six[256 + 64 * h + b] =
                static_cast<uint8_t>(v[4 * h][b] >> 4 | (v[4 * h + 1][b] >> 4) << 2 |
                                     (v[4 * h + 2][b] >> 4) << 4 | (v[4 * h + 3][b] >> 4) << 6);
      }
    }
  });
  return fits ? out : empty({0}, qweight.options());
}

// The fp32 weight [N, K] of bytes_linear's operands: the reference dequantizer's values
// (bytes_dequant.h: the product and the offset rounded one after the other).
at::Tensor bytes_dequantize(const at::Tensor& qweight, const at::Tensor& subs,
                            const at::Tensor& supers, int64_t N) {
  const auto [P, S] = check_bytes(qweight, subs, supers, N);
  const int64_t G = qweight.size(1), K = G * 32;
  auto out = empty({N, K}, supers.options());
  const at::Tensor held = qweight.size(2) == 6 ? six_to_bytes(qweight) : qweight;
  const uint8_t* q = held.data_ptr<uint8_t>();
  const int8_t* sb = subs.data_ptr<int8_t>();
  const float* sp = supers.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      mellea_bytes::dequantize_row(q, sb, sp, G, S, P, n / kTile, n % kTile, o + n * K);
  });
  return out;
}

}  // namespace MELLEA_CPU_NS
