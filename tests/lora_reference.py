"""A tiny model with random PEFT adapters, and PEFT's greedy replies to one question.

For the tests of requests that name an adapter (``m serve --lora``): two LoRAs and an
aLoRA (invoked by the chat template's assistant header, so the question's prompt
invokes it) on the tiny random Llama, and what PEFT + transformers answer greedily
with each of them, and with none, as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.engine.conftest import make_tiny_llama
from tests.engine.test_lora import make_adapter, reference_greedy, reference_model

QUESTION = "Name a colour."
MAX_TOKENS = 8
# two LoRAs that differ in rank, scale and targets, and an aLoRA (below)
LORAS = {
    "a1": dict(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"]),
    "a2": dict(r=8, lora_alpha=8, target_modules=["k_proj", "o_proj", "up_proj"]),
}
ALORA = "checker"
ALORA_TARGETS = ["q_proj", "k_proj", "v_proj"]


@dataclass
class AdapterModel:
    """The model, its adapters' directories, and PEFT's greedy text under each
    (``None``: the base model) for :data:`QUESTION` as the one user message."""

    model_dir: Path
    adapters: dict[str, Path]
    expected: dict[str | None, str]

    def lora_flags(self) -> list[str]:
        """``--lora NAME=PATH`` entries for every adapter."""
        return [f"{name}={path}" for name, path in self.adapters.items()]


def adapter_model(root: Path) -> AdapterModel:
    """Build the model and adapters under ``root`` and PEFT's replies with each."""
    from transformers import AutoTokenizer

    model_dir = make_tiny_llama(root / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    messages = [{"role": "user", "content": QUESTION}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    header = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert ids[-len(header) :] == header  # the prompt invokes the aLoRA
    alora = dict(r=4, lora_alpha=16, target_modules=ALORA_TARGETS, alora_invocation_tokens=header)
    configs = {**LORAS, ALORA: alora}
    adapters = {
        name: make_adapter(model_dir, root / name, seed, **config)
        for seed, (name, config) in enumerate(configs.items(), start=1)
    }
    model = reference_model(model_dir, adapters, "float32")
    expected: dict[str | None, str] = {}
    for adapter in (None, *adapters):
        tokens = reference_greedy(model, adapter, ids, MAX_TOKENS)
        if tokenizer.eos_token_id in tokens:
            tokens = tokens[: tokens.index(tokenizer.eos_token_id)]
        expected[adapter] = tokenizer.decode(tokens, skip_special_tokens=True)
    assert len(set(expected.values())) == len(expected), expected  # each adapter shows
    return AdapterModel(model_dir, adapters, expected)
