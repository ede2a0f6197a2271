"""Two C++ ops for the CPU path: decode attention read straight from the paged KV
cache, and RMSNorm fused with its residual add.

The PyTorch decode path gathers each layer's KV blocks into a padded copy and runs
SDPA on it: at 32 sequences of a few hundred tokens that copy is ~15 MB per layer
and step, written and read again. :func:`paged_decode` reads K and V where they lie,
through the block tables: one task per sequence scores its query heads against
the keys, takes the softmax and sums the values, in fp32 whatever the
cache's dtype (fp32, bf16, fp16). :func:`rms_norm` does in one pass what took
PyTorch six small ops (add, square, mean, rsqrt, two multiplies).

They are compiled on first use with the C++ compiler PyTorch's extensions use
(20-30 s on 2 busy cores; the build is cached under ``TORCH_EXTENSIONS_DIR``, by
default ``~/.cache/torch_extensions``, so later processes only load it). Where
that fails, or with ``MELLEA_CPU_KERNEL=0``, :func:`available` is False and the
model keeps its PyTorch path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import tempfile
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)

_SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace {

template <typename T>
inline const float* as_float(const T* src, float* buf, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(src[i]);
    return buf;
  }
}

// One task per sequence, all heads together, so each cached token's K (and V) row of
// Hk * D values is read once and in order.
template <typename T>
void decode(const T* q, int64_t q_stride, const T* kc, const T* vc, const int32_t* tables,
            const int32_t* lens, T* out, int64_t batch, int64_t hq, int64_t hk, int64_t dim,
            int64_t block, int64_t width, int64_t kv_block_stride, float scale, int64_t window) {
  const int64_t groups = hq / hk, row_size = hk * dim;
  at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(hq * dim), acc(hq * dim), scores, sums(hq), buf(row_size);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t len = lens[b];
      const int64_t first = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      const int64_t n = len - first;
      const int32_t* table = tables + b * width;
      for (int64_t j = 0; j < hq * dim; ++j)
        qf[j] = static_cast<float>(q[b * q_stride + j]) * scale;
      scores.resize(hq * n);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = first + t;
        const float* row = as_float(
            kc + table[pos / block] * kv_block_stride + (pos % block) * row_size, buf.data(),
            row_size);
        for (int64_t j = 0; j < hq; ++j) {
          const float* qj = qf.data() + j * dim;
          const float* k = row + (j / groups) * dim;
          float s = 0.f;
#pragma omp simd reduction(+ : s)
          for (int64_t d = 0; d < dim; ++d) s += qj[d] * k[d];
          scores[j * n + t] = s;
        }
      }
      for (int64_t j = 0; j < hq; ++j) {
        float* sc = scores.data() + j * n;
        float top = -INFINITY;
        for (int64_t t = 0; t < n; ++t) top = std::max(top, sc[t]);
        float sum = 0.f;
        for (int64_t t = 0; t < n; ++t) {
          sc[t] = std::exp(sc[t] - top);
          sum += sc[t];
        }
        sums[j] = sum;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = first + t;
        const float* row = as_float(
            vc + table[pos / block] * kv_block_stride + (pos % block) * row_size, buf.data(),
            row_size);
        for (int64_t j = 0; j < hq; ++j) {
          const float p = scores[j * n + t];
          const float* v = row + (j / groups) * dim;
          float* a = acc.data() + j * dim;
#pragma omp simd
          for (int64_t d = 0; d < dim; ++d) a[d] += p * v[d];
        }
      }
      for (int64_t j = 0; j < hq; ++j) {
        const float inv = 1.f / sums[j];
        T* o = out + (b * hq + j) * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] = static_cast<T>(acc[j * dim + d] * inv);
      }
    }
  });
}

at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& block_tables, const at::Tensor& context_lens,
                        double scale, int64_t window) {
  TORCH_CHECK(q.dim() == 3 && q.stride(2) == 1 && q.stride(1) == q.size(2), "q: [B, Hq, D], heads dense");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.stride(3) == 1 && k_cache.stride(2) == k_cache.size(3)
                  && k_cache.stride(1) == k_cache.size(2) * k_cache.size(3),
              "k_cache: [blocks, block_size, Hk, D], dense within a block");
  TORCH_CHECK(v_cache.strides() == k_cache.strides() && v_cache.sizes() == k_cache.sizes(),
              "v_cache laid out as k_cache");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && block_tables.is_contiguous(), "tables");
  TORCH_CHECK(context_lens.scalar_type() == at::kInt && context_lens.is_contiguous(), "lens");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type(), "q and cache dtypes differ");
  auto out = at::empty(q.sizes(), q.options());
  const int64_t batch = q.size(0), hq = q.size(1), dim = q.size(2);
  const int64_t block = k_cache.size(1), hk = k_cache.size(2);
  TORCH_CHECK(hq % hk == 0 && dim == k_cache.size(3), "head shapes");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "paged_decode", [&] {
    decode<scalar_t>(q.data_ptr<scalar_t>(), q.stride(0), k_cache.data_ptr<scalar_t>(),
                     v_cache.data_ptr<scalar_t>(), block_tables.data_ptr<int32_t>(),
                     context_lens.data_ptr<int32_t>(), out.data_ptr<scalar_t>(), batch, hq, hk,
                     dim, block, block_tables.size(1), k_cache.stride(0),
                     static_cast<float>(scale), window);
  });
  return out;
}

// out = RMSNorm(x (+ residual)) * weight, as the reference: normalized in fp32, rounded
// to x's dtype, then times the weight. With a residual, residual becomes x + residual.
template <typename T>
void rms_rows(const T* x, T* residual, const T* weight, T* out, int64_t rows, int64_t hidden,
              int64_t x_stride, float eps) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(hidden);
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * x_stride;
      float ss = 0.f;
      if (residual != nullptr) {
        T* res = residual + r * hidden;
        for (int64_t i = 0; i < hidden; ++i) {
          const T sum = static_cast<T>(static_cast<float>(xr[i]) + static_cast<float>(res[i]));
          res[i] = sum;
          buf[i] = static_cast<float>(sum);
        }
      } else {
        for (int64_t i = 0; i < hidden; ++i) buf[i] = static_cast<float>(xr[i]);
      }
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < hidden; ++i) ss += buf[i] * buf[i];
      const float inv = 1.f / std::sqrt(ss / static_cast<float>(hidden) + eps);
      T* o = out + r * hidden;
      for (int64_t i = 0; i < hidden; ++i)
        o[i] = static_cast<T>(static_cast<float>(static_cast<T>(buf[i] * inv)) *
                              static_cast<float>(weight[i]));
    }
  });
}

// x: [T, H] (rows may be strided). With a residual (dense [T, H], updated in place).
at::Tensor rms_norm(const at::Tensor& x, const c10::optional<at::Tensor>& residual,
                    const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "x: [T, H], rows dense");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == x.size(1), "weight: [H]");
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "weight and x dtypes differ");
  if (residual.has_value()) {
    TORCH_CHECK(residual->is_contiguous() && residual->sizes() == x.sizes() &&
                    residual->scalar_type() == x.scalar_type(),
                "residual: dense, shaped and typed as x");
  }
  auto out = at::empty(x.sizes(), x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm", [&] {
    rms_rows<scalar_t>(x.data_ptr<scalar_t>(),
                       residual.has_value() ? residual->data_ptr<scalar_t>() : nullptr,
                       weight.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.size(0),
                       x.size(1), x.stride(0), static_cast<float>(eps));
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(mellea_cpu, m) {
  m.def("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor context_lens, float scale, int window) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor(a!)? residual, Tensor weight, float eps) -> Tensor");
  m.impl("paged_decode", c10::DispatchKey::CPU, TORCH_FN(paged_decode));
  m.impl("rms_norm", c10::DispatchKey::CPU, TORCH_FN(rms_norm));
}
"""

