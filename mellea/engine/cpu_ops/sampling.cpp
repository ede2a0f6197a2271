// The best logits of each row (top_k), what sampling takes. Checked against torch.topk by
// tests/engine/test_cpu_kernels.py (test_top_k_*).
#include <ATen/Parallel.h>

#include <algorithm>
#include <tuple>

#include "ops.h"
#include "simd.h"

namespace MELLEA_CPU_NS {

namespace {

// ---- the best logits of a row -----------------------------------------------------
//
// torch.topk and max(dim) walk a 50k-wide row one element at a time (~90 and ~45 us on
// the default model's vocabulary). Here a row is scanned 16 at a time against the
// k-th best value so far; only the few elements above it are inserted, by hand, into
// the sorted best k. Among equal values the first index ranks first, as in torch.

// The k best of x[0, n) (k <= n), best first, into vals and idx.
void best_of_row(const float* x, int64_t n, int64_t k, float* vals, int64_t* idx) {
  int64_t have = 0;
  auto insert = [&](float v, int64_t i) {
    int64_t at = have < k ? have : k - 1;  // where it lands before shifting up
    if (have == k && !(v > vals[k - 1])) return;
    while (at > 0 && v > vals[at - 1]) {  // strictly greater: an earlier equal stays first
      if (at < k) {
        vals[at] = vals[at - 1];
        idx[at] = idx[at - 1];
      }
      --at;
    }
    vals[at] = v;
    idx[at] = i;
    if (have < k) ++have;
  };
  int64_t i = 0;
  for (; i < std::min(n, k); ++i) {
    // Insert as the last of have + 1 and shift it up (have < k here).
    int64_t at = have++;
    while (at > 0 && x[i] > vals[at - 1]) {
      vals[at] = vals[at - 1];
      idx[at] = idx[at - 1];
      --at;
    }
    vals[at] = x[i];
    idx[at] = i;
  }
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {
    __mmask16 above = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), _mm512_set1_ps(vals[k - 1]),
                                         _CMP_GT_OQ);
    while (above) {
      const int lane = __builtin_ctz(above);
      above &= above - 1;
      insert(x[i + lane], i + lane);
    }
  }
#elif defined(MELLEA_AVX2)
  for (; i + 8 <= n; i += 8) {
    unsigned above = static_cast<unsigned>(_mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(vals[k - 1]), _CMP_GT_OQ)));
    while (above) {
      const int lane = __builtin_ctz(above);
      above &= above - 1;
      insert(x[i + lane], i + lane);
    }
  }
#elif defined(MELLEA_NEON)
  for (; i + 8 <= n; i += 8) {
    unsigned above = mellea_neon::above8(x + i, vals[k - 1]);
    while (above) {
      const int lane = __builtin_ctz(above);
      above &= above - 1;
      insert(x[i + lane], i + lane);
    }
  }
#endif
  for (; i < n; ++i) insert(x[i], i);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> top_k(const at::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat,
              "x: [M, N] fp32, dense");
  const int64_t M = x.size(0), N = x.size(1);
  TORCH_CHECK(k >= 1 && k <= N, "k in 1..N");
  auto vals = empty({M, k}, x.options());
  auto idx = empty({M, k}, x.options().dtype(at::kLong));
  const float* xp = x.data_ptr<float>();
  float* vp = vals.data_ptr<float>();
  int64_t* ip = idx.data_ptr<int64_t>();
  at::parallel_for(0, M, 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) best_of_row(xp + r * N, N, k, vp + r * k, ip + r * k);
  });
  return {vals, idx};
}

}  // namespace MELLEA_CPU_NS
