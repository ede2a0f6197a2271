"""The engine's core: the scheduler, the model runner and the live sequences, no threads.

``step()`` is one iteration of continuous batching: pick the batch, build its
inputs, run the model, sample, append each sampled token to its sequence, and
return what happened to each request (a :class:`StepOutput`). Nothing here locks,
waits or decodes text, so tests drive it by calling ``step()``.

The threaded front (:mod:`mellea.engine.front`) runs a step in its three phases,
:meth:`EngineCore.schedule`, :meth:`EngineCore.execute` and :meth:`EngineCore.update`,
holding its lock for the first and last only, so requests can be added and aborted
while the model runs; it turns the tokens into text (:mod:`mellea.engine.output`)
after releasing the lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mellea.engine.block_manager import BlockManager
from mellea.engine.compute_path import choose_compute_path
from mellea.engine.config import (
    EngineConfig,
    ModelConfig,
    kv_cache_budget,
    resolve_device,
    resolve_dtype,
    resolve_format,
    resolve_kv_dtype,
)
from mellea.engine.constraints import Constraint
from mellea.engine.formats.resolve import faster_opt_in
from mellea.engine.lora import AdapterInfo, AdapterUse, LoraAdapter, load_peft_adapter
from mellea.engine.model_runner import ModelRunner, StepInputs
from mellea.engine.sampler import SamplingFailed
from mellea.engine.scheduler import ScheduledBatch, Scheduler
from mellea.engine.sequence import Sequence, StepOutput
from mellea.engine.stats import StepTimes, engine_stats
from mellea.engine.stops import StopChecker
from mellea.engine.switches import read_switches
from mellea.engine.types import FinishReason, SamplingParams, SamplingParamsError, TokenLogprobs
from mellea.engine.validation import check_engine_sizes, unsampleable, validate_request

log = logging.getLogger("mellea.engine")


@dataclass
class ScheduledStep:
    """A step after scheduling: its batch and model inputs (None if building them failed)."""

    batch: ScheduledBatch
    inputs: StepInputs | None
    failed: list[StepOutput] = field(default_factory=list)


@dataclass
class SampledStep:
    """A step after the forward pass: a token per sampled row, or why there are none."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs | None] | None = None
    failed_rows: dict[int, Exception] = field(default_factory=dict)  # only these rows
    error: Exception | None = None  # the whole batch


