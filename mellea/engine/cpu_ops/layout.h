// Where the two-part activations lie (free of ATen, as neon.h is): row r's
// groups of 32 as int8 hi parts from xq + r * xq_row(K), its lo parts xq_lo(K) bytes
// after them (quantize_activations writes them, every tile reads them so).
//
// A cache line between the parts and two between rows: packed at K and 2 K, the parts of
// a block of rows lie a multiple of 4 KiB apart wherever K is a multiple of 2048 (most
// models' hidden and MLP sizes), and a tile's 4 rows x 2 parts fell into one set of the
// 8-way L1 data cache at every group, beside the weights' line. A Q4_K 2048 x 8192
// product (a 1.7B model's down projection) ran at 38-41 G multiply-adds/s a core on
// AVX2 against 48-50 at K = 7936 or 8448.
#pragma once

#include <cstdint>

namespace mellea_layout {

constexpr int64_t xq_lo(int64_t K) { return K + 64; }
constexpr int64_t xq_row(int64_t K) { return 2 * xq_lo(K); }

// Whether the parts of `rows` rows (at one group) fall into as many different sets of
// a 64-set L1 (a 4 KiB way of 64-byte lines).
constexpr bool parts_in_own_sets(int64_t K, int rows) {
  for (int a = 0; a < 2 * rows; ++a)
    for (int b = a + 1; b < 2 * rows; ++b) {
      const int64_t at = (a / 2) * xq_row(K) + (a % 2) * xq_lo(K);
      const int64_t bt = (b / 2) * xq_row(K) + (b % 2) * xq_lo(K);
      if ((at / 64) % 64 == (bt / 64) % 64) return false;
    }
  return true;
}

constexpr bool apart_at_multiples_of_2048() {
  for (int64_t K = 2048; K <= 65536; K += 2048)
    if (!parts_in_own_sets(K, 8)) return false;  // 8: the widest block of rows a tile reads
  return true;
}
static_assert(apart_at_multiples_of_2048(), "the activations' parts share L1 sets");

}  // namespace mellea_layout
