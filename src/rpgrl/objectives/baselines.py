"""Baseline policy losses: PPO clip with dual clip and clip-higher, plus an optional per-token KL term.

This is verl's `compute_policy_loss` (spec 4.3 i), which every released run of the RPG paper uses, with the KL
loss that verl adds outside the registered loss (`use_kl_loss`) folded in as an explicit option. Registered
families and their paper defaults (spec 5.2-5.4, 7.3):

    ppo            eps 0.2/0.2, no dual clip, no KL                      (generic)
    grpo           eps 0.2/0.2, c = 10, beta 1e-3 * k3(ref/pi), uncorrected, vs a frozen reference (ref_logp)
    dapo           eps 0.2/0.28 (clip-higher), c = 10, no KL
    reinforce_pp   eps 0.2/0.28, c = 10, beta 1e-4 * k1 = logp - anchor, anchor = old_logp (iterative reference)
                   (REINFORCE++-baseline is the same loss; only the advantage estimator differs)

Per token, with w = exp(logp - old_logp) and A the advantage (a constant):

    A >= 0:  -w A                if w < 1 + eps_high      else  -(1 + eps_high) A   (no gradient)
    A <  0:  -(1 - eps_low) A    if w <= 1 - eps_low      (no gradient)
             -w A                if 1 - eps_low < w < c
             -c A                if w >= c                (no gradient; dual clip, only when c is set)

which equals max(-w A, -clip(w, 1-eps_low, 1+eps_high) A), capped at -c A for A < 0 (spec 4.1 table). The
regions are written out so that the gradient is exactly the table's, and exp is evaluated only where the ratio
is used, so an overflowing ratio in a clipped region cannot turn the gradient into NaN. No log-ratio clamp
(verl clamps to +-20 inline); padding never enters the value or the gradient.

Not here: the RPG surrogates (`rpg.py`), advantages (`rpgrl.advantages`), DAPO's reward shaping and group filter
(`rpgrl.shaping`).
"""

from __future__ import annotations

import math
import numbers
from typing import Literal

import torch

from rpgrl import metrics as M
from rpgrl.objectives.base import LossOutput, register_loss, reported
from rpgrl.objectives.checks import LossOverflow, check_finite, check_tensors, dtype_bound, finite_gradient
from rpgrl.objectives.kl import anchored_k3, grpo_k3, k3, log_k3, scaled_k3, weight_times_w
from rpgrl.objectives.reduce import aggregate, masked_mean
from rpgrl.options import check_size, scalar