class EngineCore:
    """A continuous-batching core with a paged KV cache and prefix reuse, for one thread."""

    def __init__(
        self,
        path: str | Path,
        *,
        eos_token_ids: set[int] | frozenset[int] = frozenset(),
        kv_cache_memory: int | float | None = None,
        block_size: int = 16,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 2048,
        dtype: str | torch.dtype | None = None,
        device: str | None = None,
        model_config: ModelConfig | None = None,
        kv_cache_dtype: str | torch.dtype | None = None,
    ) -> None:
        check_engine_sizes(block_size, max_num_seqs, max_num_batched_tokens)
        path = Path(path)
        self.model_config = model_config or ModelConfig.from_dir(path)
        dev = resolve_device(device)
        cfg = EngineConfig(
            model_path=path,
            block_size=block_size,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            dtype=resolve_dtype(dtype, dev),
            weights=resolve_format(dtype, dev, path),
            device=dev,
        )
        cfg.kv_cache_dtype = resolve_kv_dtype(kv_cache_dtype, dev, cfg.dtype)
        if dtype == "auto" and (note := faster_opt_in(cfg.weights)) is not None:
            log.info(note)
        per_token = self.model_config.kv_bytes_per_token(cfg.kv_cache_dtype)
        model_len = self.model_config.max_position_embeddings
        budget = kv_cache_budget(kv_cache_memory, dev, max_num_seqs * model_len * per_token)
        num_blocks = budget // (block_size * per_token)
        if num_blocks < 1:
            raise ValueError(
                f"kv_cache_memory={budget} bytes holds no block; one block of "
                f"{block_size} tokens takes {block_size * per_token} bytes"
            )
        # A sequence must fit in the whole cache, or preemption could never make room.
        cfg.max_model_len = min(model_len, num_blocks * block_size)
        log.info(
            "KV cache: %s, %.2f GiB holds %d tokens (%d bytes a token)",
            str(cfg.kv_cache_dtype).removeprefix("torch."),
            num_blocks * block_size * per_token / (1 << 30),
            num_blocks * block_size,
            per_token,
        )
        self.config = cfg
        self.kv_cache_budget = budget
        self.eos_token_ids = set(eos_token_ids)
        cfg.compute_path = choose_compute_path(dev, cfg.dtype, read_switches())
        self.runner = ModelRunner(self.model_config, cfg, num_blocks)
        cfg.compute_path = self.runner.model.path  # CPP_FUSED is known once weights load
        self.blocks = BlockManager(num_blocks, block_size)
        self.scheduler = Scheduler(self.blocks, max_num_seqs, max_num_batched_tokens)
        self.requests: dict[str, Sequence] = {}  # the unfinished sequences, by request id
        self.num_steps = 0  # steps that ran the model

    @property
    def vocab_size(self) -> int:
        """Rows of the model's output: the token ids a request may hold."""
        return self.model_config.vocab_size

    @property
    def max_model_len(self) -> int:
        """Longest prompt + output, in tokens (the model's positions, or what the KV
        cache holds if that is less)."""
        return self.config.max_model_len

    @property
    def weights(self) -> str:
        """The weights' format (what ``dtype`` resolved to, e.g. ``int4`` for ``auto``)."""
        return self.config.weights

    def stats(self, times: StepTimes) -> dict[str, Any]:
        """KV cache, queue and prefix cache counters, the compute path the model runs,
        and the front's step ``times``."""
        return engine_stats(self, times)

    # -- requests ---------------------------------------------------------------

    def new_sequence(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        constraint: Constraint | None = None,
    ) -> Sequence:
        """Validate a request and build its sequence (not queued yet: see :meth:`add`).

        Reads only the fixed configuration, so it needs no lock. Raises
        ``PromptTooLongError`` and ``ValueError`` (see :func:`validate_request`).
        """
        vocab = self.model_config.vocab_size
        max_tokens = validate_request(prompt_ids, params, vocab, self.config.max_model_len)
        seq = Sequence(request_id, prompt_ids, params, max_tokens)
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        seq.stop_checker = StopChecker(params, self.eos_token_ids, max_tokens)
        seq.constraint = constraint
        if params.adapter is not None:
            seq.adapter = self._adapter_use(params.adapter, prompt_ids)
        return seq

    def _adapter_use(self, name: object, prompt_ids: list[int]) -> AdapterUse | None:
        adapters = self.runner.adapters
        if not isinstance(name, str) or name not in adapters.by_name:
            loaded = ", ".join(sorted(adapters.by_name)) or "none"
            raise SamplingParamsError(
                "adapter", f"no adapter named {name!r} is loaded (loaded: {loaded})"
            )
        return adapters.use(name, prompt_ids)

    # -- adapters -------------------------------------------------------------------

    def read_adapter(self, name: str, path: str | Path) -> LoraAdapter:
        """Read a PEFT adapter directory for this model (no lock needed); see
        :meth:`add_adapter`. Raises ``AdapterLoadError``."""
        from mellea.engine.lora import AdapterLoadError
        from mellea.engine.model import qkv_row_order

        if not isinstance(name, str) or not name.strip():
            raise AdapterLoadError("an adapter needs a non-empty name")
        if name in self.runner.adapters.by_name:
            raise AdapterLoadError(f"an adapter named {name!r} is already loaded")
        model = self.runner.model
        rows = qkv_row_order(self.model_config) if model.fast_cpu else None
        return load_peft_adapter(name, path, self.model_config, rows, self.config.device)

    def add_adapter(self, adapter: LoraAdapter) -> None:
        """Make a read adapter available to new requests (``SamplingParams.adapter``)."""
        self.runner.adapters.add(adapter)

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Read and add a PEFT adapter directory under ``name``."""
        self.add_adapter(self.read_adapter(name, path))

    @property
    def adapters(self) -> dict[str, AdapterInfo]:
        """Name -> rank, targets and whether it is an aLoRA, of each loaded adapter."""
        return self.runner.adapters.info()

    def add(self, seq: Sequence) -> None:
        """Queue a sequence; ``ValueError`` if its request id is already running."""
        if seq.request_id in self.requests:
            raise ValueError(f"request id {seq.request_id!r} is already running")
        self.requests[seq.request_id] = seq
        self.scheduler.add(seq)

    def abort(self, request_id: str, only: Sequence | None = None) -> Sequence | None:
        """End a request now and free its KV blocks; its sequence, or None if it was not
        running (or, with ``only``, was another sequence under the same id)."""
        seq = self.requests.get(request_id)
        if seq is None or (only is not None and seq is not only):
            return None
        self.finish(seq, "abort")
        return seq

    def finish(self, seq: Sequence, reason: FinishReason) -> bool:
        """End ``seq`` for ``reason`` and free its blocks; False if it had already ended."""
        if seq.is_finished:
            return False
        seq.finish_reason = reason
        self.scheduler.finish(seq)
        if self.requests.get(seq.request_id) is seq:
            del self.requests[seq.request_id]
        return True

    def fail(self, seqs: list[Sequence], error: Exception) -> list[StepOutput]:
        """Abort ``seqs`` because of ``error``; an output carrying it for each still running."""
        return [
            StepOutput(seq, finish_reason="abort", error=error)
            for seq in seqs
            if self.finish(seq, "abort")
        ]

    def has_work(self) -> bool:
        """Whether any sequence is waiting or running."""
        return self.scheduler.has_work()

    # -- one step -----------------------------------------------------------------

    def step(self) -> list[StepOutput]:
        """Schedule, run the model, sample and append one token per sampled sequence.

        Returns an output per request that got a token or failed; empty when nothing
        could run. One sequence's failure ends that sequence alone.
        """
        scheduled = self.schedule()
        if scheduled is None:
            return []
        return self.update(scheduled, self.execute(scheduled))

    def schedule(self) -> ScheduledStep | None:
        """Pick the next batch, reserve its blocks and build its inputs; None if none."""
        batch = self.scheduler.schedule()
        if not batch:
            return None
        try:
            return ScheduledStep(batch, self.runner.prepare(batch))
        except Exception as exc:  # fail the sequences that broke it; the rest run next step
            log.exception("preparing a step failed")
            seqs = _batch_seqs(batch)
            blamed = unsampleable(seqs, self.model_config.vocab_size) or seqs
            return ScheduledStep(batch, None, self.fail(blamed, exc))

    def execute(self, scheduled: ScheduledStep) -> SampledStep:
        """Run the forward pass and sample. Touches only the step's inputs, the model and
        the KV cache, never the scheduler: requests may come and go meanwhile."""
        if scheduled.inputs is None:
            return SampledStep()
        inputs, tuner = scheduled.inputs, getattr(self.runner, "threads", None)
        try:
            if tuner is None:
                tokens, logprobs = self.runner.execute(inputs)
            else:  # on CPU, at the thread count that is fastest now (cpu_threads)
                n = inputs.input_ids.numel()
                decode_only = inputs.meta.num_decode == n
                tokens, logprobs = tuner.step(lambda: self.runner.execute(inputs), n, decode_only)
        except SamplingFailed as partial:  # some sequences' settings broke sampling: only theirs
            log.error("sampling failed for %d sequence(s)", len(partial.failed), exc_info=partial)
            return SampledStep(partial.tokens.tolist(), partial.logprobs, partial.failed)
        except Exception as exc:  # e.g. out of memory: fail this batch's requests only
            log.exception("forward pass failed")
            return SampledStep(error=exc)
        return SampledStep(tokens, logprobs)

    def update(self, scheduled: ScheduledStep, sampled: SampledStep) -> list[StepOutput]:
        """Record a step: its tokens are in the cache, and each sampled token joins its
        sequence, which ends here on a stop token or at its length."""
        outputs = list(scheduled.failed)
        inputs = scheduled.inputs
        if inputs is None:
            return outputs
        if sampled.error is not None:
            return outputs + self.fail(_batch_seqs(scheduled.batch), sampled.error)
        for row, error in sampled.failed_rows.items():
            outputs += self.fail([inputs.sampled[row]], error)
        self.scheduler.finish_step(scheduled.batch)
        self.num_steps += 1
        for seq, entries in inputs.prompt.per_sequence():
            if not seq.is_finished:
                seq.prompt_logprobs.extend(entries)
        for seq in inputs.scored:  # max_tokens 0: the prompt is scored, nothing follows
            if self.finish(seq, "length"):
                outputs.append(StepOutput(seq, finish_reason="length"))
        for row, (seq, token) in enumerate(zip(inputs.sampled, sampled.tokens, strict=True)):
            if seq.is_finished:  # aborted while the model ran, or its sampling failed
                continue
            entry = sampled.logprobs[row] if sampled.logprobs is not None else None
            try:
                reason = seq.append(token)
            except Exception as exc:  # e.g. its grammar matcher broke: fail it alone
                log.exception("appending a token failed for request %s", seq.request_id)
                outputs += self.fail([seq], exc)
                continue
            if reason is not None:
                self.finish(seq, reason)
            outputs.append(StepOutput(seq, token, entry, reason))
        return outputs


def _batch_seqs(batch: ScheduledBatch) -> list[Sequence]:
    return batch.decodes + [seq for seq, _ in batch.prefills]
