"""Moving a CPU model's weights into huge-page memory (mellea/engine/huge_pages.py)."""

from __future__ import annotations

import sys
import threading

import pytest
import torch
from torch import nn

from mellea.engine import huge_pages
from mellea.engine.huge_pages import HUGE_PAGE, HugePageMover, thp_mode


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never\n", "always"),
        ("", "never"),
    ],
)
def test_the_kernels_mode_is_read_from_its_setting(tmp_path, text, mode):
    setting = tmp_path / "enabled"
    setting.write_text(text)
    assert thp_mode(setting) == mode
    assert thp_mode(tmp_path / "missing") == "never"


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(1024, 1024)  # 4 MiB
        self.head = nn.Linear(1024, 1024, bias=False)
        self.head.weight = self.embed.weight  # tied: one tensor in two places
        self.register_buffer("packed", torch.randint(0, 255, (3 << 20,), dtype=torch.uint8))
        self.register_buffer("small", torch.randn(16))
        whole = torch.randn(2 << 20)
        self.register_buffer("view", whole[: 1 << 20])  # half of a larger storage
        # A buffer on the table's storage (as RefinedHead's exact rows may be).
        self.register_buffer("rows", self.embed.weight.detach())


def test_weights_move_with_their_values_and_ties(monkeypatch):
    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "madvise")
    model = Tied()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    pointers = {name: t.data_ptr() for name, t in model.state_dict().items()}
    moved = HugePageMover().finish(model)
    after = model.state_dict()
    assert moved == (4 << 20) + (3 << 20)  # the tied table counted once
    for name, tensor in after.items():
        assert torch.equal(tensor, before[name]), name
    for name in ("embed.weight", "packed"):
        assert after[name].data_ptr() != pointers[name]
        assert after[name].data_ptr() % HUGE_PAGE == 0
    assert model.head.weight is model.embed.weight  # still one tensor
    assert isinstance(model.embed.weight, nn.Parameter)
    assert not isinstance(model.rows, nn.Parameter)
    assert model.rows.data_ptr() == model.embed.weight.data_ptr()  # still one storage
    assert after["small"].data_ptr() == pointers["small"]  # under 2 MiB: stays
    assert after["view"].data_ptr() == pointers["view"]  # a view: stays
    out = model.head(torch.randn(2, 1024))
    assert out.shape == (2, 1024)


def test_nothing_moves_where_the_kernel_gives_no_huge_pages(monkeypatch):
    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "never")
    model = Tied()
    pointer = model.packed.data_ptr()
    assert HugePageMover().finish(model) == 0
    assert model.packed.data_ptr() == pointer


def mapping_of(address: int) -> tuple[str, dict[str, str]]:
    """The permissions and the smaps fields of this process's mapping holding
    ``address``."""
    perms, fields, inside = "", {}, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                start, end = (int(x, 16) for x in head[0].split("-"))
                if inside:
                    break
                inside = start <= address < end
                perms = head[1]
            elif inside and ":" in head[0]:
                fields[head[0].rstrip(":")] = head[1]
    return perms, fields


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/smaps is Linux's")
def test_huge_page_memory_is_private_and_eligible_for_huge_pages():
    """Shared anonymous memory (Python's default for mmap(-1, ...)) is shmem, whose huge
    pages follow shmem_enabled, not MADV_HUGEPAGE: the weights must sit in private
    memory, which the advice makes eligible."""
    tensor = huge_pages.huge_page_tensor(torch.empty(3 << 20, dtype=torch.uint8))
    tensor.fill_(1)
    perms, fields = mapping_of(tensor.data_ptr())
    assert perms.endswith("p"), perms  # private, not shared
    if thp_mode() != "never" and "THPeligible" in fields:
        assert fields["THPeligible"] == "1"


class Layers(nn.Module):
    """A stand-in for a loaded model: layers built one by one, then a tied head."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(1024, 1024) for _ in range(count))  # 4 MiB
        self.embed = nn.Embedding(1024, 1024)
        self.head = nn.Linear(1024, 1024, bias=False)
        self.head.weight = self.embed.weight


def test_submitted_layers_move_on_the_movers_thread_and_finish_moves_the_rest(monkeypatch):
    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "madvise")
    model = Layers(5)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    threads: set[str] = set()
    copy = huge_pages._copy_bytes

    def recording(dest, source):
        threads.add(threading.current_thread().name)
        copy(dest, source)

    monkeypatch.setattr(huge_pages, "_copy_bytes", recording)
    with HugePageMover() as mover:
        for layer in model.layers:
            mover.submit(layer)
        moved = mover.finish(model)
    assert moved == 6 * (4 << 20)  # five layers' weights and the tied table once
    assert threads == {"mellea-huge-pages", threading.current_thread().name}
    assert not any(t.name == "mellea-huge-pages" for t in threading.enumerate())
    after = model.state_dict()
    for name, tensor in after.items():
        assert torch.equal(tensor, before[name]), name
        if tensor.numel() * tensor.element_size() >= HUGE_PAGE:
            assert tensor.data_ptr() % HUGE_PAGE == 0, name
    assert model.head.weight is model.embed.weight
    assert all(isinstance(layer.weight, nn.Parameter) for layer in model.layers)


def test_a_failure_on_the_movers_thread_is_raised_by_finish(monkeypatch):
    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "madvise")

    def broken(dest, source):
        raise MemoryError("no huge pages")

    monkeypatch.setattr(huge_pages, "_copy_bytes", broken)
    model = Layers(2)
    mover = HugePageMover()
    mover.submit(model.layers[0])
    with pytest.raises(MemoryError):
        mover.finish(model)
    assert not any(t.name == "mellea-huge-pages" for t in threading.enumerate())


def test_a_failed_load_stops_the_movers_thread(monkeypatch):
    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "madvise")
    model = Layers(2)
    with pytest.raises(RuntimeError), HugePageMover() as mover:
        mover.submit(model.layers[0])
        raise RuntimeError("the checkpoint is short")
    assert not any(t.name == "mellea-huge-pages" for t in threading.enumerate())


def test_without_huge_pages_the_mover_starts_no_thread(monkeypatch):
    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "never")
    model = Layers(2)
    pointer = model.layers[0].weight.data_ptr()
    with HugePageMover() as mover:
        mover.submit(model.layers[0])
        assert mover._thread is None
        assert mover.finish(model) == 0
    assert model.layers[0].weight.data_ptr() == pointer


def test_tables_read_by_rows_stay_where_they_are(monkeypatch):
    """A GGUF's tables (an embedding, a head's exact rows) are read a few rows a step:
    the mover leaves them, and moves the layers beside them."""
    from mellea.engine.block_table import BlockTable

    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "madvise")
    model = nn.Module()
    q = torch.randint(-127, 128, (4096, 1024), dtype=torch.int8)  # 4 MiB
    model.table = BlockTable(q, torch.rand(4096, 32), None, 32)
    model.layer = nn.Linear(1024, 1024, bias=False)  # 4 MiB
    table_ptr, layer_ptr = model.table.q.data_ptr(), model.layer.weight.data_ptr()
    assert HugePageMover().finish(model) == 4 << 20
    assert model.table.q.data_ptr() == table_ptr
    assert model.layer.weight.data_ptr() != layer_ptr
    assert model.layer.weight.data_ptr() % HUGE_PAGE == 0