KLKind = Literal["k1", "k3", "k3_corrected"]
KL_KINDS = ("k1", "k3", "k3_corrected")


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_c: float | None = None,
    kl: KLKind | None = None,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    kl_clamp: float | None = None,
    agg: str = "token-mean",
    normalizer: float | torch.Tensor | None = None,
) -> LossOutput:
    """PPO clipped policy loss with optional dual clip (`clip_c`), clip-higher and a per-token KL term.

    per_token = pg + beta * kl_term, with pg the clipped surrogate of the module docstring and kl_term:
        k1            logp - anchor                          (verl `kl`)
        k3            k3(pi_anchor / pi_theta)               (verl `low_var_kl` unclamped; GRPO as published)
        k3_corrected  w * k3(pi_anchor / pi_theta)           (spec 3.4; unbiased gradient of KL(pi || anchor))
    anchor = `ref_logp` when given, else `old_logp` (the iterative reference of spec 6). `kl_clamp` clamps the KL
    term to [-kl_clamp, kl_clamp] (verl's low_var_kl uses 10; off by default) and is counted in `kl/frac_clamped`;
    where it binds the gradient is 0, also where the unclamped term overflows. Unclamped, beta is taken inside the
    term's exponential where the term alone passes the dtype and beta times it does not (`_times_beta`). A loss that
    overflows raises
    `LossOverflow` (a ValueError), as does backward where the gradient of logp is not finite under a finite loss
    (`checks.finite_gradient`; the corrected KL term's gradient is formed directly, `kl._WeightedK3`).

    loss = aggregate(per_token, mask, agg, normalizer): pass the global token (token-mean) or sequence count
    (seq-mean-*) as `normalizer` when micro-batching, and the micro-batch losses add up to the full-batch loss.

    Shapes: logp, old_logp, mask, ref_logp: (B, T); advantages: (B,) or (B, T). old_logp, ref_logp and
    advantages are treated as constants (detached here). mask is bool or 0/1.

    Metrics (detached 0-dim): loss/policy, loss/kl (= beta * aggregated KL term; both use the loss's normaliser,
    so they add up across micro-batches), kl/penalty (aggregated KL term, when `kl` is set), kl/ppo_kl
    (token-mean of old_logp - logp, a k1 estimate of KL(pi_old || pi_theta)), log_w/max, log_w/min, log_w/abs_mean
    (of log w = logp - old_logp over the tokens, as rpg_loss reports them), clip/frac_low (A < 0, w <= 1-eps_low),
    clip/frac_high (A > 0, w >= 1+eps_high), clip/frac_dual (A < 0, w >= c); fractions are local token means. The
    loss and KL metrics are computed in float64; every metric saturates at +-1e30 (`base.METRIC_LIMIT`), never inf.
    """
    eps_low, eps_high, clip_c, beta, kl_clamp = _check_options(eps_low, eps_high, clip_c, kl, beta, ref_logp, kl_clamp)
    m = check_tensors(logp, old_logp, advantages, mask, {"ref_logp": ref_logp}, loss="ppo_loss")
    eps_high, clip_c, kl_clamp = (
        dtype_bound(v, logp.dtype) for v in (eps_high, clip_c, kl_clamp)
    )  # 1e39: float32's max
    check_finite({"logp": logp, "old_logp": old_logp, "ref_logp": ref_logp, "advantages": advantages}, m)
    logp = finite_gradient(logp, "ppo_loss")
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    # Padding is replaced by 0 before any math: garbage (even inf/NaN) there reaches neither value nor gradient.
    logp = torch.where(m, logp, zero)
    old_logp = torch.where(m, old_logp.detach(), zero)
    adv = advantages.detach()
    adv = torch.where(m, adv, zero) if adv.dim() == 2 else adv[:, None]  # (B, T) or (B, 1)
    log_w = logp - old_logp  # (B, T)
    pg, rows = _clipped_surrogate(log_w, adv, eps_low, eps_high, clip_c)

    metrics: dict[str, torch.Tensor] = {}
    per_token, kl_loss, anchor, clamped = pg, zero, None, None
    if kl is not None:
        anchor = torch.where(m, (old_logp if ref_logp is None else ref_logp).detach(), zero)
        kl_term, clamped = _kl_term(kl, logp, anchor, old_logp, kl_clamp)
        if clamped is not None:
            metrics["kl/frac_clamped"] = masked_mean(clamped.to(logp.dtype), m)
        kl_value, beta_kl = _kl_metrics(kl, kl_term, beta, logp, anchor, old_logp, m, agg, normalizer)
        if beta != 0:  # beta = 0: the term is inert (0 x an overflowed term would be NaN, in the loss or metric)
            kl_loss = beta_kl
            per_token = pg + _times_beta(kl, kl_term, beta, logp, anchor, old_logp, clamped)
        metrics[M.KL_PENALTY] = kl_value

    loss = aggregate(per_token, m, agg, normalizer)
    if not torch.isfinite(loss):
        raise LossOverflow(
            f"ppo_loss overflowed (loss = {loss.item()}): an advantage or the KL term is too large to represent"
        )
    metrics["loss/policy"] = aggregate(pg.detach().to(torch.float64), m, agg, normalizer)
    metrics[M.LOSS_KL] = kl_loss
    metrics |= _ratio_metrics(log_w.detach(), adv, m, rows)
    return LossOutput(loss=loss, per_token=per_token, metrics=reported(metrics, logp.dtype))


