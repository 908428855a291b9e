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


_NEAR_ONE = [1e-7, -1e-7, 3e-5, -1e-3, 0.0625, -0.09375, 0.1, -0.125, 0.375, -0.4375, 0.5, -0.5, 0.75, -3.0, 12.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("div", ["ufkl", "urkl"])
def test_phi_and_its_gradient_near_u_equal_one_against_mpmath(div, dtype):
    """ufkl's k3(u) and urkl's u log u - u + 1 are ~(log u)^2 / 2 near u = 1; as differences of terms of size |log u|
    they kept ~2 eps / (log u)^2 of relative precision (ufkl at log u = -1e-7 in float32: -1.9e-8 for 5e-15; times rho
    = e^32.5 in `rho_phi`, -2.5e6 for 0.65), their gradients ~eps / |log u|. Now both within a few eps, also through
    `rho_phi` with a far anchor and in `regularizer`. Reference: mpmath at 50 digits, from the dtype's own log u."""
    mpmath = pytest.importorskip("mpmath")
    lu = torch.tensor(_NEAR_ONE, dtype=dtype, requires_grad=True)
    value = dv.phi(div, lu)
    (grad,) = torch.autograd.grad(value.sum(), lu)
    lr = torch.full_like(lu, 32.5)
    scaled = dv.rho_phi(div, lu, lr)
    (scaled_grad,) = torch.autograd.grad(scaled.sum(), lu)
    report = dv.regularizer(div, lu.detach(), None)
    eps = torch.finfo(dtype).eps
    with mpmath.workdps(50):
        for i, x in enumerate(lu.detach().tolist()):
            x = mpmath.mpf(x)
            u = mpmath.exp(x)
            want = u - 1 - x if div == "ufkl" else u * x - u + 1
            want_grad = u - 1 if div == "ufkl" else u * x  # d phi / d log u = u phi'(u)
            rho = mpmath.exp(mpmath.mpf(float(lr[i])))
            for got, ref in ((value[i], want), (report[i], want), (grad[i], want_grad), (scaled[i], rho * want),
                             (scaled_grad[i], rho * want_grad)):  # fmt: skip
                assert abs(got.item() - float(ref)) <= 8 * eps * abs(float(ref)), (x, got.item(), float(ref))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_k3_and_its_gradient_near_zero_against_mpmath(dtype):
    """k3(x) = e^x - 1 - x as expm1(x) - x kept ~2 eps / |x| (at x = 1e-7 in float32 nothing), its autograd gradient
    (expm1(x) + 1) - 1 ~eps / |x|; now the series below |x| = 0.5 and the gradient expm1(x)."""
    from rpgrl.objectives.kl import k3

    mpmath = pytest.importorskip("mpmath")
    x = torch.tensor(_NEAR_ONE + [-40.0, 80.0], dtype=dtype, requires_grad=True)
    v = k3(x)
    (g,) = torch.autograd.grad(v.sum(), x)
    eps = torch.finfo(dtype).eps
    with mpmath.workdps(50):
        for i, xi in enumerate(x.detach().tolist()):
            m = mpmath.mpf(xi)
            assert abs(v[i].item() - float(mpmath.expm1(m) - m)) <= 4 * eps * float(mpmath.expm1(m) - m), xi
            assert abs(g[i].item() - float(mpmath.expm1(m))) <= 4 * eps * abs(float(mpmath.expm1(m))), xi


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("div", ["fkl", "ufkl", "urkl"])
@pytest.mark.parametrize("scale", [1.0, 1e-4, 10.0])
def test_phi_over_u_and_its_gradient_against_mpmath(div, scale, dtype):
    """scale x phi(u) / u (Alg. 1's A_hat, scale = beta): near u = 1 ufkl's and urkl's cancelled to ~(log u)^2 / 2
    (ufkl, scale 10, log u = 1.2e-7 in float32: a gradient of 9.5e-7 for 3.2e-6), and far from it 1/u left the
    dtype before the scale multiplied in. Reference: mpmath at 50 digits."""
    mpmath = pytest.importorskip("mpmath")
    big = 95.0 if dtype == torch.float32 else 712.0  # 1/u beyond the dtype, scale / u within it (for scale 1e-4)
    lu = torch.tensor(_NEAR_ONE + [-big], dtype=dtype, requires_grad=True)
    value = dv.phi_over_u(div, lu, scale=scale)
    (grad,) = torch.autograd.grad(value.sum(), lu)
    eps, top = torch.finfo(dtype).eps, torch.finfo(dtype).max
    with mpmath.workdps(50):
        for i, x in enumerate(lu.detach().tolist()):
            m = mpmath.mpf(x)
            inv = mpmath.exp(-m)
            want = scale * {"fkl": -m * inv, "ufkl": 1 - (1 + m) * inv, "urkl": m - 1 + inv}[div]
            want_grad = scale * {"fkl": (m - 1) * inv, "ufkl": m * inv, "urkl": 1 - inv}[div]
            if abs(want_grad) > top:  # beyond the dtype: not asked
                continue
            tol = (16 + (abs(x) if x == -big else 0)) * eps  # the log form: its exponent's rounding, ~|log u| eps
            assert abs(value[i].item() - float(want)) <= tol * abs(float(want)), (x, value[i].item(), want)
            assert abs(grad[i].item() - float(want_grad)) <= tol * abs(float(want_grad)), (x, grad[i].item())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("div", dv.DIVERGENCES)
def test_u_dphi_and_the_reinforce_kl_weight_near_u_equal_one_against_mpmath(div, dtype):
    """u phi'(u), the REINFORCE coefficient's KL part -C = beta rho u phi'(u): ufkl's u - 1 kept ~eps / |log u| of
    relative precision near u = 1 (6% at log u = 1e-6 in float32, 0 at 6e-8), where on-policy (A = 0 in a group of
    equal rewards) it is the whole gradient of rpg_loss(ufkl, reinforce). Now expm1(log u) there. Reference: mpmath at
    50 digits, from the dtype's own log u; through `rho_u_dphi` (beta 1e-3, log rho 0 and 32.5) and rpg_loss."""
    mpmath = pytest.importorskip("mpmath")
    lu = torch.tensor(_NEAR_ONE + [1e-6, -6e-8], dtype=dtype)
    eps = torch.finfo(dtype).eps
    for log_rho in (0.0, 32.5):
        lr = torch.full_like(lu, log_rho)
        weight = dv.rho_u_dphi(div, lu, lr, scale=1e-3)
        with mpmath.workdps(50):
            for i, x in enumerate(lu.tolist()):
                u, x = mpmath.exp(mpmath.mpf(x)), mpmath.mpf(x)
                want = {"fkl": -1, "rkl": u * (x + 1), "ufkl": u - 1, "urkl": u * x}[div]
                if log_rho == 0.0:
                    assert abs(dv.u_dphi(div, lu[i : i + 1]).item() - float(want)) <= 4 * eps * abs(float(want)), x
                ref = float(mpmath.mpf(1e-3) * mpmath.exp(mpmath.mpf(float(lr[i]))) * want)
                assert abs(weight[i].item() - ref) <= 8 * eps * abs(ref), (x, log_rho, weight[i].item(), ref)
    if div == "ufkl":  # the whole gradient at A = 0: d/dlogp = beta (u - 1) / N
        from rpgrl.objectives.rpg import rpg_loss

        old = torch.full((1, lu.numel()), -1.0, dtype=dtype)
        lp = (old + lu).requires_grad_()
        out = rpg_loss(lp, old, torch.zeros(1, dtype=dtype), torch.ones_like(old), divergence="ufkl",
                       style="reinforce", beta=1e-3, normalizer=1)  # fmt: skip
        out.loss.backward()
        with mpmath.workdps(50):
            for g, x in zip(lp.grad[0].tolist(), (lp.detach() - old)[0].tolist(), strict=True):
                ref = float(mpmath.mpf(1e-3) * mpmath.expm1(mpmath.mpf(x)))
                assert abs(g - ref) <= 8 * eps * abs(ref), (x, g, ref)
