"""Masked reductions and loss aggregation (verl's `agg_loss` modes, with an explicit normalizer).

Shapes: `per_token`, `mask`: (B, T). `mask` is 1.0 for response tokens that count (up to and including EOS), 0.0
for padding. Under micro-batching or data parallelism the caller passes the *global* normalizer so that the sum of
micro-batch losses equals the loss of the whole batch (the math never reads trainer state).
"""

from __future__ import annotations

import math
import numbers

import torch

from rpgrl.objectives.checks import require_data, require_floats
from rpgrl.options import AGG_MODES, past_float, scalar  # noqa: F401 (AGG_MODES: declared with the other RPG options)


def _keep(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not isinstance(mask, torch.Tensor):
        raise ValueError(f"x and mask must be tensors, got {type(x).__name__} and {type(mask).__name__}")
    if mask.shape != x.shape:  # a broadcast mask would count its own positions, not x's
        raise ValueError(f"mask has shape {tuple(mask.shape)} but must have the shape of x {tuple(x.shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `x` over positions where `mask` is set (over `dim`, or everything). Padding values never leak in, even
    when they are inf/NaN. `mask`: x's shape, bool or numbers (nonzero = set)."""
    x = torch.where(_keep(x, mask), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over positions where `mask` is set (over `dim`, or everything): their count, not the mask's sum,
    divides. Empty -> 0. `mask` as in `masked_sum`. Half-precision values are summed in float32 and the mean
    returned in their dtype."""
    keep = _keep(x, mask)
    n = keep.sum() if dim is None else keep.sum(dim)
    if x.dtype in (torch.float16, torch.bfloat16):  # summed in float32: a sum past 65504 gave an inf mean in float16
        return (masked_sum(x.float(), keep, dim) / n.clamp(min=1)).to(x.dtype)
    return masked_sum(x, keep, dim) / n.clamp(min=1)


MIN_NORMALIZER = 2.0**-20
"""The smallest normalizer taken: a count of at least 1 divided among up to 2^20 processes (verl and TRL pass the
global count / the data-parallel size, below 1 when a batch has fewer tokens than processes)."""


def check_normalizer(normalizer: float | torch.Tensor | None) -> float | torch.Tensor | None:
    """ValueError unless `normalizer` is None or one finite number >= MIN_NORMALIZER (a zero, negative or NaN count
    would silently give an inf, sign-flipped or NaN loss, and a tiny one multiplies every gradient: at 1e-39 a loss
    of 0 came with infinite gradients), and a constant (a tensor that requires grad is refused). A tensor costs one
    host sync. Returns it, a numpy scalar or 0-dim array as Python's number, a Fraction as its float."""
    if normalizer is None:
        return None
    if not isinstance(normalizer, torch.Tensor):
        normalizer = scalar(normalizer, "normalizer")
    if isinstance(normalizer, torch.Tensor):
        if normalizer.is_meta:
            raise ValueError("normalizer is a meta tensor (no value): pass the count as a number")
        if normalizer.requires_grad:  # the loss's gradient reached it (options.scalar refuses such an option)
            raise ValueError("normalizer must be a constant count, got a tensor that requires grad: detach it")
        if normalizer.numel() != 1:
            raise ValueError(f"normalizer must be one number, got a tensor of shape {tuple(normalizer.shape)}")
        if normalizer.dtype == torch.bool or normalizer.is_complex():  # True counted as 1; complex has no >=
            raise ValueError(f"normalizer must be a real count, got a tensor of dtype {normalizer.dtype}")
        ok = bool((normalizer >= MIN_NORMALIZER) & torch.isfinite(normalizer))
    elif isinstance(normalizer, numbers.Integral) and not isinstance(normalizer, bool):
        ok = MIN_NORMALIZER <= normalizer < 2**63  # (an int past float's range overflowed math.isfinite)
    elif isinstance(normalizer, bool):  # True would count as 1
        raise ValueError(f"normalizer must be a real count, got {normalizer!r}")
    elif isinstance(normalizer, numbers.Real) and past_float(normalizer) is not None:  # float() overflows
        ok = False
    elif isinstance(normalizer, numbers.Real):  # float, numpy's floats, a Fraction (taken as its float: torch has no
        ok = math.isfinite(normalizer) and normalizer >= MIN_NORMALIZER  # `Tensor / Fraction`)
        normalizer = normalizer if isinstance(normalizer, float) else float(normalizer)
    else:
        raise ValueError(f"normalizer must be a number or a 0-dim tensor, got {type(normalizer).__name__}")
    if not ok:
        big = isinstance(normalizer, int) and abs(normalizer) >= 10**20
        shown = f"an int of {len(str(abs(normalizer)))} digits" if big else past_float(normalizer) or normalizer
        raise ValueError(f"normalizer must be a finite count >= 2**-20 (of tokens or responses, per process), "
                         f"got {shown}")  # fmt: skip
    return normalizer


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean", normalizer: float | torch.Tensor | None = None
) -> torch.Tensor:
    """Reduce a per-token loss `(B, T)` to a scalar.

    token-mean           : sum_{i,t} m l / N       N = normalizer or sum_{i,t} m   (global token count)
    seq-mean-token-sum   : sum_i sum_t m l / N     N = normalizer or B             (global sequence count)
    seq-mean-token-mean  : sum_i (sum_t m l / L_i) / N,  L_i = sum_t m[i]; N = normalizer or B

    With `normalizer` set to the global count, summing `aggregate` over micro-batches gives the full-batch value.
    `mask` must have per_token's shape and hold bool or 0/1 values; without a normalizer, token-mean needs a token.
    per_token is float32 or float64, as the losses' log-probs (half precision is refused: upcast first).
    """
    if agg not in AGG_MODES:
        raise ValueError(f"unknown agg {agg!r}; valid: {', '.join(AGG_MODES)}")
    normalizer = check_normalizer(normalizer)
    _check_mask(per_token, mask, empty_ok=normalizer is not None or agg != "token-mean")
    normalizer = normalizer.reshape(()) if isinstance(normalizer, torch.Tensor) else normalizer  # (1,): a scalar loss
    # counts from the mask as bools (exact integers): a float16 mask's own sum of 70,000 ones was inf (a loss of 0) and
    # a bfloat16 one's of 257 was 256; nor does a float64 mask's count turn a float32 loss into float64
    keep = _keep(per_token, mask)
    if agg == "token-mean":
        n = keep.sum() if normalizer is None else normalizer
        return (masked_sum(per_token, keep) / n).to(per_token.dtype)  # a float64 normalizer: not a float64 loss
    per_seq = masked_sum(per_token, keep, dim=-1)  # (B,)
    if agg == "seq-mean-token-mean":
        per_seq = per_seq / keep.sum(-1).clamp(min=1)
    n = max(per_token.shape[0], 1) if normalizer is None else normalizer  # no response: 0, not 0 / 0
    return (per_seq.sum() / n).to(per_token.dtype)


def _check_mask(per_token: torch.Tensor, mask: torch.Tensor, empty_ok: bool) -> None:
    """ValueError for a mask `aggregate` would misread: another shape (it would broadcast), values other than 0/1
    (counted as tokens), or no token where the count is its divisor (0 / 0)."""
    if not isinstance(per_token, torch.Tensor) or not isinstance(mask, torch.Tensor):
        raise ValueError(f"per_token and mask must be tensors, got {type(per_token).__name__} and "
                         f"{type(mask).__name__}")  # fmt: skip
    require_data(per_token=per_token, mask=mask)
    require_floats("aggregate", "losses", "the losses compute in float32 or float64", per_token=per_token)
    if per_token.dim() != 2 or mask.shape != per_token.shape:
        raise ValueError(f"per_token must be (B, T) and mask of its shape, got {tuple(per_token.shape)} and "
                         f"{tuple(mask.shape)}")  # fmt: skip
    if mask.dtype != torch.bool and (mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all())):
        raise ValueError("mask must be bool or contain only 0 and 1")
    if not empty_ok and not bool(mask.any()):
        raise ValueError("mask selects no token: token-mean has nothing to average (pass a normalizer)")


def aggregate_rows(
    row: torch.Tensor, mask: torch.Tensor, agg: str, normalizer: float | torch.Tensor | None = None
) -> torch.Tensor:
    """`aggregate` of a loss given by its per-response token-sums `row` (B,) (mask: (B, T) bool): equal to
    `aggregate(per_token, mask, agg, normalizer)` when row = masked_sum(per_token, mask, dim=-1). For losses with no
    per-token form (rpg_loss's differentiable style at sequence level), whose unit loss is read as the token-sum.
    `agg` and `normalizer` are the caller's, already checked."""
    normalizer = normalizer.reshape(()) if isinstance(normalizer, torch.Tensor) else normalizer
    if agg == "token-mean":
        return (row.sum() / (mask.sum() if normalizer is None else normalizer)).to(row.dtype)
    if agg == "seq-mean-token-mean":
        row = row / mask.sum(-1).clamp(min=1)  # as `aggregate`: an empty row adds 0
    return (row.sum() / (max(row.shape[0], 1) if normalizer is None else normalizer)).to(row.dtype)
