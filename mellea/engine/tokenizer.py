"""Loading a model's tokenizer without the rest of transformers' model machinery.

``AutoTokenizer.from_pretrained`` reads the model's config through ``AutoConfig``,
which imports the model family's configuration module and, through it, transformers'
weight-loading and tensor-parallel modules (``torch.distributed.tensor`` among them):
about a second of imports before the tokenizer, on the engine's path to ready, taken
while the engine thread builds the model and contends with it for the GIL. A
directory whose ``tokenizer_config.json`` names the plain ``tokenizers`` backend (every
GGUF's metadata directory, and most checkpoints saved by transformers 5) loads that
class directly; any other tokenizer class goes through ``AutoTokenizer`` as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Names transformers gives its plain tokenizers.json-backed class (5.x, and 4.x's).
PLAIN_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


def plain_tokenizer_class(path: Path) -> bool:
    """Whether ``path`` holds a ``tokenizer.json`` whose config names the plain class."""
    config = path / "tokenizer_config.json"
    if not (config.is_file() and (path / "tokenizer.json").is_file()):
        return False
    try:
        named = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return False
    return named in PLAIN_CLASSES


def load_tokenizer(path: str | Path) -> Any:
    """The Hugging Face tokenizer of the model directory ``path``."""
    path = Path(path)
    if plain_tokenizer_class(path):
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
