"""rpg_loss against exact enumeration of a tabular autoregressive policy (spec section 9), plus clip tables,
invariances, validation and extreme inputs. Everything independent of the code under test is written here from the
definitions: objectives J from the enumerated distribution, REINFORCE weights from spec 2.1's table, clip rows from
spec 4.1/4.2's tables."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from enumerate_policy import TabularPolicy

from rpgrl.objectives import LOSSES, aggregate
from rpgrl.objectives.rpg import rpg_loss

DT = torch.float64
DIVS = ("fkl", "rkl", "ufkl", "urkl")
STYLES = ("differentiable", "reinforce")
LEVELS = ("token", "sequence")
BETA = 0.37
NO_CLIP_DUAL = dict(clip="dual", eps_low=1.0, eps_high=1e12, c=1e12)  # dual clip whose bounds are never hit


# ------------------------------------------------------------------------------------------------ enumeration setup


class Toy:
    """Policy tables: old (sampler), cur (theta != theta_old), anchor; rewards per enumerated response."""

    def __init__(self, seed: int = 0):
        self.pol = TabularPolicy(vocab=3, length=3, eos=True)
        g = torch.Generator().manual_seed(seed)
        H, V = self.pol.shape
        self.th_old = torch.randn(H, V, generator=g, dtype=DT)
        self.th = self.th_old + 0.8 * torch.randn(H, V, generator=g, dtype=DT)
        self.th_anchor = self.th_old + 0.8 * torch.randn(H, V, generator=g, dtype=DT)
        self.N = len(self.pol.sequences)
        self.R = torch.randn(self.N, generator=g, dtype=DT)
        self.old_lp = self.pol.token_logp(self.th_old)  # (N, L)
        self.P_old = self.pol.seq_logp(self.th_old).exp()  # (N,)


@pytest.fixture(scope="module")
def toy() -> Toy:
    t = Toy()
    assert abs(t.P_old.sum().item() - 1) < 1e-12 and t.N == 15
    return t


def per_sample_losses(toy, th, adv, old_lp=None, anchor_lp=None, **kw):
    """(N,) l(x): one rpg_loss call per response; B = 1 with seq-mean-token-sum is the response's own loss."""
    lp = toy.pol.token_logp(th)
    old_lp = toy.old_lp if old_lp is None else old_lp
    out = []
    for i in range(toy.N):
        s = slice(i, i + 1)
        anc = None if anchor_lp is None else anchor_lp[s]
        res = rpg_loss(lp[s], old_lp[s], adv[s], toy.pol.mask[s], agg="seq-mean-token-sum", anchor_logp=anc, **kw)
        out.append(res.loss)
    return torch.stack(out)


def dloss_dlogp(toy, th, adv, old_lp=None, anchor_lp=None, **kw):
    """(N, L) d l(x) / d logp[x, t] from one batched call: with seq-mean-token-sum and normalizer 1 the loss is
    sum_x l(x), and response x's loss depends on row x only (the micro-batch test below checks that)."""
    lp = toy.pol.token_logp(th).detach().requires_grad_(True)
    old_lp = toy.old_lp if old_lp is None else old_lp
    out = rpg_loss(lp, old_lp, adv, toy.pol.mask, agg="seq-mean-token-sum", normalizer=1.0, anchor_logp=anchor_lp, **kw)
    (G,) = torch.autograd.grad(out.loss, lp)
    return G


def grad_of(f, th):
    th = th.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(th), th)
    return g


def jac(f, th):
    """(N, ...) gradient of each entry of f(theta) with respect to theta."""
    th = th.detach().clone().requires_grad_(True)
    vals = f(th).reshape(-1)
    return torch.stack([torch.autograd.grad(v, th, retain_graph=True)[0] for v in vals])


def expected_grad(toy, th, weights, adv, **kw):
    """sum_x weights(x) grad l(x), by the chain rule through logp."""
    G = dloss_dlogp(toy, th, adv, **kw)
    return grad_of(lambda t: (weights[:, None] * G * toy.pol.token_logp(t)).sum(), th)


def per_sample_grads(toy, th, adv, **kw):
    """(N, H, V) grad l(x) for every response."""
    G = dloss_dlogp(toy, th, adv, **kw)
    J = jac(toy.pol.token_logp, th).reshape(toy.N, toy.pol.length, *th.shape)
    return torch.einsum("nl,nlhv->nhv", G, J)


def rel_err(a, b) -> float:
    return ((a - b).norm() / b.norm()).item()


def J_seq(toy, th, R, div, beta, anchor_seq_lp):
    """E_theta[R] - beta D(pi_theta, anchor measure), written from the definitions (spec 2.1)."""
    lp = toy.pol.seq_logp(th)
    P, la = lp.exp(), anchor_seq_lp
    Pa = la.exp()
    D = {
        "fkl": (Pa * (la - lp)).sum(),
        "rkl": (P * (lp - la)).sum(),
        "ufkl": (Pa * (la - lp)).sum() + (P - Pa).sum(),
        "urkl": (P * (lp - la)).sum() + (Pa - P).sum(),
    }[div]
    return (P * R).sum() - beta * D


def D_tok(toy, th, div, th_anchor, th_sampler):
    """Per-history divergence (spec 2.4): sum_h P_sampler(h) D(pi_theta(.|h), pi_anchor(.|h))."""
    Ph = toy.pol.history_probs(th_sampler)  # (H,)
    lt, la = torch.log_softmax(th, -1), torch.log_softmax(th_anchor, -1)  # (H, V)
    pt, pa = lt.exp(), la.exp()
    if div in ("fkl", "ufkl"):  # token-level "UKL" = KL: per-history conditionals are normalised
        d = (pa * (la - lt)).sum(-1)
    else:
        d = (pt * (lt - la)).sum(-1)
    return (Ph * d).sum()


def table_weight(div, w, R, beta):
    """REINFORCE weight of spec 2.1's table (Z_old = 1, anchor = sampler)."""
    return {
        "fkl": w * R + beta,
        "rkl": w * (R - beta * (torch.log(w) + 1)),
        "ufkl": w * R - beta * (w - 1),
        "urkl": w * (R - beta * torch.log(w)),
    }[div]


def table_C(div, w, beta):
    """KL component C of spec 4.2 (anchor = sampler)."""
    return {
        "fkl": beta * torch.ones_like(w),
        "rkl": -beta * w * (torch.log(w) + 1),
        "ufkl": -beta * (w - 1),
        "urkl": -beta * w * torch.log(w),
    }[div]


# ------------------------------------------------------------------------------------------- sequence-level exactness


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("clip", [None, "no-op dual"])
def test_sequence_level_expected_gradient_is_exact(toy, div, style, clip):
    """#1, #2: sum_x pi_old(x) grad l(x) == -grad J at theta != theta_old (dual clip with unreachable bounds too)."""
    kw = NO_CLIP_DUAL if clip else {}
    g = expected_grad(toy, toy.th, toy.P_old, toy.R, divergence=div, style=style, beta=BETA, level="sequence", **kw)
    gJ = grad_of(lambda t: J_seq(toy, t, toy.R, div, BETA, toy.pol.seq_logp(toy.th_old)), toy.th)
    assert rel_err(g, -gJ) <= 1e-9


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("style", STYLES)
def test_sequence_level_unnormalised_old_measure(toy, div, style):
    """#1 with Z_old = 1.7: old log-probs of the measure mu = Z pi_old; sum_x mu(x) grad l(x) == -grad J(mu)."""
    logZ = math.log(1.7)
    old_mu = toy.old_lp.clone()
    old_mu[:, 0] += logZ  # every response has a first token
    mu = toy.P_old * 1.7
    kw = dict(divergence=div, style=style, beta=BETA, level="sequence")
    g = expected_grad(toy, toy.th, mu, toy.R, old_lp=old_mu, **kw)
    gJ = grad_of(lambda t: J_seq(toy, t, toy.R, div, BETA, toy.pol.seq_logp(toy.th_old) + logZ), toy.th)
    assert rel_err(g, -gJ) <= 1e-9


