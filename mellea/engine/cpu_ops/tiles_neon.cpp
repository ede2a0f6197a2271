// The neon-dotprod build's int4 and int8 tiles and two-part activations: neon.h's
// kernels on sdot behind the tiles' signatures. Checked under qemu-aarch64 by
// tests/engine/test_cpu_kernels_neon.py (neon_kernels_check.cpp).
#include "family.h"

#if defined(MELLEA_NEON)
#include <algorithm>
#include <cstring>

#include "tiles.h"

namespace MELLEA_CPU_NS {

// The neon-dotprod build: the AVX-512 build's arithmetic on sdot, 4 rows per vector
// (neon.h, where each kernel is tested against its scalar reference under
// qemu-aarch64); the same bits as that build.
static_assert(mellea_neon::kRows == kTile, "the NEON tiles are the layouts' 16 rows");

void quantize_activations(const float* x, int64_t rows, int64_t K, int8_t* xq, float* step,
                          float* xsum) {
  const int64_t G = K / 32;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = r * G + g;
      int8_t* hi = xq + r * xq_row(K) + g * 32;
      float top;
      mellea_neon::group_top_and_sum(x + i * 32, &top, &xsum[i]);
      const GroupSteps gs(top);
      step[i] = gs.unit / 256.f;
      mellea_neon::split_group(x + i * 32, gs.unit, gs.inv, gs.inv_lo, hi, hi + xq_lo(K));
    }
}

namespace {
mellea_neon::HalfScales neon_scales(const HalfScales& s) {
  return mellea_neon::HalfScales{reinterpret_cast<const uint16_t*>(s.sc),
                                 reinterpret_cast<const uint16_t*>(s.mn)};
}
mellea_neon::FloatScales neon_scales(const FloatScales& s) {
  return mellea_neon::FloatScales{s.dm};
}
mellea_neon::Q4KScales neon_scales(const Q4KScales& s) {
  return mellea_neon::Q4KScales{s.sub, reinterpret_cast<const uint16_t*>(s.super)};
}
}  // namespace

template <int MR, class S>
void int4_tile(const uint8_t* qw, const S& s, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  mellea_neon::int4_tile<MR>(qw, neon_scales(s), xq, xscale, xsum, out, N, K, t);
}

template <int MR>
void int8_tile(const int8_t* qw, const int32_t*, const float* wscale, const int8_t* xq,
                const float* xscale, float* out, int64_t N, int64_t K, int64_t t) {
  mellea_neon::int8_tile<MR>(qw, wscale, xq, xscale, out, N, K, t);
}

MELLEA_INSTANTIATE_TILES(1)
MELLEA_INSTANTIATE_TILES(2)
MELLEA_INSTANTIATE_TILES(3)
MELLEA_INSTANTIATE_TILES(4)

}  // namespace MELLEA_CPU_NS

#endif
