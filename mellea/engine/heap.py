"""glibc's heap around loading and serving: hand freed memory back while a model
loads, keep it while steps run."""

from __future__ import annotations

import ctypes


def tune_malloc() -> bool:
    """Keep freed memory in glibc's heap instead of handing it back to the OS.

    Decode attention gathers the KV blocks into fresh tensors of several MB per layer
    and step. By default glibc serves such sizes with mmap, or trims them off the heap
    once freed, so every step page-faults the memory in again: at 32 sequences of
    500 tokens that was ~195k faults and 3x slower steps. A fixed mmap threshold of
    32 MiB and a high trim threshold make those blocks reused. Linux/glibc only;
    returns whether it applied.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, 32 << 20) == 1
        return libc.mallopt(m_trim_threshold, 1 << 30) == 1 and ok
    except (OSError, AttributeError):
        return False


def trim_malloc() -> bool:
    """Return the heap's free memory to the OS (glibc's ``malloc_trim``); Linux/glibc
    only, returns whether it ran."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False
