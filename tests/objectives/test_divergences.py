"""divergences.py: phi, u phi'(u), phi'(u), phi(u)/u, rho phi(u) and C against the formulas of spec 2.1 / 4.2,
autograd derivatives and exact expectations over a small discrete distribution."""

from __future__ import annotations

import math

import pytest
import torch

from rpgrl.objectives import divergences as dv

DT = torch.float64
LOG_U = torch.linspace(-6, 6, 49, dtype=DT)
PHI = {  # spec 2.1 table, in terms of u
    "fkl": lambda u: -torch.log(u),
    "rkl": lambda u: u * torch.log(u),
    "ufkl": lambda u: u - 1 - torch.log(u),
    "urkl": lambda u: u * torch.log(u) - u + 1,
}


@pytest.mark.parametrize("div", dv.DIVERGENCES)
def test_phi_matches_table_and_vanishes_at_one(div):
    u = LOG_U.exp()
    assert torch.allclose(dv.phi(div, LOG_U), PHI[div](u), rtol=1e-13, atol=1e-13)
    assert torch.allclose(dv.phi(div, LOG_U, u), PHI[div](u), rtol=1e-13, atol=1e-13)
    assert dv.phi(div, torch.zeros((), dtype=DT)) == 0


@pytest.mark.parametrize("div", dv.DIVERGENCES)
def test_derivative_functions(div):
    """u phi'(u) = d phi / d log u (autograd); phi'(u) = u phi'(u) / u; phi(u)/u."""
    lu = LOG_U.clone().requires_grad_(True)
    (d,) = torch.autograd.grad(PHI[div](lu.exp()).sum(), lu)
    u = LOG_U.exp()
    assert torch.allclose(dv.u_dphi(div, LOG_U), d, rtol=1e-12, atol=1e-13)
    assert torch.allclose(dv.dphi(div, LOG_U), d / u, rtol=1e-12, atol=1e-13)
    assert torch.allclose(dv.dphi(div, LOG_U, u), d / u, rtol=1e-12, atol=1e-13)
    assert torch.allclose(dv.phi_over_u(div, LOG_U), PHI[div](u) / u, rtol=1e-12, atol=1e-13)
    assert torch.allclose(dv.phi_over_u(div, LOG_U, u), PHI[div](u) / u, rtol=1e-12, atol=1e-13)


def test_reinforce_kl_component_table():
    """C = -beta u phi'(u) of spec 4.2 (anchor = sampler), and rho phi(u) for a separate anchor."""
    beta, w = 0.3, LOG_U.exp()
    expect = {
        "fkl": beta * torch.ones_like(w),
        "rkl": -beta * w * (LOG_U + 1),
        "ufkl": -beta * (w - 1),
        "urkl": -beta * w * LOG_U,
    }
    log_rho = torch.full_like(LOG_U, -0.7)
    for div, e in expect.items():
        assert torch.allclose(-beta * dv.u_dphi(div, LOG_U), e, rtol=1e-13, atol=1e-14)
        assert torch.allclose(dv.regularizer(div, LOG_U, log_rho), math.exp(-0.7) * PHI[div](w), rtol=1e-13)


def test_expectation_under_the_anchor_is_the_divergence():
    """E_{pi_a}[phi(pi/pi_a)] equals KL(a||pi), KL(pi||a), UKL(mu||pi), UKL(pi||mu) (mu = 1.7 pi_a, unnormalised)."""
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(7, generator=g, dtype=DT), 0)
    mu = 1.7 * torch.softmax(torch.randn(7, generator=g, dtype=DT), 0)
    log_u = torch.log(p / mu)
    expect = {
        "fkl": (mu * torch.log(mu / p)).sum(),
        "rkl": (p * torch.log(p / mu)).sum(),
        "ufkl": (mu * torch.log(mu / p)).sum() + (p - mu).sum(),
        "urkl": (p * torch.log(p / mu)).sum() + (mu - p).sum(),
    }
    for div, e in expect.items():
        assert math.isclose((mu * dv.phi(div, log_u)).sum().item(), e.item(), rel_tol=1e-12), div


def test_log_space_is_finite_for_sequence_level_ratios():
    """A sequence-level log u of -1e4 (w underflows to 0) still gives the exact finite values."""
    lu = torch.tensor([-1e4], dtype=DT)
    assert dv.phi("fkl", lu).item() == 1e4
    assert dv.phi("ufkl", lu).item() == 1e4 - 1
    assert dv.phi("rkl", lu).item() == 0
    assert dv.phi("urkl", lu).item() == 1
    assert dv.u_dphi("urkl", lu).item() == 0 and dv.phi_over_u("rkl", lu).item() == -1e4


def test_unknown_divergence():
    with pytest.raises(ValueError, match="unknown divergence 'kl'; valid: fkl, rkl, ufkl, urkl"):
        dv.phi("kl", LOG_U)
