"""The engine's front, written once: an asyncio API over a core, stepped by one thread.

A core (:class:`~mellea.engine.interface.SteppingCore`: the batching
:class:`~mellea.engine.core.EngineCore`, or transformers' forward in
:mod:`mellea.engine.fallback`) knows nothing of threads. The front owns the thread
that steps it, the lock around it, each request's :class:`RequestStream`, abort and
shutdown.

``add_request`` is called on an asyncio loop and returns a :class:`RequestStream`.
The engine thread sleeps on a condition while there is nothing to do; each step it
holds the lock only to schedule (building the forward's inputs) and to append the
sampled tokens. The forward pass runs without the lock, so adding and aborting
requests never waits for one, and so do turning tokens into text, checking stop
strings and handing the outputs to each request's loop (``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from mellea.engine.chat import render_chat
from mellea.engine.constraints import Constraint, ConstraintCompiler
from mellea.engine.interface import SteppingCore
from mellea.engine.output import DeltaBuilder, eos_token_ids
from mellea.engine.sequence import Sequence, StepOutput
from mellea.engine.stats import StepTimes
from mellea.engine.tokenizer import load_tokenizer
from mellea.engine.types import FinishReason, RequestOutput, SamplingParams

if TYPE_CHECKING:
    from mellea.engine.lora import AdapterInfo

log = logging.getLogger("mellea.engine")

CoreT = TypeVar("CoreT", bound=SteppingCore)

# Fronts whose thread may still run. At interpreter exit each is shut down (its thread
# stopped and joined) before Python finalizes: a daemon engine thread left inside a
# torch op while native libraries tear down their statics could abort the process
# ("terminate called without an active exception") after a script's last line.
_live_fronts: weakref.WeakSet[EngineFront[Any]] = weakref.WeakSet()


@atexit.register
def _shutdown_live_fronts() -> None:
    for front in list(_live_fronts):
        try:
            front.shutdown()
        except Exception:  # exiting anyway: one engine's failure must not keep the others
            log.debug("engine shutdown at exit failed", exc_info=True)


class RequestStream:
    """Async iterator over one request's :class:`RequestOutput` deltas.

    Closing it (``aclose``), cancelling the task that reads it, or dropping it
    before the end aborts the request. Deltas that queued up while the reader was
    busy are merged into one.
    """

    def __init__(
        self, front: EngineFront[Any], seq: Sequence, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.request_id = seq.request_id
        self._seq = seq
        self._front = front
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
            self._front.abort(self.request_id)

    def __del__(self) -> None:
        if not self._done:
            # May run on any thread, even the engine's own while it holds its lock:
            # only queue the abort (a deque append is atomic).
            try:
                self._front._deferred_aborts.append((self.request_id, self._seq))
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
        prompt_logprobs=a.prompt_logprobs or b.prompt_logprobs,  # only a first one has them
    )


@dataclass
class _Request:
    """The front's side of a request: its sequence, stream and output builder."""

    seq: Sequence
    stream: weakref.ref[RequestStream]  # weak, so a stream its reader dropped gets collected
    builder: DeltaBuilder


