"""PPO dual clip / clip-higher / KL options (spec 4.1 table, 4.3 i, 5.2-5.4; section-9 item 13), float64 on CPU."""

from __future__ import annotations

import math

import pytest
import torch

from rpgrl.objectives.baselines import dapo_loss, grpo_loss, ppo_loss, reinforce_pp_loss
from rpgrl.objectives.reduce import AGG_MODES

F64 = torch.float64
EPS_LO, EPS_HI, C = 0.2, 0.28, 3.0


def close(a, b, tol=1e-12):
    return torch.allclose(torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), atol=tol, rtol=1e-10)


def one_token_batch(A: list[float], w: list[float]):
    """One single-token response per row: old_logp = -1, logp = -1 + log w."""
    old = torch.full((len(w), 1), -1.0, dtype=F64)
    logp = (old + torch.log(torch.tensor(w, dtype=F64))[:, None]).requires_grad_(True)
    return logp, old, torch.tensor(A, dtype=F64), torch.ones(len(w), 1, dtype=F64)


def per_token_grad(out, logp):
    (g,) = torch.autograd.grad(out.per_token.sum(), logp)
    return g[:, 0]


# ---------- spec 4.1 gradient-region table, row by row (eps 0.2/0.28, c = 3) ----------

TABLE = [
    # (A,    w,    loss,          d loss / d logp)
    (2.0, 0.5, -1.0, -1.0),  # A >= 0, w < 1-eps_low: still -w A, gradient flows (PPO never clips below for A > 0)
    (2.0, 1.1, -2.2, -2.2),  # A >= 0, 1-eps_low < w < 1+eps_high: -w A, gradient -A w
    (2.0, 1.5, -2.56, 0.0),  # A >= 0, w >= 1+eps_high: -(1.28)(2) constant, no gradient
    (-1.0, 0.5, 0.8, 0.0),  # A < 0, w <= 1-eps_low: -(0.8)(-1) constant, no gradient
    (-1.0, 1.1, 1.1, 1.1),  # A < 0, inside the clip range: -w A, gradient -A w
    (-1.0, 2.0, 2.0, 2.0),  # A < 0, 1+eps_high < w < c: NOT clipped for A < 0, gradient -A w
    (-1.0, 4.0, 3.0, 0.0),  # A < 0, w >= c: dual clip -c A = 3, no gradient
    (0.0, 1.5, 0.0, 0.0),  # A = 0: zero loss and gradient in every region
]


def test_dual_clip_table_row_by_row():
    A, w, loss, grad = map(list, zip(*TABLE, strict=True))
    logp, old, adv, mask = one_token_batch(A, w)
    out = ppo_loss(logp, old, adv, mask, eps_low=EPS_LO, eps_high=EPS_HI, clip_c=C)
    assert close(out.per_token[:, 0].detach(), loss)
    assert close(per_token_grad(out, logp), grad)
    assert close(out.loss.detach(), sum(loss) / len(loss))  # token-mean of one token per row
    # clip fractions over the 8 tokens: row 3 high, row 4 low, row 7 dual (row 8 has A = 0: not counted)
    assert close(out.metrics["clip/frac_high"], 1 / 8)
    assert close(out.metrics["clip/frac_low"], 1 / 8)
    assert close(out.metrics["clip/frac_dual"], 1 / 8)
    assert close(out.metrics["kl/ppo_kl"], -sum(math.log(x) for x in w) / 8)
    assert close(out.metrics["loss/policy"], out.loss.detach()) and close(out.metrics["loss/kl"], 0.0)


def test_without_dual_clip_negative_advantages_are_unbounded():
    logp, old, adv, mask = one_token_batch([-1.0, -1.0], [4.0, 50.0])
    out = ppo_loss(logp, old, adv, mask, eps_low=EPS_LO, eps_high=EPS_HI, clip_c=None)
    assert close(out.per_token[:, 0].detach(), [4.0, 50.0])
    assert close(per_token_grad(out, logp), [4.0, 50.0])
    assert close(out.metrics["clip/frac_dual"], 0.0)


