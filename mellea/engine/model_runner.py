"""Owns the model and its KV cache; turns a scheduled batch into tensors and tokens."""

from __future__ import annotations

import contextlib
import math
import mmap
import warnings
from dataclasses import dataclass, field

import torch

from mellea.engine.compute_path import ComputePath
from mellea.engine.config import EngineConfig, ModelConfig
from mellea.engine.cuda_graphs import DecodeGraphs, graphs_enabled
from mellea.engine.formats.convert import convert_weights
from mellea.engine.formats.head import HeadScorer
from mellea.engine.heap import trim_malloc, tune_malloc
from mellea.engine.lora import AdapterSet, LoraStep
from mellea.engine.model import AttentionMetadata, build_model
from mellea.engine.prompt_scores import PromptRows, score_rows
from mellea.engine.sampler import SamplingBatch, build_sampling_batch, sample
from mellea.engine.scheduler import ScheduledBatch
from mellea.engine.sequence import Sequence
from mellea.engine.types import TokenLogprobs


@dataclass
class StepInputs:
    """Everything one forward pass needs, built while the scheduler state is locked."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    logits_indices: torch.Tensor | None  # rows of the flat batch to sample from; None: all
    sampled: list[Sequence]  # one per sampled row
    sampling: SamplingBatch
    lora: LoraStep | None = None  # the adapters' rows; None when every token is the base's
    prompt: PromptRows = field(default_factory=PromptRows)  # prompt tokens to score
    scored: list[Sequence] = field(default_factory=list)  # prompts scored, nothing to sample


def _table(rows: list[list[int]], device: torch.device) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor(
        [r + [0] * (width - len(r)) for r in rows], dtype=torch.int32, device=device
    )


def zeroed(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero tensor; on CPU backed by an anonymous mmap, so pages cost RAM only once used.

    Zeros, not garbage, because padded attention reads unused slots (masked, but
    NaN * 0 is NaN). The kernel hands out anonymous pages zeroed and on first touch,
    so the resident size of the KV cache follows what the sequences actually use.
    """
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    numel = math.prod(shape)
    buffer = mmap.mmap(-1, max(1, numel * torch.empty((), dtype=dtype).element_size()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frombuffer warns about non-resizable buffers
        return torch.frombuffer(buffer, dtype=dtype, count=numel).view(shape)


def _slot(seq: Sequence, position: int) -> int:
    """The adapter slot of ``seq``'s token at ``position``; -1 for the base model."""
    use = seq.adapter
    return -1 if use is None or position < use.start else use.slot


class ModelRunner:
    """Runs the model over a flat batch and samples the next token of each sequence."""

    def __init__(self, model_cfg: ModelConfig, cfg: EngineConfig, num_blocks: int) -> None:
        self.model_cfg = model_cfg
        self.cfg = cfg
        if cfg.device.type == "cpu":
            tune_malloc()
        self.device = cfg.device
        self.block_size = cfg.block_size
        # On CPU, how many threads a step takes, by what is fast here now (cpu_threads);
        # EngineCore.execute runs each step through it.
        from mellea.engine.cpu_threads import ThreadTuner, single_threaded
        from mellea.engine.huge_pages import HugePageMover

        cpu = cfg.device.type == "cpu"
        self.threads = ThreadTuner() if cpu else None
        loading = single_threaded() if cpu else contextlib.nullcontext()
        # On CPU, each layer moves into huge pages while the next ones are built, and
        # the LM head's scoring layer is built beside them (formats.head.HeadScorer).
        scorer = HeadScorer(cfg.weights, model_cfg.tie_word_embeddings)
        with loading, HugePageMover() as mover, scorer:  # the tuner sets the count later
            self.model = build_model(
                model_cfg,
                cfg.model_path,
                cfg.max_model_len,
                cfg.dtype,
                cfg.device,
                cfg.compute_path,
                cfg.weights,
                mover.submit if cpu else None,
                scorer.submit if cpu else None,
            )
            if cpu:  # bf16 or int8 weights under the fp32 forward pass
                convert_weights(self.model, cfg.weights, scorer)
                mover.finish(self.model)  # before the fused plan holds the weights
            # The load's freed temporaries, which the tuned heap keeps (0.25 GB after a
            # 1.7B model); trimming while loading instead cost twice the CPU time in
            # page faults and lowered the peak by nothing measurable.
            trim_malloc()
        self.model.plan_fused_decode()
        shape = (
            model_cfg.num_layers,
            num_blocks,
            cfg.block_size,
            model_cfg.num_kv_heads,
            model_cfg.head_dim,
        )
        kv_dtype = cfg.kv_cache_dtype or cfg.dtype
        self.k_cache = zeroed(shape, kv_dtype, cfg.device)
        self.v_cache = zeroed(shape, kv_dtype, cfg.device)
        self.kv_caches = list(zip(self.k_cache.unbind(0), self.v_cache.unbind(0), strict=True))
        self.adapters = AdapterSet()  # LoRA/aLoRA adapters (mellea.engine.lora)
        self.model.adapters = self.adapters
        self.graphs: DecodeGraphs | None = None
        if graphs_enabled(cfg.device):
            model_len = cfg.max_model_len or model_cfg.max_position_embeddings
            max_blocks = min(num_blocks, -(-model_len // cfg.block_size))
            with torch.inference_mode():
                self.graphs = DecodeGraphs(
                    self.model, self.kv_caches, cfg.max_num_seqs, max_blocks, self.adapters
                )

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes the K and V caches take."""
        return 2 * self.k_cache.numel() * self.k_cache.element_size()

    def prepare(self, batch: ScheduledBatch) -> StepInputs:
        """Flatten the batch: decode tokens first, then prefill chunks."""
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        sampled: list[Sequence] = []
        rows: list[int] = []
        prompt, scored = PromptRows(), []

        def ends_prompt(seq: Sequence) -> None:  # its last row samples, or it was scored only
            if seq.max_tokens == 0:
                scored.append(seq)
            else:
                rows.append(len(ids) - 1)
                sampled.append(seq)

        for seq in batch.decodes:
            p = seq.num_computed
            ids.append(seq.token_ids[p])
            positions.append(p)
            slots.append(seq.block_table[p // bs] * bs + p % bs)
            prompt.add(seq, len(ids) - 1, p, 1)
            if p + 1 == seq.num_tokens:
                ends_prompt(seq)
        meta = AttentionMetadata(slot_mapping=torch.empty(0), num_decode=len(batch.decodes))
        dev = self.device
        if batch.decodes:
            lens = [seq.num_computed + 1 for seq in batch.decodes]
            meta.decode_context_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
            meta.decode_max_len = max(lens)
            tables = _table([s.block_table for s in batch.decodes], dev)
            meta.decode_block_tables = tables
            torch_path = self.model.path is ComputePath.TORCH
            if torch_path:  # what the PyTorch decode path needs
                meta.decode_block_index = tables.view(-1).long()
            if min(lens) != meta.decode_max_len and torch_path:
                span = torch.arange(meta.decode_max_len, device=dev)
                keep = span[None, :] < meta.decode_context_lens[:, None]
                meta.decode_attn_mask = keep[:, None, None, :]
        if batch.prefills:
            cu, lens, q_lens = [0], [], []
            for seq, n in batch.prefills:
                start, table = seq.num_computed, seq.block_table
                prompt.add(seq, len(ids), start, n)
                ids.extend(seq.token_ids[start : start + n])
                positions.extend(range(start, start + n))
                slots.extend(table[p // bs] * bs + p % bs for p in range(start, start + n))
                cu.append(cu[-1] + n)
                lens.append(start + n)
                q_lens.append(n)
                meta.prefill_has_context |= start > 0
                if start + n == seq.num_tokens:
                    ends_prompt(seq)
            meta.prefill_cu_seqlens = torch.tensor(cu, dtype=torch.int32, device=dev)
            meta.prefill_context_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
            meta.prefill_block_tables = _table([s.block_table for s, _ in batch.prefills], dev)
            meta.prefill_query_lens = tuple(q_lens)
            meta.prefill_total_lens = tuple(lens)
        meta.slot_mapping = torch.tensor(slots, dtype=torch.long, device=dev)
        return StepInputs(
            input_ids=torch.tensor(ids, dtype=torch.long, device=dev),
            positions=torch.tensor(positions, dtype=torch.long, device=dev),
            meta=meta,
            logits_indices=None if len(rows) == len(ids) else torch.tensor(rows, device=dev),
            sampled=sampled,
            sampling=build_sampling_batch(sampled, self.model_cfg.vocab_size),
            lora=self._lora_step(batch),
            prompt=prompt,
            scored=scored,
        )

    def _lora_step(self, batch: ScheduledBatch) -> LoraStep | None:
        """Each token's adapter slot (-1: base; an aLoRA's tokens before its activation
        point too), in the flat batch's order, as groups; None when no token has one."""
        if not any(seq.adapter for seq in batch.decodes) and not any(
            seq.adapter for seq, _ in batch.prefills
        ):
            return None
        slots = [_slot(seq, seq.num_computed) for seq in batch.decodes]
        for seq, n in batch.prefills:
            use, start = seq.adapter, seq.num_computed
            if use is None:
                slots.extend([-1] * n)
            else:
                active = max(0, min(n, start + n - use.start))
                slots.extend([-1] * (n - active) + [use.slot] * active)
        return self.adapters.plan(slots, self.device)

    @torch.inference_mode()
    def execute(self, inputs: StepInputs) -> tuple[list[int], list[TokenLogprobs | None] | None]:
        """Run the forward pass; return the next token of each sampled sequence.

        Also returns their logprobs (see :func:`sample`): None when none asked. The
        scores of prompt tokens some request asked for go into ``inputs.prompt``.
        """
        if inputs.lora is not None:
            self.adapters.install(self.model)
        logits = self._graph_logits(inputs)
        if logits is None:
            self.adapters.current = inputs.lora
            try:
                hidden = self.model(inputs.input_ids, inputs.positions, self.kv_caches, inputs.meta)
            finally:
                self.adapters.current = None
            if inputs.prompt:
                prompt = inputs.prompt
                prompt.scores = score_rows(
                    hidden[prompt.rows], prompt.targets, prompt.ks, self.model.compute_logits
                )
            if not inputs.sampled:
                return [], None
            if inputs.logits_indices is not None:
                hidden = hidden[inputs.logits_indices]
            logits = self.model.compute_logits(hidden)
        # On a GPU the logits stay there: sampling runs on the device, and only the
        # tokens (and any logprobs asked for) come back.
        tokens, logprobs = sample(logits, inputs.sampling)
        return tokens.tolist(), logprobs

    def _graph_logits(self, inputs: StepInputs) -> torch.Tensor | None:
        """The logits of a decode-only step from its CUDA graph; None where none runs it."""
        meta = inputs.meta
        if (
            self.graphs is None
            or not inputs.sampled
            or inputs.logits_indices is not None
            or inputs.prompt
            or meta.num_decode != inputs.input_ids.shape[0]
        ):
            return None
        return self.graphs.run(inputs.input_ids, inputs.positions, meta, inputs.lora)