class EngineFront(Generic[CoreT]):
    """An :class:`~mellea.engine.interface.InferenceEngine` over the core that
    ``build_core`` returns (run on the front's own thread: on CPU, one OpenMP team then
    runs the model's every op; two teams on two cores made each step ~1.7x slower), for
    the model directory ``path``, reported as ``model_id``.
    """

    core: CoreT  # set on the engine thread, once built

    def __init__(
        self, path: Path, model_id: str, build_core: Callable[[], CoreT], thread_name: str
    ) -> None:
        self.model_id = model_id
        # Guards the core and _requests; never held while the model runs or text is built.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._requests: dict[str, _Request] = {}
        # (request id, sequence) of streams dropped unread; the sequence tells a late
        # abort apart from a new request that reuses the id.
        self._deferred_aborts: collections.deque[tuple[str, Sequence]] = collections.deque()
        self._stopping = False
        self._times = StepTimes()
        self._built = threading.Event()
        self._build_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._main, args=(build_core,), name=thread_name, daemon=True
        )
        self._thread.start()
        _live_fronts.add(self)
        # Read while the engine thread builds the core: most of it is file reading and
        # Rust (tokenizers), so it overlaps the build rather than following it.
        try:
            self._tokenizer = load_tokenizer(path)
        except BaseException as exc:
            self._built.wait()
            if self._build_error is not None:  # the model's error says more (e.g. its type)
                self._thread.join()
                raise self._build_error from exc
            self.shutdown()  # the engine thread would otherwise step a core nobody uses
            raise
        self._built.wait()
        if self._build_error is not None:
            self._thread.join()
            raise self._build_error
        self.eos_token_ids = eos_token_ids(path, self._tokenizer)
        self.core.eos_token_ids = self.eos_token_ids
        self._constraints = ConstraintCompiler(self._tokenizer, self.core.vocab_size)

    # -- public API -------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer."""
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        """Longest prompt + output, in tokens."""
        return self.core.max_model_len

    @property
    def weights(self) -> str:
        """The weights' format (what ``dtype`` resolved to, e.g. ``int4`` for ``auto``)."""
        return self.core.weights

    def load_adapter(self, name: str, path: str | os.PathLike) -> None:
        """Load a PEFT LoRA or aLoRA adapter directory (``adapter_config.json`` and
        ``adapter_model.safetensors``) for requests to name in ``SamplingParams.adapter``.

        Raises ``AdapterLoadError`` (a ValueError) naming what is missing or wrong, when
        the name is taken, or when the core serves no adapters. Safe while requests run.
        """
        adapter = self.core.read_adapter(name, path)
        with self._cond:
            self.core.add_adapter(adapter)

    @property
    def adapters(self) -> dict[str, AdapterInfo]:
        """Name -> :class:`~mellea.engine.lora.AdapterInfo` (rank, targets, is_alora) of
        each loaded adapter."""
        with self._cond:
            return self.core.adapters

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
        request_id = request_id or uuid.uuid4().hex
        seq = self.core.new_sequence(request_id, ids, params)
        if params.grammar is not None:  # GrammarError: a 400
            seq.constraint = constraint or self._constraints.matcher(params.grammar)
        stream = RequestStream(self, seq, loop)
        request = _Request(seq, weakref.ref(stream), DeltaBuilder(seq, self._tokenizer))
        with self._cond:
            if self._stopping:
                raise RuntimeError("the engine is shut down")
            if request_id in self._requests:
                raise ValueError(f"request id {request_id!r} is already running")
            self.core.add(seq)
            self._requests[request_id] = request
            self._cond.notify()
        return stream

    def abort(self, request_id: str) -> None:
        """Stop a request and free what it holds now; its stream ends with "abort"."""
        self._abort(request_id)

    def _abort(self, request_id: str, only: Sequence | None = None) -> None:
        with self._cond:
            seq = self.core.abort(request_id, only)
            if seq is None:  # not running, or the engine thread is delivering its end
                return
            request = self._requests.pop(request_id, None)
        stream = request.stream() if request is not None else None
        if stream is not None:
            self._send(stream, request.builder.final("abort"))

    def stats(self) -> dict:
        """The core's counters (``running`` at least; the batching core adds its KV
        cache, queues, prefix cache and ``compute_path``) and the loop's step timings."""
        with self._cond:
            return self.core.stats(self._times)

    def shutdown(self) -> None:
        """Stop the engine thread; unfinished requests end with "abort"."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        for request_id in list(self._requests):
            self.abort(request_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- the engine thread ------------------------------------------------------

    def _main(self, build_core: Callable[[], CoreT]) -> None:
        """Build the core, then step it until shutdown."""
        try:
            self.core = build_core()
        except BaseException as exc:  # e.g. no memory for the KV cache: the constructor raises it
            self._build_error = exc
            return
        finally:
            self._built.set()
        self._run()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._deferred_aborts or self.core.has_work()):
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
                self._fail_all(exc)

    def _step(self) -> bool:
        """One step of the core; False when nothing was runnable."""
        t0 = time.perf_counter()
        with self._cond:
            scheduled = self.core.schedule()
        if scheduled is None:
            return False
        t1 = time.perf_counter()
        sampled = self.core.execute(scheduled)
        t2 = time.perf_counter()
        with self._cond:
            outputs = self.core.update(scheduled, sampled)
            claimed = [(out, req) for out in outputs if (req := self._request_of(out.seq))]
        self._deliver(claimed)
        t3 = time.perf_counter()
        self._times.schedule_s += t1 - t0
        self._times.forward_s += t2 - t1
        self._times.output_s += t3 - t2
        return True

    def _request_of(self, seq: Sequence) -> _Request | None:
        request = self._requests.get(seq.request_id)
        return request if request is not None and request.seq is seq else None

    def _deliver(self, claimed: list[tuple[StepOutput, _Request]]) -> None:
        """Turn each new token into its delta, end the requests a stop string (or a
        reader gone) ended, and hand the deltas over. Only the ending takes the lock."""
        rendered = [(req, *self._render(out, req)) for out, req in claimed]
        sends: list[tuple[RequestStream, RequestOutput | BaseException]] = []
        with self._cond:
            for req, stream, item, end in rendered:
                if self._requests.get(req.seq.request_id) is not req:
                    continue  # aborted meanwhile: its stream already got its last output
                if end is not None:
                    self.core.finish(req.seq, end)  # nothing to do if the core ended it
                if req.seq.is_finished:
                    del self._requests[req.seq.request_id]
                if stream is not None and item is not None:
                    sends.append((stream, item))
        for stream, item in sends:
            self._send(stream, item)

    def _render(
        self, out: StepOutput, req: _Request
    ) -> tuple[RequestStream | None, RequestOutput | BaseException | None, FinishReason | None]:
        """(the stream, what to send it, why the front ends the request if it does)."""
        stream = req.stream()
        if out.error is not None:  # the core failed and ended it
            return stream, RuntimeError(f"engine step failed: {out.error!r}"), None
        try:
            if out.token is None:  # a prompt scored alone (max_tokens 0): the core ended it
                delta = req.builder.final(out.finish_reason or "length")
            else:
                delta = req.builder.add(out.token, out.logprobs, out.finish_reason)
        except Exception as exc:  # this sequence's text or stops broke: fail it alone
            log.exception("output processing failed for request %s", req.seq.request_id)
            return stream, RuntimeError(f"engine step failed: {exc!r}"), "abort"
        if out.finish_reason is not None:  # the core ended it (a stop string may rename why)
            req.seq.finish_reason = delta.finish_reason
            return stream, delta, None
        if delta.finish_reason is not None:  # a stop string
            return stream, delta, delta.finish_reason
        if stream is None:  # its reader is gone
            return None, None, "abort"
        return stream, delta, None

    def _fail_all(self, exc: Exception) -> None:
        with self._cond:
            failed = list(self._requests.values())
            self._requests.clear()
            for req in failed:
                self.core.finish(req.seq, "abort")
        for req in failed:
            stream = req.stream()
            if stream is not None:
                self._send(stream, RuntimeError(f"engine step failed: {exc!r}"))

    def _send(self, stream: RequestStream, item: RequestOutput | BaseException) -> None:
        try:
            stream._loop.call_soon_threadsafe(stream._put, item)
        except RuntimeError:  # the request's event loop is closed: nobody listens
            if isinstance(item, RequestOutput) and not item.finished:
                self._deferred_aborts.append((stream.request_id, stream._seq))
