"""The slower path for models the fast engine does not cover: transformers' own forward.

Any causal LM transformers can load (hybrid Mamba models such as Granite 4 "H", or
an architecture without a family in :mod:`mellea.engine.families`) runs here. The
:class:`FallbackCore` steps the running requests in turn, one token each, every
request with its own transformers cache; there is no batching and no paged KV. The
engine's front (:mod:`mellea.engine.front`) steps it on its thread, as it steps the
fast engine's core, and builds each token's text, stop strings and logprobs; tokens
are picked by the fast engine's sampler and grammar matcher. So every
:class:`SamplingParams` option (temperature, top-p/k, seed, penalties, stop strings,
logprobs, constrained decoding) behaves as it does there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from mellea.engine.config import resolve_device, resolve_dtype
from mellea.engine.constraints import Constraint
from mellea.engine.front import EngineFront
from mellea.engine.gguf_file import transformers_weights
from mellea.engine.loader import ResolvedModel
from mellea.engine.lora import AdapterLoadError
from mellea.engine.prompt_scores import score_rows
from mellea.engine.sampler import build_sampling_batch, sample
from mellea.engine.sequence import Sequence, SequenceStatus, StepOutput
from mellea.engine.stats import StepTimes
from mellea.engine.stops import StopChecker
from mellea.engine.types import FinishReason, SamplingParams, SamplingParamsError, TokenLogprobs
from mellea.engine.validation import validate_request


@dataclass
class FallbackTurn:
    """One step's work: the request whose turn it is, and its transformers cache."""

    seq: Sequence
    cache: Any  # None before its prompt ran


@dataclass
class FallbackToken:
    """What a turn's forward pass gave: the token, or the error that ended the request."""

    token: int | None = 0  # None: the prompt was scored alone (max_tokens 0)
    logprobs: TokenLogprobs | None = None
    cache: Any = None
    error: Exception | None = None
    prompt_logprobs: list[TokenLogprobs] | None = None  # the prompt's, when asked for


