// Weights moved into the kernels' layouts at load, in one pass each (plain C++, the same
// in every family's build). Each op is the C++ form of a function of
// mellea/engine/quant.py or gguf_blocks.py, tested bit for bit against it by
// tests/engine/test_repack.py: that function documents the layout.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "ops.h"

namespace MELLEA_CPU_NS {

namespace {

constexpr int64_t kRepackTile = 16;  // quant.TILE

// The nibbles of int4 groups [N, K/2] as tiles of 16 rows [T, G, 4, 64] (part s: byte
// 4 j + b holds element 8 s + b of row j's group in its low nibble, element 8 s + 4 + b
// in its high one); rows past N are zero.
at::Tensor tile_nibbles(const at::Tensor& packed) {
  const int64_t N = packed.size(0), G = packed.size(1) / 16, T = (N + kRepackTile - 1) / kRepackTile;
  auto qweight = zeros({T, G, 4, 64}, packed.options());
  const uint8_t* src = packed.data_ptr<uint8_t>();
  uint8_t* dst = qweight.data_ptr<uint8_t>();
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = r / kRepackTile, j = r % kRepackTile;
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* p = src + (r * G + g) * 16;
      uint8_t* out = dst + (t * G + g) * 256 + 4 * j;
      for (int b = 0; b < 4; ++b) {
        out[0 * 64 + b] = (p[b] & 0x0F) | ((p[4 + b] & 0x0F) << 4);
        out[1 * 64 + b] = (p[8 + b] & 0x0F) | ((p[12 + b] & 0x0F) << 4);
        out[2 * 64 + b] = (p[b] >> 4) | (p[4 + b] & 0xF0);
        out[3 * 64 + b] = (p[8 + b] >> 4) | (p[12 + b] & 0xF0);
      }
    }
  }
  return qweight;
}

}  // namespace

// quant.tile_groups: int4 groups [N, K/2] with fp16 scales and mins [N, K/32] -> tiles of
// 16 rows [T, G, 4, 64] (part s: byte 4 j + b holds element 8 s + b of row j's group in
// its low nibble, element 8 s + 4 + b in its high one), scales and mins [T, G, 16].
std::tuple<at::Tensor, at::Tensor, at::Tensor> tile_int4_weights(const at::Tensor& packed,
                                                         const at::Tensor& scales,
                                                         const at::Tensor& mins) {
  TORCH_CHECK(packed.dim() == 2 && packed.is_contiguous() && packed.scalar_type() == at::kByte,
              "packed must be contiguous uint8 [N, K/2]");
  const int64_t N = packed.size(0), G = packed.size(1) / 16, T = (N + kRepackTile - 1) / kRepackTile;
  TORCH_CHECK(packed.size(1) == G * 16, "K must be a multiple of 32");
  for (const at::Tensor* t : {&scales, &mins})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == at::kHalf && t->numel() == N * G,
                "scales and mins must be contiguous fp16 [N, K/32]");
  auto qweight = tile_nibbles(packed);
  auto tscales = zeros({T, G, kRepackTile}, scales.options());
  auto tmins = zeros({T, G, kRepackTile}, mins.options());
  const at::Half* sc = scales.data_ptr<at::Half>();
  const at::Half* mn = mins.data_ptr<at::Half>();
  at::Half* tsc = tscales.data_ptr<at::Half>();
  at::Half* tmn = tmins.data_ptr<at::Half>();
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = r / kRepackTile, j = r % kRepackTile;
    for (int64_t g = 0; g < G; ++g) {
      tsc[(t * G + g) * kRepackTile + j] = sc[r * G + g];
      tmn[(t * G + g) * kRepackTile + j] = mn[r * G + g];
    }
  }
  return {qweight, tscales, tmins};
}

