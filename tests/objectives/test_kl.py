"""KL estimators (spec 3, section-9 items 8-12) by exact enumeration over a small softmax policy, float64.

Each outcome x of a |X| = 7 softmax policy is a one-token response, so a (B, T) = (|X|, 1) tensor holds the
log-probs of every outcome. An expectation E_{x~q}[f(x)] is the exact weighted sum sum_x q(x) f(x); gradients come
from autograd and are compared with gradients of the closed-form divergences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rpgrl.objectives.kl import KL_PENALTY_NAMES, anchored_kl_term, grpo_kl_term, k1, k2, k3, kl_penalty, scaled_k3

N = 7
TOL = 1e-9


def close(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> bool:
    return torch.allclose(a, b, atol=tol, rtol=1e-9)


@pytest.fixture
def dists():
    g = torch.Generator().manual_seed(1)
    th_old = torch.randn(N, generator=g, dtype=torch.float64)
    th = th_old + 0.8 * torch.randn(N, generator=g, dtype=torch.float64)  # theta != theta_old
    th_ref = torch.randn(N, generator=g, dtype=torch.float64)
    return th, torch.softmax(th_old, 0), torch.softmax(th_ref, 0)


def grad_of(f, th: torch.Tensor) -> torch.Tensor:
    th = th.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(th), th)
    return g


def col(p: torch.Tensor) -> torch.Tensor:
    """(|X|,) probabilities -> (|X|, 1) log-probs: one one-token response per outcome."""
    return torch.log(p)[:, None]


def kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return (p * torch.log(p / q)).sum()


def expect(q: torch.Tensor, per_sample: torch.Tensor) -> torch.Tensor:
    """E_{x~q}[per_sample(x)] for a (|X|, 1) per-sample tensor."""
    return (q * per_sample[:, 0]).sum()


# ---------- definitions and identities ----------


def test_k_definitions_against_math_module():
    xs = [-3.0, -0.5, -1e-6, 0.0, 1e-7, 0.3, 2.5]
    log_r = torch.tensor(xs, dtype=torch.float64)
    assert close(k1(log_r), torch.tensor([-x for x in xs], dtype=torch.float64))
    assert close(k2(log_r), torch.tensor([x * x / 2 for x in xs], dtype=torch.float64))
    # math.expm1 as the independent reference for r - 1
    assert close(k3(log_r), torch.tensor([math.expm1(x) - x for x in xs], dtype=torch.float64))
    # k2 = k1^2 / 2 and k3 = r - 1 - log r
    assert close(k2(log_r), k1(log_r) ** 2 / 2)
    assert close(k3(log_r), torch.exp(log_r) - 1 - log_r)


def test_k3_nonnegative_zero_only_at_one_and_accurate_near_one():
    log_r = torch.linspace(-30, 30, 20001, dtype=torch.float64)
    v = k3(log_r)
    assert (v >= 0).all()
    assert v[log_r == 0].eq(0).all() and (v[log_r != 0] > 0).all()
    # near r = 1 the naive r - 1 - log r cancels; the series x^2/2 + x^3/6 + x^4/24 is the reference
    x = torch.tensor([1e-4, -1e-4, 1e-6, 3e-8], dtype=torch.float64)
    series = x**2 / 2 + x**3 / 6 + x**4 / 24
    assert torch.allclose(k3(x), series, rtol=1e-7, atol=0)
    # float32 too: non-negative everywhere
    assert (k3(torch.linspace(-20, 20, 4001)) >= 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_k3_at_infinite_log_ratios_is_infinite_not_nan(dtype):
    """k3 = r - 1 - log r is +inf at r = 0 and at r = inf; expm1(inf) - inf was NaN. The finite entries' gradient
    stays e^x - 1."""
    x = torch.tensor([math.inf, -math.inf, 0.0, 2.0], dtype=dtype, requires_grad=True)
    v = k3(x)
    assert v[:2].tolist() == [math.inf, math.inf] and v[2].item() == 0.0
    assert v[3].item() == pytest.approx(math.expm1(2.0) - 2.0, rel=1e-6)
    (g,) = torch.autograd.grad(v[2:].sum(), x)
    assert g[2].item() == 0.0 and g[3].item() == pytest.approx(math.expm1(2.0), rel=1e-6)
    assert not torch.isnan(g).any()


def test_item8_k3_is_the_unnormalised_kl(dists):
    th, p_old, _ = dists
    pi = torch.softmax(th, 0)
    mu = 1.7 * p_old  # unnormalised measure
    ukl_pi_mu = (pi * torch.log(pi / mu)).sum() + (mu - pi).sum()
    ukl_mu_pi = (mu * torch.log(mu / pi)).sum() + (pi - mu).sum()
    assert close((pi * k3(torch.log(mu / pi))).sum(), ukl_pi_mu)
    assert close((mu * k3(torch.log(pi / mu))).sum(), ukl_mu_pi)


# ---------- spec item 9: on-policy expected gradients of estimator losses ----------


def test_item9_on_policy_estimator_gradients(dists):
    th, _, p_ref = dists
    on = torch.softmax(th, 0).detach()  # samples from pi_theta itself, held fixed

    def e_loss(estimator):
        return lambda t: expect(on, estimator(col(torch.softmax(t, 0)), col(p_ref)))

    g_rev = grad_of(lambda t: kl(torch.softmax(t, 0), p_ref), th)
    g_fwd = grad_of(lambda t: kl(p_ref, torch.softmax(t, 0)), th)
    g_k1 = grad_of(e_loss(lambda lp, lref: k1(lref - lp)), th)
    g_k2 = grad_of(e_loss(lambda lp, lref: k2(lref - lp)), th)
    g_k3 = grad_of(e_loss(lambda lp, lref: grpo_kl_term(lp, lref, corrected=False)), th)
    assert close(g_k1, torch.zeros(N, dtype=torch.float64))
    assert close(g_k2, g_rev)
    assert close(g_k3, g_fwd)  # k3(ref/pi) as a loss follows the FORWARD KL gradient ...
    assert not close(g_k3, g_rev, 1e-4)  # ... not the reverse KL its value estimates
    # and its value is the reverse KL
    assert close(expect(on, grpo_kl_term(col(on), col(p_ref), corrected=False)), kl(on, p_ref))


# ---------- spec item 10: corrected vs uncorrected GRPO term, off-policy ----------


def test_item10_corrected_grpo_kl_is_exact_off_policy(dists):
    th, p_old, p_ref = dists

    def e_term(corrected):
        return lambda t: expect(
            p_old, grpo_kl_term(col(torch.softmax(t, 0)), col(p_ref), col(p_old), corrected=corrected)
        )

    pi = torch.softmax(th, 0)
    g_rev = grad_of(lambda t: kl(torch.softmax(t, 0), p_ref), th)
    g_fwd = grad_of(lambda t: kl(p_ref, torch.softmax(t, 0)), th)
    # corrected: value and gradient of KL(pi_theta || pi_ref), samples from an arbitrary pi_old
    assert close(e_term(True)(th), kl(pi, p_ref))
    assert close(grad_of(e_term(True), th), g_rev)
    # uncorrected: biased off-policy, in value and in gradient, and not the forward-KL gradient either
    g_unc = grad_of(e_term(False), th)
    assert not close(e_term(False)(th), kl(pi, p_ref), 1e-4)
    assert not close(g_unc, g_rev, 1e-4)
    assert not close(g_unc, g_fwd, 1e-4)
    # its expected gradient is exactly E_old[(1 - pi_ref/pi) s] (spec 3.4): check through the score matrix
    jac = torch.autograd.functional.jacobian(lambda t: torch.log_softmax(t, 0), th)  # (|X|, |X|): s(x) per row
    assert close(g_unc, ((p_old * (1 - p_ref / pi))[:, None] * jac).sum(0))


def test_corrected_needs_old_logp_and_equals_anchored_reverse(dists):
    th, p_old, p_ref = dists
    lp = col(torch.softmax(th, 0))
    with pytest.raises(ValueError, match="old_logp"):
        grpo_kl_term(lp, col(p_ref), corrected=True)
    with pytest.raises(ValueError, match="same shape"):
        grpo_kl_term(lp, col(p_ref)[:3], corrected=False)
    assert close(
        grpo_kl_term(lp, col(p_ref), col(p_old), corrected=True),
        anchored_kl_term(lp, col(p_ref), col(p_old), direction="reverse"),
    )
    # uncorrected ignores old_logp; w == 1 (on-policy) makes the two coincide
    assert close(
        grpo_kl_term(lp, col(p_ref), col(p_old), corrected=False), grpo_kl_term(lp, col(p_ref), corrected=False)
    )
    assert close(grpo_kl_term(lp, col(p_ref), lp, corrected=True), grpo_kl_term(lp, col(p_ref), corrected=False))


# ---------- spec item 11: k1 loss with anchor = sampler = pi_old ----------


def test_item11_k1_with_anchor_equal_sampler_anti_regularises(dists):
    th, p_old, _ = dists
    g = grad_of(lambda t: expect(p_old, kl_penalty(col(torch.softmax(t, 0)), col(p_old), "kl")), th)
    assert close(g, -grad_of(lambda t: kl(p_old, torch.softmax(t, 0)), th))


# ---------- spec item 12: anchor != sampler ----------


def test_item12_anchor_different_from_sampler(dists):
    th, _, _ = dists
    g = torch.Generator().manual_seed(7)
    p_s = torch.softmax(torch.randn(N, generator=g, dtype=torch.float64), 0)
    p_a = torch.softmax(torch.randn(N, generator=g, dtype=torch.float64), 0)

    def e_term(direction):
        return lambda t: expect(
            p_s, anchored_kl_term(col(torch.softmax(t, 0)), col(p_a), col(p_s), direction=direction)
        )

    pi = torch.softmax(th, 0)
    assert close(e_term("reverse")(th), kl(pi, p_a))
    assert close(e_term("forward")(th), kl(p_a, pi))
    assert close(grad_of(e_term("reverse"), th), grad_of(lambda t: kl(torch.softmax(t, 0), p_a), th))
    assert close(grad_of(e_term("forward"), th), grad_of(lambda t: kl(p_a, torch.softmax(t, 0)), th))
    # per-sample gradient of the forward term w.r.t. log pi is (pi - pi_a) / pi_s
    lp = col(pi).requires_grad_(True)
    (d,) = torch.autograd.grad(anchored_kl_term(lp, col(p_a), col(p_s), direction="forward").sum(), lp)
    assert close(d[:, 0], (pi - p_a) / p_s)
    with pytest.raises(ValueError, match="direction"):
        anchored_kl_term(lp, col(p_a), col(p_s), direction="both")  # type: ignore[arg-type]


# ---------- verl kl_penalty names ----------


def test_kl_penalty_names_match_their_formulas():
    lp = torch.tensor([[-0.5, -2.0, -30.0]], dtype=torch.float64)
    ref = torch.tensor([[-0.7, -1.0, -1.0]], dtype=torch.float64)
    lr = [0.2, -1.0, -29.0]
    expected = {
        "kl": lr,
        "k1": lr,
        "abs": [abs(x) for x in lr],
        "mse": [x * x / 2 for x in lr],
        "k2": [x * x / 2 for x in lr],
        "low_var_kl": [math.exp(-x) - 1 + x for x in lr],
        "k3": [math.exp(-x) - 1 + x for x in lr],
    }
    assert set(expected) == set(KL_PENALTY_NAMES)
    for name, vals in expected.items():
        assert torch.allclose(kl_penalty(lp, ref, name), torch.tensor([vals], dtype=torch.float64), rtol=1e-12), name


def test_low_var_kl_clamps_are_off_by_default_and_explicit():
    lp = torch.tensor([[-30.0, -0.5]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.0, -0.6]], dtype=torch.float64)
    free = kl_penalty(lp, ref, "low_var_kl")
    assert free[0, 0] > 1e12  # exp(29): no silent clamp
    clamped = kl_penalty(lp, ref, "low_var_kl", value_clamp=10.0)
    assert clamped[0, 0] == 10.0 and close(clamped[0, 1], free[0, 1])
    (g,) = torch.autograd.grad(clamped.sum(), lp)
    assert g[0, 0] == 0.0 and g[0, 1] != 0.0  # the clamp kills the gradient where it binds
    lrc = kl_penalty(lp, ref, "k3", log_ratio_clamp=20.0)
    assert close(lrc[0, 0], torch.tensor(math.exp(20.0) - 1 - 20.0, dtype=torch.float64), 1e-3)
    with pytest.raises(ValueError, match="low_var_kl/k3 only"):
        kl_penalty(lp, ref, "kl", value_clamp=10.0)
    with pytest.raises(ValueError, match="unknown kl_penalty 'low-var-kl'; valid: abs"):
        kl_penalty(lp, ref, "low-var-kl")


def test_value_clamp_gradient_is_zero_not_nan_where_exp_overflows():
    lp = torch.tensor([-100.0, 0.0, 1.0, 100.0], requires_grad=True)  # float32: exp(100) overflows
    out = kl_penalty(lp, torch.zeros(4), "low_var_kl", value_clamp=10.0)
    (g,) = torch.autograd.grad(out.sum(), lp)
    assert out.tolist() == pytest.approx([10.0, 0.0, math.exp(-1.0), 10.0])
    assert g.tolist() == pytest.approx([0.0, 0.0, 1 - math.exp(-1.0), 0.0])  # d k3(-lr)/d lp = 1 - e^{-lr}


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 5e-7), (torch.float64, 1e-14)])
def test_log_k3_and_log_abs_expm1_against_mpmath(dtype, tol):
    """log k3(x) and log |e^x - 1| to the dtype's precision from 1e-6 to 700 on both sides, against 40-digit
    mpmath; k3's own expm1(x) - x keeps ~2 eps / |x| relative precision near 0 (1e-4 at 1e-3 in float32), so
    log_k3 takes a series there."""
    mpmath = pytest.importorskip("mpmath")
    from rpgrl.objectives.kl import log_abs_expm1, log_k3

    mpmath.mp.dps = 40
    xs = [s * m for s in (1, -1) for m in (1e-6, 1e-3, 0.0999, 0.1, 0.3, 1.0, 1.01, 5.0, 80.0, 700.0)]
    for x in xs:
        xt = torch.tensor([x], dtype=dtype)
        xm = mpmath.mpf(float(xt))  # the dtype's own x
        for fn, exact in (
            (log_k3, mpmath.log(mpmath.exp(xm) - 1 - xm)),
            (log_abs_expm1, mpmath.log(abs(mpmath.expm1(xm)))),
        ):
            got = fn(xt).item()
            assert abs(got - float(exact)) <= tol * max(1.0, abs(float(exact))), (fn.__name__, x, got, float(exact))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.func's own use of torch.jit.script
def test_k3_under_torch_func_transforms():
    """k3's custom gradient works under torch.func's grad, vmap and jvp (a data-dependent branch and a custom Function
    without setup_context made them raise)."""
    x = torch.tensor([1e-7, -0.3, 0.7, 3.0, -40.0], dtype=torch.float64)
    assert torch.equal(torch.func.grad(lambda t: k3(t).sum())(x), torch.expm1(x))
    assert torch.equal(torch.func.vmap(k3)(x[:, None]).flatten(), k3(x))
    assert torch.equal(torch.func.jvp(k3, (x,), (torch.ones_like(x),))[1], torch.expm1(x))


@pytest.mark.parametrize("ref", [-5.7477e-8, -0.25])
def test_corrected_grpo_term_where_w_overflows_and_k3_is_small(ref):
    """w k3(pi_ref / pi_theta) with w = e^100 (not a float32 number) and a small k3: 4.4e28 fits float32, where the
    product w x k3 was inf (and 0 while k3 was inaccurate); at -0.25 the term, 7e41, does not. Reference: mpmath."""
    mpmath = pytest.importorskip("mpmath")
    lp = torch.zeros(1, 1, requires_grad=True)
    term = grpo_kl_term(lp, torch.full((1, 1), ref), torch.full((1, 1), -100.0), corrected=True)
    x = mpmath.mpf(float(torch.tensor(ref)))  # the float32 value
    want = float(mpmath.exp(100) * (mpmath.expm1(x) - x))
    if want > torch.finfo(torch.float32).max:
        assert term.item() == math.inf
    else:
        assert term.item() == pytest.approx(want, rel=1e-5)


def test_log_ratio_clamp_binds_on_both_sides():
    """log(ref / pi) clamped to [-C, C]: pi above ref by 29 nats is evaluated at -20 (k3 = e^-20 - 1 + 20) with a
    zero gradient, as pi below ref by 29 is at +20 (a review's mutant clamped one side only)."""
    lp = torch.tensor([[0.0, -29.0, -0.5]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-29.0, 0.0, -0.6]], dtype=torch.float64)
    out = kl_penalty(lp, ref, "k3", log_ratio_clamp=20.0)
    expected = [math.exp(-20.0) - 1 + 20.0, math.exp(20.0) - 1 - 20.0, math.expm1(-0.1) + 0.1]
    assert out[0].tolist() == pytest.approx(expected, rel=1e-12)
    (g,) = torch.autograd.grad(out.sum(), lp)
    assert g[0, :2].tolist() == [0.0, 0.0] and g[0, 2] == pytest.approx(1 - math.exp(-0.1), rel=1e-12)