class FallbackCore:
    """Transformers' forward over the running requests, one token of one request a step
    (in turn); a :class:`~mellea.engine.interface.SteppingCore` without threads."""

    def __init__(
        self,
        model: ResolvedModel,
        dtype: str | torch.dtype | None = None,
        device: str | None = None,
    ) -> None:
        path = model.path
        self.model_id = model.model_id
        self.device = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, self.device)
        self._weights = str(torch_dtype).removeprefix("torch.")
        where, extra = transformers_weights(path)  # a GGUF's: transformers dequantizes it
        self.model = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, **extra)
        self.model.to(self.device).eval().requires_grad_(False)
        text_config = self.model.config.get_text_config()
        self._vocab_size = int(text_config.vocab_size)
        self._max_model_len = int(getattr(text_config, "max_position_embeddings", 0) or 4096)
        self.eos_token_ids: set[int] = set()
        # The unfinished sequences, by request id, in turn order (the next is first).
        self.requests: dict[str, Sequence] = {}
        self._caches: dict[str, Any] = {}  # request id -> its transformers cache
        self.num_steps = 0

    @property
    def vocab_size(self) -> int:
        """Rows of the model's output."""
        return self._vocab_size

    @property
    def max_model_len(self) -> int:
        """Longest prompt + output, in tokens (the model's positions)."""
        return self._max_model_len

    @property
    def weights(self) -> str:
        """The weights' format (transformers holds them in this dtype)."""
        return self._weights

    # -- adapters: none ----------------------------------------------------------

    @property
    def adapters(self) -> dict[str, Any]:
        """No adapters load here (see :meth:`read_adapter`)."""
        return {}

    def read_adapter(self, name: str, path: str | os.PathLike) -> Any:
        """Adapters run on the fast engine only: always ``AdapterLoadError``."""
        raise AdapterLoadError(
            f"cannot load adapter {name!r}: model {self.model_id!r} runs on transformers' "
            "forward (the fallback engine), which serves no LoRA adapters"
        )

    def add_adapter(self, adapter: Any) -> None:
        """Never reached: :meth:`read_adapter` refuses every adapter."""
        raise AdapterLoadError("the fallback engine serves no LoRA adapters")

    # -- requests ---------------------------------------------------------------

    def new_sequence(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        constraint: Constraint | None = None,
    ) -> Sequence:
        """Validate a request and build its sequence (``PromptTooLongError``, ``ValueError``)."""
        max_tokens = validate_request(prompt_ids, params, self.vocab_size, self.max_model_len)
        if params.adapter is not None:
            raise SamplingParamsError(
                "adapter", f"model {self.model_id!r} runs without adapters (no adapter is loaded)"
            )
        seq = Sequence(request_id, prompt_ids, params, max_tokens)
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        seq.stop_checker = StopChecker(params, self.eos_token_ids, max_tokens)
        seq.constraint = constraint
        return seq

    def add(self, seq: Sequence) -> None:
        """Run ``seq`` from the next turn on; ``ValueError`` if its id is already running."""
        if seq.request_id in self.requests:
            raise ValueError(f"request id {seq.request_id!r} is already running")
        seq.status = SequenceStatus.RUNNING
        self.requests[seq.request_id] = seq

    def abort(self, request_id: str, only: Sequence | None = None) -> Sequence | None:
        """End a request now and drop its cache; its sequence, or None (see the protocol)."""
        seq = self.requests.get(request_id)
        if seq is None or (only is not None and seq is not only):
            return None
        self.finish(seq, "abort")
        return seq

    def finish(self, seq: Sequence, reason: FinishReason) -> bool:
        """End ``seq`` for ``reason`` and drop its cache; False if it had already ended."""
        if seq.is_finished:
            return False
        seq.finish_reason = reason
        seq.status = SequenceStatus.FINISHED
        if self.requests.get(seq.request_id) is seq:
            del self.requests[seq.request_id]
            self._caches.pop(seq.request_id, None)
        return True

    def has_work(self) -> bool:
        """Whether any request is running."""
        return bool(self.requests)

    # -- one step -----------------------------------------------------------------

    def step(self) -> list[StepOutput]:
        """One token for the request whose turn it is; empty when none runs."""
        turn = self.schedule()
        if turn is None:
            return []
        return self.update(turn, self.execute(turn))

    def schedule(self) -> FallbackTurn | None:
        """The request whose turn it is (it goes to the back of the line)."""
        if not self.requests:
            return None
        request_id = next(iter(self.requests))
        seq = self.requests.pop(request_id)
        self.requests[request_id] = seq
        return FallbackTurn(seq, self._caches.get(request_id))

    def execute(self, scheduled: FallbackTurn) -> FallbackToken:
        """Run the forward for the turn's request (its whole prompt first) and sample."""
        seq, cache = scheduled.seq, scheduled.cache
        try:
            with torch.inference_mode():
                ids = seq.token_ids if cache is None else seq.token_ids[-1:]
                out = self.model(
                    input_ids=torch.tensor([ids], device=self.device),
                    past_key_values=cache,
                    use_cache=True,
                )
                prompt = None
                if cache is None and seq.params.prompt_logprobs is not None:
                    prompt = self._score_prompt(seq, out.logits[0, :-1, : self.vocab_size])
                if seq.max_tokens == 0:
                    return FallbackToken(None, None, out.past_key_values, prompt_logprobs=prompt)
                logits = out.logits[0, -1:, : self.vocab_size].float().cpu()
                tokens, logprobs = sample(logits, build_sampling_batch([seq], logits.shape[-1]))
        except Exception as exc:  # fail this request alone
            return FallbackToken(error=exc)
        entry = logprobs[0] if logprobs is not None else None
        return FallbackToken(int(tokens[0]), entry, out.past_key_values, prompt_logprobs=prompt)

    @staticmethod
    def _score_prompt(seq: Sequence, logits: torch.Tensor) -> list[TokenLogprobs]:
        """The prompt's tokens after the first, scored from the logits before each."""
        k = seq.params.prompt_logprobs or 0
        targets = seq.token_ids[1 : seq.prompt_len]
        rows = logits[: len(targets)].float().cpu()
        return score_rows(rows, targets, [k] * len(targets), lambda chunk, _ids: chunk)

    def update(self, scheduled: FallbackTurn, sampled: FallbackToken) -> list[StepOutput]:
        """Append the sampled token (unless the request ended meanwhile)."""
        seq = scheduled.seq
        if seq.is_finished:  # aborted while the model ran
            return []
        if sampled.error is not None:
            return self._fail(seq, sampled.error)
        self.num_steps += 1
        if sampled.prompt_logprobs is not None:
            seq.prompt_logprobs.extend(sampled.prompt_logprobs)
        if sampled.token is None:  # max_tokens 0: the prompt is scored, nothing follows
            self.finish(seq, "length")
            return [StepOutput(seq, finish_reason="length")]
        try:
            reason = seq.append(sampled.token)
        except Exception as exc:  # e.g. its grammar matcher broke
            return self._fail(seq, exc)
        self._caches[seq.request_id] = sampled.cache
        if reason is not None:
            self.finish(seq, reason)
        return [StepOutput(seq, sampled.token, sampled.logprobs, reason)]

    def _fail(self, seq: Sequence, error: Exception) -> list[StepOutput]:
        self.finish(seq, "abort")
        return [StepOutput(seq, finish_reason="abort", error=error)]

    def stats(self, times: StepTimes) -> dict[str, Any]:
        """Queue counters (the fallback has no KV cache of its own); ``times`` unused."""
        return {"engine": "transformers-fallback", "running": len(self.requests)}


class FallbackEngine(EngineFront[FallbackCore]):
    """Serve a model with transformers' forward pass, one request step at a time.

    An :class:`~mellea.engine.interface.InferenceEngine`, like
    :class:`mellea.engine.engine.Engine`: the same front over a :class:`FallbackCore`.
    """

    def __init__(
        self,
        model: ResolvedModel,
        *,
        dtype: str | torch.dtype | None = None,
        device: str | None = None,
        **_unused: Any,  # the fast engine's KV and batching settings
    ) -> None:
        # Built here, before the tokenizer: when transformers does not know the
        # architecture, that is the error (and no two threads import from transformers).
        core = FallbackCore(model, dtype, device)
        super().__init__(model.path, model.model_id, lambda: core, thread_name="mellea-fallback")
