"""Decode steps on a GPU replayed as CUDA graphs, one graph per padded batch size.

A decode-only step of the kernel path has fixed shapes for a given batch size and
no host syncs (the attention kernels read each sequence's length and block table
on the device), so its forward pass and LM head can be captured once and replayed:
one launch instead of some ten per layer, which at small batches is most of a
step's time. A batch is padded up to the next captured size; padded rows write no
KV (slot -1) and attend to nothing (length 0), and their logits are dropped.

Decode steps with adapter rows (LoRA, aLoRA) replay graphs of their own, captured at
the first such step of each size: the same forward pass with each projection's
gathered LoRA kernel, which reads every row's adapter slot from one more static
buffer (padded and base rows: -1). They are captured again after an adapter loads,
since they hold the adapters' stacks (:mod:`mellea.engine.lora.dense`).
"""

from __future__ import annotations

import logging

import torch

from mellea.engine.cpu_attention import AttentionMetadata
from mellea.engine.lora import AdapterSet, LoraStep
from mellea.engine.switches import read_switches

log = logging.getLogger("mellea.engine")

# Batch sizes that get a graph (those up to the engine's max_num_seqs, and it).
GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def graphs_enabled(device: torch.device) -> bool:
    """Whether decode runs as CUDA graphs here (``MELLEA_CUDA_GRAPHS=0`` turns it off)."""
    return device.type == "cuda" and read_switches().cuda_graphs


def graph_sizes(max_batch: int) -> list[int]:
    """The captured batch sizes for an engine that batches up to ``max_batch`` sequences."""
    sizes = [s for s in GRAPH_BATCH_SIZES if s < max_batch]
    return [*sizes, max_batch]


class DecodeGraphs:
    """Captured decode steps over static input buffers, for one model and KV cache."""

    def __init__(
        self,
        model: torch.nn.Module,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        max_batch: int,
        max_blocks: int,
        adapters: AdapterSet | None = None,
    ) -> None:
        device = kv_caches[0][0].device
        self.model, self.kv_caches, self.adapters = model, kv_caches, adapters
        self.sizes = graph_sizes(max_batch)
        top = self.sizes[-1]
        self.input_ids = torch.zeros(top, dtype=torch.long, device=device)
        self.positions = torch.zeros(top, dtype=torch.long, device=device)
        self.slots = torch.full((top,), -1, dtype=torch.long, device=device)
        self.lens = torch.zeros(top, dtype=torch.int32, device=device)
        self.tables = torch.zeros((top, max_blocks), dtype=torch.int32, device=device)
        self.adapter_slots = torch.full((top,), -1, dtype=torch.long, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        # Graphs with adapter rows, by size, for the adapters' stacks of one generation.
        self.lora_graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._lora_generation = -1
        self._lora_pool = None
        pool = None
        # Largest first, all in one memory pool: smaller graphs reuse its buffers.
        for size in reversed(self.sizes):
            graph, self.logits[size] = self._capture(self._forward(size), pool)
            pool = graph.pool()
            self.graphs[size] = graph
        torch.cuda.synchronize(device)
        log.info("captured decode CUDA graphs for batch sizes %s", self.sizes)

    def _capture(self, run, pool) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """Warm ``run`` up on a side stream (Triton compiles there), then capture it."""
        device = self.input_ids.device
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            run()
        torch.cuda.current_stream(device).wait_stream(stream)
        with torch.cuda.graph(graph, pool=pool):
            logits = run()
        return graph, logits

    def _lora_graph(self, size: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """The graph of a decode step of ``size`` rows with adapters, captured now if
        this size has none for the adapters loaded.

        Called with the step's inputs already in the static buffers: the warm-up run
        computes the step itself (its KV writes are the ones the replay makes again).
        """
        assert self.adapters is not None
        if self._lora_generation != self.adapters.generation:
            self.lora_graphs.clear()  # they hold the former stacks
            self._lora_pool = None
            self._lora_generation = self.adapters.generation
        if size not in self.lora_graphs:
            forward = self._forward(size)
            step = LoraStep(gathered=self.adapter_slots[:size])

            def run() -> torch.Tensor:
                self.adapters.current = step
                try:
                    return forward()
                finally:
                    self.adapters.current = None

            graph, logits = self._capture(run, self._lora_pool)
            self._lora_pool = graph.pool()
            self.lora_graphs[size] = (graph, logits)
            log.info("captured a decode CUDA graph with adapters for batch size %d", size)
        return self.lora_graphs[size]

    def _forward(self, size: int):
        meta = AttentionMetadata(slot_mapping=self.slots[:size], num_decode=size)
        meta.decode_context_lens = self.lens[:size]
        meta.decode_block_tables = self.tables[:size]
        meta.decode_max_len = 1  # read by the CPU paths only
        ids, positions = self.input_ids[:size], self.positions[:size]
        model, kv_caches = self.model, self.kv_caches
        return lambda: model.compute_logits(model(ids, positions, kv_caches, meta))

    def size_for(self, batch: int) -> int | None:
        """The captured size a batch of ``batch`` decodes runs at; None if too large."""
        return next((s for s in self.sizes if s >= batch), None)

    def run(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        lora: LoraStep | None = None,
    ) -> torch.Tensor | None:
        """fp32 logits [B, V] of a decode-only step, or None if no graph fits it.

        ``lora``: the step's adapter rows (from :meth:`AdapterSet.plan` on this GPU).

        The logits are a view of the graph's output: valid until the next replay.
        """
        n = input_ids.shape[0]
        size = self.size_for(n)
        tables = meta.decode_block_tables
        if size is None or tables is None or tables.shape[1] > self.tables.shape[1]:
            return None
        if lora is not None and (lora.gathered is None or self.adapters is None):
            return None
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slots[:n].copy_(meta.slot_mapping)
        self.lens[:n].copy_(meta.decode_context_lens)
        if size > n:
            self.slots[n:size].fill_(-1)
            self.lens[n:size].zero_()
        self.tables[:n, : tables.shape[1]].copy_(tables)
        if lora is None:
            self.graphs[size].replay()
            return self.logits[size][:n]
        self.adapter_slots[:n].copy_(lora.gathered)
        self.adapter_slots[n:size].fill_(-1)
        graph, logits = self._lora_graph(size)
        graph.replay()
        return logits[:n]