@pytest.mark.parametrize("level", LEVELS)
def test_per_sample_gradients_of_both_styles_agree(toy, level):
    """#3: for every response and variant, grad l_diff(x) == grad l_RF(x); at sequence level also == -Weight(x) s(x)
    with Weight from spec 2.1's table."""
    w = (toy.pol.seq_logp(toy.th) - toy.pol.seq_logp(toy.th_old)).exp()
    s = jac(toy.pol.seq_logp, toy.th)  # (N, H, V) scores
    for div in DIVS:
        kw = dict(divergence=div, beta=BETA, level=level)
        gd = per_sample_grads(toy, toy.th, toy.R, style="differentiable", **kw)
        gr = per_sample_grads(toy, toy.th, toy.R, style="reinforce", **kw)
        assert torch.allclose(gd, gr, rtol=1e-10, atol=1e-12), div
        if level == "sequence":
            expect = -table_weight(div, w, toy.R, BETA)[:, None, None] * s
            assert torch.allclose(gd, expect, rtol=1e-10, atol=1e-12), div


@pytest.mark.parametrize("pair", [("fkl", "ufkl"), ("rkl", "urkl")])
def test_normalised_and_unnormalised_are_the_same_objective(toy, pair):
    """#4 (Z_old = 1): E_old[l_diff] values and expected gradients of FKL/UFKL (RKL/URKL) coincide."""
    kw = dict(style="differentiable", beta=BETA, level="sequence")
    vals = [(toy.P_old * per_sample_losses(toy, toy.th, toy.R, divergence=d, **kw)).sum() for d in pair]
    assert abs(vals[0] - vals[1]).item() < 1e-12
    g = [expected_grad(toy, toy.th, toy.P_old, toy.R, divergence=d, **kw) for d in pair]
    assert rel_err(g[0], g[1]) < 1e-10


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("style", STYLES)
def test_regulariser_gradient_at_theta_old(toy, level, style):
    """#5: at theta = theta_old, per-sample regulariser gradient (A = 0) is 0 for UFKL/URKL, -beta s(x) for FKL,
    +beta s(x) for RKL; all have zero expectation."""
    zero = torch.zeros(toy.N, dtype=DT)
    factor = {"fkl": -BETA, "rkl": BETA, "ufkl": 0.0, "urkl": 0.0}
    s = jac(toy.pol.seq_logp, toy.th_old)
    for div in DIVS:
        kw = dict(divergence=div, style=style, beta=BETA, level=level)
        g = per_sample_grads(toy, toy.th_old, zero, **kw)
        assert torch.allclose(g, factor[div] * s, atol=1e-13), div
        assert (toy.P_old[:, None, None] * g).sum(0).abs().max() < 1e-13


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("style", STYLES)
def test_constant_baseline_leaves_expected_gradient_unchanged(toy, level, style):
    """#6: A = R - b (b constant) gives the same expected gradient as A = R, for every divergence."""
    for div in DIVS:
        kw = dict(divergence=div, style=style, beta=BETA, level=level)
        g0 = expected_grad(toy, toy.th, toy.P_old, toy.R, **kw)
        gb = expected_grad(toy, toy.th, toy.P_old, toy.R - 0.77, **kw)
        assert rel_err(gb, g0) < 1e-10, div


@pytest.mark.parametrize("div", ["rkl", "urkl"])
def test_algorithm1_paper_analogues(toy, div):
    """#7: -w A_hat with the paper's A_hat (differentiated through A_hat) has the exact expected gradient, and its
    per-sample gradient differs from the Table-1 surrogate's by exactly beta w s(x)."""
    kw = dict(divergence=div, style="differentiable", beta=BETA, level="sequence", analogue="paper", **NO_CLIP_DUAL)
    g = expected_grad(toy, toy.th, toy.P_old, toy.R, **kw)
    gJ = grad_of(lambda t: J_seq(toy, t, toy.R, div, BETA, toy.pol.seq_logp(toy.th_old)), toy.th)
    assert rel_err(g, -gJ) <= 1e-9
    w = (toy.pol.seq_logp(toy.th) - toy.pol.seq_logp(toy.th_old)).exp()
    gp = per_sample_grads(toy, toy.th, toy.R, **kw)
    s = jac(toy.pol.seq_logp, toy.th)
    table = -table_weight(div, w, toy.R, BETA)[:, None, None] * s
    assert torch.allclose(gp - table, BETA * w[:, None, None] * s, atol=1e-12)


@pytest.mark.parametrize("div", DIVS)
def test_exact_analogue_with_unreachable_bounds_equals_no_clip_per_sample(toy, div):
    kw = dict(divergence=div, style="differentiable", beta=BETA, level="sequence")
    a = per_sample_losses(toy, toy.th, toy.R, **kw)
    b = per_sample_losses(toy, toy.th, toy.R, **kw, **NO_CLIP_DUAL)
    assert torch.allclose(a, b, rtol=1e-13, atol=1e-14)


# ---------------------------------------------------------------------------------------------- token level (2.4)


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("anchor", ["sampler", "separate"])
def test_token_level_kl_part_is_the_per_history_divergence(toy, div, style, anchor):
    """#17, #18: with A = 0, E_old[l] = beta sum_h P_old(h) D(pi_theta(.|h), pi_a(.|h)) (value, differentiable
    style) and E_old[grad l] = beta grad of it (both styles), at theta != theta_old; the anchor pi_a is the sampler
    (the default, no anchor_logp) or a separate policy passed as anchor_logp."""
    th_a = toy.th_old if anchor == "sampler" else toy.th_anchor
    zero = torch.zeros(toy.N, dtype=DT)
    kw = dict(divergence=div, style=style, beta=BETA, level="token")
    if anchor == "separate":
        kw["anchor_lp"] = toy.pol.token_logp(th_a)
    g = expected_grad(toy, toy.th, toy.P_old, zero, **kw)
    gD = grad_of(lambda t: BETA * D_tok(toy, t, div, th_a, toy.th_old), toy.th)
    assert rel_err(g, gD) <= 1e-9
    if style == "differentiable":
        val = (toy.P_old * per_sample_losses(toy, toy.th, zero, **kw)).sum()
        assert abs(val - BETA * D_tok(toy, toy.th, div, th_a, toy.th_old)).item() < 1e-12


def test_token_level_forward_kl_is_sequence_kl_reverse_is_not(toy):
    """#17: per-history forward KL == sequence KL(P_old || P_theta) (value, gradient); #18: the reverse one differs
    from KL(P_theta || P_old) away from theta_old, and both gradients vanish at theta_old."""
    lo = toy.pol.seq_logp(toy.th_old)

    def seq_fwd(t):
        return (toy.P_old * (lo - toy.pol.seq_logp(t))).sum()

    def seq_rev(t):
        lp = toy.pol.seq_logp(t)
        return (lp.exp() * (lp - lo)).sum()

    def tok(div):
        return lambda t: D_tok(toy, t, div, toy.th_old, toy.th_old)

    assert abs(tok("fkl")(toy.th) - seq_fwd(toy.th)).item() < 1e-12
    assert rel_err(grad_of(tok("fkl"), toy.th), grad_of(seq_fwd, toy.th)) < 1e-10
    assert abs(tok("rkl")(toy.th) - seq_rev(toy.th)).item() > 1e-3
    assert rel_err(grad_of(tok("rkl"), toy.th), grad_of(seq_rev, toy.th)) > 1e-3
    assert grad_of(tok("rkl"), toy.th_old).abs().max() < 1e-12 and grad_of(seq_rev, toy.th_old).abs().max() < 1e-12


