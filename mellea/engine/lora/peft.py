"""Reading a PEFT LoRA/aLoRA directory into the engine's fused projections.

An adapter is a PEFT directory (``adapter_config.json`` + ``adapter_model.safetensors``).
For each target projection it holds a low-rank pair (A: [r, in], B: [out, r]) and a
scale (``lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with ``use_rslora``); the
projection's output gains ``scale * (x @ A^T) @ B^T``. Our model fuses q/k/v and
gate/up into one linear each, so an adapter's pieces for one fused projection share
one product with A (their rows one after another) and each piece's B writes its own
rows of the output (:class:`~mellea.engine.lora.low_rank.LowRank`); the scale is folded
into B, and B's q/k rows are put in the CPU path's rotary order as the loader orders
the base weights.

An aLoRA (``alora_invocation_tokens`` in its config) applies from the start of the
last occurrence of those tokens in the prompt on, as PEFT does (:func:`activation_start`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from mellea.engine.checkpoint_names import fused_pieces, our_name
from mellea.engine.lora.low_rank import LowRank, low_rank

if TYPE_CHECKING:
    from mellea.engine.config import ModelConfig

_KEY = re.compile(r"layers\.(\d+)\.(.+)\.lora_([AB])(?:\.[A-Za-z0-9_]+)?\.weight$")


class AdapterLoadError(ValueError):
    """An adapter directory that cannot be loaded: the message names what is wrong."""


@dataclass(frozen=True)
class AdapterInfo:
    """What :attr:`Engine.adapters` tells about one loaded adapter."""

    rank: int  # the largest rank of its target modules
    targets: tuple[str, ...]  # the module names it adapts (PEFT's, e.g. "q_proj")
    is_alora: bool
    invocation_tokens: tuple[int, ...] = ()  # an aLoRA's activation sequence


@dataclass
class LoraAdapter:
    """One loaded adapter: per (layer, projection) the fused low-rank pair."""

    name: str
    info: AdapterInfo
    # (layer, projection) -> its low-rank update there (B scaled), fp32.
    updates: dict[tuple[int, str], LowRank]

    @property
    def device(self) -> torch.device:
        """Where its pairs are (the CPU for an adapter without any)."""
        update = next(iter(self.updates.values()), None)
        return torch.device("cpu") if update is None else update.a.device

    @property
    def is_alora(self) -> bool:
        """Whether it applies only from its invocation tokens on."""
        return self.info.is_alora


def activation_start(tokens: Seq[int], invocation: Seq[int]) -> int | None:
    """Start of the last occurrence of ``invocation`` in ``tokens``; None if absent."""
    n = len(invocation)
    if n == 0:
        return None
    first = invocation[0]
    for i in range(len(tokens) - n, -1, -1):
        if tokens[i] == first and list(tokens[i : i + n]) == list(invocation):
            return i
    return None


def _read_config(path: Path) -> dict[str, Any]:
    file = path / "adapter_config.json"
    if not path.is_dir():
        raise AdapterLoadError(f"adapter directory {str(path)!r} does not exist")
    if not file.is_file():
        raise AdapterLoadError(f"{str(path)!r} has no adapter_config.json (not a PEFT adapter)")
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise AdapterLoadError(f"{str(file)!r} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise AdapterLoadError(f"{str(file)!r} does not hold a JSON object")
    kind = str(config.get("peft_type", "LORA")).upper()
    if kind != "LORA":
        raise AdapterLoadError(f"{str(path)!r} is a {kind} adapter; only LoRA and aLoRA load")
    for flag in ("use_dora", "use_qalora"):
        if config.get(flag):
            raise AdapterLoadError(f"{str(path)!r} sets {flag}, which the engine does not run")
    if config.get("modules_to_save"):
        raise AdapterLoadError(
            f"{str(path)!r} saves whole modules ({config['modules_to_save']}); "
            "only low-rank updates of linear layers load"
        )
    if config.get("bias", "none") != "none":
        raise AdapterLoadError(f"{str(path)!r} trains biases (bias={config['bias']!r})")
    if not isinstance(config.get("r", 8), int) or not isinstance(
        config.get("lora_alpha", 8), (int, float)
    ):
        raise AdapterLoadError(f"{str(file)!r}: r must be an int and lora_alpha a number")
    tokens = config.get("alora_invocation_tokens")
    if tokens is not None and (
        not isinstance(tokens, list)
        or not tokens
        or not all(isinstance(t, int) and t >= 0 for t in tokens)
    ):
        raise AdapterLoadError(
            f"{str(file)!r}: alora_invocation_tokens must be a non-empty list of token ids"
        )
    return config


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    file = path / "adapter_model.safetensors"
    if not file.is_file():
        hint = " (adapter_model.bin is not read: save with safetensors)"
        has_bin = (path / "adapter_model.bin").is_file()
        raise AdapterLoadError(
            f"{str(path)!r} has no adapter_model.safetensors{hint if has_bin else ''}"
        )
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise AdapterLoadError(f"cannot read {str(file)!r}: {exc}") from None


def _pattern_value(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """PEFT's per-module override (``rank_pattern``/``alpha_pattern``): the first key
    that matches the end of the module's name."""
    for key, value in (patterns or {}).items():
        if re.fullmatch(rf"(.*\.)?{key}", module):
            return value
    return default


