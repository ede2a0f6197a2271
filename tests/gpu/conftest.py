"""The GPU tests: they run where CUDA is, and are collected and skipped elsewhere (CI).

Run them on a GPU machine with ``pytest tests/gpu``. Collected in one run with
tests/kernels, whose conftest turns on Triton's interpreter for the whole process,
they skip too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.gpu.models import SMOLLM2_135M, make_random_model, tokenizer_dir

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not HAS_CUDA:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
    elif os.environ.get("TRITON_INTERPRET") == "1":  # set by tests/kernels' conftest
        skip = pytest.mark.skip(reason="Triton's interpreter is on: run pytest tests/gpu alone")
    else:
        return
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