@pytest.mark.parametrize("style", STYLES)
def test_token_level_reward_term_is_first_order(toy, style):
    """#19: beta = 0, token level: E_old[grad l] == -grad E_theta[A] at theta_old, and not elsewhere."""

    def ER(t):
        return (toy.pol.seq_logp(t).exp() * toy.R).sum()

    kw = dict(divergence="urkl", style=style, beta=0.0, level="token")
    g_old = expected_grad(toy, toy.th_old, toy.P_old, toy.R, **kw)
    assert rel_err(g_old, -grad_of(ER, toy.th_old)) <= 1e-9
    g = expected_grad(toy, toy.th, toy.P_old, toy.R, **kw)
    assert rel_err(g, -grad_of(ER, toy.th)) > 1e-2


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("style", STYLES)
def test_token_level_surrogate_objective_is_exact(toy, div, style):
    """Token level follows the gradient of J_tok = E_old[sum_t w_t A] - beta D_tok exactly, at any theta."""

    def J_tok(t):
        w_t = (toy.pol.token_logp(t) - toy.old_lp).exp() * toy.pol.mask  # (N, L)
        return (toy.P_old * w_t.sum(-1) * toy.R).sum() - BETA * D_tok(toy, t, div, toy.th_old, toy.th_old)

    g = expected_grad(toy, toy.th, toy.P_old, toy.R, divergence=div, style=style, beta=BETA, level="token")
    assert rel_err(g, -grad_of(J_tok, toy.th)) <= 1e-9


# ----------------------------------------------------------------------------------------------- anchor != sampler


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("style", STYLES)
def test_separate_anchor_sequence_level(toy, div, style):
    """Sampler pi_old, anchor pi_a: surrogate -w A + beta rho phi(u), weight w A - beta rho u phi'(u) give
    sum_x pi_old(x) grad l(x) == -grad (E_theta[R] - beta D(pi_theta, pi_a))."""
    anchor = toy.pol.token_logp(toy.th_anchor)
    kw = dict(divergence=div, style=style, beta=BETA, level="sequence", anchor_lp=anchor)
    g = expected_grad(toy, toy.th, toy.P_old, toy.R, **kw)
    gJ = grad_of(lambda t: J_seq(toy, t, toy.R, div, BETA, toy.pol.seq_logp(toy.th_anchor)), toy.th)
    assert rel_err(g, -gJ) <= 1e-9
    if style == "differentiable":  # the exact Alg.-1 analogue with unreachable bounds too
        g2 = expected_grad(toy, toy.th, toy.P_old, toy.R, **kw, **NO_CLIP_DUAL)
        assert rel_err(g2, -gJ) <= 1e-9


# ------------------------------------------------------------------------------------------------------- clipping

EPS_LO, EPS_HI, C = 0.2, 0.28, 3.0
CLIP_KW = dict(eps_low=EPS_LO, eps_high=EPS_HI, c=C)


def token_grads(logp, old_logp, adv, **kw):
    """Per-token loss values and d l_t / d logp_t for a (1, n) row of independent tokens."""
    lp = logp.detach().clone().requires_grad_(True)
    out = rpg_loss(lp, old_logp, adv, torch.ones_like(lp, dtype=torch.bool), agg="seq-mean-token-sum", **kw)
    (g,) = torch.autograd.grad(out.loss, lp)
    return out, g[0]


def random_tokens(n, seed, spread=1.0, min_gap=1e-4):
    """(1, n) logp, old_logp and (1, n) advantages, with ratios kept away from the clip boundaries."""
    g = torch.Generator().manual_seed(seed)
    lpo = -torch.rand(1, n, generator=g, dtype=DT) * 3 - 0.05
    lw = (torch.rand(1, n, generator=g, dtype=DT) * 2 - 0.8) * spread
    for bound in (1 - EPS_LO, 1 + EPS_HI, C):
        near = (lw - math.log(bound)).abs() < min_gap
        lw = torch.where(near, lw + 3 * min_gap, lw)
    A = torch.randn(1, n, generator=g, dtype=DT)
    A = torch.where(A.abs() < 1e-3, A + 0.01, A)
    return lpo + lw, lpo, A


def ppo_dual_clip_reference(lp, lpo, A):
    """verl compute_policy_loss per token (spec 4.3 i), written independently."""
    r = torch.exp(lp - lpo)
    lc = torch.maximum(-A * r, -A * torch.clamp(r, 1 - EPS_LO, 1 + EPS_HI))
    return torch.where(A < 0, torch.minimum(lc, -A * C), lc)


