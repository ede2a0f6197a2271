"""Split-context decode attention (each context cut into pieces merged by a second
kernel) against the reference, in the interpreter."""

from __future__ import annotations

import pytest
import torch

from mellea.engine.kernels.attention import paged_attention_decode_ref
from tests.kernels.helpers import tolerance
from tests.kernels.test_attention_triton import make_cache, small_tiles


@pytest.mark.parametrize("num_splits", [1, 2, 3, 16])
@pytest.mark.parametrize("window", [0, 10])
def test_decode_split_matches_the_reference(
    monkeypatch: pytest.MonkeyPatch, num_splits: int, window: int
) -> None:
    from mellea.engine.kernels.attention_triton import paged_attention_decode_triton

    small_tiles(monkeypatch)  # 16-position key tiles: these lengths span 1 to 4 of them
    # More splits than tiles leaves some empty; length 1 leaves all but one empty.
    lens = [1, 15, 16, 17, 33, 64]
    k_cache, v_cache, tables = make_cache(lens, 8, 3, 64, torch.float32)
    q = torch.randn(len(lens), 9, 64)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    args = (q, k_cache, v_cache, tables, context_lens, 0.125, window)
    out = paged_attention_decode_triton(*args, num_splits=num_splits)
    ref = paged_attention_decode_ref(*args)
    torch.testing.assert_close(out, ref, **tolerance(torch.float32))


def test_split_count_fills_the_gpu_and_never_splits_on_cpu(monkeypatch: pytest.MonkeyPatch):
    from mellea.engine.kernels import attention_triton as at

    assert at.decode_splits(1, 3, torch.device("cpu")) == 1
    monkeypatch.setattr(at, "_multiprocessors", lambda index: 132)
    cuda = torch.device("cuda", 0)
    assert at.decode_splits(1, 3, cuda) == at.MAX_SPLITS  # 3 programs: as many pieces as allowed
    assert at.decode_splits(8, 8, cuda) == 9  # 64 programs -> about 4 per multiprocessor
    assert at.decode_splits(30, 3, cuda) == 6  # 90 programs -> 540
    assert at.decode_splits(64, 3, cuda) == 3  # 192 programs -> 576
    assert at.decode_splits(88, 3, cuda) == 1  # 264 programs, 2 per multiprocessor: enough