// quant.tile_q4k: gguf_blocks.Q4KGroups (packed [N, K/2] as above, sub [N, K/32, 2] uint8
// (sc, m), super [N, K/256, 2] fp16 (d, -dmin)) -> the nibbles tiled as
// tile_int4_weights does, sub [T, G, 2, 16] and super [T, G/8, 2, 16] (row j in lane j).
std::tuple<at::Tensor, at::Tensor, at::Tensor> tile_q4k_weights(const at::Tensor& packed,
                                                        const at::Tensor& sub,
                                                        const at::Tensor& super) {
  TORCH_CHECK(packed.dim() == 2 && packed.is_contiguous() && packed.scalar_type() == at::kByte,
              "packed must be contiguous uint8 [N, K/2]");
  const int64_t N = packed.size(0), G = packed.size(1) / 16, T = (N + kRepackTile - 1) / kRepackTile;
  TORCH_CHECK(packed.size(1) == G * 16 && G % 8 == 0, "K must be a multiple of 256");
  TORCH_CHECK(sub.is_contiguous() && sub.scalar_type() == at::kByte && sub.numel() == N * G * 2,
              "sub must be contiguous uint8 [N, K/32, 2]");
  TORCH_CHECK(super.is_contiguous() && super.scalar_type() == at::kHalf &&
                  super.numel() == N * (G / 8) * 2,
              "super must be contiguous fp16 [N, K/256, 2]");
  auto qweight = tile_nibbles(packed);
  auto tsub = zeros({T, G, 2, kRepackTile}, sub.options());
  auto tsuper = zeros({T, G / 8, 2, kRepackTile}, super.options());
  const uint8_t* s = sub.data_ptr<uint8_t>();
  const at::Half* h = super.data_ptr<at::Half>();
  uint8_t* ts = tsub.data_ptr<uint8_t>();
  at::Half* th = tsuper.data_ptr<at::Half>();
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = r / kRepackTile, j = r % kRepackTile;
    for (int64_t g = 0; g < G; ++g)
      for (int k = 0; k < 2; ++k) ts[((t * G + g) * 2 + k) * kRepackTile + j] = s[(r * G + g) * 2 + k];
    for (int64_t b = 0; b < G / 8; ++b)
      for (int k = 0; k < 2; ++k)
        th[((t * (G / 8) + b) * 2 + k) * kRepackTile + j] = h[(r * (G / 8) + b) * 2 + k];
  }
  return {qweight, tsub, tsuper};
}

// quant.tile_rows: int8 [N, K] with fp32 scales [N] -> tiles [T, G, 8, 64] (part u: bytes
// 4 j .. 4 j + 3 are bytes 4 u .. 4 u + 3 of row j's group), each row's sum per group
// [T, G, 16] int32, the scales padded to [T * 16].
std::tuple<at::Tensor, at::Tensor, at::Tensor> tile_int8_weights(const at::Tensor& q,
                                                         const at::Tensor& scale) {
  TORCH_CHECK(q.dim() == 2 && q.is_contiguous() && q.scalar_type() == at::kChar,
              "q must be contiguous int8 [N, K]");
  const int64_t N = q.size(0), G = q.size(1) / 32, T = (N + kRepackTile - 1) / kRepackTile;
  TORCH_CHECK(q.size(1) == G * 32, "K must be a multiple of 32");
  TORCH_CHECK(scale.is_contiguous() && scale.scalar_type() == at::kFloat && scale.numel() == N,
              "scale must be contiguous fp32 [N]");
  auto qweight = zeros({T, G, 8, 64}, q.options());
  auto wsum = zeros({T, G, kRepackTile}, q.options().dtype(at::kInt));
  auto tscale = zeros({T * kRepackTile}, scale.options());
  const int8_t* src = q.data_ptr<int8_t>();
  int8_t* dst = qweight.data_ptr<int8_t>();
  int32_t* sums = wsum.data_ptr<int32_t>();
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = r / kRepackTile, j = r % kRepackTile;
    for (int64_t g = 0; g < G; ++g) {
      const int8_t* p = src + (r * G + g) * 32;
      int8_t* out = dst + (t * G + g) * 512 + 4 * j;
      int32_t total = 0;
      for (int u = 0; u < 8; ++u) {
        std::memcpy(out + u * 64, p + 4 * u, 4);
        total += p[4 * u] + p[4 * u + 1] + p[4 * u + 2] + p[4 * u + 3];
      }
      sums[(t * G + g) * kRepackTile + j] = total;
    }
  }
  std::memcpy(tscale.data_ptr<float>(), scale.data_ptr<float>(), N * sizeof(float));
  return {qweight, wsum, tscale};
}

