"""When a sequence ends, and stop strings that never reach the client.

Text that could be the start of a stop string is held back until the next tokens
show whether it is; a stop string found ends the sequence and is cut from the text
along with anything after it.
"""

from __future__ import annotations

from mellea.engine.types import FinishReason, SamplingParams


class StopChecker:
    """Per-sequence stop conditions: stop tokens, length, and stop strings."""

    def __init__(self, params: SamplingParams, eos_ids: set[int], max_tokens: int) -> None:
        self.stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            self.stop_ids |= eos_ids
        self.max_tokens = max_tokens
        self.stops = [s for s in params.stop if s]
        self.held = ""  # text that may be the beginning of a stop string

    def check_token(self, token_id: int, num_output: int) -> FinishReason | None:
        """``"stop"`` for a stop/EOS token (whose text is not shown), ``"length"`` at
        ``max_tokens``, else ``None``."""
        if token_id in self.stop_ids:
            return "stop"
        if num_output >= self.max_tokens:
            return "length"
        return None

    def feed(self, text: str) -> tuple[str, bool]:
        """Add new text; return (text safe to emit, whether a stop string was hit)."""
        if not self.stops:
            return text, False
        pending = self.held + text
        hit = min((i for i in (pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if hit >= 0:
            self.held = ""
            return pending[:hit], True
        keep = self._partial_suffix(pending)
        self.held = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep], False

    def flush(self) -> str:
        """Text held back when the sequence ends for another reason."""
        held, self.held = self.held, ""
        return held

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest end of ``text`` that starts some stop string."""
        best = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:size]):
                    best = size
                    break
        return best