def _upstream_gradcheck(f, *inputs):
    """gradcheck with an upstream gradient of both signs: the custom backwards must carry its sign (one that
    dropped it gave the gradient of +sum for -sum, where every built-in loss passes a positive one)."""
    g = torch.Generator().manual_seed(3)
    weights = torch.randn(f(*inputs).shape, generator=g, dtype=torch.float64)
    assert (weights > 0).any() and (weights < 0).any()
    assert torch.autograd.gradcheck(lambda *x: (f(*x) * weights).sum(), inputs)


@pytest.mark.parametrize("direction", ["reverse", "forward"])
def test_anchored_term_gradient_under_a_signed_upstream_gradient(direction):
    g = torch.Generator().manual_seed(2)
    logp = (-torch.rand(3, 4, generator=g, dtype=torch.float64) - 0.1).requires_grad_(True)
    anchor, sampler = (-torch.rand(3, 4, generator=g, dtype=torch.float64) - 0.1 for _ in range(2))
    _upstream_gradcheck(lambda lp: anchored_kl_term(lp, anchor, sampler, direction=direction), logp)
    _upstream_gradcheck(lambda lp: grpo_kl_term(lp, anchor, sampler, corrected=True), logp)


@pytest.mark.parametrize("divergence", ["fkl", "rkl", "ufkl", "urkl"])
def test_rho_phi_gradient_under_a_signed_upstream_gradient(divergence):
    from rpgrl.objectives.divergences import rho_phi

    g = torch.Generator().manual_seed(4)
    log_u = (0.5 * torch.randn(3, 4, generator=g, dtype=torch.float64)).requires_grad_(True)
    log_rho = 0.5 * torch.randn(3, 4, generator=g, dtype=torch.float64)
    _upstream_gradcheck(lambda lu: rho_phi(divergence, lu, log_rho, scale=0.3), log_u)


