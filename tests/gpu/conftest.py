"""The GPU tests: they run where CUDA is, and are collected and skipped elsewhere (CI).

Run them on a GPU machine with ``pytest tests/gpu``. They must not run in one process
with tests/kernels, whose conftest turns on Triton's interpreter for everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.gpu.models import SMOLLM2_135M, make_random_model, tokenizer_dir

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def smol_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight model of the default model's shape (fp32), with its tokenizer."""
    if tokenizer_dir() is None:
        pytest.skip("no tokenizer files of the default model here (set MELLEA_GPU_TOKENIZER)")
    return make_random_model(tmp_path_factory.mktemp("smol-random"), SMOLLM2_135M)


@pytest.fixture(scope="session")
def hf_fp32(smol_dir: Path):
    """The same model in transformers, fp32 on the GPU."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smol_dir, dtype=torch.float32).cuda().eval()
