"""GGUF files with made-up vocabularies, for the metadata path (config, tokenizer, chat
template) without a download: a Qwen2-shaped byte-level BPE vocabulary of any size
(151,936 tokens as Qwen2.5 ships), and a small Gemma-style sentencepiece one.

The weights are random: with ``layers=0`` only a token embedding and an output norm
(enough for the metadata directory), else every tensor of that many decoder layers
(enough to serve).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

QWEN_VOCAB = 151_936  # Qwen2.5's embedding rows: 151,643 BPE tokens, specials, padding
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>"]
QWEN_USER_DEFINED = ["<tool_call>", "</tool_call>"]  # added tokens that are not special
QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_alphabet() -> list[str]:
    """GPT-2's printable spelling of the 256 byte values (what byte-level BPE tokens use)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    spelled, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            spelled[byte] = chr(byte)
        else:
            spelled[byte] = chr(256 + extra)
            extra += 1
    return [spelled[b] for b in range(256)]


def bpe_vocabulary(size: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``size`` byte-level BPE tokens (the 256 bytes first) and the merges that make them:
    each new token joins two earlier ones, the shorter, older tokens more often (as a
    trained vocabulary's are)."""
    rng = random.Random(seed)
    tokens = byte_alphabet()
    # Common text bytes (letters, the space 'Ġ') first, so real strings find merges.
    common = [t for t in tokens if t.isalpha() and t.isascii()] + ["Ġ"]
    seen = set(tokens)
    merges = []
    while len(tokens) < size:
        pool = len(tokens)
        left = common[rng.randrange(len(common))] if rng.random() < 0.3 else None
        if left is None:
            left = tokens[int(pool * rng.random() ** 3)]
        right = tokens[int(pool * rng.random() ** 3)]
        joined = left + right
        if joined in seen or len(joined) > 24:
            continue
        seen.add(joined)
        tokens.append(joined)
        merges.append(f"{left} {right}")
    return tokens, merges


def write_qwen2_gguf(
    path: Path,
    vocab: int = QWEN_VOCAB,
    chat_template: str | None = QWEN_TEMPLATE,
    arch: str = "qwen2",
    hidden: int = 64,
    layers: int = 0,
) -> Path:
    """A Qwen2-architecture GGUF with a ``vocab``-row byte-level BPE vocabulary (as
    llama.cpp's converter writes Qwen2.5's: BPE tokens, then the special and added
    tokens, then ``[PAD n]`` rows up to the embedding's size)."""
    regular = vocab - len(QWEN_SPECIALS) - len(QWEN_USER_DEFINED) - 256
    tokens, merges = bpe_vocabulary(max(regular, 512))
    types = [TokenType.NORMAL] * len(tokens)
    eos = len(tokens)
    tokens += QWEN_SPECIALS + QWEN_USER_DEFINED
    types += [TokenType.CONTROL] * len(QWEN_SPECIALS)
    types += [TokenType.USER_DEFINED] * len(QWEN_USER_DEFINED)
    while len(tokens) < vocab:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(TokenType.UNUSED)
    writer = GGUFWriter(path, arch)
    writer.add_name("synthetic qwen2")
    writer.add_block_count(max(layers, 1))
    writer.add_context_length(4096)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(hidden * 2)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(eos + 2)  # <|im_end|>
    writer.add_pad_token_id(eos)
    writer.add_bos_token_id(eos)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    _add_weights(writer, len(tokens), hidden, layers, kv_heads=2, gemma=False)
    return _finish(writer, path)


GEMMA_TEMPLATE_TOKENS = ["<start_of_turn>", "<end_of_turn>"]


def write_gemma3_gguf(
    path: Path, chat_template: str | None = None, hidden: int = 64, layers: int = 0
) -> Path:
    """A Gemma 3 architecture GGUF with a small sentencepiece vocabulary (the control
    tokens, the turn markers, the 256 byte pieces and some word pieces), no merges and
    no chat template, as the Gemma 3 270M file ships."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", *GEMMA_TEMPLATE_TOKENS]
    types = [TokenType.CONTROL] * 3 + [TokenType.UNKNOWN] + [TokenType.CONTROL] * 3
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TokenType.BYTE] * 256
    words = ["▁", *"abcdefghijklmnopqrstuvwxyz", "▁t", "he", "▁the", "▁a", "in", "er", "▁in"]
    words += ["an", "on", "▁o", "re", "▁s", "▁w", "at", "en", "▁c", "or", "is", "▁the▁"]
    words += ["ou", "▁f", "it", "es", "ed", "▁b", "▁p", "ar", "▁m", "al", "ing", "▁hello"]
    tokens += words
    types += [TokenType.NORMAL] * len(words)
    writer = GGUFWriter(path, "gemma3")
    writer.add_name("synthetic gemma3")
    writer.add_block_count(max(layers, 1))
    writer.add_context_length(4096)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(hidden * 2)
    writer.add_head_count(4)
    writer.add_head_count_kv(1)
    writer.add_key_length(hidden // 4)
    writer.add_value_length(hidden // 4)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(512)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    _add_weights(writer, len(tokens), hidden, layers, kv_heads=1, gemma=True)
    return _finish(writer, path)


def _add_weights(
    writer: GGUFWriter, vocab: int, hidden: int, layers: int, kv_heads: int, gemma: bool
) -> None:
    """Random F32 tensors: the embedding (tied head), the output norm and ``layers``
    decoder layers of 4 heads of ``hidden // 4`` (Qwen2's q/k/v biases, or Gemma 3's
    q/k norms and post-norms)."""
    rng = np.random.default_rng(0)
    head_dim = hidden // 4

    def add(name: str, *shape: int, scale: float = 0.5) -> None:
        values = rng.normal(0, scale, shape).astype(np.float32)
        if name.endswith("norm.weight"):
            values = 1 + 0.1 * values
        writer.add_tensor(name, values)

    add("token_embd.weight", vocab, hidden)
    add("output_norm.weight", hidden)
    for i in range(layers):
        block = f"blk.{i}"
        add(f"{block}.attn_q.weight", 4 * head_dim, hidden)
        add(f"{block}.attn_k.weight", kv_heads * head_dim, hidden)
        add(f"{block}.attn_v.weight", kv_heads * head_dim, hidden)
        add(f"{block}.attn_output.weight", hidden, 4 * head_dim)
        add(f"{block}.ffn_gate.weight", 2 * hidden, hidden)
        add(f"{block}.ffn_up.weight", 2 * hidden, hidden)
        add(f"{block}.ffn_down.weight", hidden, 2 * hidden)
        norms = ["attn_norm", "ffn_norm"]
        if gemma:
            add(f"{block}.attn_q_norm.weight", head_dim)
            add(f"{block}.attn_k_norm.weight", head_dim)
            norms += ["post_attention_norm", "post_ffw_norm"]
        else:
            add(f"{block}.attn_q.bias", 4 * head_dim)
            add(f"{block}.attn_k.bias", kv_heads * head_dim)
            add(f"{block}.attn_v.bias", kv_heads * head_dim)
        for norm in norms:
            add(f"{block}.{norm}.weight", hidden)


def _finish(writer: GGUFWriter, path: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