def test_scaled_k3_is_the_scale_times_k3_and_its_gradient_where_both_fit():
    """exp(log_scale) k3(x) and d/dx = exp(log_scale) expm1(x), against float64 closed forms, in range and where
    exp(x) alone overflows float32 (x = 95, scale 1e-5)."""
    x = torch.tensor([-3.0, -0.25, 0.0, 0.3, 2.0, 95.0], requires_grad=True)
    out = scaled_k3(x, math.log(1e-5))
    out.sum().backward()
    for xi, v, g in zip(x.tolist(), out.tolist(), x.grad.tolist(), strict=True):
        val = math.exp(math.log(1e-5) + xi) - 1e-5 * (1 + xi) if xi > 50 else 1e-5 * (math.expm1(xi) - xi)
        assert v == pytest.approx(val, rel=1e-5, abs=1e-45), xi
        assert g == pytest.approx(1e-5 * math.expm1(xi) if xi < 50 else math.exp(math.log(1e-5) + xi), rel=1e-5), xi


@pytest.mark.parametrize("log_scale, match", [
    (math.nan, "log_scale must be a finite number, got nan"),  # NaN terms and gradients
    (math.inf, "log_scale must be a finite number, got inf"),  # inf terms
    (10**400, "log_scale must be a float or an int below 2..63"),  # OverflowError
    ("1", "log_scale must be a finite number, got '1'"),  # float('1') = 1 taken
    (True, "log_scale must be a finite number, got True"),
    (torch.tensor(0.5, requires_grad=True), "log_scale must be a constant number"),  # its graph cut silently
])  # fmt: skip
def test_anchored_kl_term_refuses_a_log_scale_that_is_no_finite_number(log_scale, match):
    """log_scale was taken through float(): NaN and inf gave NaN / inf terms and gradients, a string of a number
    passed, 10**400 raised OverflowError; one-line ValueErrors naming log_scale now. A finite one (numpy's or a 0-dim
    tensor's too) scales the term by exp(log_scale): reference e^0.5 x the unscaled term, float64."""
    lp, a, s = (torch.tensor([v], dtype=torch.float64) for v in ([-1.0, -2.0], [-1.5, -2.0], [-1.2, -1.0]))
    with pytest.raises(ValueError, match=match) as info:
        anchored_kl_term(lp, a, s, direction="reverse", log_scale=log_scale)
    assert "\n" not in str(info.value)
    want = math.exp(0.5) * anchored_kl_term(lp, a, s, direction="reverse")
    for ok in (0.5, np.float32(0.5), torch.tensor(0.5)):
        assert torch.allclose(anchored_kl_term(lp, a, s, direction="reverse", log_scale=ok), want, rtol=1e-15, atol=0)


