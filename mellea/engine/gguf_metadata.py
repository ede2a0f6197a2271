"""A GGUF file's metadata as a model directory: config, generation config, tokenizer,
chat template and a pointer to the file (see :data:`mellea.engine.gguf_file.SOURCE`).

The file's header is read once, its vocabulary and merges as plain lists
(:func:`~mellea.engine.gguf_file.read_table`); transformers' own GGUF loading reads
the header twice through ``gguf.GGUFReader``, an object per vocabulary entry, which
took 17 s for a 151k-token vocabulary. The config follows transformers' table of GGUF
keys (:func:`config_dict`, checked against transformers in the tests) and the tokenizer
is built by transformers' GGUF tokenizer builders from the same lists, so both are what
``AutoConfig`` / ``AutoTokenizer`` would make of the file.

A file without a chat template gets its family's (:mod:`mellea.engine.chat_templates`),
said at every start (:func:`template_note`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mellea.engine.chat_templates import format_for
from mellea.engine.gguf_file import SOURCE, read_table

# Architectures whose config is transformers' generic translation of the GGUF keys; the
# others (with their own fix-ups in transformers) go through ``AutoConfig``.
GENERIC_CONFIG_ARCHS = frozenset({"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"})

# tokenizer_config names of the special tokens -> the GGUF keys of their ids.
_SPECIAL_TOKEN_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


def write_metadata(gguf: Path, out: Path) -> None:
    """Write ``gguf``'s config, generation config and tokenizer into ``out`` (a few MB),
    and the pointer to the file, from the file's metadata only."""
    from transformers import AutoConfig, GenerationConfig

    fields, entries = read_table(gguf, arrays=True)
    out.mkdir(parents=True, exist_ok=True)
    if fields["general.architecture"] in GENERIC_CONFIG_ARCHS:
        config = config_from_dict(config_dict(fields, [entry.name for entry in entries]))
    else:
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config.save_pretrained(out)
    generation = GenerationConfig.from_model_config(config)
    tokenizer = build_tokenizer(fields)
    source: dict[str, Any] = {"path": str(gguf.resolve())}
    if not tokenizer.chat_template:
        source.update(use_family_template(fields, tokenizer, generation))
    generation.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record_added_tokens(out, tokenizer)
    (out / SOURCE).write_text(json.dumps(source))


def record_added_tokens(out: Path, tokenizer: Any) -> None:
    """List the tokenizer's added tokens in ``tokenizer_config.json`` too: without that
    list, every load parses the whole ``tokenizer.json`` in Python to find them (a
    second read of a 151k-token vocabulary, about a second, at every start)."""
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["added_tokens_decoder"] = {
        str(index): {
            "content": token.content,
            "lstrip": token.lstrip,
            "normalized": token.normalized,
            "rstrip": token.rstrip,
            "single_word": token.single_word,
            "special": token.special,
        }
        for index, token in sorted(tokenizer.added_tokens_decoder.items())
    }
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def use_family_template(fields: dict[str, Any], tokenizer: Any, generation: Any) -> dict[str, str]:
    """Give ``tokenizer`` (of a file without a chat template) its family's template,
    and ``generation`` its end-of-turn token as a stop; returns what to record in the
    pointer for :func:`template_note` (nothing where no family format fits)."""
    architecture = str(fields["general.architecture"])
    chat_format = format_for(architecture, set(fields.get("tokenizer.ggml.tokens") or ()))
    if chat_format is None:
        return {}
    tokenizer.chat_template = chat_format.template
    if chat_format.end_of_turn is not None:
        stop = tokenizer.convert_tokens_to_ids(chat_format.end_of_turn)
        generation.eos_token_id = _with_stop(generation.eos_token_id, stop)
    return {"builtin_chat_template": chat_format.name, "architecture": architecture}


def template_note(model_dir: Path) -> str | None:
    """The start-up line for a metadata directory whose chat template is its family's
    (the file has none), else None."""
    pointer = model_dir / SOURCE
    if not pointer.is_file():
        return None
    source = json.loads(pointer.read_text())
    if "builtin_chat_template" not in source:
        return None
    return (
        f"no chat template in {Path(source['path']).name}; using the "
        f"{source['builtin_chat_template']} template for architecture {source['architecture']}"
    )


def config_dict(fields: dict[str, Any], tensor_names: list[str]) -> dict[str, Any]:
    """The transformers config dictionary of a file with this metadata and these tensors,
    as transformers' ``load_gguf_checkpoint`` builds it for the
    :data:`GENERIC_CONFIG_ARCHS`: each GGUF key renamed by transformers' table."""
    from transformers.integrations import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    architecture = str(fields["general.architecture"])
    # llama.cpp calls Mistral files "llama"; transformers tells them by the name.
    renamed = (
        "mistral"
        if architecture == "llama" and fields.get("general.name") == "mistral"
        else architecture
    )
    config: dict[str, Any] = {"tie_word_embeddings": "output.weight" not in tensor_names}
    for key, value in GGUF_CONFIG_DEFAULTS_MAPPING.get(renamed, {}).items():
        config.setdefault(key, value)
    for key, value in fields.items():
        prefix, _, name = key.replace(architecture, renamed).partition(".")
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, str) and architecture in value:
            value = value.replace(architecture, renamed)
        target = GGUF_CONFIG_MAPPING.get(prefix, {}).get(name)
        if target is not None and target != -1:
            config[target] = value
    if config.get("model_type") == "gemma3":  # the file holds the text model only
        config["model_type"] = "gemma3_text"
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in fields:
        config["vocab_size"] = len(fields["tokenizer.ggml.tokens"])
    return config


def config_from_dict(values: dict[str, Any]) -> Any:
    """The transformers config object of a config dictionary (by its ``model_type``)."""
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[values["model_type"]].from_dict(values)


def tokenizer_parts(fields: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tokenizer description, tokenizer config) as transformers' ``get_gguf_tokenizer``
    reads them from the file: the vocabulary, merges and scores under its names, and
    the special tokens by their text."""
    from transformers.integrations.gguf import GGUF_TOKENIZER_MAPPING

    parts = {
        group: {
            name: fields[f"tokenizer.{key}"]
            for key, name in renames.items()
            if fields.get(f"tokenizer.{key}") is not None
        }
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    description, config = parts["tokenizer"], parts["tokenizer_config"]
    kind = description.get("tokenizer_type")
    if kind == "llama":  # sentencepiece: llama.cpp adds BOS unless the file says otherwise
        config.setdefault("add_bos_token", True)
    elif kind == "gemma4":  # the template writes <bos> itself
        config["add_bos_token"] = False
    tokens = description["tokens"]
    for name, key in _SPECIAL_TOKEN_IDS.items():
        token_id = fields.get(key)
        config[name] = tokens[token_id] if token_id is not None else None
    return description, config


def build_tokenizer(fields: dict[str, Any]) -> Any:
    """The Hugging Face tokenizer the file's metadata describes (transformers' GGUF
    builders on the lists :func:`tokenizer_parts` reads)."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf import convert_gguf_tokenizer

    description, config = tokenizer_parts(fields)
    backend, extra = convert_gguf_tokenizer(str(fields["general.architecture"]), description)
    return PreTrainedTokenizerFast(tokenizer_object=backend, **config, **extra)


def _with_stop(eos: int | list[int] | None, stop: int) -> int | list[int]:
    """``eos`` (an id, a list or None) with ``stop`` added (as it is if it has it)."""
    ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if stop not in ids:
        return [*ids, stop]
    return ids[0] if len(ids) == 1 else ids
