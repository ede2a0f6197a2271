"""How many threads a CPU decode step uses, chosen by what is fast on this machine now.

A decode step of a small model is ~120 parallel regions of tens of microseconds each,
and every region ends in a barrier. With as many threads as cores and one other busy
process on the machine, one of our threads keeps losing its core for a whole scheduler
slice (milliseconds) while the other waits at the barrier: a batch-1 int4 step of the
default model took 46 ms with 2 threads against 5.8 ms with 1 (2 cores, load ~4;
benchmarks/README.md). No fixed count is right: alone, 2 threads are faster. So the
engine thread measures: every few seconds it runs a few decode steps at each candidate
count (all cores, half, one), all at one step size, and keeps the fastest per token
until the next probe. A probe costs the steps it runs at a slower count, so a candidate
clearly slower than the current count (a 1.7B model at batch 1 on 1 thread of 2: 1.46x)
is dropped after one step, and prompt steps never run at a candidate: they run at the
count the last probe chose.

A shared machine's memory bandwidth drifts by 20-30 % within seconds, so blocks of
steps timed one after another can rank two counts wrongly (a quiet 2-core machine once
timed 2 threads at 67.8 ms per token and 1 at 60.6, then 1 at 72.2 and 2 at 49.2). So a
count replaces the current one only when it is :data:`SWITCH_MARGIN` times faster, and
only after the current count is timed once more, after the candidates: the faster of
its two blocks is what the candidate must beat. A neighbour's cost is far beyond the
margin (a batch-1 step 46.7 ms on 2 threads against 21.1 on 1).
``MELLEA_CPU_THREADS=N`` pins the count instead.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from mellea.engine.switches import read_switches

log = logging.getLogger(__name__)
T = TypeVar("T")

PROBE_STEPS = 4  # decode steps timed per candidate (after one to settle)
PROBE_EVERY_S = 3.0  # seconds between probes, doubled while the choice holds ...
PROBE_EVERY_MAX_S = 48.0  # ... up to this
ABANDON = 1.25  # a candidate this many times slower per token than the current is dropped
SWITCH_MARGIN = 1.15  # a count replaces the current one only when this much faster


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run the body with one torch thread on the calling thread, then restore the count.

    For loading a model: its tensor ops are short and memory-bound, so a second thread
    adds little, and on a busy machine every op's barrier waits for a thread that lost
    its core (a 1.7B Q4_1 GGUF built in 6.4-6.7 s with one thread against 23-26 s with
    two, 2 cores at load ~2.5; benchmarks/README.md)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _candidates(most: int, current: int) -> list[int]:
    """The counts a probe times, the current one first (the others' baseline)."""
    others = sorted({most, max(1, most // 2), 1} - {current}, reverse=True)
    return [current, *others]


class ThreadTuner:
    """Sets ``torch``'s thread count on the calling (engine) thread, step by step.

    Call :meth:`before_step` before a step (saying whether it is decode-only) and
    :meth:`after_step` after it with the step's tokens and seconds (or :meth:`step`);
    only decode-only steps are measured (a prompt chunk's cost per token is another
    matter), and only they run at a probe's candidate count.
    A probe costs little: a candidate that runs a step :data:`ABANDON` times slower
    than the current count is dropped at once, and while the choice holds the probes
    grow rarer."""

    def __init__(self, most: int | None = None, clock=time.perf_counter) -> None:
        self.most = most or torch.get_num_threads()
        self.pinned = read_switches().cpu_threads
        self.clock = clock
        self.current = self.pinned or self.most
        self._queue: list[int] = []  # candidates still to time in this probe
        self._timed: dict[int, list[float]] = {}  # candidate -> seconds per token
        self._first_block: float | None = None  # the current count's median, when confirming
        self._probe_tokens = 0  # the step size this probe times (0: not seen yet)
        self._next_probe = 0.0
        self._interval = PROBE_EVERY_S
        self._skip = 0
        self._threads_set = 0  # what torch has now on this thread (0: not set yet)

    def step(self, run: Callable[[], T], tokens: int, decode_only: bool) -> T:
        """``run()`` (one step of ``tokens`` tokens) at the thread count for it, timed."""
        self.before_step(decode_only)
        start = time.perf_counter()
        out = run()
        self.after_step(tokens, time.perf_counter() - start, decode_only)
        return out

    def _use(self, threads: int) -> None:
        if threads != self._threads_set:
            torch.set_num_threads(threads)
            self._threads_set = threads

    def before_step(self, decode_only: bool = True) -> None:
        """Start a probe when it is time; set the thread count for this step.

        A step with prompt tokens runs at the current count even during a probe: a
        request's first token waits for it, and at a slower candidate (one thread for a
        large model) it would wait the longer, for a measurement the probe discards."""
        if self.pinned or self.most <= 1:
            self._use(self.current)
            return
        if not self._queue and self.clock() >= self._next_probe:
            self._start_probe(0)
        if not decode_only:
            if self._queue and self._queue[0] != self.current:
                self._skip = max(self._skip, 1)  # the candidate's next step switches again
            self._use(self.current)
            return
        self._use(self._queue[0] if self._queue else self.current)

    def _start_probe(self, tokens: int) -> None:
        self._queue = _candidates(self.most, self.current)
        self._timed = {}
        self._first_block = None
        self._skip = 1
        self._probe_tokens = tokens

    def _median(self, threads: int) -> float:
        times = sorted(self._timed[threads])
        return times[len(times) // 2]

    def after_step(self, tokens: int, seconds: float, decode_only: bool) -> None:
        """Record a step; at a probe's end, keep the fastest count per token."""
        if not self._queue or not decode_only or tokens <= 0:
            return
        if tokens != self._probe_tokens:
            # A step's cost per token falls as its batch grows, so counts timed at
            # different sizes (streams joining or leaving mid-probe) are not comparable:
            # time them all again at this size, the current count first.
            if self._probe_tokens:
                self._start_probe(tokens)
                return
            self._probe_tokens = tokens
        candidate, per_token = self._queue[0], seconds / tokens
        baseline = self._timed.get(self.current) if candidate != self.current else None
        if baseline and per_token > ABANDON * self._median(self.current):
            self._timed[candidate] = [per_token]  # clearly slower: no more steps at it
            self._next_candidate()
            return
        if self._first_block is not None and per_token > ABANDON * self._best_other()[1]:
            self._timed[candidate] = [per_token]  # confirming: the current is still slow
            self._next_candidate()
            return
        if self._skip:  # the first step at a new count pays for the switch
            self._skip -= 1
            return
        times = self._timed.setdefault(candidate, [])
        times.append(per_token)
        if len(times) >= PROBE_STEPS:
            self._next_candidate()

    def _best_other(self) -> tuple[int, float]:
        """The fastest count timed in this probe other than the current one, and its
        median seconds per token."""
        others = [n for n in self._timed if n != self.current]
        best = min(others, key=self._median)
        return best, self._median(best)

    def _next_candidate(self) -> None:
        self._queue.pop(0)
        self._skip = 1
        if self._queue:
            return
        best, per_token = self._best_other()
        current = self._median(self.current)
        if self._first_block is None:
            if per_token * SWITCH_MARGIN < current:  # time the current count once more
                self._first_block = current
                self._timed[self.current] = []
                self._queue = [self.current]
                return
        else:
            current = min(current, self._first_block)
        if per_token * SWITCH_MARGIN < current:
            log.info(
                "CPU threads %d -> %d (ms per token: %s)",
                self.current,
                best,
                ", ".join(f"{n}: {self._median(n) * 1e3:.2f}" for n in self._timed),
            )
            self.current = best
            self._interval = PROBE_EVERY_S
        else:
            self._interval = min(2 * self._interval, PROBE_EVERY_MAX_S)
        self._first_block = None
        self._next_probe = self.clock() + self._interval
