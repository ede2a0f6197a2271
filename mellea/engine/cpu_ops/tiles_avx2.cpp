// The AVX2 build's int4 and int8 tiles on vpmaddubsw / vpmaddwd (8 lanes, any AVX2 CPU),
// and its two-part activations (the 8-lane vpdpbusd tiles: tiles_vnni256.h). Checked by
// tests/engine/test_cpu_kernels.py (test_int4_vnni_*, test_int8_vnni_*, and bit for
// bit against the AVX-512 build: test_the_simd_families_compute_the_same_bits) and
// tests/engine/test_q4k.py.
#include "family.h"

#if defined(MELLEA_AVX2)
#include <algorithm>
#include <cstring>

#include "tiles.h"
#include "tiles_avx2.h"

namespace MELLEA_CPU_NS {

namespace {
// 32 int32 lanes (4 vectors, in order) to int8 with saturation, in order.
inline __m256i pack_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  // packs works within 128-bit halves: put the 4-byte runs back in order.
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
}  // namespace

// quantize_activations of the AVX-512 build on 8 lanes, the same roundings in the same
// order (the sum as _mm512_reduce_add_ps takes it), so the parts match bit for bit.
void quantize_activations(const float* x, int64_t rows, int64_t K, int8_t* xq, float* step,
                          float* xsum) {
  const int64_t G = K / 32;
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 lo_max = _mm256_set1_ps(127.f), lo_min = _mm256_set1_ps(-127.f);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = r * G + g;
      const float* v = x + i * 32;
      int8_t* hi = xq + r * xq_row(K) + g * 32;
      int8_t* lo = hi + xq_lo(K);
      __m256 xv[4];
      for (int j = 0; j < 4; ++j) xv[j] = _mm256_loadu_ps(v + 8 * j);
      const __m256 top8 = _mm256_max_ps(
          _mm256_max_ps(_mm256_andnot_ps(sign, xv[0]), _mm256_andnot_ps(sign, xv[1])),
          _mm256_max_ps(_mm256_andnot_ps(sign, xv[2]), _mm256_andnot_ps(sign, xv[3])));
      __m128 t4 = _mm_max_ps(_mm256_extractf128_ps(top8, 1), _mm256_castps256_ps128(top8));
      t4 = _mm_max_ps(t4, _mm_shuffle_ps(t4, t4, _MM_SHUFFLE(1, 0, 3, 2)));
      const float top = std::max(_mm_cvtss_f32(t4), _mm_cvtss_f32(_mm_shuffle_ps(t4, t4, 1)));
      // (a + b) of the AVX-512 build's two 16-lane halves is (xv0 + xv2 | xv1 + xv3);
      // its reduction adds the upper 8 to the lower 8 first.
      xsum[i] = reduce_add_ps(
          _mm256_add_ps(_mm256_add_ps(xv[1], xv[3]), _mm256_add_ps(xv[0], xv[2])));
      const GroupSteps gs(top);
      step[i] = gs.unit / 256.f;
      const __m256 inv = _mm256_set1_ps(gs.inv), inv_lo = _mm256_set1_ps(gs.inv_lo);
      const __m256 u = _mm256_set1_ps(gs.unit);
      __m256i qh[4], ql[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 h = _mm256_round_ps(_mm256_mul_ps(xv[j], inv), kNearest);
        const __m256 rest = _mm256_fnmadd_ps(h, u, xv[j]);  // x - h * unit
        const __m256 l = _mm256_min_ps(
            _mm256_max_ps(_mm256_round_ps(_mm256_mul_ps(rest, inv_lo), kNearest), lo_min),
            lo_max);
        qh[j] = _mm256_cvtps_epi32(h);
        ql[j] = _mm256_cvtps_epi32(l);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), pack_bytes(qh[0], qh[1], qh[2], qh[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), pack_bytes(ql[0], ql[1], ql[2], ql[3]));
    }
}

