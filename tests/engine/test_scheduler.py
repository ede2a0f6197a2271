"""Scheduling policy: token budget, chunked prefill, admission, preemption, FCFS."""

from __future__ import annotations

from mellea.engine.block_manager import BlockManager
from mellea.engine.scheduler import Scheduler
from mellea.engine.sequence import Sequence, SequenceStatus
from mellea.engine.types import SamplingParams


def seq(n: int, rid: str, start: int = 0) -> Sequence:
    return Sequence(rid, list(range(start, start + n)), SamplingParams(), max_tokens=100)


def step(sched: Scheduler):
    """Schedule, pretend the model ran and each sampled sequence got token 7."""
    batch = sched.schedule()
    sampled = [s for s in batch.decodes if s.num_computed + 1 == s.num_tokens]
    sampled += [s for s, n in batch.prefills if s.num_computed + n == s.num_tokens]
    sched.finish_step(batch)
    for s in sampled:
        s.token_ids.append(7)
    return batch


def test_prefill_then_decode_together():
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=100)
    a, b = seq(10, "a"), seq(6, "b", 100)
    sched.add(a)
    sched.add(b)
    batch = step(sched)
    assert [(s.request_id, n) for s, n in batch.prefills] == [("a", 10), ("b", 6)]
    sched.add(seq(5, "c", 200))
    batch = step(sched)  # a and b decode while c prefills in the same step
    assert [s.request_id for s in batch.decodes] == ["a", "b"]
    assert [(s.request_id, n) for s, n in batch.prefills] == [("c", 5)]


def test_token_budget_chunks_long_prompts():
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=8)
    a = seq(20, "a")
    sched.add(a)
    chunks = [step(sched).prefills[0][1] for _ in range(3)]
    assert chunks == [8, 8, 4]
    assert a.num_output == 1  # only the last chunk samples


def test_running_decodes_come_before_new_prefills():
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=10)
    sched.add(seq(4, "a"))
    step(sched)
    sched.add(seq(30, "b", 100))
    batch = step(sched)
    assert [s.request_id for s in batch.decodes] == ["a"]
    assert batch.prefills[0][1] == 9  # the rest of the budget


def test_max_num_seqs():
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=2, max_num_batched_tokens=100)
    for i in range(3):
        sched.add(seq(3, f"r{i}", 10 * i))
    step(sched)
    assert [s.request_id for s in sched.running] == ["r0", "r1"]
    assert [s.request_id for s in sched.waiting] == ["r2"]


def test_admission_bounded_by_free_blocks():
    sched = Scheduler(BlockManager(4, 4), max_num_seqs=8, max_num_batched_tokens=100)
    sched.add(seq(12, "a"))  # 3 blocks
    sched.add(seq(8, "b", 100))  # 2 blocks: does not fit now
    step(sched)
    assert [s.request_id for s in sched.running] == ["a"]
    sched.finish(sched.running[0])
    step(sched)
    assert [s.request_id for s in sched.running] == ["b"]


def test_preempts_newest_and_recomputes_fcfs():
    sched = Scheduler(BlockManager(4, 4), max_num_seqs=8, max_num_batched_tokens=100)
    sched.watermark = 0
    a, b = seq(4, "a"), seq(4, "b", 100)
    sched.add(a)
    sched.add(b)
    step(sched)  # each holds 1 full block and needs a 2nd one to decode
    step(sched)  # both decode: 4 blocks used
    for _ in range(3):
        step(sched)
    assert a.num_tokens == b.num_tokens == 9  # 9th token needs a 3rd block each: 6 > 4
    batch = step(sched)
    assert sched.num_preemptions == 1
    assert b.status is SequenceStatus.WAITING and b.num_computed == 0 and not b.block_table
    assert [s.request_id for s in batch.decodes] == ["a"]
    assert list(sched.waiting) == [b]
    # Once a is done, b is recomputed from all its tokens (prompt + output so far).
    sched.finish(a)
    batch = step(sched)
    assert batch.prefills[0] == (b, 5)  # its first block was still in the prefix cache


def test_preempting_itself_when_alone_in_front():
    sched = Scheduler(BlockManager(2, 4), max_num_seqs=8, max_num_batched_tokens=100)
    sched.watermark = 0
    a = seq(8, "a")
    sched.add(a)
    step(sched)  # 2 blocks, now 9 tokens: needs a 3rd that does not exist
    batch = step(sched)
    assert not batch
    assert a.status is SequenceStatus.WAITING


def test_finish_frees_blocks():
    bm = BlockManager(16, 4)
    sched = Scheduler(bm, max_num_seqs=8, max_num_batched_tokens=100)
    a = seq(10, "a")
    sched.add(a)
    step(sched)
    assert bm.num_used == 3
    sched.finish(a)
    assert bm.num_used == 0 and not sched.has_work()
    assert a.status is SequenceStatus.FINISHED


def test_prefix_hits_counted_once():
    bm = BlockManager(16, 4)
    sched = Scheduler(bm, max_num_seqs=8, max_num_batched_tokens=100)
    a = seq(10, "a")
    sched.add(a)
    step(sched)
    b = seq(10, "b")
    sched.add(b)
    batch = step(sched)
    assert b.num_cached == 8 and batch.prefills == [(b, 2)]
    assert (sched.prefix_hit_tokens, sched.prefix_query_tokens) == (8, 20)