namespace {

// A Q4_K block's 128 bytes of nibbles (32 per 64 elements: low nibbles the first group,
// high the second) as our int4 groups' 128 (element e packed with e + 16: byte e of the
// group, e < 16).
void q4_k_nibbles(const uint8_t* blk, uint8_t* out) {
  const uint8_t* qs = blk + 16;
  for (int c = 0; c < 4; ++c) {
    const uint8_t* x = qs + 32 * c;
    for (int e = 0; e < 16; ++e) {
      out[32 * c + e] = (x[e] & 0x0F) | ((x[e + 16] & 0x0F) << 4);
      out[32 * c + 16 + e] = (x[e] >> 4) | (x[e + 16] & 0xF0);
    }
  }
}


}  // namespace

// gguf_blocks.to_int4 for Q4_K: blocks of 256 [N, K/256 * 144 bytes] (fp16 d and dmin,
// 12 bytes of 6-bit scales and minimums, 128 bytes of nibbles) -> int4 groups [N, K/2]
// with scale d * sc and minimum -(dmin * m), computed in fp32 and rounded to fp16.
std::tuple<at::Tensor, at::Tensor, at::Tensor> q4_k_groups(const at::Tensor& raw) {
  TORCH_CHECK(raw.dim() == 2 && raw.is_contiguous() && raw.scalar_type() == at::kByte &&
                  raw.size(1) % 144 == 0,
              "raw must be contiguous uint8 [N, blocks * 144]");
  const int64_t N = raw.size(0), B = raw.size(1) / 144;
  auto packed = empty({N, B * 128}, raw.options());
  auto scales = empty({N, B * 8}, raw.options().dtype(at::kHalf));
  auto mins = empty({N, B * 8}, raw.options().dtype(at::kHalf));
  const uint8_t* src = raw.data_ptr<uint8_t>();
  uint8_t* dst = packed.data_ptr<uint8_t>();
  at::Half* sc_out = scales.data_ptr<at::Half>();
  at::Half* mn_out = mins.data_ptr<at::Half>();
  for (int64_t i = 0; i < N * B; ++i) {
    const uint8_t* blk = src + i * 144;
    at::Half dh, mh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&mh, blk + 2, 2);
    const float d = static_cast<float>(dh), dmin = static_cast<float>(mh);
    const uint8_t* s = blk + 4;
    for (int k = 0; k < 8; ++k) {  // ggml's get_scale_min_k4
      const int sc = k < 4 ? (s[k] & 63) : ((s[k + 4] & 0x0F) | ((s[k - 4] >> 6) << 4));
      const int m = k < 4 ? (s[k + 4] & 63) : ((s[k + 4] >> 4) | ((s[k] >> 6) << 4));
      sc_out[i * 8 + k] = at::Half(d * static_cast<float>(sc));
      mn_out[i * 8 + k] = at::Half(-(dmin * static_cast<float>(m)));
    }
    q4_k_nibbles(blk, dst + i * 128);
  }
  return {packed, scales, mins};
}

// gguf_blocks.to_q4k: Q4_K blocks [N, K/256 * 144 bytes] -> the file's values as they are
// (gguf_blocks.Q4KGroups): the nibbles as q4_k_groups packs them, each group's 6-bit sc
// and m [N, K/32, 2] uint8, each block's d and -dmin [N, K/256, 2] fp16.
std::tuple<at::Tensor, at::Tensor, at::Tensor> q4_k_exact(const at::Tensor& raw) {
  TORCH_CHECK(raw.dim() == 2 && raw.is_contiguous() && raw.scalar_type() == at::kByte &&
                  raw.size(1) % 144 == 0,
              "raw must be contiguous uint8 [N, blocks * 144]");
  const int64_t N = raw.size(0), B = raw.size(1) / 144;
  auto packed = empty({N, B * 128}, raw.options());
  auto sub = empty({N, B * 8, 2}, raw.options());
  auto super = empty({N, B, 2}, raw.options().dtype(at::kHalf));
  const uint8_t* src = raw.data_ptr<uint8_t>();
  uint8_t* dst = packed.data_ptr<uint8_t>();
  uint8_t* sub_out = sub.data_ptr<uint8_t>();
  uint16_t* super_out = reinterpret_cast<uint16_t*>(super.data_ptr<at::Half>());
  for (int64_t i = 0; i < N * B; ++i) {
    const uint8_t* blk = src + i * 144;
    uint16_t d, dmin;
    std::memcpy(&d, blk, 2);
    std::memcpy(&dmin, blk + 2, 2);
    super_out[2 * i] = d;
    super_out[2 * i + 1] = dmin ^ 0x8000;  // -dmin: the sign bit, exactly
    const uint8_t* s = blk + 4;
    for (int k = 0; k < 8; ++k) {  // ggml's get_scale_min_k4
      sub_out[16 * i + 2 * k] = k < 4 ? (s[k] & 63) : ((s[k + 4] & 0x0F) | ((s[k - 4] >> 6) << 4));
      sub_out[16 * i + 2 * k + 1] = k < 4 ? (s[k + 4] & 63) : ((s[k + 4] >> 4) | ((s[k] >> 6) << 4));
    }
    q4_k_nibbles(blk, dst + i * 128);
  }
  return {packed, sub, super};
}