def _clipped_surrogate(log_w, adv, eps_low, eps_high, clip_c) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The per-token clipped surrogate -A w_clip of the module docstring, (B, T), and its clipped rows (boolean
    (B, T) masks "high", "low", "dual"). Where a clip binds, w is a constant (no gradient)."""
    w_value = torch.exp(log_w.detach())
    pos = adv >= 0
    high = pos & (w_value >= 1 + eps_high)
    low = ~pos & (w_value <= 1 - eps_low)
    dual = ~pos & (w_value >= clip_c) if clip_c is not None else torch.zeros_like(high)
    active = ~(high | low | dual)
    clipped_w = torch.ones_like(w_value).masked_fill(high, 1 + eps_high).masked_fill(low, 1 - eps_low)
    if clip_c is not None:
        clipped_w = clipped_w.masked_fill(dual, clip_c)
    neg_adv = -adv
    free = weight_times_w(torch.where(active, log_w, 0.0), neg_adv.expand_as(log_w), active)
    return torch.where(active, free, neg_adv * clipped_w), {"high": high, "low": low, "dual": dual}


def _ratio_metrics(lw, adv, m, rows) -> dict[str, torch.Tensor]:
    """kl/ppo_kl, the clip fractions and the spread of log w (lw: (B, T) detached, zero at padding)."""
    fm = m.to(lw.dtype)
    out = {
        M.KL_PPO: masked_mean(-lw, fm),
        M.CLIP_LOW: masked_mean(rows["low"].to(lw.dtype), fm),  # low implies A < 0
        M.CLIP_HIGH: masked_mean((rows["high"] & (adv > 0)).to(lw.dtype), fm),
        M.CLIP_DUAL: masked_mean(rows["dual"].to(lw.dtype), fm),
        M.LOG_W_ABS_MEAN: masked_mean(lw.abs(), fm),
    }
    # padding filled with the mean of the valid entries, which lies between their min and max
    out[M.LOG_W_MIN], out[M.LOG_W_MAX] = torch.aminmax(torch.where(m, lw, lw.sum() / fm.sum()))
    return out


register_loss("ppo")(ppo_loss)


def _kl_term(kind: str, logp, anchor, old_logp, kl_clamp: float | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The per-token KL term (B, T) of `ppo_loss` and, with `kl_clamp`, where the clamp binds (else None).

    Where it binds the value is +-kl_clamp and the gradient 0: the term is evaluated there at logp = anchor, so
    the backward of an overflowed exp (inf * 0) cannot reach logp as NaN. A term that overflows to NaN (w = 0
    times k3 = inf) counts as clamped, with its value w * k3 taken in float64 log space."""

    def term(lp: torch.Tensor) -> torch.Tensor:  # unguarded: ppo_loss guards logp
        return lp - anchor if kind == "k1" else grpo_k3(lp, anchor, old_logp, kind == "k3_corrected")

    if kl_clamp is None:
        return term(logp), None
    with torch.no_grad():
        raw = term(logp.detach())
        clamped = ~(raw.abs() <= kl_clamp)  # NaN counts as clamped
        if bool(raw.isnan().any()):  # only k3_corrected (w underflowed): exp(lw + log k3), never NaN
            f64 = [x.detach().to(torch.float64) for x in (logp, anchor, old_logp)]
            exact = torch.exp(f64[0] - f64[2] + torch.log(k3(f64[1] - f64[0]))).to(raw.dtype)
            raw = torch.where(raw.isnan(), exact, raw)
        fill = raw.clamp(-kl_clamp, kl_clamp)
    return torch.where(clamped, fill, term(torch.where(clamped, anchor, logp))), clamped


