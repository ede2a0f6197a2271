"""Moving a CPU model's weights into huge-page memory (mellea/engine/huge_pages.py)."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from mellea.engine import huge_pages
from mellea.engine.huge_pages import HUGE_PAGE, move_to_huge_pages, thp_mode


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
    moved = move_to_huge_pages(model)
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
    assert move_to_huge_pages(model) == 0
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
