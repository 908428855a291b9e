"""Outcome advantage estimators (spec 5.1): one scalar reward per response in, advantages out.

Every estimator shares one signature (the `AdvantageFn` protocol):

    fn(rewards: (B,), group: (B,) integer prompt ids, mask: (B, T)) -> advantages (B,) or (B, T)

`group` marks responses to the same prompt (any integer ids, not necessarily contiguous); groups may have different
sizes. Rewards are float32 or float64 (half precision is refused, as by the losses). Group statistics are computed with
index_add (no Python loop over groups), in float64 whatever the rewards' dtype (float32 rewards of 1e20 have a variance
float32 cannot hold; a spread whose squares pass float64, past ~1e154, takes its std from squares scaled by the largest
deviation), and the advantages are returned in the rewards' dtype; advantages that do not fit it raise ValueError. A
mean is taken as the least value plus the mean of the differences to it, so equal rewards give advantages of exactly 0
at any magnitude (a plain float64 mean of seven copies of 6.6e10 is off by an ulp, which GRPO's division by a std of the
same size turned into A = 0.87).
Estimators, with exact epsilons:

    rpg                     A_i = R_i - mean_g(R)                         size-1 group: mean 0 (A = R)
    drgrpo                  the same (Dr. GRPO's "no std"); a separate name so presets say what they mean
    grpo                    A_i = (R_i - mean_g(R)) / (std_g(R) + 1e-6)   Bessel std; size-1 group: mean 0, std 1
    rloo                    A_i = R_i - mean_{j in g, j != i} R_j          size-1 group: baseline 0 (A = R)
    reinforce_pp            R_i on every valid token, whitened over all valid tokens of the batch:
                            (v - mu) / sqrt(var + 1e-8), token-weighted mu, Bessel var over tokens -> (B, T)
    reinforce_pp_baseline   R_i - mean_g(R) (size-1: mean 0) on every valid token, then the same whitening

(`rpg` = ((G-1)/G) * `rloo` for a group of size G, so its expected gradient is ((G-1)/G) grad E[R]; dividing by
the group std (`grpo`) makes it not even parallel to grad E[R], spec 5.1.) REINFORCE++ uses gamma = 1, so the
return of every valid token is R_i. The (B, T) outputs are 0 on padding.
"""

from __future__ import annotations

import numbers
from typing import Protocol

import torch

from rpgrl.objectives.checks import require_data, require_floats, require_tensors
from rpgrl.options import check_size, scalar
from rpgrl.registry import Registry

GRPO_EPS = 1e-6
WHITEN_EPS = 1e-8
_HALF = "the advantages come back in the rewards' dtype, which the losses refuse"


class AdvantageFn(Protocol):
    def __call__(self, rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor, **options) -> torch.Tensor: ...


ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")
register_advantage = ADVANTAGES.register
get_advantage = ADVANTAGES.get


