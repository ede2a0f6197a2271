// The generic build's byte-form tile in plain loops. Checked by
// tests/engine/test_cpu_kernels.py (test_bytes_linear_*, on the generic family).
#include "family.h"

#if !defined(MELLEA_AVX512) && !defined(MELLEA_AVX2) && !defined(MELLEA_NEON)
#include <algorithm>

#include "bytes_tiles.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

// The generic build: the same sums in plain loops (the compiler vectorizes what it can).
template <int MR, bool MINS, bool SIX>
void bytes_tile(const uint8_t* qw, const int8_t* subs, const float* supers, int64_t S,
                const int8_t* xq, const float* xscale, const float* xsum, const int32_t*,
                float* out, int64_t N, int64_t K, int64_t t) {
  constexpr int P = MINS ? 3 : 2;
  constexpr int64_t B = SIX ? kSixGroup : 512;
  const int64_t G = K / 32, n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  float acc[MR][kTile] = {};
  const uint8_t* next = qw + t * G * B;
  const int8_t* sb = subs + t * G * P * kTile;
  const float* sp = supers + t * (G / S) * (P - 1) * kTile;
  const int s_shift = __builtin_ctzll(S);  // S is a power of two (check_bytes)
  uint8_t rebuilt[512];  // a six-bit group's bytes
  for (int64_t g = 0; g < G; ++g, next += B, sb += P * kTile) {
    const uint8_t* w = next;
    if constexpr (SIX) {
      unpack_six_group(next, rebuilt);
      w = rebuilt;
    }
    const float* dp = sp + (g >> s_shift) * (P - 1) * kTile;  // g / S
    for (int i = 0; i < MR; ++i) {
      const int8_t* xh = xq + i * xq_row(K) + g * 32;
      const int8_t* xl = xh + xq_lo(K);
      for (int j = 0; j < kTile; ++j) {
        int32_t dot[2] = {0, 0};
        for (int e = 0; e < 32; ++e) {
          const int32_t q = static_cast<int32_t>(w[64 * (e / 4) + 4 * j + e % 4]) - 128;
          dot[e / 16] += q * (256 * xh[e] + xl[e]);
        }
        const float f = static_cast<float>(dot[0]) * (dp[j] * static_cast<float>(sb[j])) +
                        static_cast<float>(dot[1]) * (dp[j] * static_cast<float>(sb[kTile + j]));
        acc[i][j] += f * xscale[i * G + g];
        if constexpr (MINS)
          acc[i][j] -= dp[kTile + j] * static_cast<float>(sb[2 * kTile + j]) * xsum[i * G + g];
      }
    }
  }
  for (int i = 0; i < MR; ++i) std::copy(acc[i], acc[i] + valid, out + i * N + n0);
}

MELLEA_INSTANTIATE_BYTES_TILES(1)
MELLEA_INSTANTIATE_BYTES_TILES(2)
MELLEA_INSTANTIATE_BYTES_TILES(3)
MELLEA_INSTANTIATE_BYTES_TILES(4)

}  // namespace MELLEA_CPU_NS

#endif
