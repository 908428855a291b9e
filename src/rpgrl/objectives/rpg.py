"""`rpg_loss`: the eight RPG surrogates (4 divergences x 2 styles) at token or sequence level, with RPG-Style Clip.

What it leaves out: advantage estimation (`rpgrl.advantages`), GRPO/DAPO/REINFORCE++ losses (`objectives.baselines`),
reference management (the trainer passes `anchor_logp`). Math follows `docs/rpg-spec.md` sections 2 and 4; the
scalar divergence functions live in `objectives/divergences.py`.

Clipping (the `clip` option of `rpg_loss`; bounds lo = 1 - eps_low, hi = 1 + eps_high, cap c > 1):

    clip="dual" (RPG-Style Clip):
      style="differentiable" (paper Alg. 1, spec 4.1): l = -A_hat * clamp(w, 0, hi) if A_hat >= 0, else
        -A_hat * clamp(w, lo, c); gradient flows through w (where unclipped) and through A_hat.
        `kl_in_clip=True`, `analogue="exact"`: A_hat = A - beta phi(u)/u, so -w A_hat = l_diff exactly and huge
          eps/c reproduce the unclipped loss per sample. Caveat: in the clipped region the regulariser is scaled by
          clip(w)/w, which is large when w -> 0 (e.g. fkl/ufkl/urkl at sequence level with log w << 0).
        `analogue="paper"` (spec 4.1): urkl A_hat = A - beta log u, rkl A_hat = A - beta (log u + 1) (right
          expected gradient, per-sample gradient off by beta w s); fkl/ufkl A_hat = A with beta rho phi(u) added
          unclipped (the paper's "A_hat = R - b" for forward KL).
        `kl_in_clip=False`: the released code (spec 4.3 iv): PPO dual clip on A only + unclipped beta rho phi(u);
          with `kl_value_clamp=10.0` and branch="raw" this is the authors' loss for rkl/ufkl/urkl (they never
          clamp fkl, so the faithful fkl setting is kl_value_clamp=None).
      style="reinforce" (paper Alg. 2, spec 4.2 table): effective advantage A' = A + C/w = A - beta phi'(u);
        rows 1/4 (active): l = -SG(w A + C) logp; rows 2/3/5 (clipped): l = -(A w_b + C_b) SG(logp) with
        w_b = hi, lo or c: zero gradient, KL part included. C uses the raw ratio (paper, not the code's clip(w));
        only the clipped rows' value takes C_b = C at w_b (the paper's C(w) there overflows for long sequences and
        the value carries no gradient).
      `branch="effective"`: positive branch iff A_hat >= 0 (resp. A' >= 0), as the paper; "raw": iff A > 0, the
        released code's `sign(A)` (A = 0 goes to the negative branch, as in its compute_policy_loss_reinforce).
    clip="truncate" (style="reinforce" only; paper Remark F.2, code `clip_hard`): l = -SG(wc A + C(wc)) logp with
        wc = clamp(w, lo, hi) and u_c = wc/rho inside C; never masked.

Metrics (of `rpg_loss`; names read elsewhere are constants in `rpgrl.metrics`)

    Detached 0-dim tensors: loss/total, loss/kl (beta x divergence estimate, same aggregation), loss/policy (= total -
    kl; the policy term's aggregate where the differentiable loss is it plus a separate KL term, clip=None or
    kl_in_clip=False, which the difference loses below the KL term's rounding, and with the exact dual clip the
    aggregate of -A clamp(w) + beta rho phi(u) (clamp(w) / w - 1), -A w where unclipped), kl/<divergence> (mean over
    responses of the per-response estimate sum_units rho phi(u)), kl/k3_anchor (token mean of k3(pi_a/pi_theta) =
    KL(pi_theta||pi_a) estimate), kl/k1_old (token mean of old_logp - logp), kl/grad_share (the KL part's share of the
    per-unit gradient weight, sum|C| / (sum|w A| + sum|C|) before clipping), log_w/max, log_w/min, log_w/abs_mean (over
    units), clip/frac_low, clip/frac_high, clip/frac_dual (fraction of units in each clipped row), clip/frac_max_log_w,
    clip/frac_kl_clamp. The KL and loss metrics are computed in float64 (beta x each unit's term bounded at +-1e300, per
    unit and per row, as are the beta-less terms of kl/<divergence>) and every metric saturates at +-1e30
    (`base.METRIC_LIMIT`): a finite loss never comes with an inf or NaN metric, and 1e30 means the estimate overflowed
    (e.g. kl/k3_anchor with pi_a/pi_theta > e^88 in float32).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch

from rpgrl import metrics as M
from rpgrl.objectives import divergences as dv
from rpgrl.objectives.base import LossOutput, register_loss, reported
from rpgrl.objectives.checks import LossOverflow, check_finite, check_tensors, dtype_bound, finite_gradient
from rpgrl.objectives.kl import log_abs_expm1, weight_times_w, weight_times_w_value
from rpgrl.objectives.reduce import aggregate_rows, check_normalizer
from rpgrl.options import ANALOGUES, BRANCHES, CLIPS, LEVELS, STYLES, OptionError, RPGOptions  # noqa: F401 (re-exported)


@register_loss("rpg")
def rpg_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    divergence: Literal["fkl", "rkl", "ufkl", "urkl"],
    style: Literal["differentiable", "reinforce"],
    beta: float,
    level: Literal["token", "sequence"] = "token",
    agg: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean",
    clip: Literal["dual", "truncate"] | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    c: float = 10.0,
    branch: Literal["effective", "raw"] = "effective",
    kl_in_clip: bool = True,
    analogue: Literal["exact", "paper"] = "exact",
    kl_value_clamp: float | None = None,
    max_log_w: float | None = None,
    anchor_logp: torch.Tensor | None = None,
    normalizer: float | torch.Tensor | None = None,
) -> LossOutput:
    """KL-regularised policy-gradient loss of RPG (paper Sec. 3-4, Table 1, Alg. 1-2; spec 2.1, 2.4, 4.1-4.3).

    Objective maximised: J = E_{pi_theta}[A] - beta * D(pi_theta, pi_a), D one of fkl/rkl/ufkl/urkl (see
    `divergences.py`). Samples come from the sampler pi_s (`old_logp`); the anchor pi_a is `anchor_logp` (default:
    the sampler, as in the paper). With u = pi_theta/pi_a, rho = pi_a/pi_s (constant), w = rho u = pi_theta/pi_s:

        differentiable, per unit:  l = -w A + beta rho phi(u)                          (spec 2.1 l_diff)
        reinforce, per unit:       l = -SG(w A + C) * logp,   C = -beta rho u phi'(u)   (spec 2.1 l_RF, 4.2 C)

    Both have per-unit gradient -(w A + C) * grad logp, and E_{pi_s}[grad l] = -grad J exactly at any theta when
    `level="sequence"` (proved by `rpgrl verify`).

    level="token" (the authors' code, spec 1.4/2.4): a unit is a token; w_t = exp(logp_t - old_logp_t), the KL term
        is the per-token phi(u_t), A_i is broadcast to the response's tokens. The KL part is exact for the
        per-prefix divergences averaged over prefixes drawn from the sampler, sum_h P_s(h) D(.|h) (spec 2.4): with
        the sampler as anchor that is the sequence forward KL (chain rule), and the prefix-averaged reverse KL; with
        another anchor it is no sequence-level KL (a review measured 7-10% off both). The reward term -w_t A is the
        PPO first-order surrogate (exact gradient only at theta = theta_old).
    level="sequence" (the paper): a unit is a response; log w(x) = sum_t mask (logp - old_logp), all in log space
        (w log w = exp(log_w) log_w), and the REINFORCE coefficient multiplies every token's logp. Needs (B,)
        advantages.

    clip=None: no clipping; clip="dual": RPG-Style Clip (Alg. 1 for style="differentiable", Alg. 2 for
    "reinforce"); clip="truncate": truncated importance weights (reinforce only). Each row of each algorithm is in
    "Clipping" in the module docstring.

    Guards (off by default, each counted in a metric):
      `kl_value_clamp=K`: clamp the separate KL term beta-less value rho phi(u) to [-K, K] (the authors' +-10; zero
        gradient outside, also where phi(u) itself overflows). Only where the KL is a separate term (differentiable,
        clip=None or kl_in_clip=False).
      `max_log_w=M`: clamp log w (per unit) to <= M before anything else (zero gradient above).
    Without guards, an overflowing loss (e.g. unclipped w = exp(5000) at sequence level), or a finite loss whose
    gradient weight w A + C overflows, raises `LossOverflow` (a ValueError) instead of returning inf/NaN; so does
    backward, where the gradient of logp is not finite under a finite loss (`checks.finite_gradient`).

    Aggregation (`agg`, `normalizer` as in `reduce.aggregate`): a sequence-level unit's loss l_i is treated as
    response i's token-sum: token-mean -> sum_i l_i / N_tok; seq-mean-token-sum -> sum_i l_i / B (the paper-exact
    unbiased estimate of -J); seq-mean-token-mean -> sum_i l_i / (L_i B). Pass the global count as `normalizer`
    under micro-batching.

    Shapes:
        logp, old_logp, mask, anchor_logp: (B, T); advantages: (B,) or (B, T) (token level only).
        per_token: (B, T), zero at padding; None for style="differentiable" at level="sequence" (not a sum of
        per-token terms). logp/old_logp/anchor_logp must be float32 or float64 (same dtype, also advantages);
        mask is bool or 0/1 numbers.

    Detached: old_logp, anchor_logp, advantages (constants); the whole REINFORCE coefficient SG(w A + C); clipped
    rows' logp (style="reinforce"). Padding (mask 0) may hold anything, NaN included; it never reaches the loss or
    gradient. Metrics: see "Metrics" in the module docstring.
    """
    o = RPGOptions(divergence=divergence, style=style, beta=beta, level=level, agg=agg, clip=clip, eps_low=eps_low,
                   eps_high=eps_high, c=c, branch=branch, kl_in_clip=kl_in_clip, analogue=analogue,
                   kl_value_clamp=kl_value_clamp, max_log_w=max_log_w).check()  # fmt: skip
    normalizer = check_normalizer(normalizer)
    o = _in_dtype(o, logp)
    logp = finite_gradient(logp, "rpg_loss")
    r = _ratios(logp, old_logp, advantages, mask, anchor_logp, o)
    policy = None
    if style == "differentiable":
        loss_unit, clamped_kl, policy = _differentiable(r, o)
        per_token = None if level == "sequence" else torch.where(r.mask, loss_unit, 0.0)  # loss_unit is -A at padding
        row_loss = loss_unit if level == "sequence" else per_token.sum(-1)
    else:
        per_token, clamped_kl = _reinforce(logp, r, o), None  # zero at padding
        row_loss = per_token.sum(-1)
    loss = aggregate_rows(row_loss, r.mask, agg, normalizer)  # == aggregate(per_token, mask, agg, normalizer)
    if not torch.isfinite(loss) or (style == "differentiable" and not _gradient_weight_finite(r, o)):
        what = f"loss = {loss.item()}" if not torch.isfinite(loss) else "its gradient"
        rho = "" if r.log_rho is None else f", log rho = log(pi_anchor / pi_old) in {_span(r.log_rho)}"
        sizes = f"beta = {o.beta:g}, |A| up to {float(r.adv.abs().max()):g}"  # (not the ratio's: beta 1e308, say)
        raise LossOverflow(
            f"rpg_loss overflowed ({what}, log w per {level} in {_span(r.log_w)}{rho}, {sizes}): a ratio, beta or "
            "an advantage is too extreme to represent; use clip='dual', smaller steps or max_log_w, or a smaller "
            "beta" + (", or a fresher anchor" if rho else "")
        )
    r.metrics |= _kl_and_loss_metrics(loss, clamped_kl, policy, r, o, normalizer)
    return LossOutput(loss=loss, per_token=per_token, metrics=reported(r.metrics, logp.dtype))


def _in_dtype(o: RPGOptions, logp: torch.Tensor) -> RPGOptions:
    """The options as numbers of logp's dtype: max_log_w and kl_value_clamp capped at its largest (`dtype_bound`), and
    a beta past it refused in one line where the loss multiplies it in that dtype (the differentiable dual clip's
    A_hat = A - beta phi(u)/u, and beta x the clamped KL term: torch's RuntimeError before; elsewhere beta is
    multiplied in float64 or log space)."""
    if not isinstance(logp, torch.Tensor) or logp.dtype not in (torch.float32, torch.float64):
        return o  # check_tensors names it
    top = torch.finfo(logp.dtype).max
    in_clip = o.style == "differentiable" and o.clip == "dual" and not o.separate_kl
    if (in_clip or o.kl_value_clamp is not None) and o.beta > top:
        what = "the dual clip's A_hat = A - beta phi(u)/u" if in_clip else "beta x the clamped KL term"
        raise OptionError("beta", f"beta {o.beta:g} is past {logp.dtype}'s largest number ({top:g}), which {what} "
                          "needs: compute the loss in float64")  # fmt: skip
    bound = {k: dtype_bound(getattr(o, k), logp.dtype) for k in ("max_log_w", "kl_value_clamp")}
    return dataclasses.replace(o, **bound)


def _span(x: torch.Tensor) -> str:
    return f"[{x.min().item():.6g}, {x.max().item():.6g}]"


@dataclass
class _Ratios:
    """The log-ratio prelude shared by both styles. Token tensors are (B, T) and zero at padding; `log_w`, `log_rho`,
    `log_u` are per unit: (B, T) at token level, (B,) at sequence level (after the max_log_w guard)."""

    mask: torch.Tensor  # (B, T) bool
    log_w_tok: torch.Tensor  # logp - old_logp
    log_rho_tok: torch.Tensor | None  # anchor_logp - old_logp (None: the anchor is the sampler)
    adv: torch.Tensor  # (B, T), (B, 1) at token level; (B,) at sequence level
    log_w: torch.Tensor
    log_rho: torch.Tensor | None
    log_u: torch.Tensor  # log w - log rho
    n_tok: torch.Tensor
    unit_mask: torch.Tensor | None  # the mask at token level, None at sequence level (every unit is valid)
    metrics: dict[str, torch.Tensor]

    def unit_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Fraction of units (tokens or sequences) where the boolean `x` holds."""
        dtype = self.log_w_tok.dtype
        if self.unit_mask is None:
            return x.to(dtype).mean()
        return (x & self.unit_mask).sum().to(dtype) / self.n_tok


