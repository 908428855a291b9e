"""What both adapters need besides the loss itself: engines hand over responses with no valid token (verl's fully
masked rows, TRL's `mask_truncated_completions`), which `rpg_loss` rightly refuses."""

from __future__ import annotations

import math
from typing import Any

import torch

from rpgrl.objectives.base import LossOutput
from rpgrl.objectives.checks import check_tensors
from rpgrl.objectives.rpg import rpg_loss


def rpg_loss_nonempty(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    empty_metric: float = math.nan,
    **options: Any,
) -> LossOutput:
    """`rpg_loss` over the responses that have at least one valid token; the others get a zero per-token loss and no
    gradient. With the default normaliser, seq-mean modes count only the kept responses (as verl's agg_loss does).
    A micro-batch with no valid token at all reports the same metric names as any other, each `empty_metric`
    (NaN: left out of a nanmean; verl's own losses report 0): every process of a data-parallel job then gathers the
    same metrics, whichever micro-batch came out empty (a process with none hung the others' collectives).
    Shapes: logp, old_logp, mask (B, T); advantages (B,) or (B, T). per_token comes back as (B, T)."""
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and bool(mask.bool().any(-1).all()):
        return rpg_loss(logp, old_logp, advantages, mask, **options)  # no empty row: rpg_loss checks it all
    # checked before rows are indexed: a wrong shape or type is rpg_loss's one-line message, not an IndexError
    mask_b = check_tensors(logp, old_logp, advantages, mask, {"anchor_logp": options.get("anchor_logp")},
                           loss="rpg_loss", per_response_advantages=options.get("level") == "sequence",
                           allow_empty_rows=True)  # fmt: skip
    keep = mask_b.any(-1)  # (B,)
    # (B, T) zeros that keep the graph, so backward() works on an all-empty micro-batch; not logp * 0, which is NaN
    # where padding holds inf or NaN
    zero = logp.where(torch.zeros_like(mask_b), 0.0)
    if not bool(keep.any()):
        metrics = _empty_metrics(logp, advantages, empty_metric, options)
        return LossOutput(loss=zero.sum(), per_token=zero, metrics=metrics)
    if options.get("anchor_logp") is not None:
        options = {**options, "anchor_logp": options["anchor_logp"][keep]}
    out = rpg_loss(logp[keep], old_logp[keep], advantages[keep], mask[keep], **options)
    per_token = None
    if out.per_token is not None:
        per_token = zero.index_put((keep,), out.per_token)  # (B, T), rows of empty responses stay 0
    return LossOutput(loss=out.loss, per_token=per_token, metrics=out.metrics)


def _empty_metrics(logp: torch.Tensor, advantages: torch.Tensor, value: float, options: dict) -> dict[str, Any]:
    """rpg_loss's metric names for these options (from a one-token call with w = 1), each set to `value`."""
    one = torch.zeros(1, 1, dtype=logp.dtype, device=logp.device)
    adv = torch.zeros((1,) * advantages.dim(), dtype=logp.dtype, device=logp.device)  # (1,) or (1, 1)
    if options.get("anchor_logp") is not None:
        options = {**options, "anchor_logp": one}
    names = rpg_loss(one, one, adv, torch.ones(1, 1, dtype=torch.bool, device=logp.device), **options).metrics
    return {k: torch.full_like(v, value) for k, v in names.items()}