@pytest.mark.parametrize("branch", ["effective", "raw"])
def test_ppo_dual_clip_equals_algorithm2_without_kl(branch):
    """#13: beta = 0: differentiable dual clip (values and gradients) == verl PPO dual clip, and its per-token
    gradients == Alg. 2's (reinforce dual clip)."""
    lp, lpo, A = random_tokens(2000, seed=1)
    kw = dict(divergence="urkl", beta=0.0, clip="dual", branch=branch, **CLIP_KW)
    out_d, g_d = token_grads(lp, lpo, A, style="differentiable", **kw)
    _, g_r = token_grads(lp, lpo, A, style="reinforce", **kw)
    lpr = lp.clone().requires_grad_(True)
    ref = ppo_dual_clip_reference(lpr, lpo, A)
    (g_ref,) = torch.autograd.grad(ref.sum(), lpr)
    assert torch.allclose(out_d.per_token, ref.detach(), rtol=1e-12, atol=1e-14)
    assert torch.allclose(g_d, g_ref[0], rtol=1e-12, atol=1e-14)
    assert torch.allclose(g_r, g_ref[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("div", DIVS)
def test_algorithm2_row_by_row(div):
    """#14: Alg. 2 table. Rows 1/4: gradient -(w A + C), value -(w A + C) logp; rows 2/3/5: gradient exactly 0 (KL
    part included), value -(A w_b + C_b) logp. Branch on A' = A + C/w (effective) or A > 0 (raw)."""
    beta = 0.5
    lp, lpo, A = random_tokens(600, seed=2, spread=2.0)
    w = torch.exp(lp - lpo)[0]
    for branch in ("effective", "raw"):
        kw = dict(divergence=div, beta=beta, clip="dual", branch=branch, style="reinforce", **CLIP_KW)
        out, g = token_grads(lp, lpo, A, **kw)
        hits = []
        for k in range(w.numel()):
            wk, Ak, lpk = w[k].item(), A[0, k].item(), lp[0, k].item()
            Ck = table_C(div, w[k], beta).item()
            pos = (Ak + Ck / wk >= 0) if branch == "effective" else (Ak > 0)
            if pos:
                row, wb = (1, wk) if wk < 1 + EPS_HI else (2, 1 + EPS_HI)
            elif wk <= 1 - EPS_LO:
                row, wb = 3, 1 - EPS_LO
            else:
                row, wb = (4, wk) if wk < C else (5, C)
            hits.append(row)
            Cb = table_C(div, torch.tensor(wb, dtype=DT), beta).item()
            exp_grad = -(wk * Ak + Ck) if row in (1, 4) else 0.0
            exp_val = -(wk * Ak + Ck) * lpk if row in (1, 4) else -(Ak * wb + Cb) * lpk
            assert math.isclose(g[k].item(), exp_grad, rel_tol=1e-10, abs_tol=1e-13), (branch, k, row)
            assert math.isclose(out.per_token[0, k].item(), exp_val, rel_tol=1e-10, abs_tol=1e-13), (branch, k)
        assert set(hits) == {1, 2, 3, 4, 5}
        n = len(hits)
        for key, row in (("clip/frac_high", 2), ("clip/frac_low", 3), ("clip/frac_dual", 5)):
            assert math.isclose(out.metrics[key].item(), hits.count(row) / n, rel_tol=1e-12), (branch, key)


@pytest.mark.parametrize("style", STYLES)
def test_clip_boundaries_are_clipped_rows(style):
    """Ties (spec 4.2): w = 1 + eps_high with A > 0, w = 1 - eps_low and w = c with A < 0 are constant rows (zero
    gradient); beta = 0 so the branch is sign(A). old_logp = 0 makes log w exactly log(bound)."""
    lpo = torch.zeros(1, 3, dtype=DT)
    lp = torch.tensor([[math.log(1 + EPS_HI), math.log(1 - EPS_LO), math.log(C)]], dtype=DT)
    A = torch.tensor([[1.0, -1.0, -1.0]], dtype=DT)
    out, g = token_grads(lp, lpo, A, divergence="fkl", beta=0.0, clip="dual", style=style, **CLIP_KW)
    assert (g == 0).all()
    assert [out.metrics[k].item() for k in ("clip/frac_high", "clip/frac_low", "clip/frac_dual")] == [1 / 3] * 3


def test_algorithm2_effective_vs_raw_branch_on_a_sign_flip():
    """A = 0.1 > 0 but A' = A - beta log w < 0 (URKL, w = 2): the paper's branch keeps the gradient (row 4), the
    code's sign(A) branch clips it (row 2)."""
    lpo = torch.tensor([[-1.0]], dtype=DT)
    lp, A = lpo + math.log(2.0), torch.tensor([0.1], dtype=DT)
    kw = dict(divergence="urkl", beta=0.5, clip="dual", style="reinforce", **CLIP_KW)
    _, g_eff = token_grads(lp, lpo, A, branch="effective", **kw)
    _, g_raw = token_grads(lp, lpo, A, branch="raw", **kw)
    assert math.isclose(g_eff.item(), -(2 * 0.1 - 0.5 * 2 * math.log(2)), rel_tol=1e-12)
    assert g_raw.item() == 0.0


def alg1_reference(lp, lpo, A, a_hat_fn):
    """Paper Alg. 1 in its max/min form (spec 4.1), A_hat differentiable."""
    w = torch.exp(lp - lpo)
    Ah = a_hat_fn(w)
    lc = torch.maximum(-w * Ah, -torch.clamp(w, 1 - EPS_LO, 1 + EPS_HI) * Ah)
    return torch.where(Ah >= 0, lc, torch.minimum(lc, -C * Ah))


PHI = {  # phi(w) of spec 2.1, written out
    "fkl": lambda w: -torch.log(w),
    "rkl": lambda w: w * torch.log(w),
    "ufkl": lambda w: w - 1 - torch.log(w),
    "urkl": lambda w: w * torch.log(w) - w + 1,
}


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("analogue", ["exact", "paper"])
def test_algorithm1_matches_reference(div, analogue):
    """#15 (general form): differentiable dual clip == paper Alg. 1 (max/min form), values and per-token gradients,
    with A_hat = A - beta phi(w)/w (exact) or the paper's analogues (paper; fkl/ufkl: A_hat = A + separate KL)."""
    beta = 0.3
    lp, lpo, A = random_tokens(1000, seed=3, spread=1.5)
    kw = dict(divergence=div, beta=beta, clip="dual", style="differentiable", analogue=analogue, **CLIP_KW)
    out, g = token_grads(lp, lpo, A, **kw)
    lpr = lp.clone().requires_grad_(True)
    if analogue == "exact":
        ref = alg1_reference(lpr, lpo, A, lambda w: A - beta * PHI[div](w) / w)
    elif div in ("rkl", "urkl"):
        extra = 1.0 if div == "rkl" else 0.0
        ref = alg1_reference(lpr, lpo, A, lambda w: A - beta * (torch.log(w) + extra))
    else:
        ref = alg1_reference(lpr, lpo, A, lambda w: A) + beta * PHI[div](torch.exp(lpr - lpo))
    (g_ref,) = torch.autograd.grad(ref.sum(), lpr)
    assert torch.allclose(out.per_token, ref.detach(), rtol=1e-11, atol=1e-13)
    assert torch.allclose(g, g_ref[0], rtol=1e-10, atol=1e-13)
    w = torch.exp(lp - lpo)
    if analogue == "exact":
        pos = A - beta * PHI[div](w) / w >= 0
    elif div in ("rkl", "urkl"):
        pos = A - beta * (torch.log(w) + (1.0 if div == "rkl" else 0.0)) >= 0
    else:
        pos = A >= 0
    expect = {
        "clip/frac_high": (pos & (w >= 1 + EPS_HI)).double().mean(),
        "clip/frac_low": (~pos & (w <= 1 - EPS_LO)).double().mean(),
        "clip/frac_dual": (~pos & (w >= C)).double().mean(),
    }
    for k, v in expect.items():
        assert torch.allclose(out.metrics[k], v), k
        assert v > 0, k


def test_algorithm1_clipped_region_keeps_kl_gradient():
    """#15: URKL, A_hat > 0, w = 1.5 >= 1 + eps_high: d loss / d lp = beta (1 + eps_high) with the paper's analogue
    (A_hat = A - beta log w) and beta (1 + eps_high)(1 - 1/w) with the exact one (A_hat = A - beta phi(w)/w)."""
    beta = 0.37
    lpo = torch.tensor([[-1.0]], dtype=DT)
    lp, A = lpo + math.log(1.5), torch.tensor([1.0], dtype=DT)
    kw = dict(divergence="urkl", beta=beta, clip="dual", style="differentiable", **CLIP_KW)
    _, g = token_grads(lp, lpo, A, analogue="paper", **kw)
    assert math.isclose(g.item(), beta * 1.28, rel_tol=1e-12)
    _, g = token_grads(lp, lpo, A, analogue="exact", **kw)
    assert math.isclose(g.item(), beta * 1.28 * (1 - 1 / 1.5), rel_tol=1e-12)


@pytest.mark.parametrize("div", DIVS)
def test_truncated_importance_weights(div):
    """#16: clip='truncate' gradient == -(A wc + C(wc)), wc = clip(w, 1-eps_low, 1+eps_high); never masked."""
    beta = 0.4
    lp, lpo, A = random_tokens(500, seed=4, spread=2.0)
    _, g = token_grads(lp, lpo, A, divergence=div, beta=beta, clip="truncate", style="reinforce", **CLIP_KW)
    wc = torch.exp(lp - lpo).clamp(1 - EPS_LO, 1 + EPS_HI)[0]
    expect = -(A[0] * wc + table_C(div, wc, beta))
    assert torch.allclose(g, expect, rtol=1e-12, atol=1e-14)
    assert (g != 0).all()


@pytest.mark.parametrize("div", DIVS)
def test_truncated_importance_weights_with_a_separate_anchor(div):
    """clip='truncate' with an anchor: the KL part is taken at the truncated weight, C = rho C_1(uc) with uc =
    wc / rho (C_1: the anchor = sampler table); the clip fractions count w below 1 - eps_low and above 1 + eps_high,
    and loss/policy is the total less loss/kl."""
    beta = 0.4
    lp, lpo, A = random_tokens(500, seed=5, spread=2.0)
    anchor = lpo + 0.5 * torch.randn(lpo.shape, generator=torch.Generator().manual_seed(6), dtype=DT)
    out, g = token_grads(lp, lpo, A, divergence=div, beta=beta, clip="truncate", style="reinforce",
                         anchor_logp=anchor, **CLIP_KW)  # fmt: skip
    w = torch.exp(lp - lpo)[0]
    wc, rho = w.clamp(1 - EPS_LO, 1 + EPS_HI), torch.exp(anchor - lpo)[0]
    expect = -(A[0] * wc + rho * table_C(div, wc / rho, beta))
    assert torch.allclose(g, expect, rtol=1e-12, atol=1e-14)
    assert out.metrics["clip/frac_low"].item() == pytest.approx((w < 1 - EPS_LO).double().mean().item(), abs=1e-15)
    assert out.metrics["clip/frac_high"].item() == pytest.approx((w > 1 + EPS_HI).double().mean().item(), abs=1e-15)
    assert 0.05 < out.metrics["clip/frac_low"].item() < 0.9 and 0.05 < out.metrics["clip/frac_high"].item() < 0.9
    assert abs(out.metrics["loss/kl"].item()) > 1e-3
    parts = out.metrics["loss/policy"].item() + out.metrics["loss/kl"].item()
    assert parts == pytest.approx(out.metrics["loss/total"].item(), rel=1e-12)


@pytest.mark.parametrize("div", DIVS)
def test_code_faithful_separate_clamped_kl(div):
    """#28, #29: kl_in_clip=False with the authors' +-10 value clamp, A = 0: the loss is beta D_kind(w) per token;
    D = 0 at w = 1; d/dlp = beta w phi'(w) inside [-10, 10] and 0 outside (fkl: -log w, inside here)."""
    beta = 0.2
    lpo = torch.full((1, 5), -1.3, dtype=DT)
    ws = torch.tensor([1.0, 0.5, 2.0, 30.0, 1e-6], dtype=DT)
    lp = lpo + torch.log(ws)
    kw = dict(divergence=div, beta=beta, clip="dual", kl_in_clip=False, kl_value_clamp=10.0, branch="raw")
    out, g = token_grads(lp, lpo, torch.zeros(1, dtype=DT), style="differentiable", **CLIP_KW, **kw)
    D = PHI[div](ws)
    wdphi = {"fkl": -torch.ones_like(ws), "rkl": ws * (torch.log(ws) + 1), "ufkl": ws - 1, "urkl": ws * torch.log(ws)}
    inside = D.abs() < 10
    assert torch.allclose(out.per_token[0], beta * D.clamp(-10, 10), rtol=1e-12, atol=1e-15)
    assert torch.allclose(g, torch.where(inside, beta * wdphi[div], 0.0), rtol=1e-12, atol=1e-15)
    assert out.per_token[0, 0] == 0
    assert math.isclose(out.metrics["clip/frac_kl_clamp"].item(), (~inside).double().mean().item())


@pytest.mark.parametrize("div", DIVS)
def test_code_faithful_mode_is_the_released_loss(div):
    """Spec 4.3 iv: token-mean(verl PPO dual clip on A) + beta token-mean(D_kind), D clamped to [-10, 10] except
    fkl; rpg_loss(kl_in_clip=False, branch='raw', kl_value_clamp=10 or None for fkl) gives the same loss and
    gradient on a padded batch."""
    lp, lpo, A, mask, _ = batch(B=16, T=9, seed=9)
    lp = lpo + 5.0 * (lp - lpo)  # wider ratios: clip and clamp regions are hit
    beta = 0.05
    lpr = lp.clone().requires_grad_(True)
    A_bt, m = A[:, None].expand_as(lp), mask.to(DT)
    lr = lpr - lpo
    ref_pg = (ppo_dual_clip_reference(lpr, lpo, A_bt) * m).sum() / m.sum()
    D = PHI[div](torch.exp(lr))
    D = D if div == "fkl" else D.clamp(-10, 10)
    ref = ref_pg + beta * (D * m).sum() / m.sum()
    (g_ref,) = torch.autograd.grad(ref, lpr)
    kw = dict(divergence=div, style="differentiable", beta=beta, clip="dual", kl_in_clip=False, branch="raw")
    out, g = loss_and_grad(lp, lpo, A, mask, kl_value_clamp=None if div == "fkl" else 10.0, **CLIP_KW, **kw)
    assert torch.allclose(out.loss, ref, rtol=1e-12)
    assert torch.allclose(g, g_ref, rtol=1e-11, atol=1e-15)
    assert out.metrics["clip/frac_high"] > 0 and out.metrics["clip/frac_low"] > 0
    assert div == "fkl" or out.metrics["clip/frac_kl_clamp"] > 0


@pytest.mark.parametrize("div", DIVS)
def test_algorithm2_at_sequence_level(div):
    """Sequence level, reinforce + dual clip: each response's tokens get gradient -(w(x) A + C(x)) if the response
    is in an active row, else 0; branch on A + C/w with the sequence ratio."""
    beta, T = 0.3, 5
    g = torch.Generator().manual_seed(5)
    lpo = -torch.rand(40, T, generator=g, dtype=DT) * 2 - 0.1
    lp = lpo + 0.4 * torch.randn(40, T, generator=g, dtype=DT)
    mask = torch.ones(40, T, dtype=torch.bool)
    mask[::3, 3:] = False
    A = torch.randn(40, generator=g, dtype=DT)
    lpr = lp.clone().requires_grad_(True)
    kw = dict(divergence=div, beta=beta, clip="dual", style="reinforce", level="sequence", **CLIP_KW)
    out = rpg_loss(lpr, lpo, A, mask, agg="seq-mean-token-sum", normalizer=1.0, **kw)
    (gr,) = torch.autograd.grad(out.loss, lpr)
    w = torch.exp(((lp - lpo) * mask).sum(-1))
    Cs = table_C(div, w, beta)
    pos = A + Cs / w >= 0
    active = torch.where(pos, w < 1 + EPS_HI, (w > 1 - EPS_LO) & (w < C))
    expect = torch.where(active, -(w * A + Cs), 0.0)[:, None] * mask
    assert torch.allclose(gr, expect, rtol=1e-11, atol=1e-13)
    assert active.any() and (~active).any()


# ---------------------------------------------------------------------------------------------------- invariances

VARIANTS = [
    dict(style="differentiable", level="token"),
    dict(style="differentiable", level="token", clip="dual"),
    dict(style="reinforce", level="token", clip="dual"),
    dict(style="reinforce", level="token", clip="truncate"),
    dict(style="differentiable", level="sequence"),
    dict(style="differentiable", level="sequence", clip="dual"),
    dict(style="reinforce", level="sequence"),
    dict(style="reinforce", level="sequence", clip="dual"),
]


def batch(B=8, T=7, seed=6, dtype=DT, adv_2d=False):
    g = torch.Generator().manual_seed(seed)
    lpo = -torch.rand(B, T, generator=g, dtype=dtype) * 2 - 0.1
    lp = lpo + 0.3 * torch.randn(B, T, generator=g, dtype=dtype)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lens[:, None]
    A = torch.randn(B, T, generator=g, dtype=dtype) if adv_2d else torch.randn(B, generator=g, dtype=dtype)
    anchor = lpo + 0.2 * torch.randn(B, T, generator=g, dtype=dtype)
    return lp, lpo, A, mask, anchor


def loss_and_grad(lp, *args, **kw):
    lpr = lp.detach().clone().requires_grad_(True)
    out = rpg_loss(lpr, *args, **kw)
    (g,) = torch.autograd.grad(out.loss, lpr)
    return out, g


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values()))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_micro_batches_with_global_normalizer_give_the_full_batch_gradient(variant, agg):
    lp, lpo, A, mask, anchor = batch()
    kw = dict(divergence="urkl", beta=0.2, agg=agg, **variant)
    full, g_full = loss_and_grad(lp, lpo, A, mask, anchor_logp=anchor, **kw)
    if full.per_token is not None:  # the loss is reduce.aggregate of the per-token loss, normalizer included
        assert torch.allclose(full.loss, aggregate(full.per_token, mask, agg), rtol=1e-13)
        out = rpg_loss(lp, lpo, A, mask, anchor_logp=anchor, normalizer=3.5, **kw)
        assert torch.allclose(out.loss, aggregate(out.per_token, mask, agg, normalizer=3.5), rtol=1e-13)
    norm = mask.sum() if agg == "token-mean" else lp.shape[0]
    total, g_parts = 0.0, []
    for s in (slice(0, 3), slice(3, 4), slice(4, 8)):
        part, g = loss_and_grad(lp[s], lpo[s], A[s], mask[s], anchor_logp=anchor[s], normalizer=norm, **kw)
        total, g_parts = total + part.loss, g_parts + [g]
    assert torch.allclose(total, full.loss, rtol=1e-12)
    assert torch.allclose(torch.cat(g_parts), g_full, rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values()))
