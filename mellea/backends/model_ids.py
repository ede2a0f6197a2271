"""Model identifiers: one constant names a model on every platform upstream mellea supports.

A :class:`ModelIdentifier` carries the name a model goes by on the Hugging Face hub,
in Ollama, on watsonx, in MLX, behind an OpenAI-compatible API and on Bedrock. Each
backend picks the name it needs (see :func:`backend_model_name`). The constants below
follow upstream mellea's catalog, so a program that names ``IBM_GRANITE_4_1_3B`` runs
here unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class ModelIdentifier:
    """A model's names per platform; a field is ``None`` where the platform lacks it.

    ``hf_tokenizer_name`` defaults to ``hf_model_name`` when unset. ``openai_name`` is
    the name an OpenAI-compatible endpoint serves the model under (not necessarily a
    model hosted by OpenAI). ``context_length`` is the model's rated context window.
    """

    hf_model_name: str | None = None
    ollama_name: str | None = None
    watsonx_name: str | None = None
    mlx_name: str | None = None
    openai_name: str | None = None
    bedrock_name: str | None = None
    bedrock_litellm_name: str | None = None
    hf_tokenizer_name: str | None = None
    context_length: int | None = None


# Which fields each backend reads, in order of preference.
_NAME_FIELDS: dict[str, tuple[str, ...]] = {
    "local": ("hf_model_name",),
    "ollama": ("ollama_name",),
    "openai": ("openai_name", "hf_model_name"),
    "watsonx": ("watsonx_name",),
    "mlx": ("mlx_name",),
    "bedrock": ("bedrock_name",),
}


def backend_model_name(model_id: Any, backend: str) -> str | None:
    """The name ``backend`` (``local``, ``ollama``, ``openai``...) uses for ``model_id``.

    A string (or ``None``) passes through unchanged. A :class:`ModelIdentifier` gives
    the field that backend reads; if it has none, :class:`ValueError` says which name
    is missing, so a program learns it at session start rather than at the first call.
    """
    if model_id is None or isinstance(model_id, str):
        return model_id
    fields = _NAME_FIELDS.get(backend, ("hf_model_name",))
    for field in fields:
        value = getattr(model_id, field, None)
        if isinstance(value, str) and value:
            return value
    if not isinstance(model_id, ModelIdentifier):
        return str(model_id)
    wanted = " or ".join(fields)
    raise ValueError(f"model {model_id} has no {wanted}, which the {backend} backend needs")


# --- IBM Granite ---------------------------------------------------------------------

IBM_GRANITE_4_HYBRID_MICRO = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.0-h-micro",
    ollama_name="granite4:micro-h",
    context_length=131072,
)
IBM_GRANITE_4_HYBRID_TINY = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.0-h-tiny",
    ollama_name="granite4:tiny-h",
    context_length=131072,
)
IBM_GRANITE_4_HYBRID_SMALL = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.0-h-small",
    ollama_name="granite4:small-h",
    watsonx_name="ibm/granite-4-h-small",
    context_length=131072,
)
IBM_GRANITE_4_HYBRID_1B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.0-h-1b",
    ollama_name="granite4:1b-h",
    context_length=131072,
)
IBM_GRANITE_4_HYBRID_350m = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.0-h-350m",
    ollama_name="granite4:350m-h",
    context_length=32768,
)
IBM_GRANITE_4_1_3B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.1-3b",
    ollama_name="granite4.1:3b",
    context_length=131072,
)
IBM_GRANITE_4_1_8B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.1-8b",
    ollama_name="granite4.1:8b",
    context_length=131072,
)
IBM_GRANITE_4_1_30B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.1-30b",
    ollama_name="granite4.1:30b",
    context_length=131072,
)
IBM_GRANITE_GUARDIAN_4_1_8B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-guardian-4.1-8b", context_length=131072
)
IBM_GRANITE_3_2_8B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-3.2-8b-instruct",
    ollama_name="granite3.2:8b",
    watsonx_name="ibm/granite-3-2b-instruct",
    context_length=131072,
)
IBM_GRANITE_3_3_8B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-3.3-8b-instruct",
    ollama_name="granite3.3:8b",
    watsonx_name="ibm/granite-3-3-8b-instruct",
    context_length=131072,
)
IBM_GRANITE_4_MICRO_3B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.0-micro",
    ollama_name="granite4:micro",
    watsonx_name="ibm/granite-4-h-small",
    context_length=131072,
)
IBM_GRANITE_3_3_VISION_2B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-vision-3.3-2b",
    ollama_name="ibm/granite3.3-vision:2b",
    context_length=131072,
)
IBM_GRANITE_VISION_4_1_4B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-vision-4.1-4b",
    ollama_name="hf.co/ibm-granite/granite-vision-4.1-4b-GGUF:Q4_K_M",
    context_length=131072,
)
IBM_GRANITE_GUARDIAN_3_0_2B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-guardian-3.0-2b",
    ollama_name="granite3-guardian:2b",
    context_length=4096,
)
IBM_GRANITE_4_TINY_PREVIEW_7B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.0-tiny-preview", context_length=131072
)
IBM_GRANITE_4_TINY_PREVIEW_BASE_7B = ModelIdentifier(
    hf_model_name="ibm-granite/granite-4.0-tiny-base-preview", context_length=131072
)
IBM_GRANITE_SWITCH_4_1_3B_PREVIEW = ModelIdentifier(
    hf_model_name="ibm-granite/granite-switch-4.1-3b-preview", context_length=131072
)
IBM_GRANITE_SWITCH_4_1_8B_PREVIEW = ModelIdentifier(
    hf_model_name="ibm-granite/granite-switch-4.1-8b-preview", context_length=131072
)
IBM_GRANITE_SWITCH_4_1_30B_PREVIEW = ModelIdentifier(
    hf_model_name="ibm-granite/granite-switch-4.1-30b-preview", context_length=131072
)

# --- Meta Llama ----------------------------------------------------------------------

META_LLAMA_4_SCOUT_17B_16E_INSTRUCT = ModelIdentifier(
    hf_model_name="unsloth/Llama-4-Scout-17B-16E-Instruct",
    ollama_name="llama4:scout",
    hf_tokenizer_name="unsloth/Llama-4-Scout-17B-16E-Instruct",
    mlx_name="mlx-community/Llama-4-Scout-17B-16E-Instruct-4bit",
    context_length=10485760,
)
META_LLAMA_4_MAVERICK_17B_128E_INSTRUCT = ModelIdentifier(
    hf_model_name="unsloth/Llama-4-Maverick-17B-128E-Instruct",
    ollama_name="llama4:maverick",
    hf_tokenizer_name="unsloth/Llama-4-Maverick-17B-128E-Instruct",
    mlx_name="mlx-community/Llama-4-Maverick-17B-128E-Instruct-4bit",
    context_length=1048576,
)
META_LLAMA_3_3_70B = ModelIdentifier(
    hf_model_name="unsloth/Llama-3.3-70B-Instruct",
    ollama_name="llama3.3:70b",
    watsonx_name="meta-llama/llama-3-3-70b-instruct",
    hf_tokenizer_name="unsloth/Llama-3.3-70B-Instruct",
    mlx_name="mlx-community/Llama-3.3-70B-Instruct-4bit",
    context_length=131072,
)
META_LLAMA_3_2_3B = ModelIdentifier(
    hf_model_name="unsloth/Llama-3.2-3B-Instruct",
    ollama_name="llama3.2:3b",
    watsonx_name="meta-llama/llama-3-2-3b-instruct",
    context_length=131072,
)
META_LLAMA_GUARD3_1B = ModelIdentifier(
    hf_model_name="meta-llama/Llama-Guard-3-1B",
    ollama_name="llama-guard3:1b",
    context_length=131072,
)
META_LLAMA_3_2_1B = ModelIdentifier(
    hf_model_name="unsloth/Llama-3.2-1B", ollama_name="llama3.2:1b", context_length=131072
)

# --- Mistral -------------------------------------------------------------------------

MISTRALAI_MISTRAL_0_3_7B = ModelIdentifier(
    hf_model_name="mistralai/Mistral-7B-Instruct-v0.3",
    ollama_name="mistral:7b",
    context_length=32768,
)
MISTRALAI_MISTRAL_SMALL_24B = ModelIdentifier(
    hf_model_name="mistralai/Mistral-Small-3.1-24B-Instruct-2503",
    ollama_name="mistral-small:latest",
    watsonx_name="mistralai/mistral-small-3-1-24b-instruct-2503",
    context_length=131072,
)
MISTRALAI_MISTRAL_LARGE_123B = ModelIdentifier(
    hf_model_name="mistralai/Mistral-Large-Instruct-2411",
    ollama_name="mistral-large:latest",
    watsonx_name="mistralai/mistral-large",
    context_length=131072,
)
MISTRALAI_DEVSTRAL_2_123B = ModelIdentifier(
    bedrock_name="mistral.devstral-2-123b",
    bedrock_litellm_name="bedrock/converse/mistral.devstral-2-123b",
)

# --- Qwen ----------------------------------------------------------------------------

QWEN3_0_6B = ModelIdentifier(
    hf_model_name="Qwen/Qwen3-0.6B", ollama_name="qwen3:0.6b", context_length=32768
)
QWEN3_1_7B = ModelIdentifier(
    hf_model_name="Qwen/Qwen3-1.7B", ollama_name="qwen3:1.7b", context_length=32768
)
QWEN3_8B = ModelIdentifier(
    hf_model_name="Qwen/Qwen3-8B", ollama_name="qwen3:8b", context_length=40960
)
QWEN3_14B = ModelIdentifier(
    hf_model_name="Qwen/Qwen3-14B", ollama_name="qwen3:14b", context_length=40960
)

# --- NVIDIA (openai_name is the NVIDIA-hosted endpoint's name) -----------------------

NVIDIA_NEMOTRON_3_NANO_4B = ModelIdentifier(
    hf_model_name="nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16",
    ollama_name="nemotron-3-nano:4b",
    mlx_name="mlx-community/NVIDIA-Nemotron-3-Nano-4B-4bit",
    context_length=262144,
)
NVIDIA_NEMOTRON_3_NANO_30B_A3B = ModelIdentifier(
    hf_model_name="nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    ollama_name="nemotron-3-nano:30b",
    mlx_name="mlx-community/NVIDIA-Nemotron-3-Nano-30B-A3B-4bit",
    openai_name="nvidia/nemotron-3-nano-30b-a3b",
    bedrock_name="nvidia.nemotron-nano-3-30b",
    bedrock_litellm_name="bedrock/converse/nvidia.nemotron-nano-3-30b",
    context_length=262144,
)
NVIDIA_NEMOTRON_3_SUPER_120B_A12B = ModelIdentifier(
    hf_model_name="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16",
    ollama_name="nemotron-3-super:120b",
    mlx_name="mlx-community/NVIDIA-Nemotron-3-Super-120B-A12B-4bit",
    openai_name="nvidia/nemotron-3-super-120b-a12b",
    bedrock_name="nvidia.nemotron-super-3-120b",
    bedrock_litellm_name="bedrock/converse/nvidia.nemotron-super-3-120b",
    context_length=262144,
)
NVIDIA_NEMOTRON_3_ULTRA_550B_A55B = ModelIdentifier(
    hf_model_name="nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
    ollama_name="nemotron-3-ultra:cloud",
    openai_name="nvidia/nemotron-3-ultra-550b-a55b",
    context_length=262144,
)
NVIDIA_NEMOTRON_3_NANO_OMNI_30B_A3B = ModelIdentifier(
    hf_model_name="nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16",
    ollama_name="nemotron3:33b",
    openai_name="nvidia/nemotron-3-nano-omni-30b-a3b-reasoning",
    context_length=131072,
)
NVIDIA_NEMOTRON_NANO_9B_V2 = ModelIdentifier(
    hf_model_name="nvidia/NVIDIA-Nemotron-Nano-9B-v2",
    mlx_name="mlx-community/NVIDIA-Nemotron-Nano-9B-v2-4bits",
    openai_name="nvidia/nvidia-nemotron-nano-9b-v2",
    bedrock_name="nvidia.nemotron-nano-9b-v2",
    bedrock_litellm_name="bedrock/converse/nvidia.nemotron-nano-9b-v2",
    context_length=131072,
)
NVIDIA_NEMOTRON_NANO_12B_V2 = ModelIdentifier(
    hf_model_name="nvidia/NVIDIA-Nemotron-Nano-12B-v2", context_length=131072
)
NVIDIA_LLAMA_3_1_NEMOTRON_NANO_8B = ModelIdentifier(
    hf_model_name="nvidia/Llama-3.1-Nemotron-Nano-8B-v1",
    openai_name="nvidia/llama-3.1-nemotron-nano-8b-v1",
    context_length=131072,
)
NVIDIA_LLAMA_3_3_NEMOTRON_SUPER_49B = ModelIdentifier(
    hf_model_name="nvidia/Llama-3_3-Nemotron-Super-49B-v1_5",
    openai_name="nvidia/llama-3.3-nemotron-super-49b-v1.5",
    context_length=131072,
)
NVIDIA_LLAMA_3_1_NEMOTRON_ULTRA_253B = ModelIdentifier(
    hf_model_name="nvidia/Llama-3_1-Nemotron-Ultra-253B-v1",
    openai_name="nvidia/llama-3.1-nemotron-ultra-253b-v1",
    context_length=131072,
)
NVIDIA_LLAMA_3_1_NEMOTRON_70B = ModelIdentifier(
    hf_model_name="nvidia/Llama-3.1-Nemotron-70B-Instruct-HF",
    ollama_name="nemotron:70b",
    mlx_name="mlx-community/Llama-3.1-Nemotron-70B-Instruct-HF-4bit",
    openai_name="nvidia/llama-3.1-nemotron-70b-instruct",
    context_length=131072,
)
NVIDIA_NEMOTRON_MINI_4B = ModelIdentifier(
    hf_model_name="nvidia/Nemotron-Mini-4B-Instruct",
    ollama_name="nemotron-mini:4b",
    openai_name="nvidia/nemotron-mini-4b-instruct",
    context_length=4096,
)

# --- OpenAI ----------------------------------------------------------------------------

OPENAI_GPT_OSS_20B = ModelIdentifier(
    hf_model_name="openai/gpt-oss-20b",
    ollama_name="gpt-oss:20b",
    bedrock_name="openai.gpt-oss-20b",
    bedrock_litellm_name="bedrock/converse/openai.gpt-oss-20b-1:0",
    context_length=131072,
)
OPENAI_GPT_OSS_120B = ModelIdentifier(
    hf_model_name="openai/gpt-oss-120b",
    ollama_name="gpt-oss:120b",
    bedrock_name="openai.gpt-oss-120b",
    bedrock_litellm_name="bedrock/converse/openai.gpt-oss-120b-1:0",
    context_length=131072,
)
OPENAI_GPT_5_1 = ModelIdentifier(openai_name="gpt-5.1")

# --- Others ----------------------------------------------------------------------------

GOOGLE_GEMMA_3N_E4B = ModelIdentifier(
    hf_model_name="google/gemma-3n-e4b-it", ollama_name="gemma3n:e4b", context_length=32768
)
MS_PHI_4_14B = ModelIdentifier(
    hf_model_name="microsoft/phi-4", ollama_name="phi4:14b", context_length=16384
)
MS_PHI_4_MINI_REASONING_4B = ModelIdentifier(
    hf_model_name="microsoft/Phi-4-mini-flash-reasoning",
    ollama_name="phi4-mini-reasoning:3.8b",
    context_length=131072,
)
DEEPSEEK_R1_8B = ModelIdentifier(
    hf_model_name="deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
    ollama_name="deepseek-r1:8b",
    context_length=131072,
)
HF_SMOLLM2_2B = ModelIdentifier(
    hf_model_name="HuggingFaceTB/SmolLM2-1.7B-Instruct",
    ollama_name="smollm2:1.7b",
    mlx_name="mlx-community/SmolLM2-1.7B-Instruct",
    context_length=8192,
)
HF_SMOLLM3_3B_no_ollama = ModelIdentifier(
    hf_model_name="HuggingFaceTB/SmolLM3-3B", context_length=65536
)

# Ours, not upstream's: the model the local backend runs when none is named.
HF_SMOLLM2_135M = ModelIdentifier(
    hf_model_name="HuggingFaceTB/SmolLM2-135M-Instruct",
    ollama_name="smollm2:135m",
    context_length=8192,
)