def load_peft_adapter(
    name: str,
    path: str | os.PathLike,
    cfg: ModelConfig,
    qkv_rows: torch.Tensor | None = None,
    device: torch.device | None = None,
) -> LoraAdapter:
    """Read a PEFT LoRA/aLoRA directory for a model of shape ``cfg``.

    ``qkv_rows`` is the order the model keeps its fused q/k/v rows in (the CPU path's
    rotary order), which B's rows take too. Raises :class:`AdapterLoadError`.
    """
    path = Path(path)
    config = _read_config(path)
    tensors = _read_tensors(path)
    rslora = bool(config.get("use_rslora", False))
    default_r, default_alpha = config.get("r", 8), config.get("lora_alpha", 8)
    fused = fused_pieces(cfg)
    sizes = _projection_sizes(cfg)
    # (layer, projection) -> list of (first row, A, B scaled)
    pieces: dict[tuple[int, str], list[tuple[int, torch.Tensor, torch.Tensor]]] = {}
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.search(key)
        if match is None:
            raise AdapterLoadError(
                f"{str(path)!r} holds {key!r}, which is not a LoRA weight of a decoder layer "
                "(embeddings, the LM head and DoRA magnitudes do not load)"
            )
        layer, module, half = int(match[1]), match[2], match[3]
        halves.setdefault((layer, module), {})[half] = tensor
    targets: set[str] = set()
    rank = 0
    for (layer, module), pair in sorted(halves.items()):
        if set(pair) != {"A", "B"}:
            raise AdapterLoadError(f"{str(path)!r}: layer {layer} {module} lacks lora_A or lora_B")
        if layer >= cfg.num_layers:
            raise AdapterLoadError(
                f"{str(path)!r} adapts layer {layer}; the model has {cfg.num_layers} layers"
            )
        ours = our_name(f"model.layers.{layer}.{module}.weight", cfg.family.renames)
        ours = ours.removeprefix(f"layers.{layer}.").removesuffix(".weight")
        first, piece_rows = 0, 0
        if ours in fused:
            ours, first, piece_rows = fused[ours]
        if ours not in sizes:
            raise AdapterLoadError(
                f"{str(path)!r} adapts {module!r}, which the engine cannot adapt "
                f"(targets: q/k/v/o projections, gate/up/down projections)"
            )
        a, b = pair["A"].float(), pair["B"].float()
        in_features, out_features = sizes[ours]
        r = a.shape[0]
        piece_rows = piece_rows or out_features
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != in_features or b.shape != (piece_rows, r):
            raise AdapterLoadError(
                f"{str(path)!r}: layer {layer} {module} has A {tuple(a.shape)} and B "
                f"{tuple(b.shape)}, which do not fit the model ({in_features} in, {piece_rows} "
                "out): an adapter for another base model?"
            )
        short = module.rsplit(".", 1)[-1]
        alpha = _pattern_value(config.get("alpha_pattern"), module, default_alpha)
        expected_r = _pattern_value(config.get("rank_pattern"), module, default_r)
        if expected_r != r:
            raise AdapterLoadError(
                f"{str(path)!r}: layer {layer} {module} has rank {r}, its config says {expected_r}"
            )
        scale = alpha / (math.sqrt(r) if rslora else r)
        pieces.setdefault((layer, ours), []).append((first, a, b * scale))
        targets.add(short)
        rank = max(rank, r)
    if not pieces:
        raise AdapterLoadError(f"{str(path)!r} holds no LoRA weights")
    updates = {}
    for (layer, proj), parts in pieces.items():
        if qkv_rows is not None and proj == "self_attn.qkv_proj":
            parts = [_in_rotary_order(part, qkv_rows, sizes[proj][1]) for part in parts]
        on_device = [(first, a.to(device), b.to(device)) for first, a, b in parts]
        updates[(layer, proj)] = low_rank([(0, *part) for part in on_device])
    invocation = config.get("alora_invocation_tokens")
    info = AdapterInfo(
        rank=rank,
        targets=tuple(sorted(targets)),
        is_alora=invocation is not None,
        invocation_tokens=tuple(invocation or ()),
    )
    return LoraAdapter(name, info, updates)


def _in_rotary_order(
    part: tuple[int, torch.Tensor, torch.Tensor], rows: torch.Tensor, out_features: int
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """A q/k/v piece with B's rows in the order the model keeps the fused rows in
    (each head's dims reordered within the head, so a piece keeps its row range)."""
    first, a, b = part
    whole = torch.zeros(out_features, b.shape[1])
    whole[first : first + b.shape[0]] = b
    whole[: rows.numel()] = whole[rows]
    return first, a, whole[first : first + b.shape[0]].contiguous()


def _projection_sizes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {
        "self_attn.qkv_proj": (cfg.hidden_size, q + 2 * kv),
        "self_attn.o_proj": (q, cfg.hidden_size),
        "mlp.gate_up_proj": (cfg.hidden_size, 2 * cfg.intermediate_size),
        "mlp.down_proj": (cfg.intermediate_size, cfg.hidden_size),
    }
