// The tiled int4 linears on the integer dot product: fp16 scales and minimums
// (int4_vnni_linear) or a GGUF's Q4_K factors exactly (q4k_vnni_linear), and the fp32
// weights they stand for (int4_vnni_dequantize, q4k_vnni_dequantize). The tiles are each
// family's (tiles_<family>.cpp). Checked against PyTorch's matmul of the dequantized
// weights by tests/engine/test_cpu_kernels.py (test_int4_vnni_*) and
// tests/engine/test_q4k.py.
#include <ATen/Parallel.h>

#include <type_traits>
#include <vector>

#include "ops.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

namespace {

// The int4 tile for MR rows that `dot` (g_dot) names: the AVX2 build's maddubs tile or
// its 8-lane vpdpbusd ones; the other builds have one.
template <int MR, class S>
Int4Tile<S> int4_tile_for(int dot) {
#if defined(MELLEA_AVX2)
  if (dot == kAvxVnni) return &avx_vnni::int4_tile<MR, S>;
  if (dot == kEvexVnni) return &evex_vnni::int4_tile<MR, S>;
#else
  (void)dot;
#endif
  return &int4_tile<MR, S>;
}

// The tiled int4 linear over either form of factors (see HalfScales, Q4KScales). Above
// one block of rows, Q4_K's factors are formed once per tile (FloatScales): each block
// would form them again (2-3 % of a 32-row step of the 1.7B model).
template <class S>
at::Tensor int4_tiles_linear(const at::Tensor& x, const at::Tensor& qweight, const S& scales,
                             int64_t N) {
  const int64_t M = x.size(0), K = x.size(1), G = K / 32, T = (N + kTile - 1) / kTile;
  const TwoPartActivations a = two_part(x.data_ptr<float>(), M, K);
  auto out = empty({M, N}, x.options());
  const uint8_t* qw = qweight.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  const int dot = g_dot.load();
  constexpr bool kQ4K = std::is_same_v<S, Q4KScales>;
  at::parallel_for(0, T, 4, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> formed;
    for (int64_t t = begin; t < end; ++t) {
      if constexpr (kQ4K) {
        if (M > 4) {
          formed.resize(G * 2 * kTile);
          form_q4k_factors(scales, t, G, formed.data());
          const FloatScales ahead{formed.data()};
          for_row_blocks(M, [&](auto rows, int64_t m) {
            int4_tile_for<decltype(rows)::value, FloatScales>(dot)(
                qw, ahead, a.q + m * xq_row(K), a.step + m * G, a.sum + m * G, op + m * N, N, K, t);
          });
          continue;
        }
      }
      for_row_blocks(M, [&](auto rows, int64_t m) {
        int4_tile_for<decltype(rows)::value, S>(dot)(qw, scales, a.q + m * xq_row(K), a.step + m * G,
                                                 a.sum + m * G, op + m * N, N, K, t);
      });
    }
  });
  return out;
}

void check_int4_tiles(const at::Tensor& x, const at::Tensor& qweight, int64_t N) {
  check_activations(x);
  const int64_t K = x.size(1), G = K / 32, T = (N + kTile - 1) / kTile;
  TORCH_CHECK(K % 32 == 0 && qweight.scalar_type() == at::kByte && qweight.is_contiguous() &&
                  qweight.numel() == T * G * 256,
              "qweight: [ceil(N / 16), K / 32, 4, 64] uint8, dense");
}

void check_q4k_factors(const at::Tensor& sub, const at::Tensor& super, int64_t T, int64_t G) {
  TORCH_CHECK(G % 8 == 0, "Q4_K: K must be a multiple of 256");
  TORCH_CHECK(sub.is_contiguous() && sub.scalar_type() == at::kByte && sub.numel() == T * G * 2 * kTile,
              "sub: [ceil(N / 16), K / 32, 2, 16] uint8 (sc, m), dense");
  TORCH_CHECK(super.is_contiguous() && super.scalar_type() == at::kHalf &&
                  super.numel() == T * (G / 8) * 2 * kTile,
              "super: [ceil(N / 16), K / 256, 2, 16] fp16 (d, -dmin), dense");
}


