"""The engine's counters: KV cache use, queues, prefix cache hits, step timings (and
the compute path the model runs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mellea.engine.core import EngineCore


@dataclass
class StepTimes:
    """Seconds spent in each part of the engine loop's steps, summed."""

    schedule_s: float = 0.0  # scheduling and building the inputs (under the lock)
    forward_s: float = 0.0  # the forward pass and sampling (off the lock)
    output_s: float = 0.0  # appending tokens (under the lock), then text and delivery (off it)


def engine_stats(core: EngineCore, times: StepTimes) -> dict:
    """A snapshot of ``core``'s counters and the loop's ``times`` (take it under the lock)."""
    blocks, scheduler = core.blocks, core.scheduler
    return {
        "compute_path": core.config.compute_path.value,
        "kv_blocks_total": blocks.num_blocks,
        "kv_blocks_used": blocks.num_used,
        "kv_blocks_free": blocks.num_free,
        "kv_block_size": blocks.block_size,
        "kv_cache_bytes": core.runner.kv_cache_bytes,
        "kv_cache_budget_bytes": core.kv_cache_budget,
        "running": len(scheduler.running),
        "waiting": len(scheduler.waiting),
        "prefix_cache_queries": scheduler.prefix_queries,
        "prefix_cache_hits": scheduler.prefix_hits,
        "prefix_cache_hit_tokens": scheduler.prefix_hit_tokens,
        "prefix_cache_query_tokens": scheduler.prefix_query_tokens,
        "preemptions": scheduler.num_preemptions,
        "steps": core.num_steps,
        **{k: round(v, 3) for k, v in asdict(times).items()},
    }
