"""A CPU model's weights in 2 MiB pages, which Linux gives anonymous memory only on request.

A decode step reads every weight once, from memory: with 4 KiB pages that is a page
walk every 4 KiB. Where the kernel's transparent huge pages are set to ``madvise``
(this machine's setting, and the default of several distributions), memory gets 2 MiB
pages only where ``madvise(MADV_HUGEPAGE)`` asks, and only in private memory. Moving
the built weights into such memory made a batch-1 step of the 1.7B-shaped Q4_K_M file
1.00-1.08x as fast (two threads, the models taking turns; benchmarks/README.md).
llama.cpp maps the file, whose page-cache pages come in large folios.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import torch
from torch import nn

from mellea.engine.heap import trim_malloc

HUGE_PAGE = 2 << 20
TRIM_EVERY = 128 << 20  # bytes moved between handing the old copies back to the OS
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode(setting: Path = THP_SETTING) -> str:
    """The kernel's transparent huge page mode: ``always``, ``madvise`` or ``never``
    (also where the setting cannot be read: not Linux)."""
    try:
        text = setting.read_text()
    except OSError:
        return "never"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "never"


def huge_page_tensor(like: torch.Tensor) -> torch.Tensor:
    """An empty CPU tensor of ``like``'s dtype and shape in an anonymous mapping advised
    for huge pages, its start 2 MiB aligned (the mapping lives as long as the tensor)."""
    size = like.numel() * like.element_size()
    # Private: Python's default for an anonymous map is MAP_SHARED, which is shmem,
    # whose huge pages follow shmem_enabled (usually never), not MADV_HUGEPAGE.
    region = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_HUGEPAGE)
    raw = torch.frombuffer(region, dtype=torch.uint8)  # holds the mapping
    start = -raw.data_ptr() % HUGE_PAGE
    return raw[start : start + size].view(like.dtype).view(like.shape)


def move_to_huge_pages(model: nn.Module, smallest: int = HUGE_PAGE) -> int:
    """Move every CPU buffer and parameter of ``model`` of at least ``smallest`` bytes
    into huge-page memory (the same values), handing the old copies back to the OS as
    it goes; returns the bytes moved (0 where the kernel gives no huge pages on request).
    Call it before anything keeps references to the weights (the fused decode plan)."""
    if thp_mode() == "never" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return 0
    moved = since_trim = 0
    copies: dict[int, torch.Tensor] = {}  # old data pointer -> its copy (shared storage)
    done: dict[int, torch.Tensor] = {}  # id of an old tensor -> what replaced it (ties)
    for module in model.modules():
        for table in (module._buffers, module._parameters):
            for name, tensor in table.items():
                if tensor is None or tensor.device.type != "cpu" or tensor.is_sparse:
                    continue
                size = tensor.numel() * tensor.element_size()
                # A view of a larger storage stays: copying it would not free the rest.
                whole = tensor.is_contiguous() and tensor.untyped_storage().nbytes() == size
                if size < smallest or not whole:
                    continue
                new = done.get(id(tensor))
                if new is None:
                    copy = copies.get(tensor.data_ptr())
                    if copy is None:
                        copy = huge_page_tensor(tensor)
                        copy.copy_(tensor)
                        copies[tensor.data_ptr()] = copy
                        moved += size
                        since_trim += size
                    new = copy
                    if isinstance(tensor, nn.Parameter):
                        new = nn.Parameter(copy, requires_grad=tensor.requires_grad)
                    done[id(tensor)] = new
                table[name] = new
                if since_trim >= TRIM_EVERY:
                    trim_malloc()
                    since_trim = 0
    trim_malloc()
    return moved
