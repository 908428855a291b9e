"""DAPO's reward shaping and group filter (spec 5.3; section-9 items 23-24), as pure tensor functions.

    overlong_penalty     penalty(L) = min(-(L - (L_max - L_buf)) / L_buf * factor, 0)   added to the score
    group_filter_keep    keep a prompt group iff its accuracies are not all equal, or it has one response

The accumulation of generation batches until enough groups are kept (and the abort after too many batches)
is orchestration and lives with the rollout code. Imports torch (and rpgrl's option and tensor checks) only.
"""

from __future__ import annotations

import math
import numbers

import torch

from rpgrl.objectives.checks import require_data
from rpgrl.options import check_size, scalar


def overlong_penalty(
    lengths: torch.Tensor, max_len: int, buffer: int, factor: float = 1.0, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """DAPO's soft overlong punishment, to be added to each response's score.

    penalty(L) = 0                                     for L <= max_len - buffer
               = -(L - (max_len - buffer)) / buffer * factor   up to L = max_len (= -factor there)
    With max_len 2048, buffer 512, factor 1: L = 1000 -> 0, 1536 -> 0, 1792 -> -0.5, 2048 -> -1.

    `lengths`: (B,) valid response tokens (EOS included). Generation is truncated at max_len, so a length above it
    is a bug upstream and raises. Returns (B,) in `dtype`, a floating dtype (default: torch's default float dtype),
    computed in float64 and rounded once (in bfloat16 the lengths themselves rounded: 1537 of 2048 got 0).
    """
    out_dtype = torch.get_default_dtype() if dtype is None else dtype
    if not (isinstance(out_dtype, torch.dtype) and out_dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")
    if lengths is None or isinstance(lengths, (str, bytes)):
        raise ValueError(f"lengths must be (B,) integers, got {type(lengths).__name__}")
    lengths = torch.as_tensor(lengths)
    require_data(lengths=lengths)
    if lengths.is_complex() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be (B,) real numbers, got {lengths.dtype}")
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be (B,), got shape {tuple(lengths.shape)}")
    max_len, buffer, factor = _options(max_len, buffer, factor, out_dtype)
    given = lengths
    if not lengths.is_floating_point():  # int64: exact past 2**53 (max_len may reach 2**63), and uint32 has no min
        wrapped = lengths.dtype == torch.uint64  # past 2**63 it wraps negative: too long, not negative
        lengths = lengths.to(torch.int64)
        if wrapped:
            lengths = torch.where(lengths < 0, torch.iinfo(torch.int64).max, lengths)
    if lengths.numel():
        if not torch.isfinite(lengths).all() or lengths.min() < 0:
            raise ValueError("lengths must be finite and >= 0")
        if lengths.max() > max_len:
            i = int(lengths.argmax())
            raise ValueError(f"lengths[{i}] = {given[i].item()} exceeds max_len {max_len}")
    over = lengths - (max_len - buffer) if not lengths.is_floating_point() else lengths.double() - (max_len - buffer)
    return torch.clamp(-over.double() / buffer * factor, max=0.0).to(out_dtype)


def _options(max_len, buffer, factor, out_dtype: torch.dtype) -> tuple[int, int, float]:
    """`overlong_penalty`'s max_len, buffer (ints below 2**63: torch compares them as int64, and 2**63 + 5 wrapped)
    and factor (a float, or a number below 2**63 as the loss options take one, finite, >= 0, and at most the output
    dtype's largest number: the penalty reaches -factor), as Python's; a one-line ValueError naming the option."""
    max_len, buffer, factor = scalar(max_len, "max_len"), scalar(buffer, "buffer"), scalar(factor, "factor")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (max_len, buffer)):
        raise ValueError(f"max_len and buffer must be ints, got {max_len!r} and {buffer!r}")
    for name, v in (("max_len", max_len), ("buffer", buffer)):
        if abs(v) >= 2**63:
            raise ValueError(f"{name} must be an int below 2**63, got an int of {len(str(abs(v)))} digits")
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
        raise ValueError(f"factor must be a number, got {factor!r}")
    check_size(factor, "factor")  # float() of 10**400 raised OverflowError
    if not 0 < buffer <= max_len:
        raise ValueError(f"need 0 < buffer <= max_len, got buffer={buffer}, max_len={max_len}")
    factor = float(factor)
    if not (math.isfinite(factor) and factor >= 0):
        raise ValueError(f"factor must be finite and >= 0, got {factor}")
    top = torch.finfo(out_dtype).max
    if torch.isinf(torch.tensor(-factor, dtype=torch.float64).to(out_dtype)):  # rounded to -inf: a score of -inf
        raise ValueError(f"factor {factor:g} is past {out_dtype}'s largest number ({top:g}): the penalty reaches "
                         "-factor; pass a smaller factor or a wider dtype")  # fmt: skip
    return max_len, buffer, factor


def group_filter_keep(acc: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """DAPO dynamic-sampling filter: True for every response whose prompt group is kept.

    A group is kept iff the standard deviation of its accuracies is > 0 (i.e. not all equal: neither all correct
    nor all wrong), or it has a single response. Filter on `acc` (0/1 correctness), not on the shaped reward.
    Exact: compares group min and max, so no rounding can make equal accuracies look different.

    Shapes: acc: (B,) float or bool; group: (B,) integer prompt ids -> (B,) bool. Kept prompts:
    `group[keep].unique()`.
    """
    if not isinstance(acc, torch.Tensor) or not isinstance(group, torch.Tensor):
        raise ValueError(f"acc and group must be tensors, got {type(acc).__name__} and {type(group).__name__}")
    require_data(acc=acc, group=group)
    if acc.is_complex():  # its imaginary part was dropped with a warning
        raise ValueError(f"acc must hold real accuracies (0/1 or bool), got {acc.dtype}")
    if acc.dim() != 1 or group.shape != acc.shape:
        raise ValueError(f"acc and group must both be (B,), got {tuple(acc.shape)} and {tuple(group.shape)}")
    if group.is_floating_point() or group.is_complex() or group.dtype == torch.bool:
        raise ValueError(f"group must hold integer prompt ids, got {group.dtype}")
    acc = acc.to(torch.float64)
    bad = (~torch.isfinite(acc)).nonzero()
    if bad.numel():
        raise ValueError(f"acc[{int(bad[0, 0])}] is not finite")
    if acc.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=acc.device)
    _, inv, counts = torch.unique(group, return_inverse=True, return_counts=True)
    k = counts.numel()
    lo = torch.full((k,), math.inf, dtype=acc.dtype, device=acc.device).scatter_reduce(0, inv, acc, "amin")
    hi = torch.full((k,), -math.inf, dtype=acc.dtype, device=acc.device).scatter_reduce(0, inv, acc, "amax")
    return ((hi > lo) | (counts == 1))[inv]


__all__ = ["group_filter_keep", "overlong_penalty"]