def _kl_metrics(kind, kl_term, beta: float, logp, anchor, old_logp, m, agg, normalizer) -> tuple:
    """(kl/penalty, loss/kl): the aggregated KL term and beta times it (beta > 0), 0-dim float64, detached. Where the
    dtype's term overflowed (k3's exp(anchor - logp) past ~88.7 nats in float32), the float64 aggregate was inf and
    both read as saturated (1e30) although beta x term / N, or term / N, fits below it: there each token's term is
    taken in log space from the float64 inputs (log k3, plus log w for k3_corrected), with log beta and the
    aggregation's log weight added before the exponential. Elsewhere, to the bit, aggregate(term) and beta x it."""
    f64 = torch.float64
    kl64 = kl_term.detach().to(f64)
    kl_value = aggregate(kl64, m, agg, normalizer)
    if kind == "k1" or bool(torch.isfinite(kl_value)):  # k1 (a signed term) cannot overflow from finite log-probs
        return kl_value, beta * kl_value
    lp, a, s = (t.detach().to(f64) for t in (logp, anchor, old_logp))
    x = a - lp
    log_term = log_k3(x) if kind == "k3" else torch.where(x == 0, -math.inf, lp - s + log_k3(x))
    log_term = torch.where(torch.isfinite(kl64), torch.log(kl64), log_term)  # k3 terms are >= 0; clamped ones kept
    n = normalizer.reshape(()).to(f64) if isinstance(normalizer, torch.Tensor) else normalizer
    if n is None:
        n = m.sum() if agg == "token-mean" else m.shape[0]
    log_weight = -torch.log(torch.as_tensor(n, dtype=f64, device=kl64.device))
    if agg == "seq-mean-token-mean":
        log_weight = log_weight - torch.log(m.sum(-1, keepdim=True).to(f64))
    log_term = torch.where(m, log_term + log_weight, -math.inf)  # padding adds 0
    kl_value = torch.exp(log_term).sum()
    return kl_value, (torch.exp(log_term + math.log(beta)).sum() if beta > 0 else None)


def _times_beta(kind, kl_term, beta: float, logp, anchor, old_logp, clamped) -> torch.Tensor:
    """beta * kl_term (B, T), value and gradient. Where that product is not finite (k3's exp(anchor - logp) past the
    dtype, ~88.7 nats in float32, while beta k3 fits: beta / N takes it back in range), the term is formed with
    log(beta) inside its exponential (`scaled_k3`, `anchored_k3` with log beta added to the weight's log), finite
    wherever the product is, its gradient too. Elsewhere, to the bit, beta * kl_term."""
    scaled = beta * kl_term
    bad = ~torch.isfinite(scaled.detach())
    if kind == "k1" or clamped is not None or not bool(bad.any()):  # k1 cannot overflow; a clamp bounds the term
        return scaled
    safe = torch.where(bad, anchor, logp)  # the term is 0 there, with a zero gradient: no inf reaches backward
    direct = beta * grpo_k3(safe, anchor, old_logp, kind == "k3_corrected")  # (ppo_loss guards logp)
    far = torch.where(bad, logp, anchor)  # and 0 elsewhere
    if kind == "k3":
        big = scaled_k3(anchor - far, math.log(beta))
    else:
        big = anchored_k3(far, anchor, old_logp, "reverse", math.log(beta))
    return torch.where(bad, big, direct)


@register_loss("grpo")
def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_c: float | None = 10.0,
    kl: KLKind = "k3",
    beta: float = 1e-3,
    kl_clamp: float | None = None,
    agg: str = "token-mean",
    normalizer: float | torch.Tensor | None = None,
) -> LossOutput:
    """GRPO as run by the RPG authors (spec 5.2): PPO dual clip 0.2/0.2, c = 10, plus beta = 1e-3 times the
    uncorrected k3(pi_ref/pi_theta) against a frozen reference (`ref_logp`, required). `kl="k3_corrected"` gives
    the paper's corrected estimator; `kl_clamp=10.0` reproduces verl's low_var_kl clamp. Shapes as `ppo_loss`."""
    if ref_logp is None:
        raise ValueError(
            "grpo needs ref_logp (the frozen reference's log-probs, (B, T)); pass ref_logp=old_logp for an "
            "iterative reference"
        )
    return ppo_loss(
        logp,
        old_logp,
        advantages,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        clip_c=clip_c,
        kl=kl,
        beta=beta,
        ref_logp=ref_logp,
        kl_clamp=kl_clamp,
        agg=agg,
        normalizer=normalizer,
    )


