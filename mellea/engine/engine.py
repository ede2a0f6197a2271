"""The engine: a background thread that schedules, runs the model, and streams outputs.

``add_request`` is called on an asyncio loop and returns a :class:`RequestStream`;
the engine thread sleeps on a condition while there is nothing to do, and hands
each step's outputs to the request's loop with ``call_soon_threadsafe``. The model
runs outside the lock, so adding and aborting requests never waits for a forward.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import threading
import time
import uuid
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from mellea.engine.block_manager import BlockManager
from mellea.engine.config import (
    EngineConfig,
    ModelConfig,
    kv_cache_budget,
    resolve_device,
    resolve_dtype,
)
from mellea.engine.constraints import Constraint, ConstraintCompiler
from mellea.engine.detokenizer import IncrementalDetokenizer
from mellea.engine.loader import DEFAULT_ALIASES, DEFAULT_MODEL_ID, resolve_model
from mellea.engine.model_runner import ModelRunner, StepInputs
from mellea.engine.sampler import SamplingFailed, build_sampling_batch
from mellea.engine.scheduler import ScheduledBatch, Scheduler
from mellea.engine.sequence import Sequence
from mellea.engine.stops import StopChecker
from mellea.engine.types import (
    PromptTooLongError,
    RequestOutput,
    SamplingParams,
    SamplingParamsError,
    TokenLogprobs,
)

log = logging.getLogger("mellea.engine")


class RequestStream:
    """Async iterator over one request's :class:`RequestOutput` deltas.

    Closing it (``aclose``), cancelling the task that reads it, or dropping it
    before the end aborts the request. Deltas that queued up while the reader was
    busy are merged into one.
    """

    def __init__(self, engine: Engine, seq: Sequence, loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = seq.request_id
        self._seq = seq
        self._engine = engine
        self._loop = loop
        self._queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._done = False  # the final output was handed to the reader

    def _put(self, item: RequestOutput | BaseException) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            self._abort()
            raise
        while not isinstance(item, BaseException) and not item.finished and not self._queue.empty():
            nxt = self._queue.get_nowait()
            if isinstance(nxt, BaseException):
                item = nxt
                break
            item = _merge(item, nxt)
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if item.finished:
            self._done = True
        return item

    async def aclose(self) -> None:
        """Stop reading; aborts the request if it has not finished."""
        self._abort()

    def _abort(self) -> None:
        if not self._done:
            self._done = True
            self._engine.abort(self.request_id)

    def __del__(self) -> None:
        if not self._done:
            # May run on any thread, even the engine's own while it holds its lock:
            # only queue the abort (a deque append is atomic).
            try:
                self._engine._deferred_aborts.append((self.request_id, self._seq))
            except Exception:  # interpreter shutdown
                pass


def _merge(a: RequestOutput, b: RequestOutput) -> RequestOutput:
    logprobs = None
    if a.logprobs is not None or b.logprobs is not None:
        logprobs = (a.logprobs or []) + (b.logprobs or [])
    return replace(
        b,
        text=a.text + b.text,
        token_ids=a.token_ids + b.token_ids,
        logprobs=logprobs,
    )


class Engine:
    """A continuous-batching inference engine with a paged KV cache and prefix reuse."""

    def __init__(
        self,
        model: str | None = None,
        *,
        kv_cache_memory: int | float | None = None,
        block_size: int = 16,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 2048,
        dtype: str | torch.dtype | None = None,
        device: str | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        if block_size < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("block_size, max_num_seqs and max_num_batched_tokens must be >= 1")
        path = Path(resolve_model(model))
        self.model_id = DEFAULT_MODEL_ID if model in DEFAULT_ALIASES else str(model)
        self.model_config = ModelConfig.from_dir(path)
        dev = resolve_device(device)
        cfg = EngineConfig(
            model_path=path,
            block_size=block_size,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            dtype=resolve_dtype(dtype, dev),
            device=dev,
        )
        per_token = self.model_config.kv_bytes_per_token(cfg.dtype)
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
        self.config = cfg
        self.kv_cache_budget = budget
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self.eos_token_ids = _eos_ids(path, self._tokenizer)
        self.runner = ModelRunner(self.model_config, cfg, num_blocks)
        self._constraints = ConstraintCompiler(self._tokenizer, self.model_config.vocab_size)
        self.blocks = BlockManager(num_blocks, block_size)
        self.scheduler = Scheduler(self.blocks, max_num_seqs, max_num_batched_tokens)

        self._cond = threading.Condition()
        self._seqs: dict[str, Sequence] = {}
        # Weak, so a stream its reader dropped gets collected (and aborts its request).
        self._streams: dict[str, weakref.ref[RequestStream]] = {}
        # (request id, sequence) of streams dropped unread; the sequence tells a late
        # abort apart from a new request that reuses the id.
        self._deferred_aborts: collections.deque[tuple[str, Sequence]] = collections.deque()
        self._stopping = False
        self._steps = 0
        self._timing = {"schedule_s": 0.0, "forward_s": 0.0, "output_s": 0.0}
        self._thread = threading.Thread(target=self._run, name="mellea-engine", daemon=True)
        self._thread.start()

    # -- public API -------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer."""
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        """Longest prompt + output, in tokens."""
        return self.config.max_model_len

    def apply_chat_template(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> list[int]:
        """Render chat messages with the model's template (or ``chat_template``) and
        tokenize them; ``ChatTemplateError`` (a ValueError) when that cannot be done."""
        from mellea.engine.chat import render_chat

        return render_chat(
            self._tokenizer,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            chat_template=chat_template,
            template_kwargs=template_kwargs,
        )

    def compile_grammar(self, grammar: str) -> Constraint:
        """A matcher for ``grammar``, to pass to :meth:`add_request` as ``constraint``.

        Compiling a large grammar takes long enough to stall an event loop; this may
        run in a worker thread. Raises ``GrammarError`` (a ``ValueError``).
        """
        return self._constraints.matcher(grammar)

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        *,
        constraint: Constraint | None = None,
    ) -> RequestStream:
        """Validate and enqueue a request; stream its outputs.

        Raises :class:`PromptTooLongError` if the prompt leaves no room for a new
        token and ``ValueError`` for bad parameters. Call from a running asyncio loop.
        ``constraint``, from :meth:`compile_grammar` of ``params.grammar``, saves
        compiling the grammar here.
        """
        loop = asyncio.get_running_loop()
        ids = self._tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        max_tokens = self._validate(ids, params)
        request_id = request_id or uuid.uuid4().hex
        seq = Sequence(request_id, ids, params, max_tokens)
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        seq.detokenizer = IncrementalDetokenizer(self._tokenizer, ids)
        seq.stop_checker = StopChecker(params, self.eos_token_ids, max_tokens)
        if params.grammar is not None:  # GrammarError: a 400
            seq.constraint = constraint or self._constraints.matcher(params.grammar)
        stream = RequestStream(self, seq, loop)
        with self._cond:
            if self._stopping:
                raise RuntimeError("the engine is shut down")
            if request_id in self._seqs:
                raise ValueError(f"request id {request_id!r} is already running")
            self._seqs[request_id] = seq
            self._streams[request_id] = weakref.ref(stream)
            self.scheduler.add(seq)
            self._cond.notify()
        return stream

    def abort(self, request_id: str) -> None:
        """Stop a request and free its KV blocks now; its stream ends with "abort"."""
        self._abort(request_id)

    def _abort(self, request_id: str, only: Sequence | None = None) -> None:
        with self._cond:
            seq = self._seqs.get(request_id)
            if seq is None or seq.is_finished or (only is not None and seq is not only):
                return
            seq.finish_reason = "abort"
            self.scheduler.finish(seq)
            output = self._output(seq, "", [])
            stream = self._pop_stream(request_id)
            del self._seqs[request_id]
        if stream is not None:
            self._send(stream, output)

    def stats(self) -> dict:
        """KV cache and queue counters."""
        with self._cond:
            return {
                "kv_blocks_total": self.blocks.num_blocks,
                "kv_blocks_used": self.blocks.num_used,
                "kv_blocks_free": self.blocks.num_free,
                "kv_block_size": self.blocks.block_size,
                "kv_cache_bytes": self.runner.kv_cache_bytes,
                "kv_cache_budget_bytes": self.kv_cache_budget,
                "running": len(self.scheduler.running),
                "waiting": len(self.scheduler.waiting),
                "prefix_cache_queries": self.scheduler.prefix_queries,
                "prefix_cache_hits": self.scheduler.prefix_hits,
                "prefix_cache_hit_tokens": self.scheduler.prefix_hit_tokens,
                "prefix_cache_query_tokens": self.scheduler.prefix_query_tokens,
                "preemptions": self.scheduler.num_preemptions,
                "steps": self._steps,
                **{k: round(v, 3) for k, v in self._timing.items()},
            }

    def shutdown(self) -> None:
        """Stop the engine thread; unfinished requests end with "abort"."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        for request_id in list(self._seqs):
            self.abort(request_id)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- validation -------------------------------------------------------------

    def _validate(self, ids: list[int], params: SamplingParams) -> int:
        """Check a request; return its effective max_tokens."""
        if not ids:
            raise ValueError("the prompt is empty")
        vocab = self.model_config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"prompt token ids must be in [0, {vocab})")
        room = self.max_model_len - len(ids)
        if room < 1:
            raise PromptTooLongError(
                f"the prompt has {len(ids)} tokens, but the model's context holds "
                f"{self.max_model_len} tokens including at least one new token; "
                "shorten the prompt"
            )
        _check_params(params, vocab)
        p = params
        if p.max_tokens is None:
            return room
        return min(p.max_tokens, room)

    # -- the engine thread ------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._deferred_aborts or self.scheduler.has_work()):
                    self._cond.wait()
                if self._stopping:
                    return
            while self._deferred_aborts:
                self._abort(*self._deferred_aborts.popleft())
            try:
                if not self._step():
                    with self._cond:  # nothing could be scheduled: do not spin
                        self._cond.wait(0.01)
            except Exception as exc:  # a bug in the engine: fail everything, keep serving
                log.exception("engine step failed")
                with self._cond:
                    live = list(self._seqs.values())
                self._fail(live, exc)

    def _step(self) -> bool:
        """One scheduling step and forward pass; False when nothing was runnable."""
        t0 = time.perf_counter()
        with self._cond:
            batch = self.scheduler.schedule()
            if not batch:
                return False
            try:
                inputs = self.runner.prepare(batch)
            except Exception as exc:  # fail the sequences that broke it; the rest run next step
                log.exception("preparing a step failed")
                seqs = batch.decodes + [s for s, _ in batch.prefills]
                self._fail(_unsampleable(seqs, self.model_config.vocab_size) or seqs, exc)
                return True
        t1 = time.perf_counter()
        try:
            tokens, logprobs = self.runner.execute(inputs)
        except SamplingFailed as partial:  # some sequences' settings broke sampling: only theirs
            log.error("sampling failed for %d sequence(s)", len(partial.failed), exc_info=partial)
            for row, error in partial.failed.items():
                self._fail([inputs.sampled[row]], error)
            tokens, logprobs = partial.tokens.tolist(), partial.logprobs
        except Exception as exc:  # e.g. out of memory: fail this batch's requests only
            log.exception("forward pass failed")
            self._fail(batch.decodes + [s for s, _ in batch.prefills], exc)
            return True
        t2 = time.perf_counter()
        with self._cond:
            self._steps += 1
            deliveries = self._process(batch, inputs, tokens, logprobs)
        for stream, output in deliveries:
            self._send(stream, output)
        t3 = time.perf_counter()
        self._timing["schedule_s"] += t1 - t0
        self._timing["forward_s"] += t2 - t1
        self._timing["output_s"] += t3 - t2
        return True

    def _process(
        self,
        batch: ScheduledBatch,
        inputs: StepInputs,
        tokens: list[int],
        logprobs: list[TokenLogprobs | None] | None,
    ) -> list[tuple[RequestStream, RequestOutput]]:
        """Append sampled tokens, detokenize, check stops; finish what is done."""
        self.scheduler.finish_step(batch)
        deliveries = []
        for i, (seq, token) in enumerate(zip(inputs.sampled, tokens, strict=True)):
            if seq.is_finished:  # aborted while the model ran, or its sampling failed
                continue
            entry = logprobs[i] if logprobs is not None else None
            try:
                delivery = self._advance(seq, token, entry)
            except Exception as exc:  # this sequence's stops or text broke: fail it alone
                log.exception("output processing failed for request %s", seq.request_id)
                self._fail([seq], exc)
                continue
            if delivery is not None:
                deliveries.append(delivery)
        return deliveries

    def _advance(
        self, seq: Sequence, token: int, entry: TokenLogprobs | None
    ) -> tuple[RequestStream, RequestOutput] | None:
        """Append one sampled token to ``seq``; its output for its stream, if it has one."""
        seq.token_ids.append(token)
        stops, detok = seq.stop_checker, seq.detokenizer
        reason = stops.check_token(token, seq.num_output)
        if seq.constraint is not None and not seq.constraint.accept(token) and reason is None:
            reason = "stop"  # cannot happen with the mask applied; never run off-grammar
        if reason == "stop":  # a stop token: its own text (and logprobs) are not shown
            text, hit = stops.feed(detok.flush())
            entry = None
        else:
            text, hit = stops.feed(detok.step([token]))
            if reason is not None and not hit:
                more, hit = stops.feed(detok.flush())
                text += more
        if hit:
            reason = "stop"
        elif reason is not None:
            text += stops.flush()
        ref = self._streams.get(seq.request_id)
        stream = ref() if ref is not None else None
        if stream is None and reason is None:  # its reader is gone
            reason = "abort"
        if reason is not None:
            seq.finish_reason = reason
            self.scheduler.finish(seq)
            self._streams.pop(seq.request_id, None)
            self._seqs.pop(seq.request_id, None)
        if stream is None:
            return None
        shown = [entry] if entry is not None else []
        return stream, self._output(seq, text, [token], shown)

    def _pop_stream(self, request_id: str) -> RequestStream | None:
        ref = self._streams.pop(request_id, None)
        return ref() if ref is not None else None

    def _output(
        self,
        seq: Sequence,
        text: str,
        token_ids: list[int],
        logprobs: list[TokenLogprobs] | None = None,
    ) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            text=text,
            token_ids=token_ids,
            prompt_tokens=seq.prompt_len,
            completion_tokens=seq.num_output,
            cached_tokens=seq.num_cached,
            finished=seq.is_finished,
            finish_reason=seq.finish_reason,
            logprobs=(logprobs or []) if seq.params.logprobs is not None else None,
        )

    def _fail(self, seqs: list[Sequence], exc: Exception) -> None:
        failed = []
        with self._cond:
            for seq in seqs:
                if seq.is_finished:
                    continue
                seq.finish_reason = "abort"
                self.scheduler.finish(seq)
                self._seqs.pop(seq.request_id, None)
                stream = self._pop_stream(seq.request_id)
                if stream is not None:
                    failed.append(stream)
        for stream in failed:
            self._send(stream, RuntimeError(f"engine step failed: {exc!r}"))

    def _send(self, stream: RequestStream, item: RequestOutput | BaseException) -> None:
        try:
            stream._loop.call_soon_threadsafe(stream._put, item)
        except RuntimeError:  # the request's event loop is closed: nobody listens
            if isinstance(item, RequestOutput) and not item.finished:
                self._deferred_aborts.append((stream.request_id, stream._seq))


# Largest |logit bias| and |presence/frequency penalty|: far past any useful value, and
# small enough that float32 logits stay finite when it is added or multiplied by a count.
MAX_LOGIT_ADJUSTMENT = 1e6


def _check_params(p: SamplingParams, vocab: int) -> None:
    """Refuse values that would make sampling fail or overflow, so that a request with
    them fails alone at ``add_request`` instead of failing the batch it joins."""

    def bad(field: str, message: str) -> SamplingParamsError:
        return SamplingParamsError(field, f"{field} {message}")

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    for field in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty"):
        if not number(getattr(p, field)) or not math.isfinite(getattr(p, field)):
            raise bad(field, "must be a finite number")
    if not number(p.repetition_penalty) or not math.isfinite(p.repetition_penalty):
        raise bad("repetition_penalty", "must be a finite number")
    if p.temperature < 0:
        raise bad("temperature", "must be >= 0")
    if not 0 < p.top_p <= 1:
        raise bad("top_p", "must be in (0, 1]")
    if not isinstance(p.top_k, int) or p.top_k < 0:
        raise bad("top_k", "must be an integer >= 0 (0 turns it off)")
    if not 0 <= p.min_p <= 1:
        raise bad("min_p", "must be in [0, 1]")
    if p.repetition_penalty <= 0:
        raise bad("repetition_penalty", "must be > 0")
    for field in ("presence_penalty", "frequency_penalty"):
        if abs(getattr(p, field)) > MAX_LOGIT_ADJUSTMENT:
            raise bad(field, f"must be in [{-MAX_LOGIT_ADJUSTMENT:g}, {MAX_LOGIT_ADJUSTMENT:g}]")
    for token, value in p.logit_bias.items():
        if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < vocab:
            raise bad("logit_bias", f"token ids must be in [0, {vocab}), the model's vocabulary")
        if not number(value) or not math.isfinite(value) or abs(value) > MAX_LOGIT_ADJUSTMENT:
            raise bad(
                "logit_bias",
                f"values must be numbers in [{-MAX_LOGIT_ADJUSTMENT:g}, {MAX_LOGIT_ADJUSTMENT:g}]",
            )
    k = p.logprobs
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 20):
        raise bad("logprobs", "must be None or an integer in [0, 20]")
    if p.max_tokens is not None and (not isinstance(p.max_tokens, int) or p.max_tokens < 1):
        raise bad("max_tokens", "must be an integer >= 1")
    if p.seed is not None and (not isinstance(p.seed, int) or not -(2**63) <= p.seed < 2**64):
        raise bad("seed", "must be a 64-bit integer")


def _unsampleable(seqs: list[Sequence], vocab_size: int) -> list[Sequence]:
    """The sequences whose sampling settings cannot be built on their own."""
    bad = []
    for seq in seqs:
        try:
            build_sampling_batch([seq], vocab_size)
        except Exception:
            bad.append(seq)
    return bad


def _eos_ids(path: Path, tokenizer: Any) -> set[int]:
    """EOS ids from generation_config.json plus the tokenizer's EOS token."""
    ids: set[int] = set()
    gen = path / "generation_config.json"
    if gen.is_file():
        eos = json.loads(gen.read_text()).get("eos_token_id")
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
