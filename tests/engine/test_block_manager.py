"""Block allocation, ref counts, the chained-hash prefix cache and LRU eviction."""

from __future__ import annotations

from mellea.engine.block_manager import BlockManager, block_hash
from mellea.engine.sequence import Sequence
from mellea.engine.types import SamplingParams


def seq(tokens: list[int], rid: str = "r") -> Sequence:
    return Sequence(rid, tokens, SamplingParams(), max_tokens=10)


def admit(bm: BlockManager, s: Sequence) -> int:
    """Adopt the cached prefix, allocate the rest, pretend it was computed; return hits."""
    hits = bm.match_prefix(s)
    bm.adopt_prefix(s, hits)
    bm.grow(s, s.num_tokens)
    s.num_computed = s.num_tokens
    bm.commit(s)
    return len(hits)


def test_grow_and_release():
    bm = BlockManager(num_blocks=8, block_size=4)
    s = seq(list(range(10)))
    assert bm.blocks_needed(s, 10) == 3
    bm.grow(s, 10)
    assert len(s.block_table) == 3 and bm.num_free == 5
    bm.grow(s, 12)  # still fits in 3 blocks
    assert len(s.block_table) == 3
    bm.grow(s, 13)
    assert len(s.block_table) == 4 and bm.num_used == 4
    bm.release(s)
    assert bm.num_free == 8 and s.block_table == [] and s.num_computed == 0


def test_hash_is_chained():
    a = block_hash(None, [1, 2, 3, 4])
    assert block_hash(None, [1, 2, 3, 4]) == a
    assert block_hash(a, [5, 6]) != block_hash(None, [5, 6])
    assert block_hash(None, [1, 2, 3, 5]) != a


def test_prefix_shared_with_ref_counts():
    bm = BlockManager(num_blocks=16, block_size=4)
    first = seq(list(range(10)), "a")
    assert admit(bm, first) == 0
    second = seq(list(range(8)) + [99, 98, 97], "b")
    assert admit(bm, second) == 2  # two full shared blocks
    assert second.block_table[:2] == first.block_table[:2]
    assert second.num_computed == 11
    shared = first.block_table[0]
    assert bm.ref_counts[shared] == 2
    bm.release(first)
    assert bm.ref_counts[shared] == 1
    assert shared not in bm.free


def test_last_token_never_cached():
    bm = BlockManager(num_blocks=16, block_size=4)
    admit(bm, seq(list(range(8)), "a"))
    again = seq(list(range(8)), "b")
    assert len(bm.match_prefix(again)) == 1  # 8 tokens: the 2nd block holds the last token


def test_freed_blocks_keep_their_hash_until_evicted():
    bm = BlockManager(num_blocks=4, block_size=4)
    a = seq(list(range(9)), "a")  # 3 blocks, 2 full ones get hashed
    admit(bm, a)
    bm.release(a)
    assert bm.num_free == 4
    # The unhashed tail block is reused first; the cached prefix survives.
    b = seq([50], "b")
    admit(bm, b)
    assert len(bm.match_prefix(seq(list(range(9)), "c"))) == 2
    # Taking every block evicts the prefix.
    d = seq(list(range(100, 112)), "d")
    admit(bm, d)
    assert bm.num_free == 0
    assert bm.match_prefix(seq(list(range(9)), "e")) == []
    assert len(bm.cached) == 3  # only d's own blocks


def test_lru_eviction_order():
    bm = BlockManager(num_blocks=4, block_size=2)
    old, new = seq([1, 2, 3], "old"), seq([7, 8, 9], "new")
    admit(bm, old)
    admit(bm, new)
    bm.release(old)
    bm.release(new)
    # Free list front: the two unhashed tails, then old's block, then new's.
    admit(bm, seq([20, 21, 22, 23, 24, 25], "x"))  # needs 3 blocks: evicts "old" only
    assert bm.match_prefix(seq([1, 2, 3], "q")) == []
    assert len(bm.match_prefix(seq([7, 8, 9], "q"))) == 1


def test_reviving_cached_block_counts_as_needed():
    bm = BlockManager(num_blocks=4, block_size=4)
    a = seq(list(range(9)), "a")
    admit(bm, a)
    bm.release(a)
    b = seq(list(range(9)), "b")
    hits = bm.match_prefix(b)
    # Two revived cached blocks + one new block for the 9th token.
    assert bm.blocks_needed(b, 9, hits) == 3


def test_duplicate_content_is_cached_once():
    bm = BlockManager(num_blocks=8, block_size=4)
    a, b = seq(list(range(5)), "a"), seq(list(range(5)), "b")
    for s in (a, b):  # both computed before either was committed
        bm.grow(s, 5)
        s.num_computed = 5
    bm.commit(a)
    bm.commit(b)
    assert len(bm.cached) == 1
    assert bm.hashes[b.block_table[0]] is None
    assert b.block_hashes == a.block_hashes


def test_a_cache_salt_partitions_the_prefix_cache():
    bm = BlockManager(num_blocks=16, block_size=4)
    tokens = list(range(13))

    def salted(salt: str | None, rid: str) -> Sequence:
        return Sequence(rid, tokens, SamplingParams(cache_salt=salt), max_tokens=10)

    assert admit(bm, salted("tenant-a", "a1")) == 0
    assert admit(bm, salted("tenant-b", "b1")) == 0  # same tokens, another salt: no hit
    assert admit(bm, salted(None, "n1")) == 0  # nor without one
    assert admit(bm, salted("tenant-a", "a2")) == 3
    assert admit(bm, salted("tenant-b", "b2")) == 3
    assert admit(bm, salted(None, "n2")) == 3
