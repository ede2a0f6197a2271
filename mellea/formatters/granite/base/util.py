"""Helpers shared by the Granite formatters and their tests."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from mellea.formatters.granite.base.optional import import_optional


def random_uuid() -> str:
    """A fresh random UUID, as text."""
    return str(uuid.uuid4())


def load_transformers_lora(local_or_remote_path: str) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a local PEFT adapter directory on its base model, with
    transformers and peft (both must be installed), on CUDA, MPS or the CPU.

    The base model is the adapter config's ``base_model_name_or_path`` (from the local
    Hugging Face cache; nothing is downloaded here). A path that does not exist is a
    FileNotFoundError.
    """
    path = Path(local_or_remote_path)
    if not path.is_dir():
        raise FileNotFoundError(
            f"no adapter directory at {path}: adapters are read from local directories here"
        )
    with import_optional("hf"):
        import peft
        import torch
        import transformers
    config = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
    base_name = config["base_model_name_or_path"]
    if torch.cuda.is_available():
        device = "cuda"
    elif torch.backends.mps.is_available():
        device = "mps"
    else:
        device = "cpu"
    base = transformers.AutoModelForCausalLM.from_pretrained(base_name, device_map=device)
    tokenizer = transformers.AutoTokenizer.from_pretrained(base_name)
    model = peft.PeftModel.from_pretrained(base, str(path), device_map=device)
    return model, tokenizer


__all__ = ["import_optional"]
