"""One request as the engine sees it: its tokens, its place in the KV cache, its state."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mellea.engine.types import FinishReason, SamplingParams, TokenLogprobs

if TYPE_CHECKING:
    import torch

    from mellea.engine.constraints import Constraint
    from mellea.engine.lora import AdapterUse
    from mellea.engine.stops import StopChecker


class SequenceStatus(enum.Enum):
    """Where a sequence is: queued, in the running batch, or done."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """Token ids (prompt then output), the block table and progress of one request.

    ``num_computed`` counts the tokens whose K/V are in the cache; the tokens after it
    still have to go through the model (the whole prompt at first, one token while
    decoding, everything again after a preemption).
    """

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        max_tokens: int,
    ) -> None:
        self.request_id = request_id
        self.token_ids = list(prompt_token_ids)
        self.prompt_len = len(prompt_token_ids)
        self.params = params
        self.max_tokens = max_tokens
        self.status = SequenceStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.block_table: list[int] = []
        self.block_hashes: list[bytes] = []  # chained hashes of the full, computed blocks
        self.num_computed = 0
        self.num_cached = 0  # prompt tokens that came from the prefix cache at admission
        self.admitted = False
        self.generator: torch.Generator | None = None
        self.stop_checker: StopChecker | None = None
        self.constraint: Constraint | None = None  # the grammar the output must follow
        self.adapter: AdapterUse | None = None  # the LoRA it runs with, from where
        # The prompt tokens' log-probabilities scored so far (params.prompt_logprobs):
        # None for the first token, then one per prompt token, in order.
        self.prompt_logprobs: list[TokenLogprobs | None] = [None]

    @property
    def scores_prompt(self) -> bool:
        """Whether some of the prompt's log-probabilities are still to be computed."""
        return (
            self.params.prompt_logprobs is not None and len(self.prompt_logprobs) < self.prompt_len
        )

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens."""
        return len(self.token_ids)

    @property
    def num_output(self) -> int:
        """Tokens generated so far."""
        return len(self.token_ids) - self.prompt_len

    @property
    def output_ids(self) -> list[int]:
        """The generated token ids."""
        return self.token_ids[self.prompt_len :]

    def append(self, token: int) -> FinishReason | None:
        """Add a sampled token; why it ends the sequence, if it does.

        ``"stop"`` for a stop token or EOS (or, which the grammar mask rules out, a token
        the grammar refuses), ``"length"`` at ``max_tokens`` or when the budget closed
        a constrained answer (:mod:`mellea.engine.budget_guard`). Stop strings are text:
        the output side (:mod:`mellea.engine.output`) finds those.
        """
        self.token_ids.append(token)
        reason = (
            self.stop_checker.check_token(token, self.num_output) if self.stop_checker else None
        )
        if self.constraint is not None:
            if not self.constraint.accept(token) and reason is None:
                reason = "stop"  # cannot happen with the mask applied; never run off-grammar
            elif reason == "stop" and self.constraint.closed_by_budget:
                reason = "length"  # the token budget, not the model, closed the answer
        return reason

    @property
    def is_finished(self) -> bool:
        """Whether the sequence is done (stopped, hit its length, or aborted)."""
        return self.status is SequenceStatus.FINISHED

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, {self.status.value}, tokens={self.num_tokens}, "
            f"computed={self.num_computed}, blocks={len(self.block_table)})"
        )


@dataclass
class StepOutput:
    """What one step did to one request: a new token, or an error that ended it."""

    seq: Sequence
    token: int | None = None  # None with no error: the prompt was scored (max_tokens 0)
    logprobs: TokenLogprobs | None = None
    finish_reason: FinishReason | None = None  # set when this step ended the sequence
    error: Exception | None = None  # the sequence failed (and was aborted)
