"""Engine ops, one module each: a PyTorch reference, a Triton kernel, and a dispatch.

The dispatch functions exported here take the Triton path on CUDA tensors and the
reference on CPU.
"""

from mellea.engine.kernels.activation import gelu_tanh_and_mul, silu_and_mul
from mellea.engine.kernels.attention import paged_attention_decode, paged_attention_prefill
from mellea.engine.kernels.kv_cache import store_kv_cache
from mellea.engine.kernels.rms_norm import rms_norm
from mellea.engine.kernels.rotary import build_cos_sin_cache, rotary_embedding

__all__ = [
    "build_cos_sin_cache",
    "gelu_tanh_and_mul",
    "paged_attention_decode",
    "paged_attention_prefill",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "store_kv_cache",
]
