// One row of the byte form's weights in fp32 (linear_bytes.cpp's bytes_dequantize,
// a layout described there), free of ATen, so that tests/engine/neon_kernels_check.cpp
// runs the very code of the aarch64 builds under qemu-aarch64 and compares it with the
// x86 builds' bits.
//
// The weight is the reference dequantizer's (d * sc) * q (+ -(dmin * m)): the product and
// the offset rounded one after the other. A compiler that contracts a multiply and an
// add into one fused instruction (GCC's default, on aarch64 as on x86-64-v3) would round
// once and give other bits, so contraction is off here and the function is not inlined
// into a caller compiled with it on.
#pragma once

#include <cstdint>

namespace mellea_bytes {

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
// Row j (0..15) of tile t: K = 32 G values into row. q [T, G, 8, 64] the stored q + 128,
// sb [T, G, P, 16] int8, sp [T, G / S, P - 1, 16] fp32.
__attribute__((noinline)) inline void dequantize_row(const uint8_t* q, const int8_t* sb,
                                                      const float* sp, int64_t G, int64_t S,
                                                      int64_t P, int64_t t, int64_t j,
                                                      float* row) {
  constexpr int64_t kRows = 16;
  for (int64_t g = 0; g < G; ++g) {
    const uint8_t* w = q + (t * G + g) * 512;
    const int8_t* s = sb + (t * G + g) * P * kRows;
    const float* dp = sp + (t * (G / S) + g / S) * (P - 1) * kRows;
    const float d = dp[j];
    const float offset = P == 3 ? -(dp[kRows + j] * static_cast<float>(s[2 * kRows + j])) : 0.f;
    float* out = row + g * 32;
    for (int e = 0; e < 32; ++e) {
      const float scale = d * static_cast<float>(s[(e / 16) * kRows + j]);
      const float v =
          scale * static_cast<float>(static_cast<int32_t>(w[64 * (e / 4) + 4 * j + e % 4]) - 128);
      out[e] = P == 3 ? v + offset : v;
    }
  }
}
#pragma GCC pop_options

}  // namespace mellea_bytes
