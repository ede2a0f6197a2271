"""The naive engine: one Hugging Face ``generate()`` per request, each in its own thread.

This is how servers without a batching engine serve a local model. It is the
baseline the benchmarks compare against, with the same ``add_request`` API as
:class:`mellea.engine.engine.Engine`; ``naive_hello.py`` serves it through ``m serve``
(a ``LocalBackend(engine=...)``).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

from mellea.engine.gguf_file import transformers_weights
from mellea.engine.loader import resolve_model
from mellea.engine.stops import StopChecker
from mellea.engine.types import PromptTooLongError, RequestOutput, SamplingParams


class HFGenerateEngine:
    """Serve requests with ``model.generate`` in a thread per request (no batching)."""

    def __init__(self, model: str | None = None, *, dtype: Any = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = resolve_model(model)
        self.model_id = str(model or "SmolLM2-135M-Instruct")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        where, extra = transformers_weights(path)  # a GGUF: transformers dequantizes it
        self.model = AutoModelForCausalLM.from_pretrained(
            where, dtype=dtype or torch.float32, **extra
        )
        self.model.eval()
        self.max_model_len = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self._cancelled: set[str] = set()

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Token ids of ``messages`` rendered with the model's chat template."""
        ids = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)

    def compile_grammar(self, grammar: str) -> None:
        """Refused: the baseline has no constrained decoding."""
        raise ValueError("constrained decoding needs the batching engine, not the naive baseline")

    def add_request(
        self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """Start ``generate()`` in a thread; return an async iterator of text deltas."""
        if params.grammar is not None:
            raise ValueError(
                "constrained decoding needs the batching engine, not the naive baseline"
            )
        if params.logprobs is not None:
            raise ValueError("logprobs are not supported by the naive hf engine")
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if len(ids) >= self.max_model_len:
            raise PromptTooLongError(
                f"the prompt has {len(ids)} tokens; this model's context is {self.max_model_len}"
            )
        rid = request_id or uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        threading.Thread(
            target=self._run, args=(rid, ids, params, loop, queue), daemon=True
        ).start()
        return self._drain(rid, queue)

    def abort(self, request_id: str) -> None:
        """Ask the request's ``generate()`` to stop at its next token."""
        self._cancelled.add(request_id)

    async def _drain(
        self, rid: str, queue: asyncio.Queue[RequestOutput | BaseException]
    ) -> AsyncIterator[RequestOutput]:
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finished:
                    return
        finally:
            self.abort(rid)

    def _run(
        self,
        rid: str,
        ids: list[int],
        params: SamplingParams,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[RequestOutput | BaseException],
    ) -> None:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList
        from transformers.generation.streamers import BaseStreamer

        engine = self
        emit = lambda item: loop.call_soon_threadsafe(queue.put_nowait, item)  # noqa: E731
        prompt_len = len(ids)
        generated: list[int] = []
        decoded = ""  # text of ``generated`` so far
        sent = ""  # what the client has: ``decoded`` less a possible stop string's start
        stopped = False
        stops = StopChecker(params, set(), params.max_tokens or self.max_model_len)

        class Streamer(BaseStreamer):
            first = True

            def put(self, value: torch.Tensor) -> None:
                if self.first:  # generate() first hands over the prompt itself
                    self.first = False
                    return
                nonlocal decoded, sent, stopped
                generated.extend(value.flatten().tolist())
                text = engine.tokenizer.decode(generated, skip_special_tokens=True)
                if stopped or text.endswith("\ufffd") or not text.startswith(decoded):
                    return
                new, decoded = text[len(decoded) :], text
                safe, stopped = stops.feed(new)  # generate() also stops on a stop string
                sent += safe
                emit(RequestOutput(rid, safe, [], prompt_len, len(generated)))

            def end(self) -> None:
                pass

        class Cancelled(StoppingCriteria):
            def __call__(self, input_ids: torch.Tensor, scores: Any, **kw: Any) -> torch.Tensor:
                stop = rid in engine._cancelled
                return torch.full((input_ids.shape[0],), stop, dtype=torch.bool)

        max_new = params.max_tokens or (self.max_model_len - prompt_len)
        max_new = min(max_new, self.max_model_len - prompt_len)
        kwargs: dict[str, Any] = {"max_new_tokens": max_new, "do_sample": params.temperature > 0}
        if params.temperature > 0:
            kwargs.update(temperature=params.temperature, top_p=params.top_p)
            if params.top_k:
                kwargs["top_k"] = params.top_k
        if params.stop:
            kwargs.update(stop_strings=params.stop, tokenizer=self.tokenizer)
        if params.ignore_eos:
            kwargs["eos_token_id"] = None
            kwargs["min_new_tokens"] = max_new
        try:
            with torch.inference_mode():
                if params.seed is not None:
                    torch.manual_seed(params.seed)
                self.model.generate(
                    torch.tensor([ids]),
                    attention_mask=torch.ones(1, prompt_len, dtype=torch.long),
                    streamer=Streamer(),
                    stopping_criteria=StoppingCriteriaList([Cancelled()]),
                    pad_token_id=self.tokenizer.eos_token_id,
                    **kwargs,
                )
            text = self.tokenizer.decode(generated, skip_special_tokens=True)
            for stop in params.stop:
                if stop in text:
                    text = text[: text.index(stop)]
            delta = text[len(sent) :] if text.startswith(sent) else ""
            eos = generated and generated[-1] == self.tokenizer.eos_token_id
            reason = "stop" if eos or len(generated) < max_new else "length"
            if rid in self._cancelled:
                reason = "abort"
            emit(RequestOutput(rid, delta, [], prompt_len, len(generated), 0, True, reason))
        except BaseException as exc:  # hand the failure to the consumer, never lose it
            emit(exc)
        finally:
            self._cancelled.discard(rid)
