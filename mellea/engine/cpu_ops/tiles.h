// The tiled int4 and int8 layouts, on each family's integer dot product: what the
// linears (linear_int4.cpp, linear_int8.cpp, linear_bytes.cpp) share with each
// family's tiles (tiles_<family>.cpp, bytes_tiles_<family>.cpp), free of ATen.
//
// Both layouts are the same in every build (loaded weights do not depend on the CPU),
// and every build computes the same integer dot products; only the instructions
// differ: vpdpbusd on AVX512-VNNI (16 lanes), vpmaddubsw + vpmaddwd on AVX2 (8 lanes,
// each tile in two halves of 8 rows), sdot on NEON (4 lanes, four vectors a tile),
// plain loops in the generic build.
//
// Activations: each group of 32 becomes two int8 parts with its own step, x ~= step *
// (256 hi + lo) (about 16 bits: finer than bf16), hi and lo in -127..127.
//
// int4 (tile_groups in quant.py): the grid of int4_linear (groups of 32 along K,
// w = q * scale + min, q in 0..15). Each lane sums one weight row's group, so the 16
// lanes of a tile hold 16 output rows and no horizontal sum is needed:
//   sum_k w[n, k] x[k] = sum_g scale[n, g] * step[g] * (256 sum_j q xhi + sum_j q xlo)
//                        + min[n, g] * sum_j x[g, j]   (the exact sum, in fp32)
// qweight [T, G, 4, 64] uint8, T = ceil(N / 16) tiles of 16 rows: byte 4 j + b of
// part s of (tile t, group g) holds element 8 s + b of row 16 t + j's group g in its
// low nibble and element 8 s + 4 + b in its high nibble; scales, mins [T, G, 16] fp16.
// Rows past N are zero. About 4x fewer instructions than widening to fp32.
//
// int8 (tile_rows in quant.py): per-row symmetric int8 weights, q in -127..127 (never
// -128, which the bounds below assume), W[n, k] = q[n, k] * scale[n].
// qweight [T, G, 8, 64] int8: part u holds bytes 4 u .. 4 u + 3 of each of the tile's
// 16 rows' group g (4 bytes per lane, row j in lane j); wsum [T, G, 16] int32, the sum
// of each row's group (VNNI's correction for its unsigned operand); scale [T * 16]
// fp32 (zero past N).

#pragma once

#include <c10/util/Half.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "family.h"
#include "layout.h"
#include "simd.h"

namespace MELLEA_CPU_NS {

using mellea_layout::xq_lo;
using mellea_layout::xq_row;

constexpr int64_t kTile = 16;
// How far ahead of the group being multiplied its weights are prefetched: the
// hardware's stream prefetch alone leaves a batch-1 step's int4 linears 14 % slower
// (4.52 against 3.90 ms, 2048 bytes ahead; 1024: 4.05 ms; alternating in one process).
constexpr int64_t kPrefetch = 2048;


// The two-part steps of a group whose |x| max is top: hi's unit, and the factors
// that take x to hi's and lo's grids (0 for an all-zero group).
struct GroupSteps {
  float unit, inv, inv_lo;
  explicit GroupSteps(float top)
      : unit(top / 127.f),
        inv(top > 0.f ? 127.f / top : 0.f),
        inv_lo(top > 0.f ? 256.f * 127.f / top : 0.f) {}
};

// Where an int4 tile's per-group factors come from: each family's tile is one template
// over these two, so the exact Q4_K form runs the fp16 form's arithmetic.
//  - HalfScales (quant.tile_groups): scale and min per (tile, group), fp16 [T, G, 16] each.
//  - Q4KScales (quant.tile_q4k, a GGUF's Q4_K blocks as they are): per (tile, group) the
//    6-bit sc and m as uint8 [T, G, 2, 16] (sc's 16 rows, then m's), per (tile, super-block
//    of 8 groups) d and -dmin as the file's fp16 [T, G / 8, 2, 16]; the group's scale is
//    d * sc and its min -dmin * m, both formed in fp32, where they are exact (11 bits
//    times 6), as ggml's dequantizer forms them: the file's weights exactly. 48 bytes of
//    factors per group and tile where HalfScales has 64 (40 with d and dmin in fp16).
// group_scales(s, t, G, g, j) gives row j's (scale, min) for the scalar loops; each
// family below loads a vector of them.
struct HalfScales {
  const c10::Half* sc;
  const c10::Half* mn;
};
struct Q4KScales {
  const uint8_t* sub;
  const c10::Half* super;
};

// One tile's factors formed ahead in fp32 (from Q4KScales, for inputs of several row
// blocks, which would each form them again): d [G][16] then m [G][16] per group, the
// tile index ignored (the buffer holds one tile).
struct FloatScales {
  const float* dm;
};

inline std::pair<float, float> group_scales(const FloatScales& s, int64_t, int64_t, int64_t g,
                                            int64_t j) {
  return {s.dm[g * 2 * kTile + j], s.dm[g * 2 * kTile + kTile + j]};
}

inline std::pair<float, float> group_scales(const HalfScales& s, int64_t t, int64_t G,
                                            int64_t g, int64_t j) {
  const int64_t at = (t * G + g) * kTile + j;
  return {half_to_float(s.sc[at]), half_to_float(s.mn[at])};
}

inline std::pair<float, float> group_scales(const Q4KScales& s, int64_t t, int64_t G,
                                            int64_t g, int64_t j) {
  const uint8_t* sub = s.sub + (t * G + g) * 2 * kTile;
  const c10::Half* sup = s.super + (t * (G / 8) + g / 8) * 2 * kTile;
  return {half_to_float(sup[j]) * static_cast<float>(sub[j]),
          half_to_float(sup[kTile + j]) * static_cast<float>(sub[kTile + j])};
}

// Which integer dot product the AVX2 build's tiles use: vpmaddubsw + vpmaddwd (any
// AVX2 CPU), or vpdpbusd on 8 lanes: AVX-VNNI where the CPU has it (the default there),
// AVX512-VL VNNI when a test asks for it (avx2_dot). Other builds have one way each.
enum Dot : int { kMaddubs = 0, kAvxVnni = 1, kEvexVnni = 2 };
bool cpu_has_dot(int dot);
extern std::atomic<int> g_dot;  // the Dot the tiled linears use (tiles.cpp)
// The AVX2 build's dot product: `kind` ("" to keep it) becomes it where the CPU runs it;
// returns the one in use (the family's own name in the other builds). An op.
std::string avx2_dot(const std::string& kind);

// Each row's groups of 32 in two int8 parts, x ~= step * (256 hi + lo) (each family's
// tiles_<family>.cpp). xq: each row's hi parts, then its lo parts (layout.h); step
// and xsum [rows, G].
void quantize_activations(const float* x, int64_t rows, int64_t K, int8_t* xq, float* step,
                          float* xsum);

// Tile t's factors from Q4KScales in fp32 (FloatScales' layout), once for all row blocks.
void form_q4k_factors(const Q4KScales& s, int64_t t, int64_t G, float* dm);

// x's groups quantized by quantize_activations on the caller's thread, before the
// parallel region, into buffers that outlive the call (two allocations fewer on a
// path that runs ~120 times a decode step).
struct TwoPartActivations {
  const int8_t* q;     // M rows of hi, then lo parts (layout.h)
  const float* step;   // [M, G]
  const float* sum;    // [M, G]
};

// x [M, K] quantized by quantize_activations (see above), in thread_local buffers.
TwoPartActivations two_part(const float* x, int64_t M, int64_t K);

// tile(std::integral_constant<int, MR>, m) for the blocks of M rows: 4 at a time,
// then the 1-3 left.
template <typename Tile>
void for_row_blocks(int64_t M, const Tile& tile) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) tile(std::integral_constant<int, 4>{}, m);
  switch (M - m) {
    case 3: tile(std::integral_constant<int, 3>{}, m); break;
    case 2: tile(std::integral_constant<int, 2>{}, m); break;
    case 1: tile(std::integral_constant<int, 1>{}, m); break;
    default: break;
  }
}

