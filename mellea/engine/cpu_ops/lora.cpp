// LoRA deltas added to a projection's output (lora_add), alone or inside the fused
// decode layer. Checked against PyTorch's B (A x) by tests/engine/test_lora.py.
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "ops.h"
#include "simd.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

namespace {

// ---- LoRA deltas inside the fused decode layer --------------------------------------
//
// out[t] += B_s (A_s x[t]) for each row t whose adapter slot s (lora_slots[t]; -1: the
// base model) has a low-rank pair on the projection, its scale folded into B. One
// projection's pairs of every loaded adapter come packed (lora.py's pack_fused):
//   a     [C, K] fp16: each adapter's A rows (those of all its pieces) together
//   bt    [*] fp16, flat: per segment its B transposed, [c1 - c0, r1 - r0], in blocks
//         of kLoraBlock output rows: block j is [c1 - c0, its width] row-major, so the
//         products with one block read one contiguous run
//   segs  [S, 6] int64, a slot's segments together: slot, r0, r1, c0, c1, offset in bt
// A segment is one piece of a fused projection (q, k or v; gate or up; all of o or
// down): B's output rows [r0, r1) from the product with A's rows [c0, c1). The pieces
// of one projection have their own A rows, so one task takes a segment and up to 4 of
// its slot's rows through both products (h = A x, then out += B h): a call is one
// parallel region, and with one row per adapter (a mixed batch) each pair is read once.
// fp16 halves what fp32 pairs would read.

constexpr int64_t kLoraBlock = 64;  // output rows per block of bt (lora.py's LORA_BLOCK)

#ifdef __AVX512F__
constexpr int64_t kLoraChunk = 64;  // output columns per pass of lora_products: 4 vectors per row
#elif defined(MELLEA_AVX2)
constexpr int64_t kLoraChunk = 32;
#else
constexpr int64_t kLoraChunk = 64;
#endif
static_assert(kLoraBlock % kLoraChunk == 0, "a block of bt is whole passes");

// h[i][c + j] = a_j . x[i] over K, for MR rows x[i] (fp32) and NA rows a_j = a + j K of
// A (fp16): NA * MR independent sums (one would wait on its own adds), each in the order
// a single row's would take.
template <int MR, int NA>
inline void lora_dots(const at::Half* a, const float* const* x, int64_t K, float* const* h,
                      int64_t c) {
  float s[MR][NA] = {};
  int64_t k = 0;
#ifdef __AVX512F__
  __m512 acc[MR][NA];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) acc[i][j] = _mm512_setzero_ps();
  for (; k + 16 <= K; k += 16) {
    __m512 w[NA];
    for (int j = 0; j < NA; ++j)
      w[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j * K + k)));
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_loadu_ps(x[i] + k);
      for (int j = 0; j < NA; ++j) acc[i][j] = _mm512_fmadd_ps(w[j], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) s[i][j] = _mm512_reduce_add_ps(acc[i][j]);
#elif defined(MELLEA_AVX2)
  __m256 acc[MR][NA];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) acc[i][j] = _mm256_setzero_ps();
  for (; k + 8 <= K; k += 8) {
    __m256 w[NA];
    for (int j = 0; j < NA; ++j)
      w[j] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + j * K + k)));
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x[i] + k);
      for (int j = 0; j < NA; ++j) acc[i][j] = _mm256_fmadd_ps(w[j], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) s[i][j] = reduce_add_ps(acc[i][j]);
#endif
  for (; k < K; ++k)
    for (int j = 0; j < NA; ++j) {
      const float w = half_to_float(a[j * K + k]);
      for (int i = 0; i < MR; ++i) s[i][j] += w * x[i][k];
    }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NA; ++j) h[i][c + j] = s[i][j];
}

// out[i][0, n) += sum_c h[i][c] * bt[c * ld + (0, n)] over `cols` columns c, for MR
// rows (n <= kLoraChunk); the sums stay in registers until the one add to out.
template <int MR>
inline void lora_products(const at::Half* bt, int64_t ld, int64_t cols, const float* const* h,
                          float* const* out, int64_t n) {
#ifdef __AVX512F__
  constexpr int V = kLoraChunk / 16;
  __m512 acc[MR][V];
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v) {
    mask[v] = n > 16 * v ? first_lanes(n - 16 * v) : __mmask16(0);
    for (int i = 0; i < MR; ++i) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < cols; ++c) {
    const at::Half* row = bt + c * ld;
    __m512 w[V];
    for (int v = 0; v < V; ++v)
      w[v] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask[v], row + 16 * v));
    for (int i = 0; i < MR; ++i) {
      const __m512 hv = _mm512_set1_ps(h[i][c]);
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(w[v], hv, acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < V; ++v) {
      float* o = out[i] + 16 * v;
      _mm512_mask_storeu_ps(o, mask[v],
                            _mm512_add_ps(_mm512_maskz_loadu_ps(mask[v], o), acc[i][v]));
    }
#else
  float acc[MR][kLoraChunk] = {};
  int64_t full = 0;
#if defined(MELLEA_AVX2)
  if (n == kLoraChunk) {  // whole chunks in registers; a segment's last, shorter one below
    constexpr int V = kLoraChunk / 8;
    __m256 vacc[MR][V];
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < V; ++v) vacc[i][v] = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; ++c) {
      const at::Half* row = bt + c * ld;
      __m256 w[V];
      for (int v = 0; v < V; ++v)
        w[v] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 8 * v)));
      for (int i = 0; i < MR; ++i) {
        const __m256 hv = _mm256_set1_ps(h[i][c]);
        for (int v = 0; v < V; ++v) vacc[i][v] = _mm256_fmadd_ps(w[v], hv, vacc[i][v]);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc[i] + 8 * v, vacc[i][v]);
    full = n;
  }