@pytest.mark.parametrize("corrected", ["false", "no", 0, 1, None])
def test_grpo_kl_term_corrected_must_be_a_bool(corrected):
    """corrected="false" (a config's string) was truthy: the corrected term w k3 where the uncorrected k3 was asked
    for, and 0 / 1 passed as bools. One line naming the option; numpy's bools are bools. Reference: k3(ref - logp)
    uncorrected, e^(logp - old) k3(ref - logp) corrected (float64)."""
    lp, ref, old = (torch.tensor([v], dtype=torch.float64) for v in ([-1.0, -2.0], [-1.5, -2.0], [-1.2, -1.0]))
    with pytest.raises(ValueError, match=f"^corrected must be true or false \\(a bool\\), got {corrected!r}$"):
        grpo_kl_term(lp, ref, old, corrected=corrected)
    x = ref - lp
    for flag in (False, np.bool_(False)):
        assert torch.allclose(grpo_kl_term(lp, ref, old, corrected=flag), torch.expm1(x) - x, rtol=1e-15, atol=0)
    want = torch.exp(lp - old) * (torch.expm1(x) - x)
    assert torch.allclose(grpo_kl_term(lp, ref, old, corrected=np.bool_(True)), want, rtol=1e-15, atol=0)


@pytest.mark.parametrize("name", ["kl_penalty k1", "kl_penalty k3", "kl_penalty clamped", "uncorrected", "corrected"])
def test_kl_helpers_take_the_reference_as_a_constant(name):
    """A ref_logp that required grad (a reference sharing the policy's weights, not run under no_grad) got a gradient
    from kl_penalty and the uncorrected grpo_kl_term (the corrected term and the losses cut it): the reference is a
    constant. logp's gradient is unchanged: reference 1 - e^(ref - logp) for k3, 1 for k1, float64."""
    lp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.5]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.2, -1.0, -0.7]], dtype=torch.float64, requires_grad=True)
    call = {
        "kl_penalty k1": lambda: kl_penalty(lp, ref, "k1"),
        "kl_penalty k3": lambda: kl_penalty(lp, ref, "k3"),
        "kl_penalty clamped": lambda: kl_penalty(lp, ref, "k3", value_clamp=10.0),
        "uncorrected": lambda: grpo_kl_term(lp, ref, old, corrected=False),
        "corrected": lambda: grpo_kl_term(lp, ref, old, corrected=True),
    }[name]
    call().sum().backward()
    assert ref.grad is None and old.grad is None
    x = (ref - lp).detach()
    want = {
        "kl_penalty k1": torch.ones_like(x),
        "corrected": torch.exp(lp - old).detach() * (torch.expm1(x) - x - torch.expm1(x)),
    }
    want = want.get(name, -torch.expm1(x))
    assert torch.allclose(lp.grad, want, rtol=1e-14, atol=1e-15)