@register_advantage("rpg")
def rpg_advantage(rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A_i = R_i - group mean (a size-1 group gets mean 0). Shapes: rewards, group: (B,); mask: (B, T) -> (B,)."""
    _check(rewards, group, mask)
    r = rewards.double()
    mean, _, _ = _group_moments(r, group)
    return _back(r - mean, rewards.dtype)


@register_advantage("drgrpo")
def drgrpo_advantage(rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO: group mean, no std. Identical to `rpg`. Shapes: (B,), (B,), (B, T) -> (B,)."""
    return rpg_advantage(rewards, group, mask)


@register_advantage("grpo")
def grpo_advantage(
    rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor, *, eps: float = GRPO_EPS
) -> torch.Tensor:
    """A_i = (R_i - group mean) / (group std + eps), std with Bessel correction; a size-1 group uses mean 0, std 1
    (so A = R / (1 + eps)), as verl does. Shapes: rewards, group: (B,); mask: (B, T) -> (B,)."""
    _check(rewards, group, mask)
    eps = _check_eps(eps)
    r = rewards.double()
    mean, var, n = _group_moments(r, group)
    spread = var > 0  # sqrt's backward at 0 is inf (x 0 = NaN): an all-equal group's std is 0 with gradient 0
    std = torch.where(n > 1, torch.where(spread, torch.where(spread, var, 1.0).sqrt(), 0.0), torch.ones_like(var))
    inv, _ = _group_index(group, r.dtype)
    std = torch.where(torch.isinf(var), _scaled_std(r - mean, inv, n), std)  # the squares passed float64
    return _back((r - mean) / (std + eps), rewards.dtype)


@register_advantage("rloo")
def rloo_advantage(rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A_i = R_i - mean of the other responses of its group (leave-one-out); a size-1 group has baseline 0.
    Shapes: rewards, group: (B,); mask: (B, T) -> (B,)."""
    _check(rewards, group, mask)
    r = rewards.double()
    inv, n = _group_index(group, r.dtype)
    d = r - _group_min(r, inv, n.numel())  # shifted by the group's least reward: equal rewards give exactly 0
    total = torch.zeros(n.numel(), dtype=r.dtype, device=r.device).index_add_(0, inv, d)[inv]
    n = n[inv]
    return _back(torch.where(n > 1, d - (total - d) / (n - 1).clamp(min=1), r), rewards.dtype)


@register_advantage("reinforce_pp")
def reinforce_pp_advantage(
    rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor, *, eps: float = WHITEN_EPS
) -> torch.Tensor:
    """REINFORCE++: R_i broadcast to its valid tokens (gamma = 1), whitened over all valid tokens of the batch.
    `group` is not used. Shapes: rewards, group: (B,); mask: (B, T) -> (B, T), 0 on padding."""
    _check(rewards, group, mask)
    return whiten(rewards[:, None].expand(mask.shape), mask, eps=eps)


@register_advantage("reinforce_pp_baseline")
def reinforce_pp_baseline_advantage(
    rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor, *, eps: float = WHITEN_EPS
) -> torch.Tensor:
    """REINFORCE++-baseline: R_i - group mean (size-1 group: mean 0) broadcast to its valid tokens, then whitened
    over all valid tokens of the batch. Shapes: rewards, group: (B,); mask: (B, T) -> (B, T), 0 on padding."""
    _check(rewards, group, mask)
    mean, _, _ = _group_moments(rewards.double(), group)
    centred = rewards.double() - mean  # kept in float64 for the whitening
    return _back(whiten(centred[:, None].expand(mask.shape), mask, eps=eps), rewards.dtype)


def whiten(values: torch.Tensor, mask: torch.Tensor, *, eps: float = WHITEN_EPS) -> torch.Tensor:
    """(values - mu) / sqrt(var + eps) over the positions where mask is set, 0 elsewhere.

    mu = token-weighted mean, var = token-weighted variance with Bessel correction over the token count N (sum m (v -
    mu)^2 / (N - 1)); N must be >= 2. Computed in float64, returned in values' dtype (float32 or float64). Shapes:
    values, mask: (B, T) -> (B, T); values finite where mask is set, mask bool or 0/1."""
    eps = _check_eps(eps)
    if not isinstance(values, torch.Tensor) or not isinstance(mask, torch.Tensor):
        raise ValueError(f"whiten: values and mask must be tensors, got {type(values).__name__} and "
                         f"{type(mask).__name__}")  # fmt: skip
    require_data(values=values, mask=mask)
    if values.dim() != 2 or mask.shape != values.shape:
        raise ValueError(f"whiten: values must be (B, T) and mask of its shape, got {tuple(values.shape)} and "
                         f"{tuple(mask.shape)}")  # fmt: skip
    require_floats("whiten", "values", "the result comes back in their dtype, which the losses refuse", values=values)
    if mask.dtype != torch.bool and ((mask != 0) & (mask != 1)).any():
        raise ValueError("whiten: mask must be bool or contain only 0 and 1")
    m = mask.bool()
    n = m.sum()
    if n < 2:
        raise ValueError(f"whitening needs at least 2 valid tokens (Bessel correction), got {int(n)}")
    zero = torch.zeros((), dtype=torch.float64, device=values.device)
    v = torch.where(m, values.double(), zero)
    if not bool(torch.isfinite(v).all()):
        raise ValueError(f"whiten: values are not finite at {tuple((~torch.isfinite(v)).nonzero()[0].tolist())}")
    low = torch.where(m, v, torch.full_like(v, float("inf"))).min()
    mu = low + torch.where(m, v - low, zero).sum() / n  # shifted by the least value: equal values give exactly 0
    var = torch.where(m, (v - mu).square(), zero).sum() / (n - 1)
    dev = torch.where(m, v - mu, zero)  # past float64's squares (|v - mu| ~ 1e154), the std from scaled ones
    scale = torch.where(torch.isinf(var), 1.0 / _scaled_std(dev.flatten(), None, n)[0], torch.rsqrt(var + eps))
    return _back(torch.where(m, (v - mu) * scale, zero), values.dtype)


def _scaled_std(dev: torch.Tensor, inv: torch.Tensor | None, n: torch.Tensor) -> torch.Tensor:
    """sqrt(sum dev^2 / (n - 1)) per sample of each group (`inv` from _group_index; None: one group), the squares
    taken as (dev / s)^2 with s the group's largest |dev|: finite wherever the std is, where a float64 sum of squares
    overflows past |dev| ~ 1e154 (GRPO's and the whitening's std were inf there, every advantage 0). 1 where the
    deviations are all 0 (the callers' own std holds there), with a finite gradient. Shapes: dev, inv: (B,); n: (B,)
    or 0-dim -> (B,)."""
    inv = torch.zeros_like(dev, dtype=torch.long) if inv is None else inv
    k = int(inv.max()) + 1 if inv.numel() else 0
    top = torch.zeros(k, dtype=dev.dtype, device=dev.device).scatter_reduce(0, inv, dev.abs(), "amax")
    s = torch.where(top > 0, top, 1.0)[inv]
    sq = torch.zeros(k, dtype=dev.dtype, device=dev.device).index_add_(0, inv, (dev / s).square())[inv]
    sq = sq / (n - 1).clamp(min=1)
    return s * torch.where(sq > 0, sq, 1.0).sqrt()


def _back(adv: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Advantages computed in float64, in `dtype`; ValueError where they do not fit it (or overflowed)."""
    out = adv.to(dtype)
    bad = ~torch.isfinite(out)
    if bool(bad.any()):
        i = tuple(bad.nonzero()[0].tolist())
        raise ValueError(f"advantage at {i} is {adv[i].item():.6g}, beyond {dtype}'s range: the rewards are too large "
                         "to represent their differences (rescale them)")  # fmt: skip
    return out


def _group_index(group: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense group index per sample (B,) and group sizes (K,) as `dtype`."""
    _, inv, counts = torch.unique(group, return_inverse=True, return_counts=True)
    return inv, counts.to(dtype)


def _group_min(values: torch.Tensor, inv: torch.Tensor, k: int) -> torch.Tensor:
    """Per sample (B,): the least value of its group (`inv` from _group_index, `k` groups)."""
    low = torch.empty(k, dtype=values.dtype, device=values.device)
    return low.scatter_reduce_(0, inv, values, "amin", include_self=False)[inv]


def _group_moments(rewards: torch.Tensor, group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per sample (B,): group mean (0 for size-1 groups), Bessel group variance (0 for size-1 groups), group size."""
    inv, n = _group_index(group, rewards.dtype)
    k = n.numel()
    low = _group_min(rewards, inv, k)  # the mean as low + mean(rewards - low): exact for a group of equal rewards
    above = torch.zeros(k, dtype=rewards.dtype, device=rewards.device).index_add_(0, inv, rewards - low)
    mean = torch.where(n[inv] > 1, low + above[inv] / n[inv], torch.zeros_like(low))  # (B,)
    sq = torch.zeros(k, dtype=rewards.dtype, device=rewards.device).index_add_(0, inv, (rewards - mean).square())
    var = torch.where(n > 1, sq / (n - 1).clamp(min=1), torch.zeros_like(sq))[inv]  # two-pass: no cancellation
    return mean, var, n[inv]


def _check_eps(eps: float) -> float:
    """`eps` as a Python float (numpy's scalars and 0-dim arrays or tensors taken as their value). It guards a zero
    spread (a group or batch with equal rewards): 0 would give 0/0 = NaN, < 0 flips signs."""
    eps = scalar(eps, "eps")
    check_size(eps, "eps")  # float() of 10**400 raised OverflowError
    if not (isinstance(eps, numbers.Real) and not isinstance(eps, bool) and 0 < eps < float("inf")):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    return float(eps)


def _check(rewards: torch.Tensor, group: torch.Tensor, mask: torch.Tensor) -> None:
    require_tensors(rewards=rewards, group=group, mask=mask)
    if rewards.dim() != 1 or rewards.numel() == 0:
        raise ValueError(f"rewards must be a non-empty (B,) tensor, got shape {tuple(rewards.shape)}")
    require_floats("an advantage estimator", "rewards", _HALF, rewards=rewards)
    if group.shape != rewards.shape:
        raise ValueError(f"group {tuple(group.shape)} must have the shape of rewards {tuple(rewards.shape)}")
    if group.is_floating_point() or group.is_complex() or group.dtype == torch.bool:
        raise ValueError(f"group must hold integer prompt ids, got {group.dtype}")
    if mask.dim() != 2 or mask.shape[0] != rewards.shape[0]:
        raise ValueError(f"mask must be (B, T) with B = {rewards.shape[0]}, got shape {tuple(mask.shape)}")
    if mask.dtype != torch.bool and ((mask != 0) & (mask != 1)).any():
        raise ValueError("mask must be bool or contain only 0 and 1")
    bad = (~torch.isfinite(rewards)).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(f"rewards[{i}] is not finite ({rewards[i].item()}); {bad.shape[0]} non-finite reward(s)")


__all__ = [
    "ADVANTAGES",
    "GRPO_EPS",
    "WHITEN_EPS",
    "AdvantageFn",
    "drgrpo_advantage",
    "get_advantage",
    "grpo_advantage",
    "register_advantage",
    "reinforce_pp_advantage",
    "reinforce_pp_baseline_advantage",
    "rloo_advantage",
    "rpg_advantage",
    "whiten",
]