def test_ratio_one_means_plain_policy_gradient():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=g, dtype=F64) * 3
    logp = old.clone().requires_grad_(True)
    adv = torch.randn(4, generator=g, dtype=F64)
    mask = torch.ones(4, 5, dtype=F64)
    out = ppo_loss(logp, old, adv, mask, eps_low=EPS_LO, eps_high=EPS_HI, clip_c=C)
    assert close(out.loss.detach(), -adv.mean())
    assert close(out.metrics["kl/ppo_kl"], 0.0)
    assert all(close(out.metrics[k], 0.0) for k in ("clip/frac_low", "clip/frac_high", "clip/frac_dual"))
    (gr,) = torch.autograd.grad(out.loss, logp)
    assert close(gr, (-adv[:, None] / 20).expand(4, 5))


# ---------- random draws against independent formulations ----------


def verl_style(logp, old, adv, eps_low, eps_high, c):
    """The max/min formulation of verl's compute_policy_loss (independent of the region code under test)."""
    r = torch.exp(logp - old)
    l1, l2 = -adv * r, -adv * torch.clamp(r, 1 - eps_low, 1 + eps_high)
    lc = torch.maximum(l1, l2)
    return lc if c is None else torch.where(adv < 0, torch.minimum(lc, -adv * c), lc)


def alg2_c0(logp, old, adv, eps_low, eps_high, c):
    """Paper Algorithm 2 with C = 0 (spec 4.2 table), branch on psi = A * (-logp)."""
    w = torch.exp(logp - old)
    ell = -logp
    psi = adv * ell
    wd = w.detach()
    pos = torch.where(wd < 1 + eps_high, psi * wd, adv * (1 + eps_high) * ell.detach())
    neg = torch.where(
        wd <= 1 - eps_low, adv * (1 - eps_low) * ell.detach(), torch.where(wd < c, psi * wd, adv * c * ell.detach())
    )
    return torch.where(psi >= 0, pos, neg)


def random_tokens(seed: int, B=64, T=6, spread=0.6):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=F64) * 3 - 0.01
    logp = (old + torch.randn(B, T, generator=g, dtype=F64) * spread).clamp(max=-1e-3)
    adv = torch.randn(B, T, generator=g, dtype=F64)
    return logp, old, adv


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("c", [None, 3.0, 10.0])
def test_matches_max_min_formulation(seed, c):
    logp, old, adv = random_tokens(seed)
    mask = torch.ones_like(logp)
    lp1, lp2 = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    out = ppo_loss(lp1, old, adv, mask, eps_low=EPS_LO, eps_high=EPS_HI, clip_c=c)
    ref = verl_style(lp2, old, adv, EPS_LO, EPS_HI, c)
    assert close(out.per_token.detach(), ref.detach())
    (g1,) = torch.autograd.grad(out.per_token.sum(), lp1)
    (g2,) = torch.autograd.grad(ref.sum(), lp2)
    assert close(g1, g2)
    # clip fractions as verl counts them: clipped term strictly wins / dual cap strictly wins
    r = torch.exp(logp - old)
    l1, l2 = -adv * r, -adv * torch.clamp(r, 1 - EPS_LO, 1 + EPS_HI)
    assert close(out.metrics["clip/frac_high"] + out.metrics["clip/frac_low"], (l2 > l1).double().mean())
    if c is not None:
        assert close(out.metrics["clip/frac_dual"], ((adv < 0) & (torch.maximum(l1, l2) > -adv * c)).double().mean())


@pytest.mark.parametrize("seed", range(4))
def test_item13_ppo_dual_clip_gradient_equals_algorithm2_with_c0(seed):
    logp, old, adv = random_tokens(seed, spread=0.8)
    lp1, lp2 = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    out = ppo_loss(lp1, old, adv, torch.ones_like(logp), eps_low=EPS_LO, eps_high=EPS_HI, clip_c=C)
    (g1,) = torch.autograd.grad(out.per_token.sum(), lp1)
    (g2,) = torch.autograd.grad(alg2_c0(lp2, old, adv, EPS_LO, EPS_HI, C).sum(), lp2)
    assert close(g1, g2)


def test_overflowing_ratio_in_a_clipped_region_gives_zero_gradient_not_nan():
    for dtype in (torch.float32, F64):
        old = torch.tensor([[-900.0], [-900.0]], dtype=dtype)
        logp = torch.tensor([[-0.1], [-0.1]], dtype=dtype, requires_grad=True)  # w = exp(~900) = inf
        out = ppo_loss(logp, old, torch.tensor([1.0, -1.0], dtype=dtype), torch.ones(2, 1), clip_c=C)
        (g,) = torch.autograd.grad(out.loss, logp)
        assert torch.equal(g, torch.zeros_like(g)), dtype
        assert torch.isfinite(out.loss)


