// The generic build's int4 and int8 tiles and two-part activations in plain loops.
// Checked by tests/engine/test_cpu_kernels.py (test_int4_vnni_*, test_int8_vnni_*, on
// the generic family) against PyTorch's matmul, within the stated bound.
#include "family.h"

#if !defined(MELLEA_AVX512) && !defined(MELLEA_AVX2) && !defined(MELLEA_NEON)
#include <algorithm>
#include <cstring>

#include "tiles.h"

namespace MELLEA_CPU_NS {

// The generic build: the same arithmetic in plain loops (the compiler vectorizes what it
// can). Within the stated bound of the exact product, not bit for bit the SIMD builds'.
void quantize_activations(const float* x, int64_t rows, int64_t K, int8_t* xq, float* step,
                          float* xsum) {
  const int64_t G = K / 32;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = r * G + g;
      const float* v = x + i * 32;
      int8_t* hi = xq + r * xq_row(K) + g * 32;
      int8_t* lo = hi + xq_lo(K);
      float top = 0.f, sum = 0.f;
      for (int j = 0; j < 32; ++j) {
        top = std::max(top, std::fabs(v[j]));
        sum += v[j];
      }
      xsum[i] = sum;
      const GroupSteps gs(top);
      step[i] = gs.unit / 256.f;
      for (int j = 0; j < 32; ++j) {
        const float h = std::nearbyint(v[j] * gs.inv);
        const float l = std::nearbyint((v[j] - h * gs.unit) * gs.inv_lo);
        hi[j] = static_cast<int8_t>(h);
        lo[j] = static_cast<int8_t>(std::clamp(l, -127.f, 127.f));
      }
    }
}

template <int MR, class S>
void int4_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32, n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  float acc[MR][kTile] = {};
  const uint8_t* w = qw + t * G * 256;
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int i = 0; i < MR; ++i) {
      const int8_t* xh = xq + i * xq_row(K) + g * 32;
      const int8_t* xl = xh + xq_lo(K);
      for (int j = 0; j < kTile; ++j) {
        int32_t hi = 0, lo = 0;
        for (int s = 0; s < 4; ++s)
          for (int b = 0; b < 4; ++b) {
            const uint8_t byte = w[64 * s + 4 * j + b];
            const int e0 = 8 * s + b, e1 = 8 * s + 4 + b;  // the low and high nibble's
            hi += (byte & 0x0F) * xh[e0] + (byte >> 4) * xh[e1];
            lo += (byte & 0x0F) * xl[e0] + (byte >> 4) * xl[e1];
          }
        const auto [d, m] = group_scales(scales, t, G, g, j);
        acc[i][j] += static_cast<float>(256 * hi + lo) * (d * xscale[i * G + g]);
        acc[i][j] += m * xsum[i * G + g];
      }
    }
  }
  for (int i = 0; i < MR; ++i) std::copy(acc[i], acc[i] + valid, out + i * N + n0);
}

template <int MR>
void int8_tile(const int8_t* qw, const int32_t*, const float* wscale, const int8_t* xq,
                const float* xscale, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32, n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  float acc[MR][kTile] = {};
  const int8_t* w = qw + t * G * 512;
  for (int64_t g = 0; g < G; ++g, w += 512)
    for (int i = 0; i < MR; ++i) {
      const int8_t* xh = xq + i * xq_row(K) + g * 32;
      const int8_t* xl = xh + xq_lo(K);
      for (int j = 0; j < kTile; ++j) {
        int32_t hi = 0, lo = 0;
        for (int u = 0; u < 8; ++u)
          for (int b = 0; b < 4; ++b) {
            const int32_t q = w[64 * u + 4 * j + b];
            hi += q * xh[4 * u + b];
            lo += q * xl[4 * u + b];
          }
        acc[i][j] += static_cast<float>(256 * hi + lo) * xscale[i * G + g];
      }
    }
  for (int i = 0; i < MR; ++i)
    for (int64_t j = 0; j < valid; ++j) out[i * N + n0 + j] = acc[i][j] * wscale[n0 + j];
}

MELLEA_INSTANTIATE_TILES(1)
MELLEA_INSTANTIATE_TILES(2)
MELLEA_INSTANTIATE_TILES(3)
MELLEA_INSTANTIATE_TILES(4)

}  // namespace MELLEA_CPU_NS

#endif