// Output rows [16 t, 16 t + 16) of the int4 layout (int4_tile, over either form of
// factors) or the int8 layout (int8_tile) for MR activation rows (1-4): each family's
// tiles_<family>.cpp defines them, the AVX2 build's also on 8-lane vpdpbusd
// (tiles_vnni256.h: avx_vnni and evex_vnni, each under its own target).
template <int MR, class S>
void int4_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t);
template <int MR>
void int8_tile(const int8_t* qw, const int32_t* wsum, const float* wscale, const int8_t* xq,
               const float* xscale, float* out, int64_t N, int64_t K, int64_t t);

template <class S>
using Int4Tile = void (*)(const uint8_t*, const S&, const int8_t*, const float*, const float*,
                          float*, int64_t, int64_t, int64_t);
using Int8Tile = void (*)(const int8_t*, const int32_t*, const float*, const int8_t*,
                          const float*, float*, int64_t, int64_t, int64_t);

#if defined(MELLEA_AVX2)
#define MELLEA_AVX_VNNI __attribute__((target("avxvnni")))
#define MELLEA_EVEX_VNNI __attribute__((target("avx512vl,avx512vnni")))
namespace avx_vnni {
template <int MR, class S>
MELLEA_AVX_VNNI void int4_tile(const uint8_t* qw, const S& scales, const int8_t* xq,
                               const float* xscale, const float* xsum, float* out, int64_t N,
                               int64_t K, int64_t t);
template <int MR>
MELLEA_AVX_VNNI void int8_tile(const int8_t* qw, const int32_t* wsum, const float* wscale,
                               const int8_t* xq, const float* xscale, float* out, int64_t N,
                               int64_t K, int64_t t);
}  // namespace avx_vnni
namespace evex_vnni {
template <int MR, class S>
MELLEA_EVEX_VNNI void int4_tile(const uint8_t* qw, const S& scales, const int8_t* xq,
                                const float* xscale, const float* xsum, float* out, int64_t N,
                                int64_t K, int64_t t);
template <int MR>
MELLEA_EVEX_VNNI void int8_tile(const int8_t* qw, const int32_t* wsum, const float* wscale,
                                const int8_t* xq, const float* xscale, float* out, int64_t N,
                                int64_t K, int64_t t);
}  // namespace evex_vnni
#endif

// The explicit instantiations a file of tiles ends with: MR activation rows, every form.
#define MELLEA_INSTANTIATE_TILES(MR)                                                        \
  template void int4_tile<MR, HalfScales>(const uint8_t*, const HalfScales&, const int8_t*, \
                                          const float*, const float*, float*, int64_t,      \
                                          int64_t, int64_t);                                \
  template void int4_tile<MR, FloatScales>(const uint8_t*, const FloatScales&,              \
                                           const int8_t*, const float*, const float*,       \
                                           float*, int64_t, int64_t, int64_t);              \
  template void int4_tile<MR, Q4KScales>(const uint8_t*, const Q4KScales&, const int8_t*,   \
                                         const float*, const float*, float*, int64_t,       \
                                         int64_t, int64_t);                                 \
  template void int8_tile<MR>(const int8_t*, const int32_t*, const float*, const int8_t*,   \
                              const float*, float*, int64_t, int64_t, int64_t);

}  // namespace MELLEA_CPU_NS