def _ratios(logp, old_logp, advantages, mask, anchor_logp, o: RPGOptions) -> _Ratios:
    """Checks the tensors, forms the per-token and per-unit log-ratios, applies `max_log_w`, and starts the metrics
    (log_w/min, log_w/max, clip/frac_max_log_w)."""
    mask_b = check_tensors(logp, old_logp, advantages, mask, {"anchor_logp": anchor_logp}, loss="rpg_loss",
                           per_response_advantages=o.level == "sequence")  # fmt: skip
    old_logp, advantages = old_logp.detach(), advantages.detach()
    # Per-token log-ratios, zeroed at padding so garbage there never reaches exp() or backward().  (B, T)
    log_w_tok = torch.where(mask_b, logp - old_logp, 0.0)
    log_rho_tok = None if anchor_logp is None else torch.where(mask_b, anchor_logp.detach() - old_logp, 0.0)
    adv = torch.where(mask_b, advantages, 0.0) if advantages.dim() == 2 else advantages
    if o.level == "sequence":
        log_w = log_w_tok.sum(-1)  # (B,)
        log_rho = None if log_rho_tok is None else log_rho_tok.sum(-1)  # (B,)
    else:
        log_w, log_rho = log_w_tok, log_rho_tok  # (B, T)
        adv = adv if adv.dim() == 2 else adv[:, None]  # (B, 1) broadcasts over T
    lw_total = log_w.detach().sum()  # sum over all tokens (padding is 0)
    rho_total = None if log_rho is None else log_rho.sum()
    check = lw_total + adv.sum() + (0.0 if rho_total is None else rho_total)
    named = {"logp": logp, "old_logp": old_logp, "anchor_logp": anchor_logp, "advantages": advantages}
    check_finite(named, mask_b, total=check, log_w_tok=log_w_tok)

    n_tok = mask_b.sum()
    r = _Ratios(mask_b, log_w_tok, log_rho_tok, adv, log_w, log_rho, log_w, n_tok,
                mask_b if o.level == "token" else None, {})  # fmt: skip
    with torch.no_grad():
        lw = log_w.detach()
        if r.unit_mask is not None:  # the mean of the valid entries lies between their min and max: a neutral fill
            lw = torch.where(r.unit_mask, lw, lw_total / n_tok)
        r.metrics[M.LOG_W_MIN], r.metrics[M.LOG_W_MAX] = torch.aminmax(lw)
        if o.max_log_w is not None:
            r.metrics["clip/frac_max_log_w"] = r.unit_mean(log_w.detach() > o.max_log_w)
    if o.max_log_w is not None:
        r.log_w = log_w.clamp(max=o.max_log_w)
    r.log_u = r.log_w if log_rho is None else r.log_w - log_rho
    return r