# ---------- KL options ----------


def kl_batch(seed=3):
    logp, old, adv = random_tokens(seed, B=8, T=5, spread=0.3)
    g = torch.Generator().manual_seed(seed + 100)
    ref = old + torch.randn(old.shape, generator=g, dtype=F64) * 0.5
    lengths = torch.tensor([5, 3, 1, 4, 5, 2, 2, 3])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).double()
    return logp, old, adv[:, 0], mask, ref


def test_grpo_adds_uncorrected_k3_against_the_reference():
    logp, old, adv, mask, ref = kl_batch()
    out = grpo_loss(logp, old, adv, mask, ref_logp=ref)
    pg = ppo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.2, clip_c=10.0).per_token
    # independent k3(ref/pi) = pi_ref/pi - 1 - log(pi_ref/pi), no clamp
    k3 = torch.exp(ref - logp) - 1 - (ref - logp)
    assert close(torch.where(mask.bool(), out.per_token - pg, 0), 1e-3 * k3 * mask)
    n = mask.sum()
    assert close(out.metrics["loss/kl"], 1e-3 * (k3 * mask).sum() / n)
    assert close(out.metrics["kl/penalty"], (k3 * mask).sum() / n)
    assert close(out.loss.detach(), out.metrics["loss/policy"] + out.metrics["loss/kl"])
    corrected = grpo_loss(logp, old, adv, mask, ref_logp=ref, kl="k3_corrected")
    assert close(torch.where(mask.bool(), corrected.per_token - pg, 0), 1e-3 * torch.exp(logp - old) * k3 * mask)


def test_reinforce_pp_k1_against_old_or_given_anchor():
    logp, old, adv, mask, ref = kl_batch()
    pg = ppo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28, clip_c=10.0).per_token
    out = reinforce_pp_loss(logp, old, adv, mask)
    assert close(torch.where(mask.bool(), out.per_token - pg, 0), 1e-4 * (logp - old) * mask)
    out_ref = reinforce_pp_loss(logp, old, adv, mask, ref_logp=ref)
    assert close(torch.where(mask.bool(), out_ref.per_token - pg, 0), 1e-4 * (logp - ref) * mask)


def test_kl_clamp_is_explicit_and_counted():
    logp = torch.tensor([[-12.0, -0.5]], dtype=F64, requires_grad=True)
    old = logp.detach().clone()
    ref = torch.tensor([[-0.1, -0.6]], dtype=F64)  # token 0: k3(ref/pi) = e^11.9 - ... >> 10
    mask = torch.ones(1, 2, dtype=F64)
    adv = torch.zeros(1, dtype=F64)
    free = grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=1.0)
    assert free.per_token[0, 0] > 1e5 and "kl/frac_clamped" not in free.metrics
    clamped = grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=1.0, kl_clamp=10.0)
    assert close(clamped.per_token[0, 0].detach(), 10.0)
    assert close(clamped.metrics["kl/frac_clamped"], 0.5)
    (g,) = torch.autograd.grad(clamped.loss, logp)
    assert g[0, 0] == 0 and g[0, 1] != 0


def test_expected_gradient_by_enumeration_corrected_vs_uncorrected():
    """|X| = 7 one-token responses sampled from pi_old; no clipping (eps_low = 1, eps_high = inf).

    E_old[grad per_token] must equal -grad E_pi[A] + beta grad KL(pi || ref) exactly with the corrected term; the
    published (uncorrected) term misses it off-policy."""
    g = torch.Generator().manual_seed(5)
    n, beta = 7, 0.3
    th_old = torch.randn(n, generator=g, dtype=F64)
    th = th_old + 0.7 * torch.randn(n, generator=g, dtype=F64)
    p_old, p_ref = torch.softmax(th_old, 0), torch.softmax(torch.randn(n, generator=g, dtype=F64), 0)
    A = torch.randn(n, generator=g, dtype=F64)

    def expected_loss(kind):
        def f(t):
            lp = torch.log_softmax(t, 0)[:, None]
            out = ppo_loss(
                lp, torch.log(p_old)[:, None], A, torch.ones(n, 1, dtype=F64),
                eps_low=1.0, eps_high=math.inf, kl=kind, beta=beta, ref_logp=torch.log(p_ref)[:, None],
            )  # fmt: skip
            return (p_old * out.per_token[:, 0]).sum()

        return f

    def grad_of(f):
        t = th.clone().requires_grad_(True)
        (gr,) = torch.autograd.grad(f(t), t)
        return gr

    def target(t):
        p = torch.softmax(t, 0)
        return -(p * A).sum() + beta * (p * torch.log(p / p_ref)).sum()

    assert close(grad_of(expected_loss("k3_corrected")), grad_of(target), 1e-9)
    assert not close(grad_of(expected_loss("k3")), grad_of(target), 1e-4)


