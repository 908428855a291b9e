"""KL anchor management: which modes keep a weight copy, when they refresh, and the KL they measure."""

import math

import pytest
import torch

from rpgrl.config import RefConfig
from rpgrl.trainer.reference import Anchor, anchor_kl


def test_anchor_kl_is_exact_kl_under_the_sampler():
    # pi_old = (0.1, 0.2, 0.3, 0.4): a batch holding token v exactly 10 * pi_old[v] times makes the token mean equal
    # the pi_old expectation, so anchor_kl must equal KL(pi_theta || pi_anchor) exactly (spec 3.4).
    old = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    theta = torch.tensor([0.25, 0.25, 0.3, 0.2], dtype=torch.float64)
    anchor = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    tokens = torch.tensor([0] * 1 + [1] * 2 + [2] * 3 + [3] * 4)[None]  # (1, 10)
    got = anchor_kl(theta.log()[tokens], old.log()[tokens], anchor.log()[tokens], torch.ones(1, 10))
    exact = float((theta * (theta / anchor).log()).sum())
    assert float(got) == pytest.approx(exact, rel=1e-12)
    # padding is ignored, whatever it holds
    pad = torch.full((1, 3), float("nan"), dtype=torch.float64)
    lp = lambda p: torch.cat([p.log()[tokens], pad], 1)  # noqa: E731
    masked = anchor_kl(lp(theta), lp(old), lp(anchor), torch.cat([torch.ones(1, 10), torch.zeros(1, 3)], 1))
    assert float(masked) == pytest.approx(exact, rel=1e-12)


def _policy(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


@pytest.mark.parametrize(
    "mode, period, separate",
    [("behaviour", 5, False), ("periodic", 1, False), ("periodic", 3, True), ("fixed", 1, True)],
)
def test_which_modes_copy_the_weights(mode, period, separate):
    anchor = Anchor(RefConfig(mode=mode, period=period), _policy(0))
    assert anchor.separate == separate and (anchor.model is not None) == separate


def test_periodic_refreshes_every_k_steps():
    policy = _policy(0)
    anchor = Anchor(RefConfig(mode="periodic", period=3), policy)
    refreshed = []
    for step in range(1, 8):
        with torch.no_grad():
            policy.weight.add_(1.0)  # an optimizer step
        if anchor.after_step(step, policy, kl=0.0):
            refreshed.append(step)
            assert torch.equal(anchor.model.weight, policy.weight)
        else:
            assert not torch.equal(anchor.model.weight, policy.weight)
    assert refreshed == [3, 6] and anchor.refreshes == 2
    assert not anchor.model.weight.requires_grad


def test_adaptive_uses_an_ema_of_the_kl():
    policy = _policy(0)
    anchor = Anchor(RefConfig(mode="adaptive", kappa=0.05, ema=0.5), policy)
    # ema: 0.04 (first value) -> 0.5*0.04 + 0.5*0.08 = 0.06 > 0.05 -> refresh, restart -> 0.01
    assert not anchor.after_step(1, policy, 0.04) and math.isclose(anchor.ema, 0.04)
    assert anchor.after_step(2, policy, 0.08) and anchor.ema is None
    assert not anchor.after_step(3, policy, 0.01) and math.isclose(anchor.ema, 0.01)


def test_adaptive_skips_a_step_that_trained_on_nothing():
    """A step whose groups were all dropped moved neither the policy nor its KL: the average keeps its value (it
    was fed 0, so three empty steps took 0.045 to 0.0056 and put the next refresh off)."""
    policy = _policy(0)
    anchor = Anchor(RefConfig(mode="adaptive", kappa=0.05, ema=0.5), policy)
    assert not anchor.after_step(1, policy, 0.045)
    assert not any(anchor.after_step(s, policy, None) for s in (2, 3, 4)) and math.isclose(anchor.ema, 0.045)
    assert anchor.after_step(5, policy, 0.06) and anchor.refreshes == 1  # 0.5 x 0.045 + 0.5 x 0.06 > 0.05
    assert not anchor.after_step(6, policy, None) and anchor.ema is None  # restarted, still nothing measured


def test_fixed_never_refreshes_and_state_round_trips():
    policy = _policy(0)
    anchor = Anchor(RefConfig(mode="fixed"), policy)
    initial = anchor.model.weight.clone()
    with torch.no_grad():
        policy.weight.add_(1.0)
    assert not any(anchor.after_step(s, policy, kl=1e9) for s in range(1, 5))
    assert torch.equal(anchor.model.weight, initial)
    other = Anchor(RefConfig(mode="fixed"), _policy(1))
    other.load_state_dict(anchor.state_dict())
    assert torch.equal(other.model.weight, initial)


def test_adaptive_average_weights_the_new_kl_by_ema_and_decides_on_the_average():
    """ema 0.1 (the default): the average moves a tenth of the way to each new KL (with 0.5, as above, swapped
    weights give the same numbers), and the refresh reads the average, not the step's own KL."""
    policy = _policy(0)
    anchor = Anchor(RefConfig(mode="adaptive", kappa=0.05, ema=0.1), policy)
    assert not anchor.after_step(1, policy, 0.02) and anchor.ema == 0.02  # the first value as it is
    assert not anchor.after_step(2, policy, 0.3)  # the step's KL is above kappa; the average is not
    assert math.isclose(anchor.ema, 0.9 * 0.02 + 0.1 * 0.3, rel_tol=1e-12)  # 0.048
    assert anchor.after_step(3, policy, 0.07) and anchor.refreshes == 1  # 0.9 x 0.048 + 0.1 x 0.07 = 0.0502


def test_adaptive_average_survives_a_resume():
    """The average is part of the anchor's state: a resumed run refreshes when the straight run would."""
    policy = _policy(0)
    anchor = Anchor(RefConfig(mode="adaptive", kappa=0.05, ema=0.5), policy)
    anchor.after_step(1, policy, 0.01)
    resumed = Anchor(RefConfig(mode="adaptive", kappa=0.05, ema=0.5), _policy(1))
    resumed.load_state_dict(anchor.state_dict())
    assert resumed.ema == 0.01 and torch.equal(resumed.model.weight, anchor.model.weight)
    # 0.5 x 0.01 + 0.5 x 0.07 = 0.04 <= 0.05: no refresh (an average started over would hold 0.07 and refresh)
    assert not resumed.after_step(2, policy, 0.07) and not anchor.after_step(2, policy, 0.07)
    assert math.isclose(resumed.ema, 0.04) and math.isclose(anchor.ema, 0.04)