#endif
  if (full == 0) {
    float w[kLoraChunk];
    for (int64_t c = 0; c < cols; ++c) {
      const at::Half* row = bt + c * ld;
      for (int64_t j = 0; j < n; ++j) w[j] = half_to_float(row[j]);
      for (int i = 0; i < MR; ++i) {
        const float hv = h[i][c];
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) acc[i][j] += w[j] * hv;
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int64_t j = 0; j < n; ++j) out[i][j] += acc[i][j];
#endif
}

void check_lora_pack(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& segs,
                     int64_t K, int64_t N) {
  TORCH_CHECK(a.dim() == 2 && a.size(1) == K && a.is_contiguous() && a.scalar_type() == at::kHalf,
              "lora a: [C, K] fp16, dense");
  TORCH_CHECK(bt.is_contiguous() && bt.scalar_type() == at::kHalf, "lora bt: fp16, dense");
  TORCH_CHECK(segs.dim() == 2 && segs.size(1) == 6 && segs.is_contiguous() &&
                  segs.scalar_type() == at::kLong,
              "lora segs: [S, 6] int64");
  const int64_t* s = segs.data_ptr<int64_t>();
  for (int64_t i = 0; i < segs.size(0); ++i, s += 6)
    TORCH_CHECK(s[1] >= 0 && s[1] < s[2] && s[2] <= N && s[3] >= 0 && s[3] < s[4] &&
                    s[4] <= a.size(0) && s[5] >= 0 && s[5] + (s[4] - s[3]) * (s[2] - s[1]) <= bt.numel(),
                "lora segment out of its pack");
}


}  // namespace

// out [T, N] fp32 += each row's adapter's B (A x[row]) (see the section's comment).
void lora_add(const at::Tensor& out, const at::Tensor& x, const at::Tensor& a,
              const at::Tensor& bt, const at::Tensor& segs, const at::Tensor& lora_slots) {
  TORCH_CHECK(out.dim() == 2 && out.is_contiguous() && out.scalar_type() == at::kFloat,
              "out: [T, N] fp32, dense");
  check_activations(x);
  const int64_t T = x.size(0), K = x.size(1), N = out.size(1);
  TORCH_CHECK(out.size(0) == T, "out and x rows differ");
  TORCH_CHECK(lora_slots.scalar_type() == at::kInt && lora_slots.is_contiguous() &&
                  lora_slots.numel() == T,
              "lora_slots: [T] int32");
  if (a.numel() == 0 || segs.numel() == 0) return;
  check_lora_pack(a, bt, segs, K, N);
  const int32_t* slot = lora_slots.data_ptr<int32_t>();
  const int64_t* sg = segs.data_ptr<int64_t>();
  // One task: a segment and up to 4 rows of its slot (rows[first, first + n)). A slot's
  // tasks go row block by row block, each block over all its segments, so that two
  // threads splitting the list in halves get about the same work.
  struct Task {
    int64_t seg, first, n;
  };
  std::vector<int64_t> rows;
  std::vector<Task> tasks;
  for (int64_t i = 0, S = segs.size(0); i < S;) {
    int64_t j = i;
    while (j < S && sg[6 * j] == sg[6 * i]) ++j;
    const int64_t first = rows.size();
    for (int64_t t = 0; t < T; ++t)
      if (slot[t] == sg[6 * i]) rows.push_back(t);
    const int64_t n = rows.size() - first;
    for (int64_t m = 0; m < n; m += 4)
      for (int64_t s = i; s < j; ++s) tasks.push_back({s, first + m, std::min<int64_t>(4, n - m)});
    i = j;
  }
  if (tasks.empty()) return;
  const at::Half* ap = a.data_ptr<at::Half>();
  const at::Half* bp = bt.data_ptr<at::Half>();
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> h;
    for (int64_t it = begin; it < end; ++it) {
      const Task& task = tasks[it];
      const int64_t* s = sg + 6 * task.seg;
      const int64_t r0 = s[1], width = s[2] - s[1], c0 = s[3], cols = s[4] - s[3];
      h.resize(4 * cols);
      for_row_blocks(task.n, [&](auto block, int64_t) {
        constexpr int MR = decltype(block)::value;
        const float* xr[MR];
        float* hr[MR];
        float* orow[MR];
        for (int i = 0; i < MR; ++i) {
          const int64_t t = rows[task.first + i];
          xr[i] = xp + t * K;
          hr[i] = h.data() + i * cols;
          orow[i] = op + t * N + r0;
        }
        // A's rows 4 at a time for 1 or 2 rows, 2 at a time for 3 or 4 (registers).
        constexpr int NA = MR <= 2 ? 4 : 2;
        int64_t c = 0;
        for (; c + NA <= cols; c += NA) lora_dots<MR, NA>(ap + (c0 + c) * K, xr, K, hr, c);
        for (; c < cols; ++c) lora_dots<MR, 1>(ap + (c0 + c) * K, xr, K, hr, c);
        for (int64_t o0 = 0; o0 < width; o0 += kLoraBlock) {
          const int64_t nb = std::min(kLoraBlock, width - o0);
          const at::Half* b = bp + s[5] + o0 * cols;  // this block: [cols, nb]
          for (int64_t o = 0; o < nb; o += kLoraChunk) {
            float* oc[MR];
            for (int i = 0; i < MR; ++i) oc[i] = orow[i] + o0 + o;
            lora_products<MR>(b + o, nb, cols, hr, oc, std::min(kLoraChunk, nb - o));
          }
        }
      });
    }
  });
}

}  // namespace MELLEA_CPU_NS
