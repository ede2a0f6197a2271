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
import queue
import threading
from pathlib import Path

import numpy as np
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


class HugePageMover:
    """Moves modules' CPU buffers and parameters of at least ``smallest`` bytes into
    huge-page memory (the same values), handing the old copies back to the OS as it goes.

    :meth:`submit` queues a module the loader has finished for a thread of the mover's
    own, which copies while the loader builds the next layers: on a 2-core VM, first
    touching a fresh 1.1 GB (the 1.7B Q4_K_M file's weights) took 0.6-2.1 s, which this
    overlaps with the build instead of following it. :meth:`finish` waits for the thread
    and moves whatever of the model is left (the LM head, the tables). The thread copies
    with numpy: one thread, no OpenMP team of its own (a second team on two cores made
    the engine's workers sleep; see ``engine.py``). It leaves the heap untrimmed: the
    loader's next allocations take the old copies' memory, already touched, and
    ``malloc_trim`` on the mover's thread held the heap's lock against the loader (the
    build of the 1.7B file's layers took 4.5 s instead of 2.3). :meth:`finish` trims.

    A module whose class sets ``read_by_rows`` (an embedding table, a GGUF head's exact
    rows: a step reads a few rows of it, not all) stays where it is: its pages cost a
    step nothing, and copying it cost the load time and memory (an 8B-shaped file's two
    tables are 1.1 GB).

    Within one module (one pass), a tensor found in two places stays one tensor (ties),
    and two tensors on one storage get one copy; a submitted module must share no
    tensor with the rest of the model (a freshly built layer), as a tie across passes
    would become two copies. Only whole, contiguous storages move: a view's copy would
    not free the rest of its storage.
    """

    def __init__(self, smallest: int = HUGE_PAGE) -> None:
        self.smallest = smallest
        self.enabled = thp_mode() != "never" and hasattr(mmap, "MADV_HUGEPAGE")
        self.moved = 0  # bytes copied into huge pages
        self._since_trim = 0
        # The copies made (kept alive while the mover is, so their addresses stay
        # theirs): a tensor on one of them is in huge pages already.
        self._kept: list[torch.Tensor] = []
        self._huge: set[int] = set()
        self._queue: queue.SimpleQueue[nn.Module | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, module: nn.Module) -> None:
        """Move ``module``'s large tensors on the mover's thread; the caller leaves
        ``module``'s tensors alone until :meth:`finish` (references held stay valid)."""
        if not self.enabled:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mellea-huge-pages")
            self._thread.start()
        self._queue.put(module)

    def finish(self, model: nn.Module) -> int:
        """Wait for the submitted modules, move the rest of ``model``, hand the freed
        memory back; returns the bytes moved (0 where the kernel gives no huge pages)."""
        self.stop()
        if self._error is not None:
            raise self._error
        if self.enabled:
            # The layers' old copies, freed on the mover's thread (which does not trim),
            # go back before the rest is copied: else they and the rest's copies met at
            # the load's peak (the 8B-shaped Q4_K_M file: 7.28 GB, 7.05 before finish).
            trim_malloc()
            self._move(model, trim=True)
            trim_malloc()
        self._kept.clear()  # the model holds them now; their addresses are no longer ours
        self._huge.clear()
        return self.moved

    def stop(self) -> None:
        """Let the thread finish the modules submitted so far and end (also where the
        load failed: the mover's ``with`` block calls it)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def __enter__(self) -> HugePageMover:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while (module := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._move(module, trim=False)
                except BaseException as exc:  # raised again by finish, on the loader's thread
                    self._error = exc

    def _move(self, model: nn.Module, trim: bool) -> None:
        copies: dict[int, torch.Tensor] = {}  # old data pointer -> its copy (one storage)
        done: dict[int, torch.Tensor] = {}  # id of an old tensor -> its replacement (ties)
        for module in model.modules():
            if getattr(module, "read_by_rows", False):
                continue
            for table in (module._buffers, module._parameters):
                for name, tensor in table.items():
                    if tensor is None or tensor.device.type != "cpu" or tensor.is_sparse:
                        continue
                    size = tensor.numel() * tensor.element_size()
                    whole = tensor.is_contiguous() and tensor.untyped_storage().nbytes() == size
                    if size < self.smallest or not whole or tensor.data_ptr() in self._huge:
                        continue
                    new = done.get(id(tensor))
                    if new is None:
                        new = copies.get(tensor.data_ptr())
                        if new is None:
                            new = self._copy(tensor, trim)
                            copies[tensor.data_ptr()] = new
                        if isinstance(tensor, nn.Parameter):
                            new = nn.Parameter(new, requires_grad=tensor.requires_grad)
                        done[id(tensor)] = new
                    table[name] = new

    def _copy(self, tensor: torch.Tensor, trim: bool) -> torch.Tensor:
        copy = huge_page_tensor(tensor)
        _copy_bytes(copy, tensor)
        self._kept.append(copy)
        self._huge.add(copy.data_ptr())
        size = tensor.numel() * tensor.element_size()
        self.moved += size
        self._since_trim += size
        if trim and self._since_trim >= TRIM_EVERY:
            trim_malloc()
            self._since_trim = 0
        return copy


def _copy_bytes(dest: torch.Tensor, source: torch.Tensor) -> None:
    """``dest`` = ``source`` (same size, contiguous) on this thread alone: numpy's copy
    lets go of the GIL and starts no OpenMP team."""
    np.copyto(dest.view(-1).view(torch.uint8).numpy(), source.view(-1).view(torch.uint8).numpy())
