// SwiGLU's activation (silu_and_mul). Checked against PyTorch by
// tests/engine/test_cpu_kernels.py (test_silu_and_mul_matches_the_reference).
#include <ATen/Parallel.h>

#include "ops.h"
#include "simd.h"

namespace MELLEA_CPU_NS {

// SwiGLU's activation over a fused [gate | up] row: silu(gate) * up, [T, 2I] -> [T, I]
// (three PyTorch ops and a copy of the halves before).
at::Tensor silu_and_mul(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat &&
                  x.size(1) % 2 == 0,
              "x: [T, 2I] fp32, dense");
  const int64_t T = x.size(0), I = x.size(1) / 2;
  auto out = empty({T, I}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, T, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = xp + t * 2 * I;
      const float* up = gate + I;
      float* o = op + t * I;
      int64_t i = 0;
#ifdef __AVX512F__
      for (; i < I; i += 16) {
        const __mmask16 mask = first_lanes(I - i);
        const __m512 g = _mm512_maskz_loadu_ps(mask, gate + i);
        const __m512 u = _mm512_maskz_loadu_ps(mask, up + i);
        const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));  // exp(-g)
        const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.f), e));
        _mm512_mask_storeu_ps(o + i, mask, _mm512_mul_ps(silu, u));
      }
#elif defined(MELLEA_AVX2)
      for (; i + 8 <= I; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));  // exp(-g)
        const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
      }
#elif defined(MELLEA_NEON)
      i = mellea_neon::silu_mul8(gate, up, o, I);
#endif
      for (; i < I; ++i) o[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
    }
  });
  return out;
}

}  // namespace MELLEA_CPU_NS