// The fp32 weight [N, K] that tiled int4 weights stand for (for inputs too long for
// the kernel, and the tests): q * scale + min, the product exact (4 bits times 17).
template <class S>
at::Tensor int4_tiles_dequantize(const uint8_t* q, const S& scales, int64_t T, int64_t G,
                                 int64_t N, const at::TensorOptions& options) {
  const int64_t K = G * 32;
  TORCH_CHECK(N <= T * kTile, "N within the tiles");
  auto out = empty({N, K}, options.dtype(at::kFloat));
  float* o = out.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t t = n / kTile, j = n % kTile;
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* w = q + (t * G + g) * 256;
        const auto [d, m] = group_scales(scales, t, G, g, j);
        float* row = o + n * K + g * 32;
        for (int s = 0; s < 4; ++s)
          for (int b = 0; b < 4; ++b) {
            const uint8_t byte = w[64 * s + 4 * j + b];
            row[8 * s + b] = static_cast<float>(byte & 0x0F) * d + m;
            row[8 * s + 4 + b] = static_cast<float>(byte >> 4) * d + m;
          }
      }
    }
  });
  return out;
}

void check_int4_qweight(const at::Tensor& qweight) {
  TORCH_CHECK(qweight.dim() == 4 && qweight.scalar_type() == at::kByte &&
                  qweight.is_contiguous() && qweight.size(2) == 4 && qweight.size(3) == 64,
              "qweight: [T, G, 4, 64] uint8, dense");
}

}  // namespace

at::Tensor int4_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                       const at::Tensor& mins, int64_t N) {
  check_int4_tiles(x, qweight, N);
  const int64_t G = x.size(1) / 32, T = (N + kTile - 1) / kTile;
  for (const auto* s : {&scales, &mins})
    TORCH_CHECK(s->is_contiguous() && s->scalar_type() == at::kHalf && s->numel() == T * G * kTile,
                "scales, mins: [ceil(N / 16), K / 32, 16] fp16, dense");
  return int4_tiles_linear(x, qweight, HalfScales{scales.data_ptr<at::Half>(), mins.data_ptr<at::Half>()},
                           N);
}

// A GGUF's Q4_K weights exactly: int4_vnni_linear's nibbles, the factors of Q4KScales.
at::Tensor q4k_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& sub,
                           const at::Tensor& super, int64_t N) {
  check_int4_tiles(x, qweight, N);
  check_q4k_factors(sub, super, (N + kTile - 1) / kTile, x.size(1) / 32);
  return int4_tiles_linear(x, qweight, Q4KScales{sub.data_ptr<uint8_t>(), super.data_ptr<at::Half>()},
                           N);
}

at::Tensor int4_vnni_dequantize(const at::Tensor& qweight, const at::Tensor& scales,
                           const at::Tensor& mins, int64_t N) {
  check_int4_qweight(qweight);
  const int64_t T = qweight.size(0), G = qweight.size(1);
  for (const auto* s : {&scales, &mins})
    TORCH_CHECK(s->is_contiguous() && s->scalar_type() == at::kHalf && s->numel() == T * G * kTile,
                "scales, mins: [T, G, 16] fp16, dense");
  return int4_tiles_dequantize(qweight.data_ptr<uint8_t>(),
                               HalfScales{scales.data_ptr<at::Half>(), mins.data_ptr<at::Half>()},
                               T, G, N, scales.options());
}

at::Tensor q4k_vnni_dequantize(const at::Tensor& qweight, const at::Tensor& sub,
                               const at::Tensor& super, int64_t N) {
  check_int4_qweight(qweight);
  const int64_t T = qweight.size(0), G = qweight.size(1);
  check_q4k_factors(sub, super, T, G);
  return int4_tiles_dequantize(qweight.data_ptr<uint8_t>(),
                               Q4KScales{sub.data_ptr<uint8_t>(), super.data_ptr<at::Half>()}, T, G,
                               N, super.options());
}

}  // namespace MELLEA_CPU_NS