_lock = threading.Lock()
_state: dict[str, bool] = {}


def _cpu_flags() -> str:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return platform.machine()


def _build() -> bool:
    """Compile and load the kernel once per process; False where that is not possible."""
    from torch.utils import cpp_extension

    # -march=native: a build is only valid for this CPU's instruction set, so the name
    # (hence the cached build) depends on it too, in case the cache dir is shared.
    digest = hashlib.sha256((_SOURCE + _cpu_flags()).encode()).hexdigest()[:12]
    name = f"mellea_cpu_kernels_{digest}"
    src_dir = Path(tempfile.gettempdir()) / "mellea_cpu_kernels"
    src_dir.mkdir(parents=True, exist_ok=True)
    source = src_dir / f"{name}.cpp"
    if not source.exists():
        tmp = source.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_SOURCE)
        tmp.replace(source)
    cpp_extension.load(
        name=name,
        sources=[str(source)],
        extra_cflags=["-O3", "-march=native", "-fopenmp"],
        is_python_module=False,
        verbose=False,
    )
    return True


def available() -> bool:
    """Whether the kernel is (or can now be) loaded; builds it on the first call."""
    if os.environ.get("MELLEA_CPU_KERNEL") == "0":
        return False
    with _lock:
        if "ok" not in _state:
            try:
                _state["ok"] = _build()
            except Exception as exc:  # no compiler, no headers, a failing build: fall back
                log.warning("C++ CPU ops unavailable (%s); using the PyTorch path", exc)
                _state["ok"] = False
        return _state["ok"]


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int | None,
) -> torch.Tensor:
    """Decode attention over the paged cache: ``q`` [B, Hq, D] -> [B, Hq, D].

    ``k_cache``/``v_cache``: [blocks, block_size, Hk, D]; ``block_tables`` [B, width]
    int32; ``context_lens`` [B] int32 (the current token included); ``window``: each
    query sees its last ``window`` positions (None: all). Call :func:`available` first.
    """
    dtype = q.dtype
    if dtype != k_cache.dtype:  # e.g. activations of another precision than the cache
        q = q.to(k_cache.dtype)
    if q.stride(2) != 1 or q.stride(1) != q.shape[2]:
        q = q.contiguous()
    out = torch.ops.mellea_cpu.paged_decode(
        q, k_cache, v_cache, block_tables, context_lens, scale, window or 0
    )
    return out.to(dtype)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """RMSNorm of ``x`` [T, H] (plus ``residual``, which becomes x + residual in place),
    with the rounding of :func:`mellea.engine.kernels.rms_norm.rms_norm_ref`."""
    if residual is not None and (residual.dtype != x.dtype or not residual.is_contiguous()):
        residual.add_(x)  # mixed precisions: the add as PyTorch promotes it, then the norm
        x, residual = residual, None
    if weight.dtype != x.dtype:
        weight = weight.to(x.dtype)
    if x.stride(-1) != 1:
        x = x.contiguous()
    return torch.ops.mellea_cpu.rms_norm(x, residual, weight, eps)