def test_padding_with_garbage_changes_nothing(variant):
    adv_2d = variant["level"] == "token"
    lp, lpo, A, mask, anchor = batch(adv_2d=adv_2d)
    kw = dict(divergence="rkl", beta=0.2, **variant)
    ref, g_ref = loss_and_grad(lp, lpo, A, mask, anchor_logp=anchor, **kw)
    extra = 4
    junk = torch.tensor([math.nan, math.inf, -math.inf, 1e30], dtype=DT).repeat(lp.shape[0], 1)

    def pad(x, fill):
        x = torch.where(mask, x, fill[:, :1]) if x.dim() == 2 else x  # garbage in the existing padding too
        return torch.cat([x, fill], 1) if x.dim() == 2 else x

    maskp = torch.cat([mask, torch.zeros(lp.shape[0], extra, dtype=torch.bool)], 1)
    out, g = loss_and_grad(
        pad(lp, junk), pad(lpo, junk.flip(1)), pad(A, junk), maskp, anchor_logp=pad(anchor, junk), **kw
    )
    assert torch.allclose(out.loss, ref.loss, rtol=1e-13)
    assert torch.allclose(g[:, : lp.shape[1]], g_ref, rtol=1e-12, atol=1e-15)
    assert torch.isfinite(g).all() and (g[~maskp] == 0).all()
    if out.per_token is not None:
        assert (out.per_token[~maskp] == 0).all()
    for k, v in out.metrics.items():
        assert torch.isfinite(v), k


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("level", LEVELS)
def test_on_policy_ratio_is_one_and_divergence_zero(div, level):
    lp, _, A, mask, _ = batch()
    for style in STYLES:
        out, _ = loss_and_grad(lp, lp.clone(), A, mask, divergence=div, style=style, beta=0.3, level=level)
        m = out.metrics
        assert m["log_w/max"] == 0 and m["log_w/min"] == 0
        assert m[f"kl/{div}"] == 0 and m["kl/k3_anchor"] == 0 and m["loss/kl"] == 0
    out, _ = loss_and_grad(lp, lp.clone(), A, mask, divergence=div, style="differentiable", beta=0.3, level=level)
    n_tok = mask.sum()
    expect = -(A[:, None] * mask).sum() / n_tok if level == "token" else -A.sum() / n_tok  # -w A with w = 1
    assert torch.allclose(out.loss, expect, rtol=1e-13)


