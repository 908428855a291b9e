"""Fuzz (hypothesis) over every rpg_loss variant and the baseline losses with extreme inputs: log-ratios up to
|log w| ~ 100 in float32 and ~ 700 in float64 (per token, so sequence level reaches thousands), advantages up to
3e38 / 1e308 (near each dtype's largest), betas up to 1e6, normalizers from 2^-20, random masks, separate anchors,
float32 and float64. Each call either refuses with a one-line ValueError (e.g. the documented overflow refusal, in
the forward or, for a finite loss whose gradient overflows, in backward) or returns a loss, gradient, per-token loss
and metrics that are all finite. The default suite runs 200 examples per family (fixed seed); the slow suite 10,000
(random)."""

from __future__ import annotations

import itertools

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rpgrl.objectives import divergences as dv  # noqa: E402
from rpgrl.objectives.baselines import dapo_loss, grpo_loss, ppo_loss, reinforce_pp_loss  # noqa: E402
from rpgrl.objectives.reduce import AGG_MODES  # noqa: E402
from rpgrl.objectives.rpg import rpg_loss  # noqa: E402

LOG_W_MAX = {torch.float32: 100.0, torch.float64: 700.0}
ADV_MAX = {torch.float32: 3e38, torch.float64: 1e308}
NORMALIZERS = [None, None, 2.0**-20, 0.5, 1.0, 7.0]  # None: each aggregation's own count
FAST = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))  # fmt: skip
SLOW = settings(max_examples=10_000, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _rpg_variants() -> list[dict]:
    """Every valid combination of the axes and guards (kl_value_clamp only where the KL is a separate term)."""
    out = []
    axes = itertools.product(
        dv.DIVERGENCES, ("differentiable", "reinforce"), ("token", "sequence"), (None, "dual", "truncate"),
        ("effective", "raw"), (True, False), ("exact", "paper"), (None, 10.0), (None, 20.0),
    )  # fmt: skip
    for div, style, level, clip, branch, kl_in_clip, analogue, clamp, max_log_w in axes:
        if clip == "truncate" and style != "reinforce":
            continue
        separate = style == "differentiable" and (
            clip is None or not kl_in_clip or (analogue == "paper" and div in ("fkl", "ufkl"))
        )
        if clamp is not None and not separate:
            continue
        out.append(dict(divergence=div, style=style, level=level, clip=clip, branch=branch, kl_in_clip=kl_in_clip,
                        analogue=analogue, kl_value_clamp=clamp, max_log_w=max_log_w))  # fmt: skip
    return out


RPG_VARIANTS = _rpg_variants()


@st.composite
def batches(draw, token_adv: bool):
    """(logp leaf, old_logp, advantages, mask, dtype, a (B, T) tensor of extreme offsets for a reference/anchor)."""
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    B, T = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    L, A = LOG_W_MAX[dtype], ADV_MAX[dtype]
    special = st.sampled_from([0.0, 1e-7, -1e-7, 0.2, -0.2, 3.0, -3.0, 30.0, -30.0, 88.7, -88.7, L, -L])
    lw_el = st.one_of(special, st.floats(-L, L, allow_nan=False))
    adv_el = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 1e-30, -1e-30, A, -A]), st.floats(-A, A, allow_nan=False))

    def tensor(el, n):
        return torch.tensor(draw(st.lists(el, min_size=n, max_size=n)), dtype=dtype)

    log_w = tensor(lw_el, B * T).reshape(B, T)
    old = tensor(st.floats(-30.0, 0.0), B * T).reshape(B, T)
    adv = tensor(adv_el, B * T).reshape(B, T) if token_adv and draw(st.booleans()) else tensor(adv_el, B)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=B * T, max_size=B * T))).reshape(B, T)
    mask[torch.arange(B), torch.tensor(draw(st.lists(st.integers(0, T - 1), min_size=B, max_size=B)))] = True
    offset = tensor(lw_el, B * T).reshape(B, T)
    return (old + log_w).requires_grad_(), old, adv, mask, dtype, offset


