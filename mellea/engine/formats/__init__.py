"""Weight formats on CPU: fp32, bf16, int8 or int4 weights under an fp32 forward pass.

The CPU forward pass always computes in fp32 (residual stream, norms, attention, KV
cache, logits); a format only changes how the big matrices are stored and multiplied:

* ``float32``: as loaded; the exact path.
* ``bfloat16``: linear-layer and LM-head weights in bf16; a linear rounds its input
  to bf16 and returns fp32 (oneDNN accumulates in fp32, on AMX where present).
* ``int8``: per-output-channel symmetric int8 weights (``Int8Linear``) for the same.
* ``int4``: 4-bit weights in groups of 32 (``Int4Linear``), or a GGUF's Q4_K groups;
  for a GGUF, every tensor in its own form (its other types in the byte form).

In the compact ones, the embedding stays fp32 and the LM head's best logits are
recomputed from its fp32 rows (``RefinedHead``).

``auto`` serves a checkpoint as it is stored (see :func:`~.resolve.auto_cpu_format`):
int4 for a quantized GGUF or one whose weights are 4-bit already, else its own dtype;
the other formats are opt-ins. On CUDA a format is the whole model's dtype.

The modules, each importing only those listed before it:

* :mod:`.quantize`: int8 rows and int4 groups from fp32, and back.
* :mod:`.cpu_support`: what this CPU runs (native bf16, the kernels' row limits, the
  byte and six-bit forms).
* :mod:`.detect`: what a checkpoint stores (its float dtype, 4-bit already or not).
* :mod:`.resolve`: the format names and what ``auto`` picks; what the engine's
  settings, core and the runtime import.
* :mod:`.tiles`: the C++ kernels' weight layouts.
* :mod:`.linear`: the linear layers of each format.
* :mod:`.head`: the LM head's scoring layer and its fp32 refinement.
* :mod:`.convert`: a loaded fp32 model's layers converted to a format.
"""
