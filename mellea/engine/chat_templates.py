"""Chat formats of the model families, for a GGUF file that carries no chat template.

A GGUF names its architecture (``general.architecture``) but not always its template
(the Gemma 3 270M file has none). llama.cpp keeps built-in formats by name for such
files; here each architecture the engine serves names its family's published turn
format, written as a Jinja template. A format is used only when the file's vocabulary
holds the format's turn tokens as single tokens (a Llama-architecture file may be
Llama 3, or SmolLM2 with ChatML turns, or a base model with neither).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

# The text of a message: a string, or OpenAI-style content parts of which the text
# ones are joined (image parts and others are dropped).
_TEXT = (
    "{%- macro text(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- elif content is iterable -%}"
    "{%- for part in content if part['type'] == 'text' -%}{{ part['text'] }}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}\n"
)

# Gemma 2/3: no system role; a system message opens the first user turn.
_GEMMA = _TEXT + (
    "{{ bos_token }}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    "{%- set ns.system = ns.system + text(message['content']) | trim + '\\n\\n' -%}"
    "{%- else -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "{%- set prefix = ns.system if role == 'user' else '' -%}"
    "{%- if role == 'user' %}{% set ns.system = '' %}{% endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + prefix + text(message['content']) | trim"
    " + '<end_of_turn>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif -%}"
)

# ChatML (Qwen2, Qwen3, SmolLM2 and other Llama-architecture files with its tokens).
_CHATML = _TEXT + (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + text(message['content']) + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif -%}"
)

# Llama 3 (3.0 to 3.3): header-delimited turns, each ended by <|eot_id|>.
_LLAMA3 = _TEXT + (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + text(message['content']) | trim + '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif -%}"
)

# Granite 3 and 4: role markers, each turn ended by <|end_of_text|>.
_GRANITE = _TEXT + (
    "{%- for message in messages -%}"
    "{{ '<|start_of_role|>' + message['role'] + '<|end_of_role|>'"
    " + text(message['content']) + '<|end_of_text|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|start_of_role|>assistant<|end_of_role|>' }}{% endif -%}"
)

# Phi-3: a token per role, each turn ended by <|end|>.
_PHI3 = _TEXT + (
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>\\n' + text(message['content']) + '<|end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif -%}"
)

# OLMo 2 (Tulu): role lines, an assistant turn ended by the end-of-text token.
_OLMO2 = _TEXT + (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>\\n' + text(message['content']) }}"
    "{%- if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif -%}"
)


@dataclass(frozen=True)
class ChatFormat:
    """One family's turn format: its template, the tokens it needs whole in the
    vocabulary, and the token that ends a model's turn (a stop for generation)."""

    name: str
    template: str
    turn_tokens: tuple[str, ...]
    end_of_turn: str | None


FORMATS = {
    f.name: f
    for f in (
        ChatFormat("gemma", _GEMMA, ("<start_of_turn>", "<end_of_turn>"), "<end_of_turn>"),
        ChatFormat("chatml", _CHATML, ("<|im_start|>", "<|im_end|>"), "<|im_end|>"),
        ChatFormat(
            "llama3",
            _LLAMA3,
            ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
            "<|eot_id|>",
        ),
        ChatFormat(
            "granite", _GRANITE, ("<|start_of_role|>", "<|end_of_role|>"), "<|end_of_text|>"
        ),
        ChatFormat("phi3", _PHI3, ("<|user|>", "<|assistant|>", "<|end|>"), "<|end|>"),
        ChatFormat("olmo2", _OLMO2, ("<|user|>", "<|assistant|>"), None),
    )
}

# GGUF architecture (``general.architecture``) -> the formats to try, in order.
ARCHITECTURE_FORMATS: dict[str, tuple[str, ...]] = {
    "gemma": ("gemma",),
    "gemma2": ("gemma",),
    "gemma3": ("gemma",),
    "qwen2": ("chatml",),
    "qwen3": ("chatml",),
    "llama": ("llama3", "chatml"),
    "granite": ("granite",),
    "granitehybrid": ("granite",),
    "phi3": ("phi3",),
    "olmo2": ("olmo2",),
}


def format_for(architecture: str, vocabulary: Collection[str]) -> ChatFormat | None:
    """The chat format for a file of ``architecture`` whose tokens are ``vocabulary``:
    the first of the architecture's formats whose turn tokens the vocabulary holds, or
    None (an architecture without one, or a vocabulary without its tokens)."""
    for name in ARCHITECTURE_FORMATS.get(architecture, ()):
        chat_format = FORMATS[name]
        if all(token in vocabulary for token in chat_format.turn_tokens):
            return chat_format
    return None
