// Every op of a family's build registered under its torch.ops namespace
// (MELLEA_CPU_NS: cpu_build.namespace), with the family's name (family), and the three
// ATen functions the ops' files call through ops.h (their headers cost each file
// that includes them seconds of compiling per family). Checked by
// tests/engine/test_cpu_kernels.py (test_the_selected_build_is_the_family_it_says, and
// every op's test, on every family this CPU runs) and tests/unit/test_cpu_build.py.
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <string>

#include "ops.h"
#include "tiles.h"

namespace MELLEA_CPU_NS {

at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::empty(sizes, options);
}

at::Tensor zeros(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::zeros(sizes, options);
}

at::Tensor cat(at::TensorList tensors, int64_t dim) { return at::cat(tensors, dim); }

// Which build this is, as cpu_build.py names the families.
std::string family() {
#if defined(MELLEA_AVX512)
  return "avx512-vnni";
#elif defined(MELLEA_AVX2)
  return "avx2";
#elif defined(MELLEA_NEON)
  return "neon-dotprod";
#else
  return "generic";
#endif
}

}  // namespace MELLEA_CPU_NS

// TORCH_LIBRARY pastes its first argument: one more macro level expands MELLEA_CPU_NS.
#define MELLEA_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
MELLEA_LIBRARY(MELLEA_CPU_NS, m) {
  using namespace MELLEA_CPU_NS;
  m.def("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor context_lens, float scale, int window) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor(a!)? residual, Tensor weight, float eps) -> Tensor");
  m.impl("paged_decode", c10::DispatchKey::CPU, TORCH_FN(paged_decode));
  m.def("int8_linear(Tensor x, Tensor qweight, Tensor scale) -> Tensor");
  m.def("int4_linear(Tensor x, Tensor qweight, Tensor scales, Tensor mins) -> Tensor");
  m.impl("rms_norm", c10::DispatchKey::CPU, TORCH_FN(rms_norm));
  m.impl("int8_linear", c10::DispatchKey::CPU, TORCH_FN(int8_linear));
  m.def("int4_dequantize(Tensor qweight, Tensor scales, Tensor mins) -> Tensor");
  m.impl("int4_linear", c10::DispatchKey::CPU, TORCH_FN(int4_linear));
  m.impl("int4_dequantize", c10::DispatchKey::CPU, TORCH_FN(int4_dequantize));
  m.def("rope_store_kv(Tensor(a!) qkv, Tensor rope, Tensor(b!) k_cache, Tensor(c!) v_cache, "
        "Tensor slots, int heads, int kv_heads) -> ()");
  m.impl("rope_store_kv", c10::DispatchKey::CPU, TORCH_FN(rope_store_kv));
  m.def("family() -> str", &family);
  m.def("avx2_dot(str kind) -> str", &avx2_dot);
  m.def("top_k(Tensor x, int k) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("decode_layer(Tensor x, Tensor(a!) residual, Tensor attn_norm, Tensor mlp_norm, "
        "Tensor[] weights, int[] out_features, Tensor(b!) k_cache, Tensor(c!) v_cache, "
        "Tensor rope, Tensor slots, Tensor block_tables, Tensor context_lens, int heads, "
        "int kv_heads, float eps, float scale, int window, Tensor[] lora, Tensor? lora_slots) "
        "-> Tensor");
  m.def("lora_add(Tensor(a!) out, Tensor x, Tensor a, Tensor bt, Tensor segs, "
        "Tensor lora_slots) -> ()");
  m.impl("lora_add", c10::DispatchKey::CPU, TORCH_FN(lora_add));
  m.impl("decode_layer", c10::DispatchKey::CPU, TORCH_FN(decode_layer));
  m.impl("silu_and_mul", c10::DispatchKey::CPU, TORCH_FN(silu_and_mul));
  m.impl("top_k", c10::DispatchKey::CPU, TORCH_FN(top_k));
  m.def("int4_vnni_linear(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int n) -> Tensor");
  m.impl("int4_vnni_linear", c10::DispatchKey::CPU, TORCH_FN(int4_vnni_linear));
  m.def("int4_vnni_dequantize(Tensor qweight, Tensor scales, Tensor mins, int n) -> Tensor");
  m.impl("int4_vnni_dequantize", c10::DispatchKey::CPU, TORCH_FN(int4_vnni_dequantize));
  m.def("q4k_vnni_linear(Tensor x, Tensor qweight, Tensor sub, Tensor super, int n) -> Tensor");
  m.impl("q4k_vnni_linear", c10::DispatchKey::CPU, TORCH_FN(q4k_vnni_linear));
  m.def("q4k_vnni_dequantize(Tensor qweight, Tensor sub, Tensor super, int n) -> Tensor");
  m.impl("q4k_vnni_dequantize", c10::DispatchKey::CPU, TORCH_FN(q4k_vnni_dequantize));
  m.def("int8_vnni_linear(Tensor x, Tensor qweight, Tensor wsum, Tensor scale, int n) -> Tensor");
  m.impl("int8_vnni_linear", c10::DispatchKey::CPU, TORCH_FN(int8_vnni_linear));
  m.def("bytes_linear(Tensor x, Tensor qweight, Tensor subs, Tensor supers, int n) -> Tensor");
  m.impl("bytes_linear", c10::DispatchKey::CPU, TORCH_FN(bytes_linear));
  m.def("bytes_dequantize(Tensor qweight, Tensor subs, Tensor supers, int n) -> Tensor");
  m.impl("bytes_dequantize", c10::DispatchKey::CPU, TORCH_FN(bytes_dequantize));
  m.def("six_to_bytes(Tensor qweight) -> Tensor");
  m.def("bytes_to_six(Tensor qweight, int n) -> Tensor");
  m.impl("bytes_to_six", c10::DispatchKey::CPU, TORCH_FN(bytes_to_six));
  m.impl("six_to_bytes", c10::DispatchKey::CPU, TORCH_FN(six_to_bytes));
  m.def("tile_int4_weights(Tensor packed, Tensor scales, Tensor mins) -> (Tensor, Tensor, Tensor)");
  m.impl("tile_int4_weights", c10::DispatchKey::CPU, TORCH_FN(tile_int4_weights));
  m.def("tile_int8_weights(Tensor q, Tensor scale) -> (Tensor, Tensor, Tensor)");
  m.impl("tile_int8_weights", c10::DispatchKey::CPU, TORCH_FN(tile_int8_weights));
  m.def("gguf_int8_rows(Tensor raw, int k_quant) -> (Tensor, Tensor)");
  m.impl("gguf_int8_rows", c10::DispatchKey::CPU, TORCH_FN(gguf_int8_rows));
  m.def("tile_q4k_weights(Tensor packed, Tensor sub, Tensor super) -> (Tensor, Tensor, Tensor)");
  m.impl("tile_q4k_weights", c10::DispatchKey::CPU, TORCH_FN(tile_q4k_weights));
  m.def("q4_k_exact(Tensor raw) -> (Tensor, Tensor, Tensor)");
  m.impl("q4_k_exact", c10::DispatchKey::CPU, TORCH_FN(q4_k_exact));
  m.def("gguf_byte_rows(Tensor raw, str qtype) -> (Tensor, Tensor, Tensor)");
  m.impl("gguf_byte_rows", c10::DispatchKey::CPU, TORCH_FN(gguf_byte_rows));
  m.def("q4_k_groups(Tensor raw) -> (Tensor, Tensor, Tensor)");
  m.impl("q4_k_groups", c10::DispatchKey::CPU, TORCH_FN(q4_k_groups));
}
