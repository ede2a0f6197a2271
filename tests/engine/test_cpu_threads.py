"""The engine thread's choice of CPU threads (mellea/engine/cpu_threads.py)."""

from __future__ import annotations

import pytest
import torch

from mellea.engine import cpu_threads
from mellea.engine.cpu_threads import PROBE_EVERY_S, PROBE_STEPS, SWITCH_MARGIN, ThreadTuner
from mellea.engine.switches import THREADS_ENV


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def threads_set(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What the tuner asks torch for, recorded instead of applied."""
    calls: list[int] = []
    monkeypatch.setattr(cpu_threads.torch, "set_num_threads", calls.append)
    monkeypatch.delenv(THREADS_ENV, raising=False)
    return calls


def run(
    tuner: ThreadTuner, clock: Clock, threads_set: list[int], cost: dict[int, float], steps: int
):
    """``steps`` decode steps of 4 tokens; a step at n threads takes cost[n] seconds.
    Returns each step's thread count."""
    counts = []
    for _ in range(steps):
        tuner.before_step()
        counts.append(threads_set[-1])
        seconds = cost[counts[-1]]
        clock.now += seconds
        tuner.after_step(4, seconds, decode_only=True)
    return counts


def test_keeps_the_fastest_count_and_probes_again_when_the_machine_changes(threads_set):
    clock = Clock()
    tuner = ThreadTuner(most=4, clock=clock)
    quiet = {4: 0.010, 2: 0.016, 1: 0.030}
    run(tuner, clock, threads_set, quiet, 3 * (PROBE_STEPS + 1))  # one probe of 4, 2, 1
    assert set(threads_set) == {4, 2, 1} and tuner.current == 4
    run(tuner, clock, threads_set, quiet, 5)
    assert threads_set[-1] == 4  # kept between probes
    busy = {4: 0.080, 2: 0.012, 1: 0.020}  # a neighbour took cores: barriers wait
    clock.now += 2 * PROBE_EVERY_S  # the choice held, so the next probe came later
    # All three counts, then one step at 4 again: still far slower, so 2 wins at once.
    counts = run(tuner, clock, threads_set, busy, 3 * (PROBE_STEPS + 1) + 1)
    assert counts[-1] == 4 and tuner.current == 2
    run(tuner, clock, threads_set, busy, 3)
    assert threads_set[-1] == 2


def test_a_much_slower_count_is_dropped_after_one_step(threads_set):
    clock = Clock()
    tuner = ThreadTuner(most=2, clock=clock)
    run(tuner, clock, threads_set, {2: 0.010, 1: 0.030}, 2 * (PROBE_STEPS + 1))
    assert tuner.current == 2
    clock.now += 100.0
    busy = {2: 0.500, 1: 0.012}  # 1 thread is now the fast one: switch to it
    counts = run(tuner, clock, threads_set, busy, 2 * (PROBE_STEPS + 1) + 1)
    assert counts.count(2) == PROBE_STEPS + 2  # its block, and one step confirming it
    assert tuner.current == 1
    clock.now += 100.0
    counts = run(tuner, clock, threads_set, busy, 3 * PROBE_STEPS)
    # The probe timed 1 thread, then dropped 2 threads after a single slow step.
    assert counts.count(2) == 1 and counts[: PROBE_STEPS + 1] == [1] * (PROBE_STEPS + 1)
    assert tuner.current == 1


def test_a_machine_that_slowed_while_the_current_count_was_timed_keeps_it(threads_set):
    # The 1.7B model at batch 1 on a shared machine: its bandwidth fell by a third while
    # 2 threads were timed, and came back by the time 1 thread was. Timed again, 2
    # threads are the faster count, as they are on a quiet machine.
    clock = Clock()
    tuner = ThreadTuner(most=2, clock=clock)
    slow = {2: 0.0678, 1: 0.0606}
    quiet = {2: 0.0448, 1: 0.0655}
    counts = run(tuner, clock, threads_set, slow, PROBE_STEPS + 1)
    counts += run(tuner, clock, threads_set, quiet, 3 * (PROBE_STEPS + 1))
    assert tuner.current == 2 and counts[-1] == 2
    assert counts.count(1) == PROBE_STEPS + 1  # one block at 1 thread, then no switch


def test_a_count_a_little_faster_does_not_replace_the_current_one(threads_set):
    clock = Clock()
    tuner = ThreadTuner(most=2, clock=clock)
    close = {2: 0.050, 1: 0.050 / (SWITCH_MARGIN * 0.97)}
    counts = run(tuner, clock, threads_set, close, 2 * (PROBE_STEPS + 1))
    assert tuner.current == 2
    assert counts == [2] * (PROBE_STEPS + 1) + [1] * (PROBE_STEPS + 1)  # no confirming block
    clear = {2: 0.050, 1: 0.050 / (SWITCH_MARGIN * 1.05)}
    clock.now += 100.0
    counts = run(tuner, clock, threads_set, clear, 3 * (PROBE_STEPS + 1))
    assert counts[: 3 * (PROBE_STEPS + 1)] == (
        [2] * (PROBE_STEPS + 1) + [1] * (PROBE_STEPS + 1) + [2] * (PROBE_STEPS + 1)
    )
    assert tuner.current == 1


def test_a_large_model_at_batch_1_pays_one_step_at_one_thread(threads_set):
    # The 1.7B-shaped Q4_K_M file's batch-1 step: 44.8 ms on 2 threads, 65.5 ms on 1
    # (benchmarks/README.md). Each probe's steps at 1 thread slow the stream that is
    # decoding then; 1.46x slower is clear from one step.
    clock = Clock()
    tuner = ThreadTuner(most=2, clock=clock)
    counts = run(tuner, clock, threads_set, {2: 0.0448, 1: 0.0655}, 4 * (PROBE_STEPS + 1))
    assert tuner.current == 2
    assert counts.count(1) == 1


def test_prompt_steps_run_at_the_current_count_during_a_probe(threads_set):
    clock = Clock()
    tuner = ThreadTuner(most=2, clock=clock)
    quiet = {2: 0.010, 1: 0.012}  # close enough that 1 thread is timed in full
    run(tuner, clock, threads_set, quiet, PROBE_STEPS + 2)  # the probe is now at 1 thread
    assert threads_set[-1] == 1
    # A request arrives: its prompt step must not wait on the candidate's one thread.
    ran_at = tuner.step(lambda: threads_set[-1], 40, decode_only=False)
    assert ran_at == 2
    # The probe goes on at 1 thread, its first step again the switch's (not timed).
    counts = run(tuner, clock, threads_set, quiet, PROBE_STEPS + 1)
    assert counts == [1] * (PROBE_STEPS + 1)
    assert tuner.current == 2 and len(tuner._timed[1]) == PROBE_STEPS


def test_prompt_steps_do_not_count(threads_set):
    clock = Clock()
    tuner = ThreadTuner(most=2, clock=clock)
    for _ in range(50):  # prompt chunks only: the probe never ends
        tuner.before_step()
        tuner.after_step(512, 1.0, decode_only=False)
    assert tuner.current == 2 and threads_set == [2]


def test_counts_are_compared_at_one_step_size(threads_set):
    clock = Clock()
    tuner = ThreadTuner(most=2, clock=clock)

    def cost(threads: int, tokens: int) -> float:  # 2 threads win at every size
        return (0.010 + 0.001 * tokens) * (1.0 if threads == 2 else 1.6)

    # Streams join while the probe moves from 2 threads to 1: 2 is timed at 1 token a
    # step, 1 at 8, where a step's cost per token is far lower.
    sizes = [1] * (PROBE_STEPS + 1) + [8] * (4 * (PROBE_STEPS + 1))
    for tokens in sizes:
        tuner.before_step()
        seconds = cost(threads_set[-1], tokens)
        clock.now += seconds
        tuner.after_step(tokens, seconds, decode_only=True)
    assert tuner.current == 2  # per token across sizes, 1 thread would have looked faster
    assert threads_set.count(1) >= 1  # and 1 thread was timed again at 8 tokens


def test_an_env_setting_pins_the_count(threads_set, monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "1")
    clock = Clock()
    tuner = ThreadTuner(most=2, clock=clock)
    run(tuner, clock, threads_set, {1: 0.05, 2: 0.01}, 30)
    assert set(threads_set) == {1}


def test_single_threaded_loads_with_one_thread_and_restores_the_count():
    from mellea.engine.cpu_threads import single_threaded

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with single_threaded():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), single_threaded():
            raise RuntimeError("a failed load")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
