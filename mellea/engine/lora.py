"""LoRA and activated LoRA (aLoRA) adapters, batched per token beside the base linears.

An adapter is a PEFT directory (``adapter_config.json`` + ``adapter_model.safetensors``).
For each target projection it holds a low-rank pair (A: [r, in], B: [out, r]) and a
scale (``lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with ``use_rslora``); the
projection's output gains ``scale * (x @ A^T) @ B^T``. Our model fuses q/k/v and
gate/up into one linear each, so an adapter's pieces for one fused projection share
one product with A (their rows one after another) and each piece's B writes its own
rows of the output (:class:`LowRank`); the scale is folded into B, and B's q/k rows
are put in the CPU path's rotary order as the loader orders the base weights.

Every token of a step carries an adapter slot (-1 for the base model). A forward hook
on each projection adds each token's adapter's delta to the linear's output, whatever
format the base linear stores its weights in (fp32, bf16, int8, int4): the hook sees
only the linear's input and output. Where the C++ CPU kernels run the model
(:attr:`ComputePath.CPP`) and a projection's weights are int8 or int4 (GGUF blocks
included), its hook adds the deltas of all the step's rows in one C++ op
(``lora_add``: each adapter's rows multiplied together) from every adapter's pairs
packed in fp16 (:func:`pack_fused`): prompt chunks, and steps mixing prompts and
decodes. Elsewhere (fp32 or bf16 weights, whose outputs the fp16 pairs' rounding
would show beside their own; a GPU; no C++ kernels) it adds them in fp32, per adapter
or on the stacked pairs. A model whose decode-only steps run each layer as one C++ op
(:attr:`ComputePath.CPP_FUSED`) adds the deltas inside that op, from the same packs.

An aLoRA (``alora_invocation_tokens`` in its config) applies from the start of the
last occurrence of those tokens in the prompt on, as PEFT does; before it, and when
they do not occur, the tokens are the base model's, so their KV blocks are too.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mellea.engine.checkpoint_names import fused_pieces, our_name
from mellea.engine.formats.linear import Int4Linear, Int8Linear, StackedLinear
from mellea.engine.kernels.lora import lora_gathered
from mellea.engine.lora_dense import DenseStack, dense_stacks

if TYPE_CHECKING:
    from mellea.engine.config import ModelConfig
    from mellea.engine.model import DecoderModel

__all__ = [
    "AdapterInfo",
    "AdapterLoadError",
    "AdapterSet",
    "AdapterUse",
    "LoraAdapter",
    "LoraStep",
    "LowRank",
    "activation_start",
    "load_peft_adapter",
    "pack_fused",
]

# Our fused projections, per layer, and the module names PEFT may target for them.
PROJECTIONS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
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


@dataclass(frozen=True)
class AdapterUse:
    """How one sequence uses an adapter: its slot, the first position it applies to
    (0 for a LoRA; an aLoRA's activation point) and the key its KV blocks carry."""

    slot: int
    start: int
    key: bytes


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
    from safetensors import SafetensorError
    from safetensors.torch import load_file

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


@dataclass
class LowRank:
    """Low-rank updates of one projection: ``out[:, r0:r1] += (x @ A[c0:c1]^T) @ B^T``
    for each part ``(r0, r1, c0, c1, B)``, the product with A taken once for all parts.

    One adapter's (its pieces of a fused projection are the parts), or every loaded
    adapter's side by side (a stack: a part per piece, holding that piece's columns of
    every adapter that has it; ``owner`` gives each column's slot).
    """

    a: torch.Tensor  # [C, in]
    parts: list[tuple[int, int, int, int, torch.Tensor]]
    owner: torch.Tensor  # [C]: the slot each column belongs to
    layout: tuple[int, ...]  # ``owner`` as a key (the step's mask cache)


def low_rank(pieces: list[tuple[int, int, torch.Tensor, torch.Tensor]]) -> LowRank:
    """A :class:`LowRank` from ``(slot, first row, A [r, in], B [rows, r])`` pieces;
    the pieces that start at the same row (the same q, k, v, gate or up piece of
    different adapters) become one part."""
    pieces = sorted(pieces, key=lambda p: (p[1], p[0]))
    parts, owner, col = [], [], 0
    for slot, first, a, b in pieces:
        owner += [slot] * a.shape[0]
        if parts and parts[-1][0] == first:
            r0, r1, c0, _, bs = parts[-1]
            parts[-1] = (r0, r1, c0, col + a.shape[0], [*bs, b])
        else:
            parts.append((first, first + b.shape[0], col, col + a.shape[0], [b]))
        col += a.shape[0]
    device = pieces[0][2].device
    return LowRank(
        a=torch.cat([p[2] for p in pieces]).contiguous(),
        parts=[(r0, r1, c0, c1, torch.cat(bs, dim=1).contiguous()) for r0, r1, c0, c1, bs in parts],
        owner=torch.tensor(owner, device=device),
        layout=tuple(owner),
    )


@dataclass
class LoraStep:
    """One step's adapter tokens.

    ``groups``: per slot present, the rows of the flat batch it owns (None: every row),
    for steps with one adapter. ``slots``: each row's slot (-1: base), set for steps
    that mix adapters, which run on the stacks (every adapter's columns side by side)
    with a mask per column layout, made once per step: two products per projection
    whatever the number of adapters, instead of two per adapter (the ranks are small,
    so multiplying by other adapters' columns costs less than the ops it saves).
    """

    groups: list[tuple[int, torch.Tensor | None]] = field(default_factory=list)
    slots: torch.Tensor | None = None
    masks: dict[tuple[int, ...], torch.Tensor] = field(default_factory=dict)
    # Each row's slot as int32 on the CPU, for the fused decode layer (None elsewhere).
    row_slots: torch.Tensor | None = None
    # Each row's slot on the GPU, for the gathered kernel (mellea.engine.lora_dense):
    # set instead of the rest on a GPU, where every step with adapters runs through it.
    gathered: torch.Tensor | None = None


# On a GPU, steps of up to this many tokens (every decode step a CUDA graph runs) add
# the deltas through the gathered kernel; longer prompt chunks, per adapter group,
# where each adapter's rows share one matrix product.
GATHERED_MAX_ROWS = 512

# A step with adapters mixed runs on the stacks unless fewer than this fraction of the
# loaded adapters are in it (the stack's products then mostly multiply by zeros).
STACKED_MIN_SHARE = 0.25


class AdapterSet:
    """The adapters loaded into one model, by name and slot, and the step being run.

    Slots only grow, so a step planned before a load stays valid. The hooks on the
    model's projections are put in by the engine thread (:meth:`install`) before the
    first step that uses an adapter, never while a forward pass runs; so are the
    stacks, rebuilt there after a load.
    """

    def __init__(self) -> None:
        self.by_name: dict[str, int] = {}
        self.adapters: list[LoraAdapter] = []
        self.current: LoraStep | None = None  # set for the forward pass of a step
        self._hooked = False
        self._stacks: dict[tuple[int, str], LowRank] = {}
        self._stacked = 0  # how many adapters the stacks hold
        # Per layer, the fp16 packs of its four projections flattened (12 tensors), for
        # a model on the C++ CPU kernels (None otherwise): what the fused decode layer
        # and the hooks' lora_add read; rebuilt with the stacks.
        self.fused: list[list[torch.Tensor]] | None = None
        # On a GPU, per (layer, projection) every adapter's pair as dense stacks.
        self.dense: dict[tuple[int, str], DenseStack] = {}
        self.generation = 0  # counts rebuilds of the stacks (a CUDA graph holds them)

    def add(self, adapter: LoraAdapter) -> int:
        """Register a loaded adapter; its slot. ``AdapterLoadError`` for a taken name."""
        if adapter.name in self.by_name:
            raise AdapterLoadError(f"an adapter named {adapter.name!r} is already loaded")
        self.adapters.append(adapter)
        self.by_name[adapter.name] = len(self.adapters) - 1
        return self.by_name[adapter.name]

    def info(self) -> dict[str, AdapterInfo]:
        """Name -> :class:`AdapterInfo` of each loaded adapter."""
        return {a.name: a.info for a in self.adapters}

    def use(self, name: str, prompt: Seq[int]) -> AdapterUse | None:
        """How a request for adapter ``name`` on ``prompt`` uses it; None when it runs as
        the base model throughout (an aLoRA whose invocation is not in the prompt).
        ``KeyError`` for an unknown name."""
        import hashlib

        slot = self.by_name[name]
        adapter = self.adapters[slot]
        start = 0
        if adapter.is_alora:
            found = activation_start(prompt, adapter.info.invocation_tokens)
            if found is None:
                return None
            start = found
        key = hashlib.blake2b(name.encode(), digest_size=16, person=b"adapter").digest()
        return AdapterUse(slot, start, key)

    def plan(self, slots: list[int], device: torch.device | None = None) -> LoraStep | None:
        """The step's plan from each token's slot (-1: base); None if all are base."""
        if not slots or max(slots) < 0:
            return None
        if device is not None and device.type == "cuda" and len(slots) <= GATHERED_MAX_ROWS:
            return LoraStep(gathered=torch.tensor(slots, device=device))
        on_cpu = device is None or device.type == "cpu"
        row_slots = torch.tensor(slots, dtype=torch.int32) if on_cpu else None
        present = sorted(set(slots) - {-1})
        if len(present) == 1 and min(slots) >= 0:
            return LoraStep([(present[0], None)], row_slots=row_slots)
        index = torch.tensor(slots, device=device)
        if len(present) > 1 and len(present) >= STACKED_MIN_SHARE * len(self.adapters):
            return LoraStep(slots=index, row_slots=row_slots)
        groups = [(s, (index == s).nonzero().flatten()) for s in present]
        return LoraStep(groups, row_slots=row_slots)

    def install(self, model: DecoderModel) -> None:
        """Put the delta hooks on every layer's projections (once), and stack (and, for
        a model with a fused decode layer, pack) the adapters loaded since the last
        call."""
        if self._stacked != len(self.adapters):
            self._stacks = _stack(self.adapters)
            self.fused = None
            if _reads_packs(model):
                self.fused = [
                    [t for proj in PROJECTIONS for t in pack_fused(self.adapters, (i, proj))]
                    for i in range(len(model.layers))
                ]
            if self.adapters and self.adapters[0].device.type == "cuda":
                self.dense = dense_stacks(self.adapters)
            self._stacked = len(self.adapters)
            self.generation += 1
        if self._hooked:
            return
        for i, layer in enumerate(model.layers):
            for proj in PROJECTIONS:
                module = layer.get_submodule(proj)
                module.register_forward_hook(self._hook(i, proj, _takes_packs(module)))
        self._hooked = True

    def _hook(self, layer: int, proj: str, packed: bool) -> Any:
        key = (layer, proj)
        first = 3 * PROJECTIONS.index(proj)  # this projection's pack in the layer's 12

        def add_delta(_module: Any, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> Any:
            step = self.current
            if step is None:
                return None
            if step.gathered is not None:
                dense = self.dense.get(key)
                if dense is not None:
                    lora_gathered(
                        out.view(-1, out.shape[-1]), inputs[0], dense.a, dense.b, step.gathered
                    )
                return out
            if (
                packed
                and self.fused is not None
                and step.row_slots is not None
                and out.dtype == torch.float32
                and out.dim() == 2
            ):
                return apply_packed(
                    out, inputs[0], step.row_slots, self.fused[layer][first : first + 3]
                )
            if step.slots is not None:
                return apply_stacked(out, inputs[0], step, self._stacks.get(key))
            return apply_deltas(out, inputs[0], step, self.adapters, key)

        return add_delta


def _takes_packs(module: Any) -> bool:
    """Whether a projection's hook adds the deltas from the fp16 packs (int8 and int4
    weights, GGUF blocks included, and a Q4_K_M q/k/v stacked from both). fp32 and bf16
    weights keep the fp32 pairs: beside their own rounding the fp16 pairs' would show
    (bf16's logprobs moved by up to 0.24 against 0.10 with fp32 pairs on the tests'
    tiny models)."""
    return isinstance(module, Int4Linear | Int8Linear | StackedLinear)


def _reads_packs(model: DecoderModel) -> bool:
    """Whether ``model`` reads the fp16 packs: it runs on the C++ CPU kernels, with int8
    or int4 projections (the fused decode layer's, the hooks' ``lora_add``)."""
    from mellea.engine import cpu_kernels

    return (
        model.path.cpp
        and cpu_kernels.available()
        and any(_takes_packs(layer.get_submodule(p)) for layer in model.layers for p in PROJECTIONS)
    )


def _stack(adapters: list[LoraAdapter]) -> dict[tuple[int, str], LowRank]:
    """Each (layer, projection)'s updates of all ``adapters`` side by side."""
    keys = {key for adapter in adapters for key in adapter.updates}
    stacks = {}
    for key in keys:
        pieces = []
        for slot, adapter in enumerate(adapters):
            update = adapter.updates.get(key)
            for r0, _, c0, c1, b in update.parts if update is not None else ():
                pieces.append((slot, r0, update.a[c0:c1], b))
        stacks[key] = low_rank(pieces)
    return stacks


def pack_fused(adapters: list[LoraAdapter], key: tuple[int, str]) -> list[torch.Tensor]:
    """The pairs of every adapter on projection ``key`` as the fused C++ decode layer
    reads them (see ``lora_add`` in cpu_ops/lora.cpp): ``a`` [C, in] fp16, each
    adapter's A rows together in slot order; ``bt`` fp16, flat, each piece's B
    transposed ([its ranks, its rows], in blocks of :data:`LORA_BLOCK` rows); ``segs``
    [S, 6] int64, per piece (slot, first row, end row, first and end row of A, offset
    in ``bt``). Empty tensors where no adapter has a pair there.

    fp16 holds the pairs to about 3 significant digits (the base weights beside them are
    int4) and halves what a step reads; each rank's A row and B column are first scaled
    by reciprocal powers of two to the same largest magnitude (their product is then
    exactly the same), so neither leaves fp16's range.
    """
    rows_of_a, pieces, segs = [], [], []
    col = offset = 0
    for slot, adapter in enumerate(adapters):
        update = adapter.updates.get(key)
        if update is None:
            continue
        a = update.a.detach().to("cpu", torch.float32, copy=True)
        for r0, r1, c0, c1, b in update.parts:
            b = b.detach().to("cpu", torch.float32, copy=True)
            _balance(a[c0:c1], b)
            segs.append([slot, r0, r1, col + c0, col + c1, offset])
            pieces.append(_in_blocks(b.T).half())
            offset += b.numel()
        rows_of_a.append(a.half())
        col += a.shape[0]
    if not segs:
        empty = torch.empty(0, dtype=torch.float16)
        return [empty.view(0, 0), empty, torch.empty(0, 6, dtype=torch.int64)]
    return [torch.cat(rows_of_a).contiguous(), torch.cat(pieces), torch.tensor(segs)]


# Output rows per block of a packed B (``kLoraBlock`` in cpu_ops/lora.cpp).
LORA_BLOCK = 64


def _in_blocks(bt: torch.Tensor) -> torch.Tensor:
    """B transposed, [rank, rows], flattened in blocks of :data:`LORA_BLOCK` rows: each
    block [rank, its rows] row-major, so the C++ op reads one block as one run."""
    return torch.cat(
        [bt[:, o : o + LORA_BLOCK].flatten() for o in range(0, bt.shape[1], LORA_BLOCK)]
    )


def _balance(a: torch.Tensor, b: torch.Tensor) -> None:
    """Scale A's rows [r, in] and B's columns [rows, r] in place by 2^e and 2^-e, e per
    rank, so that each rank's largest |A| and |B| are within a factor of 2."""
    top_a, top_b = a.abs().amax(dim=1), b.abs().amax(dim=0)
    both = (top_a > 0) & (top_b > 0)
    ratio = torch.where(both, top_b / torch.where(both, top_a, 1.0), 1.0)
    factor = torch.exp2(torch.round(0.5 * torch.log2(ratio)))
    a.mul_(factor[:, None])
    b.div_(factor[None, :])


def _add_parts(
    out: torch.Tensor, h: torch.Tensor, update: LowRank, rows: torch.Tensor | None
) -> None:
    """``out[rows, r0:r1] += h[:, c0:c1] @ B^T`` for each part (all rows: ``rows`` None)."""
    for r0, r1, c0, c1, b in update.parts:
        whole = r0 == 0 and r1 == out.shape[1]
        target = out if whole else out[:, r0:r1]
        part = h if c0 == 0 and c1 == h.shape[1] else h[:, c0:c1]
        delta = (part @ b.T).to(out.dtype)
        if rows is None:
            target.add_(delta)
        else:
            target.index_add_(0, rows, delta)


def apply_packed(
    out: torch.Tensor, x: torch.Tensor, row_slots: torch.Tensor, pack: list[torch.Tensor]
) -> torch.Tensor:
    """``out`` [T, N] fp32 plus each row's adapter's delta (``row_slots`` [T] int32, -1:
    none) from one projection's fp16 pack (:func:`pack_fused`), in one C++ op."""
    from mellea.engine import cpu_kernels

    if not out.is_contiguous():
        out = out.contiguous()
    cpu_kernels.lora_add(out, x.reshape(out.shape[0], -1).float(), *pack, row_slots)
    return out


def apply_stacked(
    out: torch.Tensor, x: torch.Tensor, step: LoraStep, stack: LowRank | None
) -> torch.Tensor:
    """``out`` plus each row's own adapter's delta, through the stacked updates: the
    columns of other adapters (all of them for a base row) are masked to zero."""
    if stack is None:
        return out
    mask = step.masks.get(stack.layout)
    if mask is None:
        assert step.slots is not None
        mask = (step.slots[:, None] == stack.owner[None, :]).float()
        step.masks[stack.layout] = mask
    _add_parts(out, (x.float() @ stack.a.T).mul_(mask), stack, None)
    return out


def apply_deltas(
    out: torch.Tensor,
    x: torch.Tensor,
    step: LoraStep,
    adapters: list[LoraAdapter],
    key: tuple[int, str],
) -> torch.Tensor:
    """``out`` plus each adapter's low-rank delta on its rows, computed in fp32."""
    for slot, rows in step.groups:
        update = adapters[slot].updates.get(key)
        if update is None:
            continue
        xs = x if rows is None else x.index_select(0, rows)
        _add_parts(out, xs.float() @ update.a.T, update, rows)
    return out
