// What every family's tiled linears share at run time: the dot product the AVX2 build
// uses (avx2_dot), the activations' two parts (two_part), and the generic form of Q4_K's
// factors (the NEON and generic builds'). Checked by tests/engine/test_cpu_kernels.py
// (test_the_avx2_builds_vnni_tiles_match_its_maddubs_ones, and every tiled linear's test).
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "tiles.h"

namespace MELLEA_CPU_NS {

namespace {
const char* const kDotNames[] = {"maddubs", "avx-vnni", "avx512vl-vnni"};
}  // namespace

bool cpu_has_dot(int dot) {
#if defined(MELLEA_AVX2)
  if (dot == kAvxVnni) return __builtin_cpu_supports("avxvnni");
  if (dot == kEvexVnni)
    return __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return dot == kMaddubs;
#else
  return false;
#endif
}

std::atomic<int> g_dot{cpu_has_dot(kAvxVnni) ? kAvxVnni : kMaddubs};

// The AVX2 build's dot product: `kind` ("" to keep it) becomes it where the CPU runs
// it; returns the one in use (the family's own name in the other builds).
std::string avx2_dot(const std::string& kind) {
#if defined(MELLEA_AVX2)
  if (!kind.empty()) {
    int wanted = -1;
    for (int i = 0; i < 3; ++i)
      if (kind == kDotNames[i]) wanted = i;
    TORCH_CHECK(wanted >= 0, "dot product: maddubs, avx-vnni or avx512vl-vnni");
    TORCH_CHECK(cpu_has_dot(wanted), "this CPU lacks ", kind);
    g_dot = wanted;
  }
  return kDotNames[g_dot.load()];
#else
  TORCH_CHECK(kind.empty(), "the dot product is chosen in the AVX2 build only");
  return "native";
#endif
}

TwoPartActivations two_part(const float* x, int64_t M, int64_t K) {
  const int64_t G = K / 32;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  xq.resize(M * xq_row(K));
  xs.resize(2 * M * G);
  quantize_activations(x, M, K, xq.data(), xs.data(), xs.data() + M * G);
  return {xq.data(), xs.data(), xs.data() + M * G};
}

#if !defined(MELLEA_AVX512) && !defined(MELLEA_AVX2)
// Tile t's factors from Q4KScales in fp32 (FloatScales' layout): the products the tiles
// form, once for all row blocks (the x86 families form them with their own vectors).
void form_q4k_factors(const Q4KScales& s, int64_t t, int64_t G, float* dm) {
  for (int64_t g = 0; g < G; ++g)
    for (int64_t j = 0; j < kTile; ++j) {
      const auto [d, m] = group_scales(s, t, G, g, j);
      dm[g * 2 * kTile + j] = d;
      dm[g * 2 * kTile + kTile + j] = m;
    }
}
#endif

}  // namespace MELLEA_CPU_NS