@register_loss("dapo")
def dapo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip_c: float | None = 10.0,
    agg: str = "token-mean",
    normalizer: float | torch.Tensor | None = None,
) -> LossOutput:
    """DAPO's loss (spec 5.3): PPO dual clip with clip-higher 0.2/0.28, c = 10, token-mean, no KL. Dynamic
    sampling and overlong shaping live in `rpgrl.shaping`. Shapes as `ppo_loss`."""
    return ppo_loss(
        logp,
        old_logp,
        advantages,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        clip_c=clip_c,
        agg=agg,
        normalizer=normalizer,
    )


@register_loss("reinforce_pp")
def reinforce_pp_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip_c: float | None = 10.0,
    kl: KLKind = "k1",
    beta: float = 1e-4,
    kl_clamp: float | None = None,
    agg: str = "token-mean",
    normalizer: float | torch.Tensor | None = None,
) -> LossOutput:
    """REINFORCE++ and REINFORCE++-baseline as run by the RPG authors (spec 5.4): PPO dual clip 0.2/0.28, c = 10,
    plus beta = 1e-4 times k1 = logp - anchor with anchor = old_logp unless `ref_logp` is given. Note (spec 3.3):
    with anchor = sampler this term *increases* KL(pi_old || pi_theta) in expectation. Shapes as `ppo_loss`."""
    return ppo_loss(
        logp,
        old_logp,
        advantages,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        clip_c=clip_c,
        kl=kl,
        beta=beta,
        ref_logp=ref_logp,
        kl_clamp=kl_clamp,
        agg=agg,
        normalizer=normalizer,
    )


def _check_options(
    eps_low: float,
    eps_high: float,
    clip_c: float | None,
    kl: str | None,
    beta: float,
    ref_logp: torch.Tensor | None,
    kl_clamp: float | None,
) -> tuple[float, float, float | None, float, float | None]:
    """Raise ValueError (one line) for an option ppo_loss cannot use; returns eps_low, eps_high, clip_c, beta and
    kl_clamp as Python floats (numpy's scalars and 0-dim arrays or tensors as `RPGOptions` takes them)."""
    values = {"eps_low": eps_low, "eps_high": eps_high, "clip_c": clip_c, "beta": beta, "kl_clamp": kl_clamp}
    values = {name: scalar(v, name) for name, v in values.items()}
    for name, v in values.items():  # clip_c and kl_clamp may be None (off)
        if (v is not None or name in ("eps_low", "eps_high", "beta")) and (
            isinstance(v, bool) or not isinstance(v, numbers.Real)
        ):
            raise ValueError(f"{name} must be a number, got {v!r}")
        check_size(v, name)  # float() of 10**400 raised OverflowError
    eps_low, eps_high, clip_c, beta, kl_clamp = (None if v is None else float(v) for v in values.values())
    if not 0 <= eps_low <= 1:
        raise ValueError(f"eps_low must be in [0, 1], got {eps_low}")
    if not eps_high >= 0:
        raise ValueError(f"eps_high must be >= 0, got {eps_high}")
    if clip_c is not None and not clip_c > 1:
        raise ValueError(f"dual-clip constant clip_c must be > 1 (or None for no dual clip), got {clip_c}")
    if kl is not None and kl not in KL_KINDS:
        raise ValueError(f"unknown kl {kl!r}; valid: {', '.join(KL_KINDS)} (or None)")
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be finite and >= 0, got {beta}")
    if kl is None and beta != 0:
        raise ValueError(f"beta={beta} given without a KL term; set kl to one of {', '.join(KL_KINDS)}")
    if kl is None and (ref_logp is not None or kl_clamp is not None):
        raise ValueError("ref_logp / kl_clamp are only used by the KL term; set kl or drop them")
    if kl_clamp is not None and not kl_clamp > 0:
        raise ValueError(f"kl_clamp must be > 0 (or None), got {kl_clamp}")
    return eps_low, eps_high, clip_c, beta, kl_clamp


__all__ = ["KL_KINDS", "KLKind", "dapo_loss", "grpo_loss", "ppo_loss", "reinforce_pp_loss"]