# ---------- aggregation: micro-batch and padding invariance ----------


@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batch_invariance_with_global_normalizer(agg):
    logp, old, adv, mask, ref = kl_batch(seed=11)
    opts = dict(ref_logp=ref, agg=agg)

    def run(sl, normalizer):
        lp = logp[sl].clone().requires_grad_(True)
        o = {**opts, "ref_logp": ref[sl]}
        out = grpo_loss(lp, old[sl], adv[sl], mask[sl], normalizer=normalizer, **o)
        (gr,) = torch.autograd.grad(out.loss, lp)
        return out, gr

    full, g_full = run(slice(None), None)
    norm = mask.sum() if agg == "token-mean" else mask.shape[0]
    a, g_a = run(slice(0, 3), norm)
    b, g_b = run(slice(3, None), norm)
    assert close(a.loss + b.loss, full.loss)
    assert close(torch.cat([g_a, g_b]), g_full)
    for key in ("loss/policy", "loss/kl", "kl/penalty"):
        assert close(a.metrics[key] + b.metrics[key], full.metrics[key]), key


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("token_advantages", [False, True])
def test_padding_with_garbage_changes_nothing(agg, token_advantages):
    logp, old, adv, mask, ref = kl_batch(seed=12)
    if token_advantages:
        adv = adv[:, None].expand_as(logp) * torch.linspace(0.5, 1.5, logp.shape[1], dtype=F64)

    def pad(x, value):
        return torch.cat([x, torch.full((x.shape[0], 3), value, dtype=x.dtype)], dim=1)

    def run(lp, o, a, m, r):
        lp = lp.clone().requires_grad_(True)
        out = grpo_loss(lp, o, a, m, ref_logp=r, kl="k3_corrected", agg=agg)
        (gr,) = torch.autograd.grad(out.loss, lp)
        return out, gr

    base, g_base = run(logp, old, adv, mask, ref)
    # garbage where mask = 0, also inside the original width
    hole = mask == 0
    lp_g = pad(logp.masked_fill(hole, float("nan")), float("inf"))
    old_g = pad(old.masked_fill(hole, -float("inf")), 50.0)
    ref_g = pad(ref.masked_fill(hole, float("nan")), -1e308)
    adv_g = pad(adv.masked_fill(hole, float("nan")), float("nan")) if token_advantages else adv
    padded, g_pad = run(lp_g, old_g, adv_g, pad(mask, 0.0), ref_g)
    assert close(padded.loss, base.loss)
    assert torch.isfinite(g_pad).all()
    assert close(g_pad[:, : logp.shape[1]], g_base) and g_pad[:, logp.shape[1] :].eq(0).all()
    for key, value in base.metrics.items():
        assert close(padded.metrics[key], value), key


# ---------- family defaults and bad input ----------


def test_family_defaults_are_the_paper_settings():
    logp, old, adv, mask, ref = kl_batch(seed=21)
    logp = (old + 0.5 * (logp - old) * 4).clamp(max=-1e-3)  # spread the ratios over every clip region
    cases = [
        (dapo_loss(logp, old, adv, mask), dict(eps_low=0.2, eps_high=0.28, clip_c=10.0)),
        (grpo_loss(logp, old, adv, mask, ref_logp=ref), dict(clip_c=10.0, kl="k3", beta=1e-3, ref_logp=ref)),
        (reinforce_pp_loss(logp, old, adv, mask), dict(eps_high=0.28, clip_c=10.0, kl="k1", beta=1e-4)),
    ]
    for out, kw in cases:
        ref_out = ppo_loss(logp, old, adv, mask, **kw)
        assert close(out.loss, ref_out.loss) and close(out.per_token, ref_out.per_token)
    # and the defaults differ from one another where the paper says they do (a wrong default would show up here)
    assert not close(dapo_loss(logp, old, adv, mask).loss, ppo_loss(logp, old, adv, mask, clip_c=10.0).loss)


