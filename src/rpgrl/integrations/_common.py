"""What both adapters need besides the loss itself: engines hand over responses with no valid token (verl's fully
masked rows, TRL's `mask_truncated_completions`), which `rpg_loss` rightly refuses."""

from __future__ import annotations

from typing import Any

import torch

from rpgrl.objectives.base import LossOutput
from rpgrl.objectives.rpg import rpg_loss


def rpg_loss_nonempty(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, **options: Any
) -> LossOutput:
    """`rpg_loss` over the responses that have at least one valid token; the others get a zero per-token loss and no
    gradient. With the default normaliser, seq-mean modes count only the kept responses (as verl's agg_loss does).
    Shapes: logp, old_logp, mask (B, T); advantages (B,) or (B, T). per_token comes back as (B, T)."""
    keep = mask.bool().any(-1)  # (B,)
    if bool(keep.all()):
        return rpg_loss(logp, old_logp, advantages, mask, **options)
    zero = logp * 0  # (B, T), keeps the graph so backward() works on an all-empty micro-batch
    if not bool(keep.any()):
        return LossOutput(loss=zero.sum(), per_token=zero, metrics={})
    out = rpg_loss(logp[keep], old_logp[keep], advantages[keep], mask[keep], **options)
    per_token = None
    if out.per_token is not None:
        per_token = zero.index_put((keep,), out.per_token)  # (B, T), rows of empty responses stay 0
    return LossOutput(loss=out.loss, per_token=per_token, metrics=out.metrics)
