"""Converting a loaded fp32 model's linear layers and LM head to a compact format."""

from __future__ import annotations

import torch
from torch import nn

from mellea.engine.block_table import BlockTable
from mellea.engine.formats.head import HeadScorer, RefinedHead, scoring_layer
from mellea.engine.formats.linear import linear_layer


@torch.no_grad()
def convert_weights(model: nn.Module, fmt: str, scorer: HeadScorer | None = None) -> nn.Module:
    """Store ``model``'s (a CPU fp32 :class:`~mellea.engine.model.DecoderModel`) linear
    layers in ``fmt``, in place, and give it a :class:`RefinedHead` (its scoring layer
    from ``scorer`` where that built it while the model loaded).

    The embedding stays fp32: a lookup reads one row per token, so its format costs
    nothing in speed, while rounded input embeddings move every later layer. The LM
    head (the embedding table, when tied) scores in ``fmt``, a search for candidates,
    and refines the best from its fp32 rows. ``float32`` (and ``float16``) change
    nothing.
    """
    if fmt not in ("bfloat16", "int8", "int4"):
        return model  # loaded in this dtype already
    head = getattr(model, "lm_head", None)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child is not head:
                setattr(parent, name, linear_layer(child.weight, child.bias, fmt))
    embed = getattr(model, "embed_tokens", None)
    if isinstance(head, BlockTable):  # a GGUF's own head table, kept in its blocks
        model.lm_head = RefinedHead(scoring_layer(head, fmt, scorer), head)
    elif head is None and isinstance(embed, BlockTable):
        model.lm_head = RefinedHead(scoring_layer(embed, fmt, scorer), embed)
    elif isinstance(head, nn.Linear):
        model.lm_head = RefinedHead(linear_layer(head.weight, head.bias, fmt), head.weight)
    elif head is None and isinstance(embed, nn.Embedding):  # tied: the head reads the table
        model.lm_head = RefinedHead(linear_layer(embed.weight, None, fmt), embed.weight)
    return model