def _reinforce(logp: torch.Tensor, r: _Ratios, o: RPGOptions) -> torch.Tensor:
    """REINFORCE style: per-token loss -coef * logp, the coefficient detached, logp cut in clipped rows. (B, T)"""
    with torch.no_grad():
        neg_coef, active = _reinforce_coef(r.log_w.detach(), r.log_u.detach(), r, o)
    lp = torch.where(r.mask, logp, 0.0)  # (B, T)
    if o.level == "sequence":
        neg_coef = neg_coef[:, None]
        active = None if active is None else active[:, None]
    if active is not None:  # clipped rows of Alg. 2: value kept, gradient cut
        lp = torch.where(active, lp, lp.detach())
    return neg_coef * lp


def _gradient_weight_finite(r: _Ratios, o: RPGOptions) -> bool:
    """Whether the differentiable style's unclipped per-unit gradient weight w A + C (spec 2.1, C = -beta rho u
    phi'(u)) is finite. The loss being finite does not say so: rkl's u (log u + 1) passes float32's largest number
    while u log u is still below it. Only unclipped terms are checked: RPG-Style Clip bounds the reward term's weight
    by max(hi, c) |A| (and the KL analogue inside it with it), `kl_value_clamp` the separate KL term."""
    reward = o.clip is None
    kl = o.separate_kl and o.kl_value_clamp is None and o.beta > 0
    if not (reward or kl):
        return True
    with torch.no_grad():
        weight = weight_times_w_value(r.log_w, r.adv.expand_as(r.log_w)) if reward else torch.zeros_like(r.log_w)
        if kl:  # beta multiplied in first: beta rho u phi'(u) may fit where rho u phi'(u) does not
            log_rho = torch.zeros_like(r.log_u) if r.log_rho is None else r.log_rho
            weight = weight - dv.rho_u_dphi(o.divergence, r.log_u, log_rho, scale=o.beta)
        return bool(torch.isfinite(weight).all())  # padding: log w = log u = 0 and A = 0 there, finite


