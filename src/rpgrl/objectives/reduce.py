"""Masked reductions and loss aggregation (verl's `agg_loss` modes, with an explicit normalizer).

Shapes: `per_token`, `mask`: (B, T). `mask` is 1.0 for response tokens that count (up to and including EOS), 0.0
for padding. Under micro-batching or data parallelism the caller passes the *global* normalizer so that the sum of
micro-batch losses equals the loss of the whole batch (the math never reads trainer state).
"""

from __future__ import annotations

import torch

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `x` over positions where `mask` is set (over `dim`, or everything). Padding values never leak in, even
    when they are inf/NaN. `mask` may be bool or 0/1 numbers."""
    keep = mask if mask.dtype == torch.bool else mask != 0
    x = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over positions where `mask` is set (over `dim`, or everything). Empty -> 0."""
    n = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / n.clamp(min=1)


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean", normalizer: float | torch.Tensor | None = None
) -> torch.Tensor:
    """Reduce a per-token loss `(B, T)` to a scalar.

    token-mean           : sum_{i,t} m l / N       N = normalizer or sum_{i,t} m   (global token count)
    seq-mean-token-sum   : sum_i sum_t m l / N     N = normalizer or B             (global sequence count)
    seq-mean-token-mean  : sum_i (sum_t m l / L_i) / N,  L_i = sum_t m[i]; N = normalizer or B

    With `normalizer` set to the global count, summing `aggregate` over micro-batches gives the full-batch value.
    """
    if agg not in AGG_MODES:
        raise ValueError(f"unknown agg {agg!r}; valid: {', '.join(AGG_MODES)}")
    # counts come from the mask as given (a bool mask sums to an exact integer); no dtype round trips
    if agg == "token-mean":
        n = mask.sum() if normalizer is None else normalizer
        return masked_sum(per_token, mask) / n
    per_seq = masked_sum(per_token, mask, dim=-1)  # (B,)
    if agg == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1)
    n = per_token.shape[0] if normalizer is None else normalizer
    return per_seq.sum() / n