// Tile t's factors from Q4KScales in fp32 (FloatScales' layout), once for all row blocks.
void form_q4k_factors(const Q4KScales& s, int64_t t, int64_t G, float* dm) {
  Scales8<Q4KScales> factors{s, t, G};
  for (int64_t g = 0; g < G; ++g)
    for (int half = 0; half < 2; ++half) {
      __m256 d, m;
      factors.load(g, half, d, m);
      _mm256_storeu_ps(dm + g * 2 * kTile + 8 * half, d);
      _mm256_storeu_ps(dm + g * 2 * kTile + kTile + 8 * half, m);
    }
}

namespace {
// One group's term of a half's 8 rows: the int16 sums of the high and low activation
// parts joined (256 hi + lo, widened by vpmaddwd), scaled by the weights' factor and the
// activations' step, plus the minimum times the activations' sum (both tiles below).
inline __m256 add_group(__m256 acc, __m256i hi, __m256i lo, __m256 d, __m256 m, float step,
                        float sum) {
  const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(hi, _mm256_set1_epi16(256)),
                                       _mm256_madd_epi16(lo, _mm256_set1_epi16(1)));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(step)), acc);
  return _mm256_fmadd_ps(m, _mm256_set1_ps(sum), acc);
}

// Half H of tile t's rows for MR > 1 activation rows, into rows[i][8 H ..], each weight
// vector unpacked just before its products. Unpacking a half's 8 vectors first and then
// running the rows (as the VNNI tiles do) took, with 4 rows' sums, more than AVX2's 16
// vector registers: 86 spills and reloads a group in the compiled loop, and 37-41 G
// multiply-adds/s a core against 47-49 this way (8192 x 2048 Q4_K, 4-32 rows, one
// thread). A row's two sums are its only registers; the float accumulators stay in
// rows[] (L1) between groups.
template <int MR, int H, class S>
void int4_half_rows(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
                    const float* xsum, int64_t K, int64_t t, float (*rows)[kTile]) {
  const int64_t G = K / 32;
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int i = 0; i < MR; ++i) _mm256_store_ps(rows[i] + 8 * H, _mm256_setzero_ps());
  const uint8_t* w = qw + t * G * 256;
  Scales8<S> factors{scales, t, G};
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int line = 0; line < 256; line += 64) prefetch(w + kPrefetch + line);
    const int8_t* x = xq + g * 32;
    __m256i hi[MR], lo[MR];
    for (int s = 0; s < 4; ++s) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * s + 32 * H));
      for (int n = 0; n < 2; ++n) {
        const int u = 2 * s + n;
        const __m256i wv = _mm256_and_si256(n == 0 ? v : _mm256_srli_epi16(v, 4), low);
        for (int i = 0; i < MR; ++i) {
          int32_t xh, xl;
          std::memcpy(&xh, x + i * xq_row(K) + 4 * u, 4);
          std::memcpy(&xl, x + i * xq_row(K) + xq_lo(K) + 4 * u, 4);
          const __m256i ph = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(xh));
          const __m256i pl = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(xl));
          hi[i] = u == 0 ? ph : _mm256_add_epi16(hi[i], ph);
          lo[i] = u == 0 ? pl : _mm256_add_epi16(lo[i], pl);
        }
      }
    }
    __m256 d, m;
    factors.load(g, H, d, m);
    for (int i = 0; i < MR; ++i)
      _mm256_store_ps(rows[i] + 8 * H, add_group(_mm256_load_ps(rows[i] + 8 * H), hi[i], lo[i], d,
                                                 m, xscale[i * G + g], xsum[i * G + g]));
  }
}

