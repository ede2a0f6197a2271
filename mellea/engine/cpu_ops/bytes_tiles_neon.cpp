// The neon-dotprod build's byte-form tile: neon.h's sdot kernel. Checked under
// qemu-aarch64 by tests/engine/test_cpu_kernels_neon.py, bit for bit against the x86
// builds.
#include "family.h"

#if defined(MELLEA_NEON)
#include <algorithm>

#include "bytes_tiles.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

// The neon-dotprod build: sdot on the bytes' signed values (neon.h, tested
// against its scalar reference and against this file's x86 tiles under qemu-aarch64);
// it needs no corr, and gives the AVX-512 build's bits.
// (The six-bit form is not built for it: quant.six_form_runs.)
template <int MR, bool MINS, bool SIX>
void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers, int64_t S,
                const int8_t* xq, const float* xscale, const float* xsum, const int32_t*,
                float* out, int64_t N, int64_t K, int64_t t) {
  static_assert(!SIX, "no six-bit tile on NEON");
  mellea_neon::bytes_tile<MR, MINS>(qw, subs, supers, S, xq, xscale, xsum, out, N, K, t);
}

MELLEA_BYTES_TILE(1, true, false)
MELLEA_BYTES_TILE(1, false, false)
MELLEA_BYTES_TILE(2, true, false)
MELLEA_BYTES_TILE(2, false, false)
MELLEA_BYTES_TILE(3, true, false)
MELLEA_BYTES_TILE(3, false, false)
MELLEA_BYTES_TILE(4, true, false)
MELLEA_BYTES_TILE(4, false, false)

}  // namespace MELLEA_CPU_NS

#endif
