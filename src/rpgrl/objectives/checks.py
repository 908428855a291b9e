"""Input validation shared by every policy loss (`rpg_loss`, `ppo_loss` and its presets): one-line ValueErrors that
name the tensor, the position and the value. Host syncs are kept to what each check needs: one for a non-bool mask's
values, one for empty rows, one for the finiteness of everything (a single fused sum; the culprit is searched only
when that sum is not finite)."""

from __future__ import annotations

import math

import torch


class LossOverflow(ValueError):
    """A loss, or the weight its gradient carries, too large to represent: importance ratios too extreme for the
    dtype (unclipped, at sequence level, or after a step that moved the policy far). The trainer reports it as a
    diverged run; a caller can retry with RPG-Style Clip, `max_log_w` or smaller steps."""


class _FiniteGradient(torch.autograd.Function):
    """Identity; its backward raises LossOverflow when the gradient reaching it is not finite."""

    @staticmethod
    def forward(ctx, logp: torch.Tensor, loss: str, why: str) -> torch.Tensor:
        ctx.loss, ctx.why = loss, why
        return logp.view_as(logp)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        if not bool(torch.isfinite(grad).all()):
            raise LossOverflow(f"{ctx.loss}'s gradient overflows {grad.dtype} under a finite loss: {ctx.why}")
        return grad, None, None


LOSS_WHY = (
    "an advantage, beta or 1 / normalizer is too large for the dtype; rescale them, or compute the loss in float64"
)
KL_WHY = (
    "the log-probs are too far apart for the dtype (padding passed without mask=?) or the term is scaled past it; "
    "pass mask= for padding, rescale, or compute in float64"
)


def finite_gradient(logp: torch.Tensor, loss: str, why: str = LOSS_WHY) -> torch.Tensor:
    """`logp` (any shape) itself, through an identity whose backward raises `LossOverflow` (one line naming `loss`)
    if the gradient of logp is inf or NaN: the net under the forward's refusals, which see the loss and the weights
    of its terms but not every product of them with the aggregation (e.g. |A| = 1e38 times c = 10, or a normalizer
    below 1), so no finite loss ever back-propagates a non-finite gradient into a model. One host sync per backward;
    nothing when logp needs no gradient (or is not a tensor: `check_tensors` names that)."""
    return _FiniteGradient.apply(logp, loss, why) if isinstance(logp, torch.Tensor) and logp.requires_grad else logp


def dtype_bound(bound: float | None, dtype: torch.dtype) -> float | None:
    """A clamp's or clip's bound (a Python float, or None: off) as a number of the loss's `dtype`: a finite bound
    above the dtype's largest number is that number, below which every finite value lies, so it binds the same values
    (torch refuses to convert it: "value cannot be converted to type float without overflow", for max_log_w 1e39 in
    float32). +-inf and None stay themselves; a non-floating dtype leaves the bound as given (the checks name it)."""
    if bound is None or math.isinf(bound) or not dtype.is_floating_point:
        return bound
    top = torch.finfo(dtype).max
    return max(min(bound, top), -top)


def require_tensors(optional: tuple[str, ...] = (), **named: torch.Tensor | None) -> None:
    """ValueError naming the first argument that is not a tensor (None passes for the names in `optional`), then
    `require_data`'s."""
    for name, t in named.items():
        if not isinstance(t, torch.Tensor) and not (t is None and name in optional):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    require_data(**named)


def require_data(**named: torch.Tensor | None) -> None:
    """ValueError naming the first tensor on the meta device (shapes, no values: a model built on it and never
    loaded; torch's error came from deep inside the loss) or on another device than the first tensor."""
    given = {name: t for name, t in named.items() if isinstance(t, torch.Tensor)}
    for name, t in given.items():
        if t.is_meta:
            raise ValueError(f"{name} is a meta tensor (shapes, no values): load the model's weights, or compute it "
                             "on a real device")  # fmt: skip
    first, device = next(((n, t.device) for n, t in given.items()), (None, None))
    for name, t in given.items():
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but {first} is on {device}: pass every tensor on one device")


FLOATS = (torch.float32, torch.float64)
"""The dtypes the loss library computes in: half precision loses the small differences of log-probs (and of rewards),
and integers or complex numbers are no log-probs or losses."""


def require_floats(fn: str, what: str, why: str, **named: torch.Tensor | None) -> None:
    """ValueError (one line) unless the first tensor of `named` is float32 or float64 (naming it, `fn` and `what` it
    holds, and `why` upcasting helps) and every other given one has its dtype. None entries are skipped."""
    given = [(name, t) for name, t in named.items() if t is not None]
    first, dtype = given[0][0], given[0][1].dtype
    if dtype not in FLOATS:
        raise ValueError(f"{first} has dtype {dtype}; {fn} needs float32 or float64 {what} (upcast first: {why})")
    for name, t in given[1:]:
        if t.dtype != dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but {first} has {dtype}; pass the same dtype")


