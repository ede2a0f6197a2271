"""What the rest of the project may use of an engine (:class:`InferenceEngine`), and
what the engine's front steps (:class:`SteppingCore`).

The batching :class:`~mellea.engine.engine.Engine` and the transformers
:class:`~mellea.engine.fallback.FallbackEngine` both satisfy :class:`InferenceEngine`
(a test checks their signatures against it), and so must whatever a ``Runtime``'s
``engine_factory`` builds. Both are one front (:class:`mellea.engine.front.EngineFront`:
the thread, the lock, request streams, abort, shutdown) over a :class:`SteppingCore`:
:class:`~mellea.engine.core.EngineCore` or :class:`~mellea.engine.fallback.FallbackCore`.
Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mellea.engine.types import RequestOutput, SamplingParams

if TYPE_CHECKING:
    from os import PathLike

    from mellea.engine.constraints import Constraint
    from mellea.engine.sequence import Sequence, StepOutput
    from mellea.engine.stats import StepTimes
    from mellea.engine.types import FinishReason


@runtime_checkable
class InferenceEngine(Protocol):
    """A loaded model that renders prompts and streams generations.

    ``model_id`` is the name it is reported under (in stats and metrics); the runtime
    may set it. ``isinstance`` checks that every member is present; the signatures
    are checked by the conformance test.
    """

    model_id: str

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer of the model."""
        ...

    @property
    def max_model_len(self) -> int:
        """Longest prompt + output, in tokens."""
        ...

    @property
    def weights(self) -> str:
        """The format the weights are served in (``float32``, ``bfloat16``, ``int8``, ...)."""
        ...

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
        ...

    def compile_grammar(self, grammar: str) -> Constraint:
        """A matcher for ``grammar``, for :meth:`add_request`'s ``constraint``; may run
        in a worker thread. ``GrammarError`` (a ValueError) for a bad grammar."""
        ...

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        *,
        constraint: Constraint | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Validate and enqueue a request (from a running asyncio loop); stream its
        outputs. ``PromptTooLongError`` and ``ValueError`` for what cannot run."""
        ...

    def abort(self, request_id: str) -> None:
        """Stop a request; its stream ends with finish reason "abort"."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters for metrics: at least ``running``; the fast engine adds its KV cache,
        queues, prefix cache, step timings and ``compute_path``."""
        ...

    def shutdown(self) -> None:
        """Stop the engine's thread; unfinished requests end with "abort"."""
        ...


@runtime_checkable
class SteppingCore(Protocol):
    """A model and its live requests, stepped by one thread and locked by the front.

    A step runs in three phases so the front can hold its lock for the first and last
    only: :meth:`schedule` (pick the work and build its inputs), :meth:`execute` (the
    forward pass and sampling: touches only what ``schedule`` returned, the model and
    its cache) and :meth:`update` (append the tokens, end what finished). :meth:`step`
    runs the three at once, for a caller without threads. Nothing here renders text:
    the front turns tokens into text and ends a request on a stop string (:meth:`finish`).
    """

    eos_token_ids: set[int]  # set by the front once the tokenizer is read

    @property
    def vocab_size(self) -> int:
        """Rows of the model's output: the token ids a request may hold."""
        ...

    @property
    def max_model_len(self) -> int:
        """Longest prompt + output, in tokens."""
        ...

    @property
    def weights(self) -> str:
        """The format the weights are served in."""
        ...

    @property
    def adapters(self) -> dict[str, Any]:
        """Name -> what is known of each loaded adapter (empty where none can load)."""
        ...

    def read_adapter(self, name: str, path: str | PathLike) -> Any:
        """Read an adapter directory (no lock needed); ``AdapterLoadError`` if it cannot."""
        ...

    def add_adapter(self, adapter: Any) -> None:
        """Make a read adapter available to new requests (under the front's lock)."""
        ...

    def new_sequence(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        constraint: Constraint | None = None,
    ) -> Sequence:
        """Validate a request and build its sequence (no lock needed; not queued yet)."""
        ...

    def add(self, seq: Sequence) -> None:
        """Queue a sequence."""
        ...

    def abort(self, request_id: str, only: Sequence | None = None) -> Sequence | None:
        """End a request now; its sequence, or None if it was not running (or, with
        ``only``, was another sequence under the same id)."""
        ...

    def finish(self, seq: Sequence, reason: FinishReason) -> bool:
        """End ``seq`` for ``reason``; False if it had already ended."""
        ...

    def has_work(self) -> bool:
        """Whether any sequence is waiting or running."""
        ...

    def schedule(self) -> Any | None:
        """The next step's work and inputs; None if nothing can run."""
        ...

    def execute(self, scheduled: Any) -> Any:
        """Run the forward pass and sample (off the front's lock)."""
        ...

    def update(self, scheduled: Any, sampled: Any) -> list[StepOutput]:
        """Record a step's tokens; an output per request that got a token or failed."""
        ...

    def step(self) -> list[StepOutput]:
        """:meth:`schedule`, :meth:`execute` and :meth:`update` at once."""
        ...

    def stats(self, times: StepTimes) -> dict[str, Any]:
        """Counters for metrics (at least ``running``), with the front's step ``times``."""
        ...


def missing_members(engine: object) -> list[str]:
    """The members of :class:`InferenceEngine` that ``engine`` lacks (empty: it has all)."""
    return [name for name in protocol_members() if not hasattr(engine, name)]


def protocol_members() -> list[str]:
    """The names :class:`InferenceEngine` requires, sorted."""
    names = set(InferenceEngine.__annotations__)
    names |= {n for n in vars(InferenceEngine) if not n.startswith("_")}
    return sorted(names)