def _finite_or_refused(fn, logp, *args, **kw) -> bool:
    """True if the call returned all-finite results, False if it refused; fails the test otherwise."""
    try:
        out = fn(logp, *args, **kw)
        (grad,) = torch.autograd.grad(out.loss, logp, allow_unused=True)
    except ValueError as e:
        assert "\n" not in str(e), str(e)
        hypothesis.event("refused: " + str(e).split(" (")[0].split(":")[0][:40])
        return False
    bad = [k for k, v in out.metrics.items() if not torch.isfinite(v)]
    assert torch.isfinite(out.loss), out.loss
    assert grad is None or torch.isfinite(grad).all(), grad
    assert out.per_token is None or torch.isfinite(out.per_token).all()
    assert not bad, {k: out.metrics[k] for k in bad}
    hypothesis.event("finite")
    return True


@st.composite
def rpg_cases(draw):
    variant = draw(st.sampled_from(RPG_VARIANTS))
    logp, old, adv, mask, dtype, offset = draw(batches(token_adv=variant["level"] == "token"))
    kw = dict(
        variant, beta=draw(st.sampled_from([0.0, 1e-4, 0.1, 1.0, 100.0, 1e6])), agg=draw(st.sampled_from(AGG_MODES))
    )
    kw["normalizer"] = draw(st.sampled_from(NORMALIZERS))
    if draw(st.booleans()):
        kw["anchor_logp"] = old + offset.clamp(-30.0, 30.0) * draw(st.sampled_from([0.0, 0.1, 1.0]))
    if draw(st.booleans()):
        kw.update(eps_low=draw(st.sampled_from([0.0, 0.2, 1.0])), eps_high=draw(st.sampled_from([0.0, 0.28, 1e6])),
                  c=draw(st.sampled_from([1.0001, 3.0, 1e30])))  # fmt: skip
    return logp, old, adv, mask, kw


@st.composite
def baseline_cases(draw):
    logp, old, adv, mask, dtype, offset = draw(batches(token_adv=True))
    fn = draw(st.sampled_from([ppo_loss, grpo_loss, dapo_loss, reinforce_pp_loss]))
    kw = dict(agg=draw(st.sampled_from(AGG_MODES)), eps_low=draw(st.sampled_from([0.0, 0.2, 1.0])))
    kw["normalizer"] = draw(st.sampled_from(NORMALIZERS))
    kw.update(eps_high=draw(st.sampled_from([0.2, 0.28, 1e6])), clip_c=draw(st.sampled_from([None, 3.0, 10.0])))
    if fn is not dapo_loss:
        kl = draw(
            st.sampled_from([None, "k1", "k3", "k3_corrected"] if fn is ppo_loss else ["k1", "k3", "k3_corrected"])
        )
        if kl is not None:
            beta = draw(st.sampled_from([0.0, 1e-3, 1.0, 1e6]))
            kw.update(kl=kl, beta=beta, kl_clamp=draw(st.sampled_from([None, 10.0])))
        if kl is not None and (fn is grpo_loss or draw(st.booleans())):
            kw["ref_logp"] = old + offset
    return fn, logp, old, adv, mask, kw


def _check_rpg(case):
    logp, old, adv, mask, kw = case
    _finite_or_refused(rpg_loss, logp, old, adv, mask, **kw)


def _check_baseline(case):
    fn, logp, old, adv, mask, kw = case
    _finite_or_refused(fn, logp, old, adv, mask, **kw)


test_rpg_loss_fuzz = FAST(hypothesis.given(rpg_cases())(_check_rpg))
test_baseline_losses_fuzz = FAST(hypothesis.given(baseline_cases())(_check_baseline))
test_rpg_loss_fuzz_10k = pytest.mark.slow(SLOW(hypothesis.given(rpg_cases())(_check_rpg)))
test_baseline_losses_fuzz_10k = pytest.mark.slow(SLOW(hypothesis.given(baseline_cases())(_check_baseline)))


def test_variant_list_covers_every_axis():
    # 4 divergences x (differentiable 2 x 2 x 8 + reinforce 2 x 3 x 8) x 2 max_log_w + 104 x 2 with the clamp
    assert len(RPG_VARIANTS) == 848
    for key in ("divergence", "style", "level", "clip", "branch", "kl_in_clip", "analogue", "kl_value_clamp"):
        assert len({str(v[key]) for v in RPG_VARIANTS}) > 1, key