def good():
    logp, old, adv, mask, ref = kl_batch(seed=30)
    return dict(logp=logp, old_logp=old, advantages=adv, mask=mask)


def nan_at(x, i, j):
    x = x.clone()
    x[i, j] = float("nan")
    return x


BAD = [
    (lambda d: {**d, "old_logp": d["old_logp"][:, :3]}, {}, "old_logp .* must have the shape of logp"),
    (lambda d: {**d, "old_logp": d["old_logp"].float()}, {}, "old_logp has dtype torch.float32 but logp"),
    (lambda d: {**d, "advantages": d["advantages"][:4]}, {}, r"advantages has shape \(4,\): must be \(B,\)"),
    (lambda d: {**d, "advantages": d["advantages"].float()}, {}, "advantages has dtype"),
    (lambda d: {**d, "mask": d["mask"][:, :2]}, {}, "mask .* must have the shape"),
    (lambda d: {**d, "mask": d["mask"] * 2}, {}, "mask must be bool or contain only 0 and 1"),
    (lambda d: {**d, "logp": d["logp"][0]}, {}, r"logp must be \(B, T\)"),
    (lambda d: {k: v.half() if k != "mask" else v for k, v in d.items()}, {}, "dtype torch.float16"),
    (lambda d: {k: v.bfloat16() if k != "mask" else v for k, v in d.items()}, {}, "dtype torch.bfloat16"),
    (lambda d: {**d, "logp": nan_at(d["logp"], 1, 0)}, {}, r"logp is not finite \(nan\) at .* \(1, 0\)"),
    (lambda d: {**d, "old_logp": nan_at(d["old_logp"], 0, 4)}, {}, r"old_logp is not finite .* \(0, 4\)"),
    (lambda d: {**d, "advantages": d["advantages"].clone().fill_(float("inf"))}, {}, "advantages is not finite"),
    (lambda d: {**d, "mask": d["mask"].clone().index_fill_(0, torch.tensor([2]), 0)}, {}, "mask row 2 is all zero"),
    (lambda d: d, {"clip_c": 1.0}, "clip_c must be > 1"),
    (lambda d: d, {"clip_c": 0.5}, "clip_c must be > 1"),
    (lambda d: d, {"eps_low": 1.2}, r"eps_low must be in \[0, 1\]"),
    (lambda d: d, {"eps_high": -0.1}, "eps_high must be >= 0"),
    (lambda d: d, {"beta": 0.1}, "beta=0.1 given without a KL term"),
    (lambda d: d, {"kl": "k4", "beta": 0.1}, "unknown kl 'k4'; valid: k1, k3, k3_corrected"),
    (lambda d: d, {"kl": "k1", "beta": -1.0}, "beta must be finite and >= 0"),
    (lambda d: d, {"kl": "k1", "kl_clamp": 0.0}, "kl_clamp must be > 0"),
    (lambda d: d, {"kl_clamp": 10.0}, "only used by the KL term"),
    (lambda d: {**d, "old_logp": d["old_logp"].tolist()}, {}, "old_logp must be a torch.Tensor, got list"),
    (lambda d: d, {"normalizer": -4.0}, r"normalizer must be a finite count >= 2\*\*-20 .*got -4.0"),
]


@pytest.mark.parametrize("edit,opts,match", BAD)
def test_bad_input_is_a_one_line_value_error(edit, opts, match):
    with pytest.raises(ValueError, match=match) as info:
        ppo_loss(**edit(good()), **opts)
    assert "\n" not in str(info.value)


def test_grpo_without_reference_says_so():
    with pytest.raises(ValueError, match="grpo needs ref_logp"):
        grpo_loss(**good())
    d = good()
    with pytest.raises(ValueError, match="ref_logp .* must have the shape"):
        grpo_loss(**d, ref_logp=d["old_logp"][:, :2])


def test_bool_mask_and_masked_out_nan_are_fine():
    d = good()
    a = ppo_loss(**d, clip_c=C)
    m = d["mask"].bool()
    b = ppo_loss(**{**d, "mask": m, "logp": d["logp"].masked_fill(~m, float("nan"))}, clip_c=C)
    assert close(a.loss, b.loss)


# ---------- extreme inputs (issue 11 items 8, 9) ----------


def _loss_grad(lp, **kw):
    lp = lp.detach().clone().requires_grad_()
    zeros = torch.zeros_like(lp)
    out = ppo_loss(lp, zeros, torch.ones(lp.shape[0], dtype=lp.dtype), torch.ones_like(lp), ref_logp=zeros, **kw)
    (g,) = torch.autograd.grad(out.loss, lp)
    return out, g