// Both halves of tile t's rows for one activation row, into row[0 .. 16): each of the
// row's activation words is broadcast once and meets both halves' weights at once. Run
// half after half, the compiler kept the first half's 16 broadcasts for the second in
// stack spills (16 stores and 16 reloads a group): 30-34 against 37-39 G multiply-adds/s
// a core from cache (8192 x 2048, one thread), 1.00-1.07x as fast from memory (2 threads).
template <class S>
void int4_one_row(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
                  const float* xsum, int64_t K, int64_t t, float* row) {
  const int64_t G = K / 32;
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const uint8_t* w = qw + t * G * 256;
  Scales8<S> factors{scales, t, G};
  for (int64_t g = 0; g < G; ++g, w += 256) {
    for (int line = 0; line < 256; line += 64) prefetch(w + kPrefetch + line);
    const int8_t* x = xq + g * 32;
    __m256i hi[2], lo[2];
    for (int s = 0; s < 4; ++s) {
      const __m256i v[2] = {
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * s)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * s + 32))};
      for (int n = 0; n < 2; ++n) {
        const int u = 2 * s + n;
        int32_t xh, xl;
        std::memcpy(&xh, x + 4 * u, 4);
        std::memcpy(&xl, x + xq_lo(K) + 4 * u, 4);
        const __m256i bh = _mm256_set1_epi32(xh), bl = _mm256_set1_epi32(xl);
        for (int h = 0; h < 2; ++h) {
          const __m256i wv = _mm256_and_si256(n == 0 ? v[h] : _mm256_srli_epi16(v[h], 4), low);
          const __m256i ph = _mm256_maddubs_epi16(wv, bh), pl = _mm256_maddubs_epi16(wv, bl);
          hi[h] = u == 0 ? ph : _mm256_add_epi16(hi[h], ph);
          lo[h] = u == 0 ? pl : _mm256_add_epi16(lo[h], pl);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      __m256 d, m;
      factors.load(g, h, d, m);
      acc[h] = add_group(acc[h], hi[h], lo[h], d, m, xscale[g], xsum[g]);
    }
  }
  _mm256_storeu_ps(row, acc[0]);
  _mm256_storeu_ps(row + 8, acc[1]);
}
}  // namespace