def _kl_grad_share(divergence, beta, log_w, log_rho, adv, unit_mask) -> torch.Tensor:
    """sum|C| / (sum|w A| + sum|C|) over units, C = -beta rho u phi'(u): the KL term's share of the per-unit gradient
    weight before clipping (both styles have per-unit gradient -(w A + C) grad logp, spec 2.1). Metric only: float64
    with log-ratios capped at +-50, each part's terms as logs divided by the largest before they are summed, so it is
    finite whatever the ratio, beta or A (as plain sums, beta 1e308 over two tokens was inf / inf = NaN); 0 when both
    parts vanish."""
    lw = log_w.double().clamp(-50.0, 50.0)
    log_u = lw if log_rho is None else lw - log_rho.double().clamp(-50.0, 50.0)
    log_kl = torch.log(dv.u_dphi(divergence, log_u.clamp(-50.0, 50.0)).abs()) + (
        math.log(beta) if beta > 0 else -math.inf
    )
    if log_rho is not None:
        log_kl = log_kl + log_rho.double().clamp(-50.0, 50.0)
    log_reward = lw + torch.log(adv.double().abs())  # (B, T) at token level, (B,) at sequence level
    if unit_mask is not None:
        log_kl, log_reward = log_kl.masked_fill(~unit_mask, -math.inf), log_reward.masked_fill(~unit_mask, -math.inf)
    top = torch.maximum(log_kl.max(), log_reward.max())
    top = torch.where(torch.isfinite(top), top, 0.0)  # -inf: both parts vanish (0 / 0 below reads 0)
    kl, reward = torch.exp(log_kl - top).sum(), torch.exp(log_reward - top).sum()
    total = kl + reward
    return torch.where(total > 0, kl / total.clamp(min=1e-300), 0.0).to(log_w.dtype)