def test_metrics_are_detached_scalars_with_expected_values():
    lp, lpo, A, mask, anchor = batch()
    out, _ = loss_and_grad(lp, lpo, A, mask, divergence="ufkl", style="reinforce", beta=0.2, clip="dual")
    for k, v in out.metrics.items():
        assert v.dim() == 0 and not v.requires_grad, k
    lw = (lp - lpo)[mask]
    assert torch.allclose(out.metrics["log_w/max"], lw.max()) and torch.allclose(out.metrics["log_w/min"], lw.min())
    assert torch.allclose(out.metrics["kl/k1_old"], -lw.mean())
    assert torch.allclose(out.metrics["kl/k3_anchor"], (torch.exp(-lw) - 1 + lw).mean())  # anchor = sampler
    per_resp = torch.where(mask, torch.exp(lp - lpo) - 1 - (lp - lpo), 0.0).sum(-1)  # k3(w) summed per response
    assert torch.allclose(out.metrics["kl/ufkl"], per_resp.mean())
    assert torch.allclose(out.metrics["loss/kl"], 0.2 * per_resp.sum() / mask.sum())


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("clip", [None, "dual"])
def test_sequence_level_aggregation_modes(style, clip):
    """A response's sequence-level loss l_i is aggregated as its token-sum: token-mean sum l_i / N_tok,
    seq-mean-token-sum sum l_i / B, seq-mean-token-mean sum l_i / (L_i B); l_i from one call per response."""
    lp, lpo, A, mask, _ = batch()
    kw = dict(divergence="rkl", style=style, beta=0.2, level="sequence", clip=clip)
    ell = torch.stack(
        [rpg_loss(lp[i : i + 1], lpo[i : i + 1], A[i : i + 1], mask[i : i + 1], agg="seq-mean-token-sum", **kw).loss
         for i in range(lp.shape[0])]
    )  # fmt: skip
    L, B = mask.sum(-1), lp.shape[0]
    expect = {
        "token-mean": ell.sum() / L.sum(),
        "seq-mean-token-sum": ell.sum() / B,
        "seq-mean-token-mean": (ell / L).sum() / B,
    }
    for agg, v in expect.items():
        assert torch.allclose(rpg_loss(lp, lpo, A, mask, agg=agg, **kw).loss, v, rtol=1e-13), agg


def test_registered_as_rpg():
    assert LOSSES.get("rpg") is rpg_loss


# -------------------------------------------------------------------------------------------------------- bad input


def _bad(name):
    lp, lpo, A, mask, anchor = batch(B=3, T=4, dtype=torch.float32)
    args = dict(logp=lp, old_logp=lpo, advantages=A, mask=mask)
    kw = dict(divergence="urkl", style="reinforce", beta=0.1)
    if name == "shape":
        args["old_logp"] = lpo[:, :3]
    elif name == "dtype":
        args["old_logp"] = lpo.double()
    elif name == "adv_dtype":
        args["advantages"] = A.double()
    elif name == "adv_shape":
        args["advantages"] = A[:2]
    elif name == "bf16":
        args["logp"], args["old_logp"], args["advantages"] = lp.bfloat16(), lpo.bfloat16(), A.bfloat16()
    elif name == "fp16":
        args["logp"], args["old_logp"], args["advantages"] = lp.half(), lpo.half(), A.half()
    elif name == "nan_logp":
        args["logp"] = lp.clone()
        args["logp"][0, 0] = math.nan
    elif name == "inf_old":
        args["old_logp"] = lpo.clone()
        args["old_logp"][1, 0] = -math.inf
    elif name == "nan_adv":
        args["advantages"] = A.clone()
        args["advantages"][2] = math.nan
    elif name == "nan_anchor":
        anchor = anchor.float().clone()
        anchor[0, 0] = math.nan
        kw["anchor_logp"] = anchor
    elif name == "empty_row":
        args["mask"] = mask.clone()
        args["mask"][1] = False
    elif name == "mask_values":
        args["mask"] = mask.float() * 0.5
    elif name == "seq_adv_2d":
        args["advantages"], kw["level"] = A[:, None].expand(3, 4).contiguous(), "sequence"
    elif name in ("divergence", "style", "level", "agg", "clip", "branch", "analogue"):
        kw[name] = "nope"
    elif name == "c":
        kw.update(clip="dual", c=1.0)
    elif name == "beta":
        kw["beta"] = -0.1
    elif name == "eps_low":
        kw["eps_low"] = 1.5
    elif name == "truncate_diff":
        kw.update(style="differentiable", clip="truncate")
    elif name == "clamp_in_clip":
        kw.update(style="differentiable", clip="dual", kl_value_clamp=10.0)
    elif name == "normalizer":
        kw["normalizer"] = 0  # an empty global count would give inf (and a negative one a sign-flipped loss)
    elif name == "overflow":
        args["logp"] = lpo + 40.0  # sequence log w = 40 T: e^160 overflows float32, unclipped
        kw["level"] = "sequence"
    return args, kw


