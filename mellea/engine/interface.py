"""What the rest of the project may use of an engine: :class:`InferenceEngine`.

The batching :class:`~mellea.engine.engine.Engine` and the transformers
:class:`~mellea.engine.fallback.FallbackEngine` both satisfy it (a test checks their
signatures against it), and so must whatever a ``Runtime``'s ``engine_factory``
builds. Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mellea.engine.types import RequestOutput, SamplingParams

if TYPE_CHECKING:
    from mellea.engine.constraints import Constraint


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


def missing_members(engine: object) -> list[str]:
    """The members of :class:`InferenceEngine` that ``engine`` lacks (empty: it has all)."""
    return [name for name in protocol_members() if not hasattr(engine, name)]


def protocol_members() -> list[str]:
    """The names :class:`InferenceEngine` requires, sorted."""
    names = set(InferenceEngine.__annotations__)
    names |= {n for n in vars(InferenceEngine) if not n.startswith("_")}
    return sorted(names)
