"""One request's streamed outputs: the text of its new tokens, stop strings, logprobs.

The engine loop decides which token a sequence gets and whether a stop token or the
length ends it (:meth:`Sequence.append`); what the client sees is built here, from
those tokens, by the engine and the transformers fallback alike. The text is decoded
incrementally (never half a character), text that may be the start of a stop string
is held back until the next tokens tell, and a stop string found ends the request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mellea.engine.detokenizer import IncrementalDetokenizer
from mellea.engine.sequence import Sequence
from mellea.engine.stops import StopChecker
from mellea.engine.types import FinishReason, RequestOutput, TokenLogprobs


class DeltaBuilder:
    """Turns one sequence's sampled tokens into :class:`RequestOutput` deltas.

    Not thread-safe: one thread (the engine's) feeds it, in token order.
    """

    def __init__(self, seq: Sequence, tokenizer: Any) -> None:
        if seq.stop_checker is None:
            raise ValueError("the sequence has no stop checker")
        self.seq = seq
        self.stops: StopChecker = seq.stop_checker
        self.detokenizer = IncrementalDetokenizer(tokenizer, seq.token_ids[: seq.prompt_len])
        self.prompt_sent = False  # whether the prompt's log-probabilities went out

    def add(
        self, token: int, logprobs: TokenLogprobs | None, reason: FinishReason | None
    ) -> RequestOutput:
        """The delta for ``token``, already appended to the sequence.

        ``reason`` is what :meth:`Sequence.append` said of it; a stop string completed by
        its text makes the delta's ``finish_reason`` "stop" (the caller then ends the
        sequence). A stop token's own text and logprobs are not shown.
        """
        stops, detok = self.stops, self.detokenizer
        if reason == "stop":
            text, hit = stops.feed(detok.flush())
            logprobs = None
        else:
            text, hit = stops.feed(detok.step([token]))
            if reason is not None and not hit:
                more, hit = stops.feed(detok.flush())
                text += more
        if hit:
            reason = "stop"
        elif reason is not None:
            text += stops.flush()
        return self._output(text, [token], [logprobs] if logprobs is not None else [], reason)

    def final(self, reason: FinishReason) -> RequestOutput:
        """The last, empty delta of a request ended from outside (an abort), or of one
        that only scored its prompt (``max_tokens=0``)."""
        return self._output("", [], [], reason)

    def _output(
        self,
        text: str,
        token_ids: list[int],
        logprobs: list[TokenLogprobs],
        reason: FinishReason | None,
    ) -> RequestOutput:
        seq = self.seq
        prompt = None
        if (
            seq.params.prompt_logprobs is not None
            and not self.prompt_sent
            and not seq.scores_prompt
        ):
            prompt, self.prompt_sent = list(seq.prompt_logprobs), True
        return RequestOutput(
            request_id=seq.request_id,
            text=text,
            token_ids=token_ids,
            prompt_tokens=seq.prompt_len,
            completion_tokens=seq.num_output,
            cached_tokens=seq.num_cached,
            finished=reason is not None,
            finish_reason=reason,
            logprobs=logprobs if seq.params.logprobs is not None else None,
            prompt_logprobs=prompt,
        )


def eos_token_ids(path: Path, tokenizer: Any) -> set[int]:
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