BAD = {
    "shape": "old_logp has shape",
    "dtype": "old_logp has dtype",
    "adv_dtype": "advantages has dtype",
    "adv_shape": "advantages has shape",
    "bf16": "float32 or float64",
    "fp16": "float32 or float64",
    "nan_logp": r"logp is not finite \(nan\) at masked-in position \(0, 0\)",
    "inf_old": r"old_logp is not finite \(-inf\) at masked-in position \(1, 0\)",
    "nan_adv": r"advantages is not finite \(nan\) at masked-in position \(2,\)",
    "nan_anchor": "anchor_logp is not finite",
    "empty_row": "mask row 1 is all zero",
    "mask_values": "mask must be bool or contain only 0 and 1",
    "seq_adv_2d": "level='sequence' needs one advantage per response",
    "divergence": "unknown divergence 'nope'",
    "style": "unknown style 'nope'",
    "level": "unknown level 'nope'",
    "agg": "unknown agg 'nope'",
    "clip": "unknown clip 'nope'",
    "branch": "unknown branch 'nope'",
    "analogue": "unknown analogue 'nope'",
    "c": r"c must be > 1",
    "beta": "beta must be finite and >= 0",
    "eps_low": r"eps_low must be in \[0, 1\]",
    "truncate_diff": "clip='truncate'.*needs style='reinforce'",
    "clamp_in_clip": "kl_value_clamp clamps a separate KL term",
    "normalizer": r"normalizer must be a finite count >= 2\*\*-20 .*got 0",
    "overflow": "rpg_loss overflowed",
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_value_error_naming_the_problem(name):
    args, kw = _bad(name)
    with pytest.raises(ValueError, match=BAD[name]):
        rpg_loss(**args, **kw)


# ------------------------------------------------------------------------------------------ extreme but valid input


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_token_level_log_ratios_up_to_50_stay_finite(dtype):
    g = torch.Generator().manual_seed(7)
    lpo = -torch.rand(4, 64, generator=g, dtype=dtype) * 60 - 0.1
    lp = (lpo + (torch.rand(4, 64, generator=g, dtype=dtype) * 100 - 50)).clamp(max=-1e-3)
    A = torch.randn(4, generator=g, dtype=dtype)
    mask = torch.ones(4, 64, dtype=torch.bool)
    combos = [dict(style="differentiable", clip=None), dict(style="reinforce", clip=None)]
    combos += [dict(style=s, clip="dual", branch=b) for s in STYLES for b in ("effective", "raw")]
    combos += [dict(style="differentiable", clip="dual", analogue="paper"), dict(style="reinforce", clip="truncate")]
    combos += [dict(style="differentiable", clip="dual", kl_in_clip=False)]
    for div, kw in itertools.product(DIVS, combos):
        out, gr = loss_and_grad(lp, lpo, A, mask, divergence=div, beta=0.1, **kw)
        assert torch.isfinite(out.loss) and torch.isfinite(gr).all(), (div, kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sequence_level_8192_tokens(dtype):
    """Long responses: sum_t logp ~ -4e4 (exp underflows) with a moderate sequence ratio; float32 agrees with float64.
    With |log w(x)| in the hundreds the clipped variants stay finite, unclipped ones raise instead of returning inf."""
    g = torch.Generator().manual_seed(8)
    B, T = 3, 8192
    lpo64 = -torch.rand(B, T, generator=g, dtype=DT) * 10
    lp64 = lpo64 + 0.02 * torch.randn(B, T, generator=g, dtype=DT)
    A64 = torch.tensor([1.0, -0.5, 0.3], dtype=DT)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 5000:] = False
    for div, style, clip in itertools.product(DIVS, STYLES, [None, "dual"]):
        kw = dict(divergence=div, style=style, beta=0.1, level="sequence", clip=clip, agg="seq-mean-token-sum")
        out, gr = loss_and_grad(lp64.to(dtype), lpo64.to(dtype), A64.to(dtype), mask, **kw)
        ref, gref = loss_and_grad(lp64, lpo64, A64, mask, **kw)
        assert torch.isfinite(out.loss) and torch.isfinite(gr).all(), (div, style, clip)
        tol = 1e-3 if dtype == torch.float32 else 1e-12
        assert torch.allclose(out.loss.double(), ref.loss, rtol=tol, atol=tol)
        assert torch.allclose(gr.double(), gref, rtol=tol, atol=tol * gref.abs().max().item())
    lp_far = lpo64 + torch.where(torch.arange(B)[:, None] == 0, 0.1, -0.1)  # log w(x) = 819, -500, -819
    for dtype_, div in itertools.product((torch.float32, DT), DIVS):
        args = (lp_far.to(dtype_), lpo64.to(dtype_), A64.to(dtype_), mask)
        for kw in (dict(style="reinforce", clip="dual"), dict(style="reinforce", clip="truncate")):
            out, gr = loss_and_grad(*args, divergence=div, beta=0.1, level="sequence", **kw)
            assert torch.isfinite(out.loss) and torch.isfinite(gr).all(), (div, kw)
        with pytest.raises(ValueError, match="overflowed"):
            loss_and_grad(*args, divergence=div, style="reinforce", beta=0.1, level="sequence")
        out, gr = loss_and_grad(*args, divergence=div, style="reinforce", beta=0.1, level="sequence", max_log_w=20.0)
        assert torch.isfinite(out.loss) and torch.isfinite(gr).all()
        assert out.metrics["clip/frac_max_log_w"] == 1 / 3


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("style", ["differentiable", "reinforce"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("anchor", [False, True])
def test_regime_metrics_against_autograd(div, style, level, anchor):
    """log_w/abs_mean is the mean |log w| over units; kl/grad_share is the KL part's share of the per-unit gradient
    weight, recovered here from autograd alone: the gradient with beta minus the gradient with beta = 0 is the KL
    part, the latter the reward part (unclipped, token-sum aggregation so the weights are not rescaled), with the
    sampler or a separate anchor (whose rho multiplies the KL part)."""
    g = torch.Generator().manual_seed(3)
    logp = -torch.rand(4, 5, generator=g, dtype=torch.float64) - 0.1
    old = logp + 0.4 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    adv = torch.tensor([0.7, -0.4, 0.2, -1.1], dtype=torch.float64)
    beta = 0.3
    anchor_logp = old + 0.3 * torch.randn(4, 5, generator=g, dtype=torch.float64) if anchor else None

    def grad(b):
        lp = logp.clone().requires_grad_(True)
        out = rpg_loss(lp, old, adv, mask, divergence=div, style=style, beta=b, level=level, agg="seq-mean-token-sum",
                       anchor_logp=anchor_logp)  # fmt: skip
        out.loss.backward()
        return out.metrics, lp.grad

    metrics, g_beta = grad(beta)
    _, g_reward = grad(0.0)
    log_w = torch.where(mask, logp - old, 0.0)
    if level == "token":
        kl_part, reward_part = (g_beta - g_reward).abs().sum(), g_reward.abs().sum()
        abs_mean = log_w.abs().sum() / mask.sum()
    else:  # one coefficient per response, repeated on its tokens: read it off the first token
        kl_part, reward_part = (g_beta - g_reward)[:, 0].abs().sum(), g_reward[:, 0].abs().sum()
        abs_mean = log_w.sum(-1).abs().mean()
    assert float(metrics["log_w/abs_mean"]) == pytest.approx(float(abs_mean), rel=1e-12)
    assert 0.0 < float(metrics["kl/grad_share"]) < 1.0
    assert float(metrics["kl/grad_share"]) == pytest.approx(float(kl_part / (kl_part + reward_part)), rel=1e-9)


def test_grad_share_is_finite_and_zero_without_kl():
    logp = torch.zeros(2, 3, dtype=torch.float32)
    old = torch.tensor([[-99.0, 0.0, 0.0], [40.0, 0.0, 0.0]])  # |log w| far beyond exp's float32 range
    out = rpg_loss(logp, old, torch.tensor([1.0, -1.0]), torch.ones(2, 3), divergence="urkl", style="reinforce",
                   beta=1e-4, clip="dual")  # fmt: skip
    assert math.isfinite(float(out.metrics["kl/grad_share"])) and 0 <= float(out.metrics["kl/grad_share"]) <= 1
    out0 = rpg_loss(logp, old, torch.tensor([1.0, -1.0]), torch.ones(2, 3), divergence="urkl", style="reinforce",
                    beta=0.0, clip="dual")  # fmt: skip
    assert float(out0.metrics["kl/grad_share"]) == 0.0


@pytest.mark.parametrize("div", DIVS)
def test_kl_value_clamp_gradient_is_zero_not_nan_where_exp_overflows(div):
    """Issue 11 item 8: float32 log w = 100 overflows exp; where the clamp binds the gradient is 0, elsewhere it
    equals the float64 formula beta w phi'(w) (A = 0, so the policy term is zero)."""
    beta = 0.2
    lw64 = torch.tensor([100.0, 0.5, -3.0, 40.0, -100.0], dtype=DT)
    lpo = torch.full((1, 5), -1.0)
    kw = dict(divergence=div, beta=beta, clip="dual", kl_in_clip=False, kl_value_clamp=10.0, style="differentiable")
    out, g = token_grads(lpo + lw64.float(), lpo, torch.zeros(1), **CLIP_KW, **kw)
    D = {"fkl": -lw64, "rkl": lw64.exp() * lw64, "ufkl": lw64.expm1() - lw64, "urkl": lw64.exp() * (lw64 - 1) + 1}[div]
    wdphi = {
        "fkl": -torch.ones_like(lw64),
        "rkl": lw64.exp() * (lw64 + 1),
        "ufkl": lw64.expm1(),
        "urkl": lw64.exp() * lw64,
    }
    inside = D.abs() <= 10
    assert torch.isfinite(g).all() and torch.isfinite(out.loss)
    assert torch.allclose(out.per_token[0].double(), beta * D.clamp(-10, 10), rtol=1e-5, atol=1e-6)
    assert torch.allclose(g.double(), torch.where(inside, beta * wdphi[div], 0.0), rtol=1e-5, atol=1e-6)
    assert math.isclose(out.metrics["clip/frac_kl_clamp"].item(), (~inside).double().mean().item(), rel_tol=1e-6)


@pytest.mark.parametrize("lw", [-99.0, 100.0])
def test_metrics_stay_finite_when_an_estimate_overflows(lw):
    """Issue 11 item 9: float32 log w = -99 made kl/k3_anchor = e^99 = inf (and +100 the KL metrics of the clipped
    variants) with a finite loss. Metrics are computed in float64 and saturate at +-1e30; those that fit keep their
    value."""
    lpo = torch.full((2, 3), -2.0)
    lp = lpo + torch.tensor([[lw, 0.1, -0.2], [0.3, 0.0, 0.05]])
    A, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool)
    variants = [dict(style="reinforce", clip=c) for c in ("dual", "truncate")]
    variants += [dict(style="differentiable", clip="dual", kl_in_clip=False, kl_value_clamp=10.0)]
    variants += [dict(style="differentiable", max_log_w=5.0)]
    for div, kw in itertools.product(DIVS, variants):
        out, g = loss_and_grad(lp, lpo, A, mask, divergence=div, beta=0.1, **kw)
        assert torch.isfinite(g).all(), (div, kw)
        bad = {k: v.item() for k, v in out.metrics.items() if not torch.isfinite(v)}
        assert not bad, (div, kw, bad)
        lw_all = (lp - lpo).double()
        assert out.metrics["log_w/min"] == lw_all.min() and out.metrics["log_w/max"] == lw_all.max()
        assert math.isclose(out.metrics["kl/k1_old"].item(), -lw_all.mean().item(), rel_tol=1e-6)
        if lw < 0:  # true value e^99 / 6 = 1.6e42: saturated
            assert out.metrics["kl/k3_anchor"] == torch.tensor(1e30, dtype=torch.float32)
        assert out.metrics["loss/total"] == out.loss


# (divergence, style, clip) -> host syncs of one rpg_loss call on ordinary inputs (bool / item / tolist of a tensor)
# before clip=None's log-space edge and ufkl's expm1 form (b317ed2): neither may add one on a normal batch
_SYNCS = {("fkl", "differentiable", None): 7, ("rkl", "differentiable", None): 7, ("ufkl", "differentiable", None): 7,
          ("urkl", "differentiable", None): 9, ("fkl", "reinforce", None): 4, ("rkl", "reinforce", None): 4,
          ("ufkl", "reinforce", None): 4, ("urkl", "reinforce", None): 5, ("ufkl", "differentiable", "dual"): 7,
          ("ufkl", "reinforce", "dual"): 4}  # fmt: skip


@pytest.mark.parametrize("key", list(_SYNCS))
def test_the_log_space_edges_add_no_host_sync_on_a_normal_batch(key, monkeypatch):
    """clip=None's w A in log space asked whether any unit needed it (one sync, plus one in the gradient-weight
    check and one in REINFORCE's coefficient), and ufkl's expm1 form whether any unit was near u = 1 (one per call
    of u phi'(u)): up to 4 more host syncs per call (7 -> 11 for ufkl, differentiable, unclipped) where the result
    is the same. The forms are now chosen per unit (or asked together with w's overflow), to the bit as before."""
    divergence, style, clip = key
    count = [0]
    for name in ("__bool__", "item", "tolist"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original):
            count[0] += 1
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    g = torch.Generator().manual_seed(0)
    logp = (torch.randn(4, 6, generator=g) * 0.1 - 1).requires_grad_()
    old = logp.detach() + torch.randn(4, 6, generator=g) * 0.05
    adv, mask = torch.randn(4, generator=g), torch.ones(4, 6, dtype=torch.bool)
    out = rpg_loss(logp, old, adv, mask, divergence=divergence, style=style, clip=clip, beta=0.1)
    assert count[0] <= _SYNCS[key]
    out.loss.backward()