// Output rows [16 t, 16 t + 16) for MR activation rows, as two halves of 8 rows. The
// nibbles (u8, <= 15) times the parts (s8, |.| <= 127) by vpmaddubsw: a pair sums to at
// most 3810 and all 8 parts' pairs to 30480, so they add up in int16 before one
// vpmaddwd widens them; the dot products are the AVX-512 build's exactly.
// Above one row, each half runs over all groups before the other half (int4_half_rows):
// with both halves in one pass the compiler kept each row's 16 activation words for the
// second half in scalar spills on the stack, and the pass ran at 33 G multiply-adds/s a
// core against 43 this way (2048 x 2048, 4-32 rows, one thread); the second pass finds
// the tile's weights in cache. One row is bound by reading the weights, so it takes both
// halves in one pass (int4_one_row; two passes: 4.5-5.3 against 3.4-3.7 ms for 49152
// x 2048).
template <int MR, class S>
void int4_tile(const uint8_t* qw, const S& scales, const int8_t* xq, const float* xscale,
               const float* xsum, float* out, int64_t N, int64_t K, int64_t t) {
  alignas(32) float rows[MR][kTile];
  if constexpr (MR == 1) {
    int4_one_row(qw, scales, xq, xscale, xsum, K, t, rows[0]);
  } else {
    int4_half_rows<MR, 0>(qw, scales, xq, xscale, xsum, K, t, rows);
    int4_half_rows<MR, 1>(qw, scales, xq, xscale, xsum, K, t, rows);
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  for (int i = 0; i < MR; ++i) std::copy(rows[i], rows[i] + valid, out + i * N + n0);
}

// int8 without VNNI: vpmaddubsw needs an unsigned side, and the shifted parts (up to
// 255) times weights (up to 127) would saturate its int16 pairs. Instead each
// activation's two parts are joined into one int16, 256 hi + lo (|.| <= 32639), and
// multiplied by the weights widened to int16 on vpmaddwd: a pair is at most 2 * 127 *
// 32639 and a group's sum 32 * 127 * 32639 < 2^31, so the integer sums are exact and
// equal to 256 sum(w hi) + sum(w lo), the AVX-512 build's dot products; no shift, so no
// wsum. One vpmaddwd and one add per 2 x 8 products, where the former way (|x| times
// sign(x) * w on vpmaddubsw, then vpmaddwd) took five instructions per 4 x 8 products
// and part: 26 -> 37 G multiply-adds/s a core (2048 x 2048, 4-32 rows, one thread).
// Each vector of widened weights holds 4 rows' 4 products of one part u, so the sums come
// as pairs of a row's halves; vphaddd adds them with the rows in the order 0 1 4 5 2 3
// 6 7 of each 8, put back once at the end.
template <int MR>
void int8_tile(const int8_t* qw, const int32_t*, const float* wscale, const int8_t* xq,
                const float* xscale, float* out, int64_t N, int64_t K, int64_t t) {
  const int64_t G = K / 32;
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const int8_t* w = qw + t * G * 512;
  alignas(32) int16_t wide[8][4][16];  // [part u][rows 4 q .. 4 q + 3][row, then k]
  alignas(32) int16_t joined[MR][32];  // [row][k of the group]: 256 hi + lo
  for (int64_t g = 0; g < G; ++g, w += 512) {
    for (int line = 0; line < 512; line += 64) prefetch(w + 2 * kPrefetch + line);
    for (int u = 0; u < 8; ++u)
      for (int q = 0; q < 4; ++q)
        _mm256_store_si256(reinterpret_cast<__m256i*>(wide[u][q]),
                           _mm256_cvtepi8_epi16(_mm_loadu_si128(
                               reinterpret_cast<const __m128i*>(w + 64 * u + 16 * q))));
    for (int i = 0; i < MR; ++i)
      for (int h = 0; h < 2; ++h) {
        const int8_t* xh = xq + i * xq_row(K) + g * 32 + 16 * h;
        const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xh)));
        const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xh + xq_lo(K))));
        _mm256_store_si256(reinterpret_cast<__m256i*>(joined[i] + 16 * h),
                           _mm256_add_epi16(_mm256_slli_epi16(hi, 8), lo));
      }
    for (int i = 0; i < MR; ++i) {
      __m256i sum[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
      for (int u = 0; u < 8; ++u) {
        const __m256i b = _mm256_broadcastq_epi64(  // the 4 joined activations of part u
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(joined[i] + 4 * u)));
        for (int q = 0; q < 4; ++q)
          sum[q] = _mm256_add_epi32(
              sum[q], _mm256_madd_epi16(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(wide[u][q]))));
      }
      const __m256 step = _mm256_set1_ps(xscale[i * G + g]);
      for (int half = 0; half < 2; ++half) {
        const __m256i dot = _mm256_hadd_epi32(sum[2 * half], sum[2 * half + 1]);
        acc[i][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), step, acc[i][half]);
      }
    }
  }
  const int64_t n0 = t * kTile, valid = std::min<int64_t>(kTile, N - n0);
  const __m256 r0 = _mm256_loadu_ps(wscale + n0), r1 = _mm256_loadu_ps(wscale + n0 + 8);
  for (int i = 0; i < MR; ++i) {
    alignas(32) float row[kTile];
    for (int half = 0; half < 2; ++half) {  // rows 0 1 4 5 2 3 6 7 -> 0 .. 7
      const __m256 in_order = _mm256_castsi256_ps(
          _mm256_permute4x64_epi64(_mm256_castps_si256(acc[i][half]), 0xD8));
      _mm256_store_ps(row + 8 * half, _mm256_mul_ps(in_order, half == 0 ? r0 : r1));
    }
    std::copy(row, row + valid, out + i * N + n0);
  }
}

MELLEA_INSTANTIATE_TILES(1)
MELLEA_INSTANTIATE_TILES(2)
MELLEA_INSTANTIATE_TILES(3)
MELLEA_INSTANTIATE_TILES(4)

}  // namespace MELLEA_CPU_NS

#endif
