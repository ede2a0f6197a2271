"""The batching engine: :class:`Engine`, the front (:mod:`mellea.engine.front`) over
:class:`~mellea.engine.core.EngineCore`, which its thread builds and steps."""

from __future__ import annotations

from pathlib import Path

import torch

from mellea.engine.block_manager import BlockManager
from mellea.engine.config import EngineConfig, ModelConfig
from mellea.engine.core import EngineCore
from mellea.engine.front import EngineFront
from mellea.engine.loader import ResolvedModel, locate_model
from mellea.engine.model_runner import ModelRunner
from mellea.engine.rope import import_transformers_rope, uses_transformers
from mellea.engine.scheduler import Scheduler
from mellea.engine.validation import check_engine_sizes


def _import_for_the_build(path: Path) -> ModelConfig | None:
    """Import on this thread what building the model at ``path`` will import from
    transformers (a scaled RoPE's functions; most models need nothing); returns the
    model's config for the build (None where it cannot be read). The engine thread
    builds the model while this thread imports and loads the tokenizer, and two
    threads importing from transformers at once can find a module half-initialized
    (``ImportError: cannot import name 'AutoConfig'``, met by a Llama 3 model)."""
    try:
        cfg = ModelConfig.from_dir(path)
    except Exception:  # the engine thread reads it again and raises, as the build's error
        return None
    if uses_transformers(cfg):
        import_transformers_rope(cfg)
    return cfg


class Engine(EngineFront[EngineCore]):
    """A continuous-batching inference engine with a paged KV cache and prefix reuse."""

    def __init__(
        self,
        model: str | ResolvedModel | None = None,
        *,
        kv_cache_memory: int | float | None = None,
        block_size: int = 16,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 2048,
        dtype: str | torch.dtype | None = None,
        device: str | None = None,
        kv_cache_dtype: str | torch.dtype | None = None,
    ) -> None:
        check_engine_sizes(block_size, max_num_seqs, max_num_batched_tokens)
        resolved = locate_model(model)  # as it is when the caller resolved it already
        path = resolved.path
        model_config = _import_for_the_build(path)

        def build() -> EngineCore:
            return EngineCore(
                path,
                kv_cache_memory=kv_cache_memory,
                block_size=block_size,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                dtype=dtype,
                device=device,
                model_config=model_config,
                kv_cache_dtype=kv_cache_dtype,
            )

        super().__init__(path, resolved.model_id, build, thread_name="mellea-engine")

    @property
    def config(self) -> EngineConfig:
        """The engine settings (model path, KV block size, batching limits, dtype, device)."""
        return self.core.config

    @property
    def model_config(self) -> ModelConfig:
        """The model's shape."""
        return self.core.model_config

    @property
    def kv_cache_budget(self) -> int:
        """Bytes given to the KV cache."""
        return self.core.kv_cache_budget

    @property
    def runner(self) -> ModelRunner:
        """The model runner (the model and its KV cache)."""
        return self.core.runner

    @property
    def blocks(self) -> BlockManager:
        """The KV block manager."""
        return self.core.blocks

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler."""
        return self.core.scheduler
