"""Fixed-size KV cache blocks: a free list, per-sequence block tables, a prefix cache.

A full block whose K/V are computed gets a content hash chained over the blocks
before it (hash of the previous block's hash and this block's token ids), so two
prompts that share a prefix share that prefix's blocks. Blocks are ref-counted;
a block whose count drops to zero goes back on the free list but keeps its hash,
so a later request can still reuse it, until it is taken for new tokens. The free
list is LRU: blocks are taken from its front and freed onto its back; blocks
without a hash are put in front, as nobody can reuse them.

A sequence's ``cache_salt`` (see ``SamplingParams``) seeds the chain of its first
block, so sequences with different salts never share a cached block. A block whose
K/V an adapter computed (see :mod:`mellea.engine.lora`) hashes the adapter's key in
too: a LoRA's from the first block, an aLoRA's from the block holding its activation
point, so an aLoRA request reuses the base model's blocks before it.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

from mellea.engine.sequence import Sequence


def block_hash(previous: bytes | None, token_ids: list[int], adapter: bytes | None = None) -> bytes:
    """Content hash of one block, chained over the hash of the block before it (and
    keyed by the adapter that computed it, if one did)."""
    digest = hashlib.blake2b(previous or b"", digest_size=16)
    digest.update(array("q", token_ids).tobytes())
    if adapter is not None:
        digest.update(adapter)
    return digest.digest()


def adapter_key(seq: Sequence, block: int, block_size: int) -> bytes | None:
    """The adapter key of ``seq``'s block number ``block``: None where the base model
    computed all of its tokens."""
    use = seq.adapter
    if use is None or (block + 1) * block_size <= use.start:
        return None
    return use.key


def salt_root(salt: str | None) -> bytes | None:
    """The hash a sequence's chain starts from: none without a salt, else one of its own."""
    if not salt:
        return None
    return hashlib.blake2b(
        salt.encode("utf-8", "surrogatepass"), digest_size=16, person=b"salt"
    ).digest()


class BlockManager:
    """Hands out KV cache blocks to sequences and keeps the prefix cache."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks <= 0:
            raise ValueError("the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self.hashes: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}  # hash -> block id
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free(self) -> int:
        """Blocks not referenced by any sequence (some may still hold cached prefixes)."""
        return len(self.free)

    @property
    def num_used(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.num_blocks - len(self.free)

    def blocks_for(self, num_tokens: int) -> int:
        """How many blocks hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks holding the longest prefix of ``seq``'s tokens (full blocks only).

        At least the last token is left out, so the model has something to compute
        logits from.
        """
        if not self.enable_prefix_caching:
            return []
        bs = self.block_size
        hits: list[int] = []
        previous = salt_root(seq.params.cache_salt)
        for i in range((seq.num_tokens - 1) // bs):
            h = block_hash(previous, seq.token_ids[i * bs : (i + 1) * bs], adapter_key(seq, i, bs))
            block = self.cached.get(h)
            if block is None:
                break
            hits.append(block)
            previous = h
        return hits

    def blocks_needed(self, seq: Sequence, num_tokens: int, hits: list[int] = ()) -> int:
        """Free blocks it takes for ``seq`` to hold ``num_tokens`` tokens.

        ``hits`` are prefix-cache blocks it would adopt; the ones now on the free list
        count too, since adopting takes them off it.
        """
        have = len(seq.block_table) + len(hits)
        revived = sum(1 for b in hits if self.ref_counts[b] == 0)
        return max(0, self.blocks_for(num_tokens) - have) + revived

    def adopt_prefix(self, seq: Sequence, hits: list[int]) -> None:
        """Give a new sequence the cached blocks of its prefix."""
        assert not seq.block_table
        previous = None
        for block in hits:
            if self.ref_counts[block] == 0:
                del self.free[block]
            self.ref_counts[block] += 1
            seq.block_table.append(block)
            previous = self.hashes[block]
            seq.block_hashes.append(previous)
        seq.num_computed = len(hits) * self.block_size

    def grow(self, seq: Sequence, num_tokens: int) -> None:
        """Extend ``seq``'s block table to hold ``num_tokens`` tokens (caller checked room)."""
        for _ in range(self.blocks_for(num_tokens) - len(seq.block_table)):
            block, _ = self.free.popitem(last=False)
            old = self.hashes[block]
            if old is not None:  # evict the cached prefix this block held
                del self.cached[old]
                self.hashes[block] = None
            self.ref_counts[block] = 1
            seq.block_table.append(block)

    def commit(self, seq: Sequence) -> None:
        """Hash the blocks of ``seq`` that became full and computed, for later reuse."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        for i in range(len(seq.block_hashes), seq.num_computed // bs):
            previous = (
                seq.block_hashes[-1] if seq.block_hashes else salt_root(seq.params.cache_salt)
            )
            h = block_hash(previous, seq.token_ids[i * bs : (i + 1) * bs], adapter_key(seq, i, bs))
            seq.block_hashes.append(h)
            block = seq.block_table[i]
            if h not in self.cached and self.hashes[block] is None:
                self.cached[h] = block
                self.hashes[block] = h

    def release(self, seq: Sequence) -> None:
        """Drop ``seq``'s references; blocks nobody uses go back on the free list.

        The tail is freed first, so a prefix outlives the blocks that follow it.
        """
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free[block] = None
                if self.hashes[block] is None:
                    self.free.move_to_end(block, last=False)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed = 0