// quant.quantize_rows of a Q6_K or Q8_0 tensor's values (as the gguf package's
// dequantizer gives them: d * sc in fp32, then times q), row by row: symmetric int8 with
// scale max |w| / 127 (at least 1e-12), rounded half to even and clamped to [-127, 127].
// Only formats whose values are one product (no offset to add, so nothing the compiler
// could fuse into an FMA and round differently).
std::tuple<at::Tensor, at::Tensor> gguf_int8_rows(const at::Tensor& raw, int64_t k_quant) {
  const int64_t block = k_quant ? 256 : 32, size = k_quant ? 210 : 34;
  TORCH_CHECK(raw.dim() == 2 && raw.is_contiguous() && raw.scalar_type() == at::kByte &&
                  raw.size(1) % size == 0,
              "raw must be contiguous uint8 [N, blocks * block bytes]");
  const int64_t N = raw.size(0), B = raw.size(1) / size, K = B * block;
  auto q = empty({N, K}, raw.options().dtype(at::kChar));
  auto scale = empty({N}, raw.options().dtype(at::kFloat));
  std::vector<float> w(K);
  const uint8_t* src = raw.data_ptr<uint8_t>();
  int8_t* q_out = q.data_ptr<int8_t>();
  float* scale_out = scale.data_ptr<float>();
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t i = 0; i < B; ++i) {
      const uint8_t* blk = src + (r * B + i) * size;
      float* y = w.data() + i * block;
      at::Half dh;
      if (!k_quant) {
        std::memcpy(&dh, blk, 2);
        const float d = static_cast<float>(dh);
        const int8_t* x = reinterpret_cast<const int8_t*>(blk + 2);
        for (int l = 0; l < 32; ++l) y[l] = static_cast<float>(x[l]) * d;
        continue;
      }
      std::memcpy(&dh, blk + 208, 2);
      const float d = static_cast<float>(dh);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      for (int half = 0; half < 2; ++half) {  // ggml's dequantize_row_q6_K
        const uint8_t* ql = blk + 64 * half;
        const uint8_t* qh = blk + 128 + 32 * half;
        const int8_t* s = sc + 8 * half;
        float* out = y + 128 * half;
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          out[l] = (d * static_cast<float>(s[is])) * static_cast<float>(q1);
          out[l + 32] = (d * static_cast<float>(s[is + 2])) * static_cast<float>(q2);
          out[l + 64] = (d * static_cast<float>(s[is + 4])) * static_cast<float>(q3);
          out[l + 96] = (d * static_cast<float>(s[is + 6])) * static_cast<float>(q4);
        }
      }
    }
    float amax = 0.f;
    for (int64_t e = 0; e < K; ++e) amax = std::max(amax, std::fabs(w[e]));
    const float step = std::max(amax / 127.0f, 1e-12f);
    int8_t* qr = q_out + r * K;
    for (int64_t e = 0; e < K; ++e) {
      const float v = std::nearbyint(w[e] / step);
      qr[e] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, v)));
    }
    scale_out[r] = step;
  }
  return {q, scale};
}

