"""What every loss returns, and the loss registry.

Every registered loss shares one signature (the `LossFn` protocol):

    fn(logp, old_logp, advantages, mask, **options) -> LossOutput

with `logp, old_logp, mask: (B, T)` and `advantages: (B,)` or `(B, T)`. Keys are families (`rpg`, `grpo`, ...),
not combinations of axes: the axes are keyword options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from rpgrl.registry import Registry


@dataclass
class LossOutput:
    """`loss`: scalar to minimise. `per_token`: (B, T) per-token loss before aggregation (None for losses that are
    not a sum of per-token terms). `metrics`: flat dict of detached 0-dim tensors (`loss/...`, `kl/...`,
    `clip/...`); reduce them once per optimizer step, never `.item()` inside the math."""

    loss: torch.Tensor
    per_token: torch.Tensor | None
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


class LossFn(Protocol):
    def __call__(
        self, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, **options
    ) -> LossOutput: ...


METRIC_LIMIT = 1e30  # loss metrics are reported within +-METRIC_LIMIT (room for float32 sums over micro-batches)


def reported(metrics: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Metrics in the loss's `dtype`, saturated at +-METRIC_LIMIT: an estimate that overflows (a KL whose ratio
    exceeds the float range) reads as +-1e30 instead of inf, so a finite loss never comes with an inf metric."""
    return {k: v.to(torch.float64).clamp(-METRIC_LIMIT, METRIC_LIMIT).to(dtype) for k, v in metrics.items()}


LOSSES: Registry[LossFn] = Registry("loss")
register_loss = LOSSES.register
get_loss = LOSSES.get
