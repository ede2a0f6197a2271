"""Continuous batching: which sequences run in the next step, and how many tokens each.

Policy, every step, within ``max_num_batched_tokens``:

1. Running sequences first, oldest first: one token each for those decoding, the
   next chunk for those still prefilling (a long prompt is prefilled in chunks).
   When the KV cache has no block left for one of them, the newest running sequence
   is preempted (its blocks are freed and it is recomputed later from its tokens);
   if that is the sequence itself, it waits.
2. Then waiting sequences, first come first served, as long as the token budget,
   ``max_num_seqs`` and the free blocks allow (a small watermark of blocks is kept
   for the decodes of the running ones). A sequence's cached prefix costs nothing
   (a prompt whose log-probabilities are asked for is computed whole instead).

So new requests join between decode steps, and no request waits for another to end.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from mellea.engine.block_manager import BlockManager
from mellea.engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledBatch:
    """One step's work: ``(sequence, new tokens)`` pairs, decodes (1 token) first."""

    decodes: list[Sequence] = field(default_factory=list)
    prefills: list[tuple[Sequence, int]] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        """Tokens this step puts through the model."""
        return len(self.decodes) + sum(n for _, n in self.prefills)

    def __bool__(self) -> bool:
        return bool(self.decodes or self.prefills)


class Scheduler:
    """Holds the waiting queue and the running batch; decides each step."""

    def __init__(
        self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int
    ) -> None:
        self.blocks = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.watermark = max(1, block_manager.num_blocks // 100)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.prefix_queries = 0  # requests looked up in the prefix cache
        self.prefix_hits = 0  # requests that found a cached prefix
        self.prefix_query_tokens = 0
        self.prefix_hit_tokens = 0

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence."""
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        """Whether any sequence is waiting or running."""
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        """Pick the next step's sequences and reserve their KV blocks."""
        batch = ScheduledBatch()
        budget = self.max_num_batched_tokens
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed, budget)
            while self.blocks.blocks_needed(seq, seq.num_computed + n) > self.blocks.num_free:
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                self.blocks.grow(seq, seq.num_computed + n)
                self._add_to_batch(batch, seq, n)
                budget -= n
                i += 1
        if not preempted:
            self._admit(batch, budget)
        return batch

    def _admit(self, batch: ScheduledBatch, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            # A prompt still to be scored reads no cached block: its positions' logits
            # are needed, and a cached block has none (prompt_scores).
            hits = [] if seq.scores_prompt else self.blocks.match_prefix(seq)
            cached = len(hits) * self.blocks.block_size
            n = min(seq.num_tokens - cached, budget)
            needed = self.blocks.blocks_needed(seq, cached + n, hits)
            if needed + self.watermark > self.blocks.num_free and self.running:
                break
            if needed > self.blocks.num_free:
                break
            self.waiting.popleft()
            self.blocks.adopt_prefix(seq, hits)
            self.blocks.grow(seq, cached + n)
            if not seq.admitted:
                seq.admitted = True
                seq.num_cached = cached
                self.prefix_queries += 1
                self.prefix_hits += cached > 0
                self.prefix_query_tokens += seq.prompt_len
                self.prefix_hit_tokens += cached
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            self._add_to_batch(batch, seq, n)
            budget -= n

    @staticmethod
    def _add_to_batch(batch: ScheduledBatch, seq: Sequence, n: int) -> None:
        if n == 1:
            batch.decodes.append(seq)
        else:
            batch.prefills.append((seq, n))

    def _preempt(self, seq: Sequence) -> None:
        self.blocks.release(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def finish_step(self, batch: ScheduledBatch) -> None:
        """Record that the batch's tokens are now in the cache."""
        for seq in batch.decodes:
            if not seq.is_finished:
                seq.num_computed += 1
                self.blocks.commit(seq)
        for seq, n in batch.prefills:
            if not seq.is_finished:
                seq.num_computed += n
                self.blocks.commit(seq)

    def finish(self, seq: Sequence) -> None:
        """Take a finished (or aborted) sequence out and free its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        self.blocks.release(seq)
