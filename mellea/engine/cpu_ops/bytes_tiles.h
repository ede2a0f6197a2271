// The byte form's tiles (linear_bytes.cpp documents the layout): what bytes_linear
// shares with each family's bytes_tiles_<family>.cpp, free of ATen.
#pragma once

#include <cstdint>

#include "family.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

constexpr int64_t kSixGroup = 384;  // a tile's group in the six-bit form, in bytes

// The six-bit form's group w (384 bytes) as the byte form's (512 bytes, q + 128).
inline void unpack_six_group(const uint8_t* w, uint8_t* out) {
  for (int u = 0; u < 8; ++u)
    for (int b = 0; b < 64; ++b) {
      const int lo = (w[64 * (u % 4) + b] >> (4 * (u / 4))) & 15;
      const int hi = (w[256 + 64 * (u / 4) + b] >> (2 * (u % 4))) & 3;
      out[64 * u + b] = static_cast<uint8_t>(96 + (lo | hi << 4));
    }
}

// Output rows [16 t, 16 t + 16) of the byte form (or, SIX, the six-bit form) for MR
// activation rows, MINS with the groups' minimums (3 parts of subs, else 2); corr: the
// rows' sub-block corrections (linear_bytes.cpp). Each family's bytes_tiles_<family>.cpp
// defines it for 1-4 rows (the AVX2 build's six-bit form also for 8), the AVX2 build's
// also on 8-lane vpdpbusd (tiles_vnni256.h).
template <int MR, bool MINS, bool SIX>
void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers, int64_t S,
                const int8_t* xq, const float* xscale, const float* xsum, const int32_t* corr,
                float* out, int64_t N, int64_t K, int64_t t);

#if defined(MELLEA_AVX2)
namespace avx_vnni {
template <int MR, bool MINS, bool SIX>
MELLEA_AVX_VNNI void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers,
                                int64_t S, const int8_t* xq, const float* xscale,
                                const float* xsum, const int32_t* corr, float* out, int64_t N,
                                int64_t K, int64_t t);
}  // namespace avx_vnni
namespace evex_vnni {
template <int MR, bool MINS, bool SIX>
MELLEA_EVEX_VNNI void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers,
                                 int64_t S, const int8_t* xq, const float* xscale,
                                 const float* xsum, const int32_t* corr, float* out, int64_t N,
                                 int64_t K, int64_t t);
}  // namespace evex_vnni
#endif

#define MELLEA_BYTES_TILE(MR, MINS, SIX)                                                     \
  template void bytes_tile<MR, MINS, SIX>(const uint8_t*, const int8_t*, const float*,       \
                                          int64_t, const int8_t*, const float*, const float*, \
                                          const int32_t*, float*, int64_t, int64_t, int64_t);
// The explicit instantiations a file of byte tiles ends with: MR rows, with and without
// minimums, in bytes and in six bits.
#define MELLEA_INSTANTIATE_BYTES_TILES(MR) \
  MELLEA_BYTES_TILE(MR, true, false)       \
  MELLEA_BYTES_TILE(MR, false, false)      \
  MELLEA_BYTES_TILE(MR, true, true)        \
  MELLEA_BYTES_TILE(MR, false, true)

}  // namespace MELLEA_CPU_NS