@pytest.mark.parametrize("kl", ["k3", "k3_corrected"])
def test_kl_clamp_gradient_is_zero_not_nan_where_exp_overflows(kl):
    """float32 with ref = old = 0: logp = -100 overflows k3's exp(ref - logp), logp = 100 overflows w; the clamp
    binds there and the gradient is 0, not NaN (inf * 0); the float64 run (no overflow) gives the same numbers.
    k3_corrected at logp = -100 is w k3 = e^-100 (e^100 - 101), about 1: taken in log space it fits, unclamped, as
    in float64 (it was inf * denormal = inf, and counted as clamped)."""
    lp64 = torch.tensor([[-100.0, 0.1, -0.1, 100.0]], dtype=F64)
    kw = dict(kl=kl, beta=0.5, kl_clamp=10.0, eps_high=1e6)
    out, g = _loss_grad(lp64.float(), **kw)
    ref, g64 = _loss_grad(lp64, **kw)
    assert torch.isfinite(out.loss) and torch.isfinite(g).all()
    assert torch.allclose(out.loss.double(), ref.loss, rtol=1e-5) and torch.allclose(g.double(), g64, rtol=1e-5)
    assert out.metrics["kl/frac_clamped"] == ref.metrics["kl/frac_clamped"]
    assert g[0, 3] == 0 and out.metrics["kl/frac_clamped"] == (0.25 if kl == "k3_corrected" else 0.5)


def test_overflowing_loss_is_refused_and_a_finite_one_has_finite_metrics():
    """A loss that overflows raises (it returned inf); a finite loss whose KL metric overflows float32 (4 tokens of
    k3 = e^88.5 = 2.7e38, beta 1e-3) reports it in float64, saturated at 1e30 (kl/penalty was inf)."""
    with pytest.raises(ValueError, match="ppo_loss overflowed"):
        _loss_grad(torch.full((1, 4), -100.0), kl="k3", beta=0.5)
    out, g = _loss_grad(torch.full((1, 4), -88.5), kl="k3", beta=1e-3, eps_low=1.0, eps_high=1e6)
    assert torch.isfinite(out.loss) and torch.isfinite(g).all()
    assert all(torch.isfinite(v) for v in out.metrics.values()), out.metrics
    assert out.metrics["kl/penalty"] == torch.tensor(1e30, dtype=torch.float32)
    assert close(out.metrics["loss/policy"].double(), -1.0 * math.exp(-88.5), tol=1e-40)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_kl_term_at_beta_0_is_inert_even_where_it_overflows(dtype):
    """beta = 0: the loss, its gradient and loss/kl are the KL-free ones, and 0, though the KL term overflows (k3 at
    logp = -100 in float32, and its aggregate over a normalizer of 2^-20 in float64): 0 x inf made the float32 loss
    NaN (refused as an overflow) and loss/kl NaN. kl/penalty still reports the term, saturated at 1e30."""
    lp = torch.full((1, 4), -100.0 if dtype == torch.float32 else -700.0, dtype=dtype)
    out, g = _loss_grad(lp, kl="k3", beta=0.0, normalizer=2.0**-20)
    lp0 = lp.clone().requires_grad_()
    ref = ppo_loss(lp0, torch.zeros_like(lp), torch.ones(1, dtype=dtype), torch.ones_like(lp), normalizer=2.0**-20)
    (g_ref,) = torch.autograd.grad(ref.loss, lp0)
    assert out.loss == ref.loss and torch.equal(g, g_ref)
    assert out.metrics["loss/kl"] == 0 and out.metrics["kl/penalty"] == torch.tensor(1e30, dtype=dtype)


def test_ppo_loss_reports_log_w_like_rpg_loss():
    """log_w/max, /min and /abs_mean over the valid tokens only (padding holds garbage), as rpg_loss reports them."""
    from rpgrl.objectives import rpg_loss

    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 2
    old = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 2
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    logp[~mask], old[~mask] = float("nan"), 50.0
    adv = torch.tensor([1.0, -0.5, 0.3], dtype=torch.float64)
    m = ppo_loss(logp, old, adv, mask).metrics
    lw = (logp - old)[mask]
    assert m["log_w/max"].item() == lw.max().item() and m["log_w/min"].item() == lw.min().item()
    assert m["log_w/abs_mean"].item() == pytest.approx(lw.abs().mean().item(), rel=1e-12)
    r = rpg_loss(logp, old, adv, mask, divergence="urkl", style="reinforce", beta=0.0).metrics
    for k in ("log_w/max", "log_w/min", "log_w/abs_mean"):
        assert m[k].item() == pytest.approx(r[k].item(), rel=1e-12), k