LOGP_WHY = "in half precision the small differences logp - old_logp are lost"


def check_tensors(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    others: dict[str, torch.Tensor | None],
    *,
    loss: str,
    per_response_advantages: bool = False,
    allow_empty_rows: bool = False,
) -> torch.Tensor:
    """Types, shapes, dtypes, mask values and empty responses (refused unless `allow_empty_rows`). Returns the boolean
    mask (B, T).

    Shapes: logp, old_logp, mask and every tensor in `others` (e.g. anchor_logp, ref_logp; None = not given): (B, T);
    advantages (B,) or (B, T), only (B,) with `per_response_advantages`. logp is float32 or float64 and the other
    float inputs share its dtype; mask is bool or 0/1 numbers. `loss` names the caller in messages."""
    given = {k: v for k, v in others.items() if v is not None}
    named = {"logp": logp, "old_logp": old_logp, "advantages": advantages, "mask": mask, **given}
    require_tensors(**named)
    if logp.dim() != 2 or logp.numel() == 0:
        raise ValueError(f"logp must be (B, T) with B, T > 0, got shape {tuple(logp.shape)}")
    require_floats(loss, "log-probs", LOGP_WHY, logp=logp)
    B, T = logp.shape
    for name in ("old_logp", "mask", *given):
        if named[name].shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(named[name].shape)} but must have the shape of logp {(B, T)}")
    require_floats(loss, "log-probs", LOGP_WHY, logp=logp, **{k: named[k] for k in ("old_logp", "advantages", *given)})
    if advantages.shape not in ((B,), (B, T)):
        raise ValueError(f"advantages has shape {tuple(advantages.shape)}: must be (B,) or (B, T) = {(B, T)}")
    if per_response_advantages and advantages.dim() == 2:
        raise ValueError("level='sequence' needs one advantage per response: advantages of shape (B,), got (B, T)")
    return _bool_mask(mask, allow_empty_rows)


def _bool_mask(mask: torch.Tensor, allow_empty_rows: bool = False) -> torch.Tensor:
    if mask.dtype == torch.bool:
        mask_b = mask
    else:
        if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("mask must be bool or contain only 0 and 1")
        mask_b = mask != 0
    has_tok = mask_b.any(-1)
    if not allow_empty_rows and not bool(has_tok.all()):
        row = int((~has_tok).nonzero()[0, 0])
        raise ValueError(f"mask row {row} is all zero (a response with no tokens); drop it from the batch")
    return mask_b


def check_finite(
    named: dict[str, torch.Tensor | None],
    mask_b: torch.Tensor,
    total: torch.Tensor | None = None,
    log_w_tok: torch.Tensor | None = None,
) -> None:
    """Raise if an input is inf or NaN where the mask counts it (padding may hold anything).

    `total`: a 0-dim sum that is finite iff nothing counted overflows, if the caller already has one (rpg_loss does);
    otherwise one is formed here. `log_w_tok` (B, T): logp - old_logp, named when only the difference overflows.
    Shapes: (B, T) tensors are checked where `mask_b` (B, T) is true, (B,) tensors on every row."""
    if total is None:
        total = sum(_masked(t.detach(), mask_b).sum() for t in named.values() if t is not None)
    if bool(torch.isfinite(total)):
        return
    for name, t in named.items():
        if t is None:
            continue
        bad = ~torch.isfinite(t.detach())
        bad = bad & (mask_b if t.dim() == 2 else mask_b.any(-1))
        if bool(bad.any()):
            idx = tuple(bad.nonzero()[0].tolist())
            raise ValueError(f"{name} is not finite ({t[idx].item()}) at masked-in position {idx}")
    if log_w_tok is not None:
        bad = ~torch.isfinite(log_w_tok.detach())
        if bool(bad.any()):
            raise ValueError(f"logp - old_logp overflows at position {tuple(bad.nonzero()[0].tolist())}")
    # else: only the check-sum overflowed; every entry is finite


def _masked(t: torch.Tensor, mask_b: torch.Tensor) -> torch.Tensor:
    """Zero where the mask does not count `t` ((B, T) tensors); (B,) tensors unchanged. A sum of finite values that
    overflows only sends `check_finite` to its per-tensor search, which then finds nothing."""
    return torch.where(mask_b, t, 0.0) if t.dim() == 2 else t