class _Bounds:
    """Clip bounds in linear and log space (log(0) = -inf, so eps_low = 1 means no lower clip)."""

    def __init__(self, eps_low: float, eps_high: float, c: float):
        self.lo, self.hi, self.c = 1.0 - eps_low, 1.0 + eps_high, c
        self.log_lo = math.log(self.lo) if self.lo > 0 else -math.inf
        self.log_hi, self.log_c = math.log(self.hi), math.log(c)


def _pick(cond: torch.Tensor, a: float, b: float, like: torch.Tensor) -> torch.Tensor:
    """torch.where(cond, a, b) for two scalars, in `like`'s dtype and device."""
    return torch.where(cond, torch.tensor(a, dtype=like.dtype, device=like.device), b)


def _inside(bound: float, direction: int, like: torch.Tensor) -> torch.Tensor:
    """The representable value next to `bound` (in `like`'s dtype) towards +inf (direction +1) or -inf (-1)."""
    x = torch.tensor(bound, dtype=like.dtype, device=like.device)
    return torch.nextafter(x, torch.tensor(direction * math.inf, dtype=like.dtype, device=like.device))


def _differentiable(r: _Ratios, o: RPGOptions) -> tuple[torch.Tensor, torch.Tensor | None, tuple | None]:
    """Per-unit differentiable loss (spec 2.1 l_diff; with clip='dual' paper Alg. 1 / spec 4.1). Returns
    (loss_unit, the clamped KL term rho phi(u) with `kl_value_clamp`, else None, the policy part for loss/policy, else
    None): (the policy term, None) where the loss is it plus a separate KL term; with the exact dual clip (-A
    clamp(w), log clamp(w) - log w), whose unit loss less beta rho phi(u) is -A clamp(w) + beta rho phi(u) (clamp(w) /
    w - 1). Shapes: units."""
    log_w, log_u, log_rho, adv, divergence, beta = r.log_w, r.log_u, r.log_rho, r.adv, o.divergence, o.beta
    clip, branch, sep_kl, b, metrics = o.clip, o.branch, o.separate_kl, _Bounds(o.eps_low, o.eps_high, o.c), r.metrics
    w = torch.exp(log_w) if clip is None else None
    masked, edge, policy = False, False, None
    if w is not None:  # one host sync for both: w overflowed; w over- or underflows where w A may not (`edge`)
        with torch.no_grad():
            finite = torch.isfinite(w)
            edge_units = (adv != 0) & ~(finite & (w >= torch.finfo(w.dtype).tiny))
            masked, edge = torch.stack([~finite.all(), edge_units.any()]).tolist()
    if masked:  # an overflowed ratio: w taken as 1 at A = 0 units, which add 0 (not 0 x inf: NaN) to loss and backward
        w = torch.exp(log_w.masked_fill(adv == 0, 0.0))
    clamped_kl, kl, alpha = None, None, beta  # the loss adds alpha x kl: the separate KL term
    if sep_kl and o.kl_value_clamp is not None:  # as released (spec 4.3 iv): the separate KL term clamped
        clamped_kl, clamped = _clamped_kl(divergence, log_u, log_rho, o.kl_value_clamp)
        kl = clamped_kl
        with torch.no_grad():
            metrics["clip/frac_kl_clamp"] = r.unit_mean(clamped)
    elif sep_kl and beta > 0:  # beta first: beta rho phi(u) may fit where rho phi(u) does not (rho = 1: no anchor)
        lr = torch.zeros_like(log_u) if log_rho is None else log_rho
        if log_rho is None and not masked and bool(dv.direct_ok(log_u, lr, beta).all()):
            kl = dv.phi(divergence, log_u, w)  # added with alpha = beta, bit for bit as before where it fits
        else:
            kl, alpha = dv.rho_phi(divergence, log_u, lr, beta), 1.0
    add_kl = kl is not None and beta > 0
    if clip is None:
        loss = w * -adv  # -adv is (B, 1) for per-sequence advantages
        if edge:  # w alone over- or underflows where w A may not: -w A in log space (`weight_times_w`)
            loss = weight_times_w(log_w.masked_fill(adv == 0, 0.0), (-adv).expand_as(log_w))
        return (torch.add(loss, kl, alpha=alpha) if add_kl else loss), clamped_kl, ((loss, None) if add_kl else None)

    # clip == "dual": l = -A_hat * clamp(w, lo_t, hi_t); (lo_t, hi_t) = (0, hi) if positive branch else (lo, c)
    exact = not (sep_kl or beta == 0) and o.analogue == "exact"  # -w A_hat == -w A + beta rho phi(u)

    def neg_a_hat_at(lu: torch.Tensor) -> torch.Tensor:
        if sep_kl or beta == 0:
            return -adv
        if exact:
            if divergence == "rkl":  # phi(u)/u = log u never overflows: beta fused in (A_hat's sign decides the branch)
                return torch.add(-adv, dv.phi_over_u(divergence, lu), alpha=beta)
            return -adv + dv.phi_over_u(divergence, lu, scale=beta)  # beta before 1/u can overflow
        # paper's analogues (rkl, urkl; fkl/ufkl are sep_kl)
        return torch.add(-adv, (lu + 1) if divergence == "rkl" else lu, alpha=beta)

    with torch.no_grad():
        lw = log_w.detach()
        pos = (neg_a_hat_at(log_u.detach()) <= 0) if branch == "effective" else (adv > 0)
    # exp of the clamped log-ratio: the value and gradient of clamp(w), never overflowing. The bounds sit one ulp
    # inside so that a ratio exactly on a bound is clipped (no gradient), as in the tables of spec 4.1/4.2.
    log_lo = torch.where(pos, _inside(-math.inf, +1, log_w), _inside(b.log_lo, +1, log_w))
    log_hi = torch.where(pos, _inside(b.log_hi, -1, log_w), _inside(b.log_c, -1, log_w))
    if exact:
        loss = _exact_dual(r, o, neg_a_hat_at, log_lo, log_hi)
        with torch.no_grad():  # the policy part: -A clamp(w), and the shift log clamp(w) - log w (0 where unclipped)
            lwc = lw.clamp(log_lo, log_hi)
            policy = (-adv * torch.exp(lwc), lwc - lw)
    else:
        loss = neg_a_hat_at(log_u) * torch.exp(log_w.clamp(log_lo, log_hi))
    with torch.no_grad():
        metrics[M.CLIP_HIGH] = r.unit_mean(pos & (lw >= b.log_hi))
        metrics[M.CLIP_LOW] = r.unit_mean(~pos & (lw <= b.log_lo))
        metrics[M.CLIP_DUAL] = r.unit_mean(~pos & (lw >= b.log_c))
    policy = (loss, None) if add_kl else policy if exact else None
    return (torch.add(loss, kl, alpha=alpha) if add_kl else loss), clamped_kl, policy


