// The tiled int8 linear on the integer dot product (int8_vnni_linear): per-row int8
// weights in tiles of 16 rows (the layout: tiles.h). The tiles are each family's
// (tiles_<family>.cpp). Checked against PyTorch's matmul by
// tests/engine/test_cpu_kernels.py (test_int8_vnni_*).
#include <ATen/Parallel.h>

#include "ops.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

namespace {

// The int8 tile for MR rows that `dot` (g_dot) names (see int4_tile_for).
template <int MR>
Int8Tile int8_tile_for(int dot) {
#if defined(MELLEA_AVX2)
  if (dot == kAvxVnni) return &avx_vnni::int8_tile<MR>;
  if (dot == kEvexVnni) return &evex_vnni::int8_tile<MR>;
#else
  (void)dot;
#endif
  return &int8_tile<MR>;
}

}  // namespace

at::Tensor int8_vnni_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& wsum,
                            const at::Tensor& scale, int64_t N) {
  check_activations(x);
  const int64_t M = x.size(0), K = x.size(1), G = K / 32, T = (N + kTile - 1) / kTile;
  TORCH_CHECK(K % 32 == 0 && qweight.scalar_type() == at::kChar && qweight.is_contiguous() &&
                  qweight.numel() == T * G * 512,
              "qweight: [ceil(N / 16), K / 32, 8, 64] int8, dense");
  TORCH_CHECK(wsum.is_contiguous() && wsum.scalar_type() == at::kInt && wsum.numel() == T * G * kTile,
              "wsum: [ceil(N / 16), K / 32, 16] int32, dense");
  TORCH_CHECK(scale.is_contiguous() && scale.scalar_type() == at::kFloat && scale.numel() == T * kTile,
              "scale: [ceil(N / 16) * 16] fp32");
  const TwoPartActivations a = two_part(x.data_ptr<float>(), M, K);
  auto out = empty({M, N}, x.options());
  const int8_t* qw = qweight.data_ptr<int8_t>();
  const int32_t* ws = wsum.data_ptr<int32_t>();
  const float* sc = scale.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int dot = g_dot.load();
  at::parallel_for(0, T, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for_row_blocks(M, [&](auto rows, int64_t m) {
        int8_tile_for<decltype(rows)::value>(dot)(qw, ws, sc, a.q + m * xq_row(K), a.step + m * G,
                                              op + m * N, N, K, t);
      });
  });
  return out;
}


}  // namespace MELLEA_CPU_NS
