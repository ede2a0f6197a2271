"""The log-probabilities of a prompt's own tokens, computed in the prompt pass.

A request with ``SamplingParams.prompt_logprobs`` gets, for each prompt token after
the first, its log-probability given the tokens before it, and the k most likely
tokens there. Position ``p``'s logits score token ``p + 1``; the model runner keeps
those rows of the step's flat batch (every prompt position in the chunk, not only
the last one a step samples from), :func:`score_rows` turns them into entries a
slice at a time, and the core appends them to the sequence. A prompt prefilled in
chunks is scored chunk by chunk; positions recomputed after a preemption are not
scored twice.

The values are what generated tokens' logprobs are: the fp32 log-softmax of the
model's logits (``Model.compute_logits``). Where the LM head scores in a compact
format and recomputes its best logits in fp32 (``formats.head.RefinedHead``), the
prompt's own token is recomputed in fp32 too, so its logprob is exact even when it
is far from the model's best guesses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mellea.engine.sequence import Sequence
from mellea.engine.types import TokenLogprobs

ROWS_PER_SLICE = 256  # rows of [vocab] fp32 logits held at once while scoring


@dataclass
class PromptRows:
    """The rows of one step's flat batch whose next token is a prompt token to score."""

    rows: list[int] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)  # the prompt token after each row
    ks: list[int] = field(default_factory=list)  # how many alternatives each row wants
    owners: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, rows)
    scores: list[TokenLogprobs] | None = None  # filled by the forward pass, in row order

    def add(self, seq: Sequence, first_row: int, start: int, n: int) -> None:
        """Keep the rows of ``seq``'s positions ``start .. start + n`` (flat rows from
        ``first_row``) that score a prompt token not scored yet."""
        k = seq.params.prompt_logprobs
        if k is None:
            return
        begin = max(start, len(seq.prompt_logprobs) - 1)
        end = min(start + n, seq.prompt_len - 1)
        if begin >= end:
            return
        self.rows.extend(range(first_row + begin - start, first_row + end - start))
        self.targets.extend(seq.token_ids[begin + 1 : end + 1])
        self.ks.extend([k] * (end - begin))
        self.owners.append((seq, end - begin))

    def __bool__(self) -> bool:
        return bool(self.rows)

    def per_sequence(self) -> list[tuple[Sequence, list[TokenLogprobs]]]:
        """The scores, split by the sequence they belong to (empty before scoring)."""
        if self.scores is None:
            return []
        out, first = [], 0
        for seq, count in self.owners:
            out.append((seq, self.scores[first : first + count]))
            first += count
        return out


def score_rows(
    hidden: torch.Tensor,
    targets: list[int],
    ks: list[int],
    logits_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> list[TokenLogprobs]:
    """An entry per row of ``hidden`` [N, hidden]: ``targets[i]``'s log-probability and
    the ``ks[i]`` best tokens, and its rank. ``logits_of(hidden, ids)`` gives fp32 logits [n, vocab]
    with the columns ``ids`` [n, 1] exact."""
    entries: list[TokenLogprobs] = []
    for first in range(0, len(targets), ROWS_PER_SLICE):
        last = min(first + ROWS_PER_SLICE, len(targets))
        ids = torch.tensor(targets[first:last], device=hidden.device).unsqueeze(1)
        logprobs = torch.log_softmax(logits_of(hidden[first:last], ids), dim=-1)
        picked = logprobs.gather(1, ids)
        ranks = (logprobs > picked).sum(dim=1).add(1).tolist()
        chosen = picked.squeeze(1).tolist()
        k = min(max(ks[first:last]), logprobs.shape[1])
        top_values, top_ids = (t.tolist() for t in logprobs.topk(k, dim=-1))
        for i, value in enumerate(chosen):
            want = ks[first + i]
            top = list(zip(top_ids[i][:want], top_values[i][:want], strict=True))
            entries.append(TokenLogprobs(targets[first + i], value, top, ranks[i]))
    return entries