def _exact_dual(r: _Ratios, o: RPGOptions, neg_a_hat_at, log_lo: torch.Tensor, log_hi: torch.Tensor) -> torch.Tensor:
    """Alg. 1 with the exact analogue, -A_hat clamp(w) per unit, A_hat = A - beta phi(u)/u. Where the clamp does not
    bind this is -w A + beta rho phi(u), and it is computed so: as the product, its gradient w (-A_hat) + w beta
    (phi/u)' adds two terms of size beta rho that cancel (urkl: beta w / u each, where the result is -w A + beta w
    log u), so with a separate anchor 20 nats above the sampler float32 lost the gradient (-4.0 for -1.05) and at 50
    nats float64 too. Each form runs on its own units, the other's set to u = 1 (w = 1 for the unclipped form, log
    u = 0 for the clipped one), so neither backward meets 0 x inf. Shapes: units."""
    log_w, log_u, log_rho, adv = r.log_w, r.log_u, r.log_rho, r.adv
    with torch.no_grad():
        free = (log_w >= log_lo) & (log_w <= log_hi)  # where clamp passes the gradient: the unclipped rows
    lw = torch.where(free, log_w, 0.0)
    if log_rho is None:  # u = w, within the clip's bounds here
        unclipped = torch.add(-adv * torch.exp(lw), dv.phi(o.divergence, lw), alpha=o.beta)
    else:  # beta multiplied in first: beta rho phi(u) may fit where rho phi(u) does not
        unclipped = -adv * torch.exp(lw) + dv.rho_phi(o.divergence, lw - log_rho, log_rho, scale=o.beta)
    clipped = neg_a_hat_at(torch.where(free, 0.0, log_u)) * torch.exp(log_w.clamp(log_lo, log_hi))
    return torch.where(free, unclipped, clipped)


