"""Train a LoRA or aLoRA adapter that judges a requirement, from ``item``/``label`` pairs.

Each JSONL row becomes ``"{item}\\nRequirement: <|end_of_text|>\\n{invocation}{label}"``
(upstream's layout); only the label (and an end-of-sequence token, so the adapter
learns to stop) is trained on. Rows are shuffled (seed 42) and split 80/20; the
adapter with the lowest validation loss, checked after every epoch, is saved with
``save_pretrained`` to ``output_file``. An aLoRA activates at its invocation tokens
(peft's ``alora_invocation_tokens``), a LoRA everywhere.

Training uses peft and a plain PyTorch loop (upstream uses TRL's ``SFTTrainer``); the
base model is read as the engine reads it (a model directory, a ``.gguf`` file, the
bundled model, or a hub id already in the local cache).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_INVOCATION = "<|start_of_role|>check_requirement<|end_of_role|>"
BUNDLED_NAMES = ("", "default", "bundled")


class TrainingSetupError(RuntimeError):
    """What ``m alora train`` needs and does not have (a package, the model, the data)."""


@dataclass
class Example:
    """One tokenized row: its token ids and the labels trained on (-100: not trained on)."""

    input_ids: list[int]
    labels: list[int]


def read_rows(dataset_path: str | Path) -> list[dict[str, str]]:
    """The ``item``/``label`` rows of a JSONL file; a row missing either is an error."""
    rows = []
    path = Path(dataset_path)
    if not path.is_file():
        raise TrainingSetupError(f"no dataset file at {path}")
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or "item" not in row or "label" not in row:
            raise TrainingSetupError(f"{path}:{number}: each row needs an item and a label")
        rows.append({"item": str(row["item"]), "label": str(row["label"])})
    if not rows:
        raise TrainingSetupError(f"{path} holds no rows")
    return rows


def invocation_prompt(prompt_file: str | None) -> str:
    """The invocation text: ``prompt_file``'s ``invocation_prompt``, else upstream's default."""
    if prompt_file is None:
        return DEFAULT_INVOCATION
    config = json.loads(Path(prompt_file).read_text(encoding="utf-8"))
    if "invocation_prompt" not in config:
        raise TrainingSetupError(f"{prompt_file} has no invocation_prompt")
    return str(config["invocation_prompt"])


def tokenize(
    rows: list[dict[str, str]], tokenizer: Any, invocation: str, max_length: int
) -> list[Example]:
    """Each row as token ids, labels masked up to the end of the invocation text."""
    examples = []
    for row in rows:
        prompt = f"{row['item']}\nRequirement: <|end_of_text|>\n{invocation}"
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        label_ids = tokenizer.encode(row["label"], add_special_tokens=False)
        label_ids.append(tokenizer.eos_token_id)
        ids = (prompt_ids + label_ids)[-max_length:]
        trained = min(len(label_ids), len(ids))
        examples.append(Example(ids, [-100] * (len(ids) - trained) + ids[len(ids) - trained :]))
    return examples


def split(examples: list[Example], seed: int = 42) -> tuple[list[Example], list[Example]]:
    """A shuffled 80/20 train/validation split (a single example trains and validates)."""
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    cut = max(1, int(len(shuffled) * 0.8))
    return shuffled[:cut], shuffled[cut:] or shuffled[:cut]


def _require_packages() -> None:
    try:
        import peft  # noqa: F401
    except ImportError:
        raise TrainingSetupError("m alora train needs the peft package: pip install peft") from None


def _device(device: str) -> str:
    import torch

    if device not in ("auto", "cpu", "cuda", "mps"):
        raise TrainingSetupError(f"unknown device {device!r}: use auto, cpu, cuda or mps")
    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else "cpu"


def load_base(base_model: str) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``base_model``, in float32, from local files only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mellea.engine.gguf_file import transformers_weights
    from mellea.engine.loader import resolve_model

    spec = None if base_model.strip().lower() in BUNDLED_NAMES else base_model
    try:
        directory = resolve_model(spec, report=lambda _message: None)
        where, extra = transformers_weights(directory)
        model = AutoModelForCausalLM.from_pretrained(where, dtype="float32", **extra)
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except Exception as exc:  # the loader's errors name the model and what is missing
        raise TrainingSetupError(
            f"cannot load the base model {base_model!r}: {exc}. There is no model hub "
            "access here: give a model directory, a .gguf file, 'default' (the bundled "
            "model) or a hub id already in the local Hugging Face cache"
        ) from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _peft_model(model: Any, tokenizer: Any, adapter: str, invocation: str) -> Any:
    from peft import LoraConfig, get_peft_model

    settings: dict[str, Any] = {
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "bias": "none",
        "task_type": "CAUSAL_LM",
        "target_modules": ["q_proj", "k_proj", "v_proj"],
    }
    if adapter == "alora":
        ids = tokenizer.encode(invocation, add_special_tokens=False)
        config = LoraConfig(r=32, alora_invocation_tokens=ids, **settings)
    elif adapter == "lora":
        config = LoraConfig(r=6, **settings)
    else:
        raise TrainingSetupError(f"unknown adapter type {adapter!r}: use alora or lora")
    return get_peft_model(model, config)


def _batches(examples: list[Example], size: int, pad_id: int) -> list[dict[str, Any]]:
    import torch

    batches = []
    for start in range(0, len(examples), size):
        chunk = examples[start : start + size]
        width = max(len(e.input_ids) for e in chunk)
        ids = [e.input_ids + [pad_id] * (width - len(e.input_ids)) for e in chunk]
        labels = [e.labels + [-100] * (width - len(e.labels)) for e in chunk]
        mask = [[1] * len(e.input_ids) + [0] * (width - len(e.input_ids)) for e in chunk]
        batches.append(
            {
                "input_ids": torch.tensor(ids),
                "labels": torch.tensor(labels),
                "attention_mask": torch.tensor(mask),
            }
        )
    return batches


def train_model(
    dataset_path: str,
    base_model: str,
    output_file: str,
    prompt_file: str | None = None,
    adapter: str = "alora",
    device: str = "auto",
    run_name: str = "multiclass_run",
    epochs: int = 6,
    learning_rate: float = 6e-6,
    batch_size: int = 2,
    max_length: int = 1024,
    grad_accum: int = 4,
) -> dict[str, Any]:
    """Train and save the adapter; returns ``{"output": path, "best_eval_loss": float, ...}``.

    ``run_name`` is accepted for upstream compatibility and only reported back.
    Raises :class:`TrainingSetupError` when a package, the model or the data is missing.
    """
    _require_packages()
    import torch

    rows = read_rows(dataset_path)
    invocation = invocation_prompt(prompt_file)
    model, tokenizer = load_base(base_model)
    where = _device(device)
    model = _peft_model(model, tokenizer, adapter, invocation).to(where)
    train_set, val_set = split(tokenize(rows, tokenizer, invocation, max_length))
    pad = tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=learning_rate
    )
    output = Path(output_file)
    had_readme = (output / "README.md").exists()
    best = float("inf")
    for epoch in range(epochs):
        model.train()
        random.Random(42 + epoch).shuffle(train_set)
        batches = _batches(train_set, batch_size, pad)
        for step, batch in enumerate(batches, start=1):
            loss = model(**{k: v.to(where) for k, v in batch.items()}).loss / grad_accum
            loss.backward()
            if step % grad_accum == 0 or step == len(batches):
                optimizer.step()
                optimizer.zero_grad()
        eval_loss = _evaluate(model, val_set, batch_size, pad, where)
        if eval_loss < best:
            best = eval_loss
            model.save_pretrained(output)
    if not had_readme:  # the model card peft writes says nothing about this adapter
        (output / "README.md").unlink(missing_ok=True)
    return {"output": str(output), "best_eval_loss": best, "run_name": run_name, "epochs": epochs}


def _evaluate(model: Any, examples: list[Example], size: int, pad: int, where: str) -> float:
    import torch

    model.eval()
    losses = []
    with torch.no_grad():
        for batch in _batches(examples, size, pad):
            losses.append(float(model(**{k: v.to(where) for k, v in batch.items()}).loss))
    return sum(losses) / len(losses)