// gguf_blocks.to_byte_blocks of a Q8_0, Q6_K, Q4_K or Q5_K tensor [N, blocks * block
// bytes]: the values q + 128 [N, K] uint8 in the row's order, each group of 32's scales
// of its two sub-blocks of 16 and, for Q4_K/Q5_K, its minimum [N, K / 32, P] int8
// (Q8_0: 1, 1), d (and dmin) of each block [N, blocks, P - 1] fp32 (widened from fp16).
std::tuple<at::Tensor, at::Tensor, at::Tensor> gguf_byte_rows(const at::Tensor& raw,
                                                            const std::string& qtype) {
  const bool q8 = qtype == "Q8_0", q6 = qtype == "Q6_K", q4 = qtype == "Q4_K",
             q5 = qtype == "Q5_K";
  TORCH_CHECK(q8 || q6 || q4 || q5, "gguf_byte_rows: Q8_0, Q6_K, Q4_K or Q5_K, not ", qtype);
  const int64_t block = q8 ? 32 : 256, size = q8 ? 34 : q6 ? 210 : q4 ? 144 : 176;
  const int64_t P = q4 || q5 ? 3 : 2;
  TORCH_CHECK(raw.dim() == 2 && raw.is_contiguous() && raw.scalar_type() == at::kByte &&
                  raw.size(1) % size == 0,
              "raw must be contiguous uint8 [N, blocks * block bytes]");
  const int64_t N = raw.size(0), B = raw.size(1) / size, K = B * block;
  auto values = empty({N, K}, raw.options());
  auto subs = empty({N, K / 32, P}, raw.options().dtype(at::kChar));
  auto supers = empty({N, B, P - 1}, raw.options().dtype(at::kFloat));
  const uint8_t* src = raw.data_ptr<uint8_t>();
  uint8_t* v = values.data_ptr<uint8_t>();
  int8_t* sc_out = subs.data_ptr<int8_t>();
  float* d_out = supers.data_ptr<float>();
  auto fp16 = [](const uint8_t* p) {
    at::Half h;
    std::memcpy(&h, p, 2);
    return static_cast<float>(h);
  };
  for (int64_t i = 0; i < N * B; ++i) {
    const uint8_t* blk = src + i * size;
    uint8_t* y = v + i * block;
    int8_t* sc = sc_out + i * (block / 32) * P;
    if (q8) {
      d_out[i] = fp16(blk);
      for (int l = 0; l < 32; ++l) y[l] = blk[2 + l] ^ 0x80;  // int8 q + 128
      sc[0] = sc[1] = 1;
    } else if (q6) {
      d_out[i] = fp16(blk + 208);
      std::memcpy(sc, blk + 192, 16);
      for (int half = 0; half < 2; ++half) {  // ggml's dequantize_row_q6_K
        const uint8_t* ql = blk + 64 * half;
        const uint8_t* qh = blk + 128 + 32 * half;
        uint8_t* out = y + 128 * half;
        for (int l = 0; l < 32; ++l) {  // q - 32 + 128
          out[l] = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) + 96;
          out[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) + 96;
          out[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) + 96;
          out[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) + 96;
        }
      }
    } else {  // Q4_K, Q5_K: ggml's get_scale_min_k4, then 64 values per 32 bytes
      d_out[2 * i] = fp16(blk);
      d_out[2 * i + 1] = fp16(blk + 2);
      const uint8_t* s = blk + 4;
      for (int k = 0; k < 8; ++k) {
        const int scale = k < 4 ? (s[k] & 63) : ((s[k + 4] & 0x0F) | ((s[k - 4] >> 6) << 4));
        const int m = k < 4 ? (s[k + 4] & 63) : ((s[k + 4] >> 4) | ((s[k] >> 6) << 4));
        sc[3 * k] = sc[3 * k + 1] = static_cast<int8_t>(scale);
        sc[3 * k + 2] = static_cast<int8_t>(m);
      }
      const uint8_t* qs = blk + (q4 ? 16 : 48);
      const uint8_t* qh = blk + 16;  // Q5_K: bit j of byte l is the fifth bit of value l of sub-block j
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          const uint8_t x = qs[32 * c + l];
          const int h0 = q5 ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
          const int h1 = q5 ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
          y[64 * c + l] = static_cast<uint8_t>(((x & 0x0F) | h0) + 128);
          y[64 * c + 32 + l] = static_cast<uint8_t>(((x >> 4) | h1) + 128);
        }
    }
  }
  return {values, subs, supers};
}


}  // namespace MELLEA_CPU_NS
