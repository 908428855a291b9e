"""The KL anchor (spec 6): which policy the regulariser pulls towards, and when it is refreshed.

    behaviour  anchor = pi_old, the sampler of each batch (what the released code does: `use_iterative_ref_model`).
               The loss reads the anchor from `old_logp`; no second copy of the weights exists.
    periodic   anchor refreshed to the current policy every `period` training steps (the paper's "every K").
    adaptive   anchor refreshed when a moving average of the KL to the anchor exceeds `kappa` (the paper's other
               trigger; it defines neither the average nor the KL, so this is our definition, below).
    fixed      anchor = the initial model, never refreshed (GRPO's reference).

Only `periodic`, `adaptive` and `fixed` keep a frozen copy of the weights; with `periodic` and period 1 the anchor
equals the sampler, so that case is served by `behaviour` semantics without a copy. When the anchor differs from
the sampler the loss gets its log-probs separately (`anchor_logp` for rpg, `ref_logp` for the baselines), which
separates the importance weight from the KL as spec 3.4 requires.

Adaptive trigger (our definition): after each training step, `kl` = the token-mean of w * k3(pi_anchor / pi_theta)
with w = pi_theta / pi_old over the step's mini-batches (measured on the pre-update policy of each optimizer step).
Its expectation under the sampler is exactly KL(pi_theta || pi_anchor) (spec 3.4). The moving average is
`ema = (1 - a) * ema + a * kl` (a = `RefConfig.ema`, started at the first value); when `ema > kappa` the anchor is
refreshed and the average restarts.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from rpgrl.config import RefConfig
from rpgrl.objectives import masked_mean
from rpgrl.objectives.kl import anchored_kl_term


def anchor_kl(
    logp: torch.Tensor, old_logp: torch.Tensor, anchor_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Token-mean of w * k3(pi_anchor / pi_theta), w = exp(logp - old_logp): an unbiased estimate of
    KL(pi_theta || pi_anchor) per token when tokens come from pi_old (spec 3.4). Detached, 0-dim.

    Shapes: logp, old_logp, anchor_logp, mask: (B, T).
    """
    term = anchored_kl_term(logp.detach(), anchor_logp.detach(), old_logp.detach(), direction="reverse", mask=mask)
    return masked_mean(term, mask)  # w k3 in log space where w or k3 alone leaves the dtype


class Anchor:
    """Holds the anchor policy (or nothing, for `behaviour`) and decides when to refresh it."""

    def __init__(self, cfg: RefConfig, policy: torch.nn.Module):
        self.cfg = cfg
        self.separate = cfg.mode == "fixed" or (cfg.mode in ("periodic", "adaptive") and not self._every_step)
        self.model: torch.nn.Module | None = None
        if self.separate:
            self.model = copy.deepcopy(policy).eval()
            self.model.requires_grad_(False)
        self.ema: float | None = None
        self.refreshes = 0

    @property
    def _every_step(self) -> bool:
        return self.cfg.mode == "periodic" and self.cfg.period == 1

    def after_step(self, step: int, policy: torch.nn.Module, kl: float | None) -> bool:
        """Called after training step `step` (1-based) with that step's `anchor_kl`, None when the step trained on
        nothing (every group dropped: the policy and its KL did not move, and the average skips the step).
        Returns True if refreshed."""
        if not self.separate or self.cfg.mode == "fixed":
            return False
        if self.cfg.mode == "periodic":
            due = step % self.cfg.period == 0
        elif kl is None:
            due = False  # the average is unchanged, and it was at most kappa after the last step
        else:
            self.ema = kl if self.ema is None else (1 - self.cfg.ema) * self.ema + self.cfg.ema * kl
            due = self.ema > self.cfg.kappa
        if due:
            self.refresh(policy)
        return due

    @torch.no_grad()
    def refresh(self, policy: torch.nn.Module) -> None:
        """Copy the policy's current weights into the anchor (in place: no new storage)."""
        assert self.model is not None
        for a, p in zip(self.model.parameters(), policy.parameters(), strict=True):
            a.copy_(p)
        self.ema = None
        self.refreshes += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "weights": None if self.model is None else self.model.state_dict(),
            "ema": self.ema,
            "refreshes": self.refreshes,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.model is not None and state["weights"] is not None:
            self.model.load_state_dict(state["weights"])
        self.ema = state["ema"]
        self.refreshes = state["refreshes"]