def _clamped_kl(divergence, log_u, log_rho, k: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(clamp(rho phi(u), -k, k), where the clamp binds), with a zero gradient where it binds. phi is evaluated at
    u = 1 there, so its backward never meets an overflowed u (inf * 0 = NaN); a term that overflows counts as
    clamped, at its true sign. Elsewhere value and gradient are those of rho phi(u) (`rho_phi`: in log space where
    rho or u leaves the dtype; as the direct product, ufkl's rho k3(u) at log rho = -95, log u = 95 in float32 was
    0 x inf = NaN, counted as clamped, its gradient of 1 cut)."""
    with torch.no_grad():
        raw = dv.regularizer(divergence, log_u.detach(), log_rho)  # never NaN
        clamped = ~(raw.abs() <= k)
    free = torch.where(clamped, 0.0, log_u)  # phi(1) = 0 where clamped
    kl = dv.phi(divergence, free) if log_rho is None else dv.rho_phi(divergence, free, log_rho)
    return torch.where(clamped, raw.clamp(-k, k), kl), clamped


def _reinforce_coef(log_w, log_u, r: _Ratios, o: RPGOptions):
    """Minus the detached REINFORCE coefficient per unit (spec 2.1 Weight, 4.2 Alg. 2, Remark F.2) and the active
    mask of Alg. 2 (None when nothing is masked). The loss is -coef * logp with logp cut where not active."""
    log_rho, adv, divergence, beta, clip, branch = r.log_rho, r.adv, o.divergence, o.beta, o.clip, o.branch
    b, unit_mean, metrics = _Bounds(o.eps_low, o.eps_high, o.c), r.unit_mean, r.metrics

    def kl_part(lu: torch.Tensor, u: torch.Tensor) -> torch.Tensor:  # C = -beta rho u phi'(u)
        if beta == 0:  # 0, also where rho or u leaves the dtype (-0 x inf was NaN)
            return torch.zeros_like(lu)
        # beta (rho) first, in log space where u phi'(u) alone would overflow (rho = 1 without an anchor)
        return dv.rho_u_dphi(divergence, lu, torch.zeros_like(lu) if log_rho is None else log_rho, scale=beta).neg_()

    if clip == "truncate":
        log_wc = log_w.clamp(b.log_lo, b.log_hi)
        wc = torch.exp(log_wc)
        log_uc = log_wc if log_rho is None else log_wc - log_rho
        uc = wc if log_rho is None else torch.exp(log_uc)
        metrics[M.CLIP_LOW] = unit_mean(log_w < b.log_lo)
        metrics[M.CLIP_HIGH] = unit_mean(log_w > b.log_hi)
        return (wc * adv).add_(kl_part(log_uc, uc)).neg_(), None

    if clip is None:
        w = torch.exp(log_w)
        u = w if log_rho is None else torch.exp(log_u)
        # A = 0: 0, also where w overflowed (0 x inf was NaN); w A in log space where w alone over- or underflows
        reward = torch.where(adv == 0, 0.0, weight_times_w_value(log_w, adv.expand_as(log_w)))
        return reward.add_(kl_part(log_u, u)).neg_(), None

    # clip == "dual" (Alg. 2): branch on A' = A + C/w = A - beta phi'(u); rows 1/4 active, rows 2/3/5 constant.
    # w_b = clamp(w, lo_t, hi_t) is w in active rows and the bound in clipped ones; C is taken at w_b, which is the
    # paper's C(w) wherever the gradient is nonzero and keeps the (meaningless, spec 2.3) clipped-row value finite.
    if branch == "effective":  # beta = 0: A' = A, whatever phi'(u) (0 x -inf was NaN where u underflowed)
        pos = adv >= 0 if beta == 0 else adv - beta * dv.dphi(divergence, log_u) >= 0
    else:
        pos = adv > 0
    active = torch.where(pos, log_w < b.log_hi, (log_w > b.log_lo) & (log_w < b.log_c))
    log_wb = log_w.clamp(_pick(pos, -math.inf, b.log_lo, log_w), _pick(pos, b.log_hi, b.log_c, log_w))
    w_b = torch.exp(log_wb)
    log_ub = log_wb if log_rho is None else log_wb - log_rho
    u_b = w_b if log_rho is None else torch.exp(log_ub)
    metrics[M.CLIP_HIGH] = unit_mean(pos & ~active)
    metrics[M.CLIP_LOW] = unit_mean(~pos & (log_w <= b.log_lo))
    metrics[M.CLIP_DUAL] = unit_mean(~pos & (log_w >= b.log_c))
    return (w_b * adv).add_(kl_part(log_ub, u_b)).neg_(), active


_ROW_LIMIT = 1e300
"""The bound on |rho phi(u)| and |beta rho phi(u)| per unit and per row in the KL metrics (float64), each taken before
it is bounded: a sum of fewer than 1e8 such terms is finite, so never inf - inf; far above the reported METRIC_LIMIT."""


def _bounded_rows(unit: torch.Tensor, level: str) -> torch.Tensor:
    """Per-unit terms (units; 0 at padding) bounded at +-_ROW_LIMIT, summed per response and bounded again. (B,)"""
    unit = unit.clamp(-_ROW_LIMIT, _ROW_LIMIT)
    return (unit if level == "sequence" else unit.sum(-1)).clamp(-_ROW_LIMIT, _ROW_LIMIT)


def _beta_kl(kl_unit: torch.Tensor, log_u: torch.Tensor, log_rho: torch.Tensor | None, o: RPGOptions) -> torch.Tensor:
    """beta rho phi(u) per unit in float64 (units): beta x `kl_unit` where that is finite, else from the term's log,
    log |rho phi(u)| + log beta (beta brings back below 1e300 a term past float64's largest: e^705 x 705 at beta
    1e-300 is 1e9). No host sync."""
    log_rho = torch.zeros_like(log_u) if log_rho is None else log_rho
    sign, log_size = dv.log_regularizer(o.divergence, log_u, log_rho)
    far = sign * torch.exp((log_size + math.log(o.beta)).clamp(max=math.log(_ROW_LIMIT)))
    return torch.where(torch.isfinite(kl_unit), o.beta * kl_unit, far)


def _policy_rows(policy_unit, shift, kl_unit, log_u, log_rho, mask_b, o: RPGOptions) -> torch.Tensor:
    """The policy part per response in float64 (B,), from `_differentiable`'s (policy term, shift): the term, plus,
    where `shift` = log clamp(w) - log w is given (the exact dual clip), beta rho phi(u) expm1(shift), the KL part
    the clip takes off or adds (0 where w is unclipped), as a product where it is finite, else from its log.
    `kl_unit` (rho phi(u)), `log_u`, `log_rho`: float64 units. Bounded per unit and per row as the KL metrics
    (`_bounded_rows`)."""
    unit = policy_unit.detach().to(f64 := torch.float64).expand_as(log_u)
    if shift is not None:
        shift, log_rho = shift.to(f64), torch.zeros_like(log_u) if log_rho is None else log_rho
        sign, log_size = dv.log_regularizer(o.divergence, log_u, log_rho)
        direct = o.beta * kl_unit * torch.expm1(shift)
        log_far = (log_size + math.log(o.beta) + log_abs_expm1(shift)).clamp(max=math.log(_ROW_LIMIT))
        far = sign * torch.sign(shift) * torch.exp(log_far)
        unit = unit + torch.where(torch.isfinite(direct), direct, far).clamp(-_ROW_LIMIT, _ROW_LIMIT)
    unit = unit if o.level == "sequence" else torch.where(mask_b, unit, 0.0)
    return _bounded_rows(unit, o.level)


@torch.no_grad()
def _kl_and_loss_metrics(loss, kl_unit, policy, r: _Ratios, o: RPGOptions, normalizer) -> dict[str, torch.Tensor]:
    """kl/<divergence>, kl/k3_anchor, kl/k1_old and loss/*, in float64 and overflow-safe (dv.regularizer is never
    NaN; `reported` saturates what exceeds the range); log_w/abs_mean and kl/grad_share, the off-policy regime.
    `kl_unit`: the loss's clamped KL term, else None (recomputed: an unclamped term may have overflowed where the
    loss does not use it, beta = 0). `policy`: `_differentiable`'s policy part, whose aggregate is loss/policy
    (`_policy_rows`); else (None) loss/policy = total - loss/kl."""
    log_u, log_rho, log_w_tok, log_rho_tok, mask_b = r.log_u, r.log_rho, r.log_w_tok, r.log_rho_tok, r.mask
    divergence, beta, level, agg = o.divergence, o.beta, o.level, o.agg
    f64, n_tok = torch.float64, mask_b.sum()
    log_u, log_rho = log_u.detach().to(f64), None if log_rho is None else log_rho.to(f64)
    kl_unit = dv.regularizer(divergence, log_u, log_rho) if kl_unit is None else kl_unit.detach().to(f64)
    # bounded per unit and per row, far above the reported range: +inf and -inf summed or averaged were NaN. beta
    # multiplies each unit before its bound: at the bound itself, beta x a bounded row read 1e300 beta (loss/kl 1.0 for
    # rkl's e^705 x 705 under beta 1e-300: 1e9), and loss/policy = total - loss/kl kept the difference
    kl_rows = _bounded_rows(kl_unit, level)  # (B,)
    kl_loss = loss.new_zeros((), dtype=f64)
    if beta > 0:
        kl_loss = aggregate_rows(_bounded_rows(_beta_kl(kl_unit, log_u, log_rho, o), level), mask_b, agg, normalizer)
    if policy is None:
        policy = loss.detach().to(f64) - kl_loss
    else:  # not as that difference: it keeps only the rounding of the two past the policy term
        policy = aggregate_rows(_policy_rows(*policy, kl_unit, log_u, log_rho, mask_b, o), mask_b, agg, normalizer)
    lu_tok = log_w_tok.detach() if log_rho_tok is None else log_w_tok.detach() - log_rho_tok
    lu_tok = lu_tok.to(f64)  # (B, T), 0 at padding
    # the off-policy regime: spread of log w before max_log_w, and the KL's gradient share
    log_w_raw = log_w_tok.detach() if level == "token" else log_w_tok.detach().sum(-1)
    return {
        M.kl_divergence(divergence): kl_rows.mean(),
        M.KL_K3_ANCHOR: (torch.expm1(-lu_tok) + lu_tok).sum() / n_tok,  # k3 = expm1(-lu) + lu, 0 at padding
        "kl/k1_old": -log_w_tok.detach().to(f64).sum() / n_tok,
        "loss/total": loss.detach(),
        M.LOSS_KL: kl_loss,
        "loss/policy": policy,
        M.LOG_W_ABS_MEAN: log_w_raw.abs().sum() / (n_tok if level == "token" else log_w_raw.numel()),
        M.KL_GRAD_SHARE: _kl_grad_share(divergence, beta, log_w_raw, log_rho, r.adv, r.unit_mask),
    }
