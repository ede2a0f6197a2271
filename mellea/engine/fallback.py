"""The slower path for models the fast engine does not cover: transformers' own forward.

Any causal LM transformers can load (hybrid Mamba models such as Granite 4 "H", or
an architecture without a family in :mod:`mellea.engine.families`) runs here. One
thread steps the running requests in turn, one token each, every request with its
own transformers cache; there is no batching and no paged KV. Tokens are picked by
the fast engine's sampler and grammar matcher, and each token's text, stop strings
and logprobs are built by its :class:`DeltaBuilder`, so every :class:`SamplingParams`
option (temperature, top-p/k, seed, penalties, stop strings, logprobs, constrained
decoding) behaves as it does there.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import uuid
import weakref
from typing import Any

import torch

from mellea.engine.chat import render_chat
from mellea.engine.config import resolve_device, resolve_dtype
from mellea.engine.constraints import Constraint, ConstraintCompiler
from mellea.engine.engine import RequestStream
from mellea.engine.gguf_file import transformers_weights
from mellea.engine.loader import ResolvedModel
from mellea.engine.output import DeltaBuilder, eos_token_ids
from mellea.engine.sampler import build_sampling_batch, sample
from mellea.engine.sequence import Sequence, SequenceStatus
from mellea.engine.stops import StopChecker
from mellea.engine.types import FinishReason, RequestOutput, SamplingParams, SamplingParamsError
from mellea.engine.validation import validate_request

log = logging.getLogger("mellea.engine")


class FallbackEngine:
    """Serve a model with transformers' forward pass, one request step at a time.

    An :class:`~mellea.engine.interface.InferenceEngine`, like
    :class:`mellea.engine.engine.Engine`.
    """

    def __init__(
        self,
        model: ResolvedModel,
        *,
        dtype: str | torch.dtype | None = None,
        device: str | None = None,
        **_unused: Any,  # the fast engine's KV and batching settings
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = model.path
        dev = resolve_device(device)
        self.model_id = model.model_id
        torch_dtype = resolve_dtype(dtype, dev)
        self._weights = str(torch_dtype).removeprefix("torch.")
        # The model first: when transformers does not know the architecture, that is the error.
        where, extra = transformers_weights(path)  # a GGUF's: transformers dequantizes it
        self.model = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, **extra)
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self.model.to(dev).eval().requires_grad_(False)
        self.device = dev
        text_config = self.model.config.get_text_config()
        self.vocab_size = int(text_config.vocab_size)
        self._max_model_len = int(getattr(text_config, "max_position_embeddings", 0) or 4096)
        self.eos_token_ids = eos_token_ids(path, self._tokenizer)
        self._constraints = ConstraintCompiler(self._tokenizer, self.vocab_size)
        self._cond = threading.Condition()
        # request id -> (sequence, weak ref to its stream, its output builder, transformers
        # cache); weak, so a stream its reader dropped gets collected and aborts its request.
        self._running: dict[str, tuple[Sequence, weakref.ref[RequestStream], DeltaBuilder, Any]]
        self._running = {}
        self._deferred_aborts: collections.deque[tuple[str, Sequence]] = collections.deque()
        self._stopping = False
        self._steps = 0
        self._thread = threading.Thread(target=self._run, name="mellea-fallback", daemon=True)
        self._thread.start()

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer."""
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        """Longest prompt + output, in tokens (the model's positions)."""
        return self._max_model_len

    @property
    def weights(self) -> str:
        """The weights' format (transformers holds them in this dtype)."""
        return self._weights

    def apply_chat_template(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> list[int]:
        """Render chat messages into prompt tokens (see ``Engine.apply_chat_template``)."""
        return render_chat(
            self._tokenizer,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            chat_template=chat_template,
            template_kwargs=template_kwargs,
        )

    def compile_grammar(self, grammar: str) -> Constraint:
        """A matcher for ``grammar`` (see ``Engine.compile_grammar``)."""
        return self._constraints.matcher(grammar)

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        *,
        constraint: Constraint | None = None,
    ) -> RequestStream:
        """Validate and enqueue a request; stream its outputs (see ``Engine.add_request``)."""
        loop = asyncio.get_running_loop()
        ids = self._tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        max_tokens = validate_request(ids, params, self.vocab_size, self.max_model_len)
        if params.adapter is not None:
            raise SamplingParamsError(
                "adapter", f"model {self.model_id!r} runs without adapters (no adapter is loaded)"
            )
        request_id = request_id or uuid.uuid4().hex
        seq = Sequence(request_id, ids, params, max_tokens)
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        seq.stop_checker = StopChecker(params, self.eos_token_ids, max_tokens)
        if params.grammar is not None:
            seq.constraint = constraint or self._constraints.matcher(params.grammar)
        builder = DeltaBuilder(seq, self._tokenizer)
        stream = RequestStream(self, seq, loop)  # type: ignore[arg-type]
        with self._cond:
            if self._stopping:
                raise RuntimeError("the engine is shut down")
            if request_id in self._running:
                raise ValueError(f"request id {request_id!r} is already running")
            seq.status = SequenceStatus.RUNNING
            self._running[request_id] = (seq, weakref.ref(stream), builder, None)
            self._cond.notify()
        return stream

    def load_adapter(self, name: str, path: object) -> None:
        """Adapters run on the fast engine only: always ``AdapterLoadError``."""
        from mellea.engine.lora import AdapterLoadError

        raise AdapterLoadError(
            f"cannot load adapter {name!r}: model {self.model_id!r} runs on transformers' "
            "forward (the fallback engine), which serves no LoRA adapters"
        )

    @property
    def adapters(self) -> dict:
        """No adapters load here (see :meth:`load_adapter`)."""
        return {}

    def abort(self, request_id: str) -> None:
        """Stop a request; its stream ends with "abort"."""
        self._abort(request_id)

    def _abort(self, request_id: str, only: Sequence | None = None) -> None:
        with self._cond:
            entry = self._running.get(request_id)
            if entry is None or (only is not None and entry[0] is not only):
                return
            del self._running[request_id]
        seq, ref, builder, _ = entry
        self._finish(seq, "abort")
        stream = ref()
        if stream is not None:
            self._send(stream, builder.final("abort"))

    def stats(self) -> dict:
        """Queue counters (the fallback has no KV cache of its own)."""
        with self._cond:
            return {"engine": "transformers-fallback", "running": len(self._running)}

    def shutdown(self) -> None:
        """Stop the worker thread; unfinished requests end with "abort"."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        for request_id in list(self._running):
            self.abort(request_id)

    # -- the worker thread ------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._deferred_aborts or self._running):
                    self._cond.wait()
                if self._stopping:
                    return
                request_ids = list(self._running)
            while self._deferred_aborts:
                self._abort(*self._deferred_aborts.popleft())
            for request_id in request_ids:
                with self._cond:
                    entry = self._running.get(request_id)
                if entry is None:
                    continue
                try:
                    self._step(*entry)
                except Exception as exc:  # fail this request alone
                    log.exception("fallback step failed")
                    with self._cond:
                        self._running.pop(request_id, None)
                    self._finish(entry[0], "abort")
                    stream = entry[1]()
                    if stream is not None:
                        self._send(stream, RuntimeError(f"generation failed: {exc!r}"))

    @torch.inference_mode()
    def _step(
        self, seq: Sequence, ref: weakref.ref[RequestStream], builder: DeltaBuilder, cache: Any
    ) -> None:
        """Run one forward for ``seq`` (its whole prompt first), sample and deliver a token."""
        if ref() is None:  # its reader is gone
            self._abort(seq.request_id, seq)
            return
        fresh = cache is None
        ids = seq.token_ids if fresh else seq.token_ids[-1:]
        out = self.model(
            input_ids=torch.tensor([ids], device=self.device),
            past_key_values=cache,
            use_cache=True,
        )
        logits = out.logits[0, -1:, : self.vocab_size].float().cpu()
        tokens, logprobs = sample(logits, build_sampling_batch([seq], logits.shape[-1]))
        token = int(tokens[0])
        self._steps += 1
        entry = logprobs[0] if logprobs is not None else None
        delta = builder.add(token, entry, seq.append(token))
        reason = delta.finish_reason
        with self._cond:
            if self._running.get(seq.request_id, (None,))[0] is not seq:
                return  # aborted meanwhile
            if reason is None:
                self._running[seq.request_id] = (seq, ref, builder, out.past_key_values)
            else:
                del self._running[seq.request_id]
        if reason is not None:
            self._finish(seq, reason)
        stream = ref()
        if stream is not None:
            self._send(stream, delta)

    @staticmethod
    def _finish(seq: Sequence, reason: FinishReason) -> None:
        seq.finish_reason = reason
        seq.status = SequenceStatus.FINISHED

    def _send(self, stream: RequestStream, item: RequestOutput | BaseException) -> None:
        try:
            stream._loop.call_soon_threadsafe(stream._put, item)
        except RuntimeError:  # the request's loop is closed: nobody listens
            if isinstance(item, RequestOutput) and not item.finished:
                self._deferred_aborts.append((stream.request_id, stream._seq))