def test_zero_advantage_tokens_count_in_no_clip_fraction():
    """A = 0 (every member of a group with equal rewards) has no gradient in any region, and is no clipped token:
    at w below 1 - eps_low or above c it counted in clip/frac_low and clip/frac_dual under a review's mutant."""
    logp, old, adv, mask = one_token_batch([0.0, 0.0, 0.0, -1.0], [0.5, 4.0, 1.5, 0.5])
    out = ppo_loss(logp, old, adv, mask, eps_low=EPS_LO, eps_high=EPS_HI, clip_c=C)
    assert close(per_token_grad(out, logp)[:3], [0.0, 0.0, 0.0])
    assert [out.metrics[k].item() for k in ("clip/frac_low", "clip/frac_dual", "clip/frac_high")] == [0.25, 0, 0]


@pytest.mark.parametrize("A, bound, key", [(1.0, "high", "clip/frac_high"), (-1.0, "low", "clip/frac_low"),
                                           (-1.0, "dual", "clip/frac_dual")])  # fmt: skip
def test_a_ratio_exactly_on_a_bound_is_clipped(A, bound, key):
    """Ties are clipped rows, as in rpg_loss (spec 4.2): w exactly 1 + eps_high (A > 0), 1 - eps_low or c (A < 0)
    is a constant with no gradient, and counts as clipped."""
    eps_low, eps_high, c = 0.25, 0.25, 4.0  # exp(log(b)) == b for these in float64 (checked below)
    w = {"high": 1 + eps_high, "low": 1 - eps_low, "dual": c}[bound]
    logp = torch.tensor([[math.log(w)]], dtype=F64, requires_grad=True)
    old = torch.zeros(1, 1, dtype=F64)
    assert torch.exp(logp.detach() - old).item() == w
    out = ppo_loss(logp, old, torch.tensor([A], dtype=F64), torch.ones(1, 1), eps_low=eps_low, eps_high=eps_high,
                   clip_c=c)  # fmt: skip
    assert per_token_grad(out, logp).item() == 0.0 and out.metrics[key].item() == 1.0
    assert close(out.per_token.detach(), -A * w)


def test_k1_kl_clamp_binds_on_both_sides():
    """k1 = logp - ref clamped to [-K, K]: below the reference by more than K the value is -K with no gradient,
    as above it is +K (a review's mutants clamped, or counted, the upper side only)."""
    logp = torch.tensor([[-20.0, 0.0, -1.0]], dtype=F64, requires_grad=True)
    ref = torch.tensor([[0.0, -20.0, -1.5]], dtype=F64)
    out = ppo_loss(logp, logp.detach(), torch.zeros(1, dtype=F64), torch.ones(1, 3), kl="k1", beta=1.0,
                   ref_logp=ref, kl_clamp=5.0)  # fmt: skip
    assert close(out.per_token.detach(), [[-5.0, 5.0, 0.5]])
    (g,) = torch.autograd.grad(out.loss, logp)
    assert close(g, [[0.0, 0.0, 1 / 3]]) and close(out.metrics["kl/frac_clamped"], 2 / 3)


def test_log_w_extremes_ignore_padding_when_every_ratio_is_above_one():
    """log_w/min over valid tokens only: with every valid log w > 0 a padding fill of 0 would read as the min."""
    g = torch.Generator().manual_seed(1)
    old = -torch.rand(3, 4, generator=g, dtype=F64) - 0.5
    logp = old + 0.2 + 0.3 * torch.rand(3, 4, generator=g, dtype=F64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    lw = (logp - old)[mask]
    from rpgrl.objectives import rpg_loss

    for m in (ppo_loss(logp, old, torch.ones(3, dtype=F64), mask).metrics,
              rpg_loss(logp, old, torch.ones(3, dtype=F64), mask, divergence="urkl", style="reinforce",
                       beta=0.0).metrics):  # fmt: skip
        assert m["log_w/min"].item() == lw.min().item() > 0.2 and m["log_w/max"].item() == lw.max().item()
