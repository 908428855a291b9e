"""KL estimators k1/k2/k3, the GRPO KL term (as published and corrected), and verl's `kl_penalty` names.

Spec section 3. To estimate KL(q || p) from samples x ~ q, with log_r = log(p(x) / q(x)):

    k1 = -log_r                    unbiased, high variance, can be negative
    k2 = log_r^2 / 2               biased, non-negative
    k3 = (r - 1) - log_r           unbiased for normalised q, p; non-negative; k3 = 0 iff r = 1

All functions are elementwise on any shape (usually (B, T) per token) and never clamp unless asked to.
What the *gradients* of these estimators mean when they are used as losses is spec 3.3 / 3.4: on-policy,
k1 -> 0, k2 -> grad KL(pi || ref), k3(ref/pi) -> grad KL(ref || pi) (forward!); off-policy only the
importance-weighted forms below have a known expected gradient.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal

import torch

from rpgrl.objectives.checks import KL_WHY, dtype_bound, finite_gradient, require_floats, require_tensors
from rpgrl.options import check_size, scalar

Direction = Literal["reverse", "forward"]


def k1(log_r: torch.Tensor) -> torch.Tensor:
    """k1 = -log r, elementwise: any shape -> the same shape."""
    return -log_r


def k2(log_r: torch.Tensor) -> torch.Tensor:
    """k2 = (log r)^2 / 2, elementwise: any shape -> the same shape."""
    return 0.5 * log_r.square()


def k3(log_r: torch.Tensor) -> torch.Tensor:
    """k3 = r - 1 - log r, elementwise: any shape -> the same shape. Taken as expm1(log r) - log r, and below |log r|
    = 0.5 as the series x^2 / 2 (1 + x / 3 + x^2 / 12 + ...) (`_k3_tail`): expm1(x) - x keeps only ~2 eps / |x| of
    relative precision there (all of it lost at |x| ~ eps; 8 eps at 0.125). Its gradient is formed as expm1(log r)
    (`_K3`), where autograd's (expm1(x) + 1) - 1 lost the same. Non-negative in floating point too (expm1 is monotone
    and expm1(x) >= x; the series' terms past x^2 / 2 are below it). +inf at log r = +-inf (a log-prob of -inf under
    either side of the ratio), where expm1 - log r gave inf - inf at +inf.
    """
    top = torch.isposinf(log_r)  # no data-dependent branch: torch.func's vmap runs this too
    return torch.where(top, log_r, _K3.apply(torch.where(top, 0.0, log_r)))  # expm1's backward never sees e^inf


K3_SERIES_MAX = 0.5
"""|x| below which k3(x) is its series (`_k3_tail`); `divergences` takes its near-u = 1 terms as k3 forms there"""


def _k3_tail(s: torch.Tensor) -> torch.Tensor:
    """sum_n 2 s^n / (n + 2)!, n = 1..14 (Horner), so that k3(s) = s^2 / 2 (1 + tail) for |s| <= 0.5: the terms
    past n = 14 are below 1e-18 there."""
    tail = torch.zeros_like(s)
    for n in range(14, 0, -1):
        tail = s * (2.0 / math.factorial(n + 2) + tail)
    return tail


class _K3(torch.autograd.Function):
    """k3(x) = expm1(x) - x (the series below |x| = 0.5) with the derivative expm1(x), in backward and in forward
    mode; torch.func transforms (grad, vmap, jvp) apply. Finite x or -inf."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        small = x.abs() < K3_SERIES_MAX
        s = torch.where(small, x, 0.0)
        return torch.where(small, 0.5 * s * s * (1 + _k3_tail(s)), torch.expm1(x) - x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.expm1(x)

    @staticmethod
    def jvp(ctx, x_t: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return x_t * torch.expm1(x)


def grpo_kl_term(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    old_logp: torch.Tensor | None = None,
    *,
    corrected: bool,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token GRPO KL penalty against a reference, as published or with the paper's correction (spec 3.4).

    uncorrected:  k3(pi_ref / pi_theta) = exp(ref_logp - logp) - 1 - (ref_logp - logp)
                  (verl `low_var_kl` without its [-10, 10] clamp). Samples come from pi_old, so off-policy its
                  expected gradient is E_old[(1 - pi_ref/pi_theta) s]: neither grad KL(pi||ref) nor grad KL(ref||pi).
    corrected:    w * k3(pi_ref / pi_theta),  w = exp(logp - old_logp) differentiated.
                  E_old[.] = KL(pi_theta || pi_ref) and E_old[grad .] = grad KL(pi_theta || pi_ref) for any pi_old.

    Shapes: logp, ref_logp, old_logp, mask: (B, T) (any equal shapes) -> (B, T), float32 or float64 log-probs of one
    dtype, as the losses take them. `old_logp` is required only when `corrected` (it is ignored otherwise). `ref_logp`
    and `old_logp` are constants (detached here, as the losses detach them). `mask` (bool or 0/1): the term is 0 at
    padding, with a zero gradient, whatever the padding holds (see `_unmasked`). Where the term is 0 (logp = ref_logp)
    the corrected term is 0 with a zero gradient, also when w overflows.
    """
    require_tensors(("old_logp", "mask"), logp=logp, ref_logp=ref_logp, old_logp=old_logp, mask=mask)
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} must have the same shape")
    corrected = scalar(corrected, "corrected")  # numpy's bool as Python's
    if not isinstance(corrected, bool):  # "false" or "no" would act as True
        raise ValueError(f"corrected must be true or false (a bool), got {corrected!r}")
    if corrected and old_logp is None:
        raise ValueError("grpo_kl_term(corrected=True) needs old_logp (the sampler's log-probs) for the weight w")
    if corrected and old_logp.shape != logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and old_logp {tuple(old_logp.shape)} must have the same shape")
    require_floats("grpo_kl_term", "log-probs", _why("ref_logp"), logp=logp, ref_logp=ref_logp,
                   old_logp=old_logp if corrected else None)  # fmt: skip
    logp = finite_gradient(logp, "grpo_kl_term", KL_WHY)  # a finite term whose gradient overflows: one line
    return grpo_k3(*_unmasked(mask, logp, ref_logp, old_logp), corrected)


def grpo_k3(logp: torch.Tensor, ref_logp: torch.Tensor, old_logp: torch.Tensor | None, corrected: bool) -> torch.Tensor:
    """`grpo_kl_term` without its checks and its guard (`checks.finite_gradient`), for a loss that has checked its
    inputs and guards its own logp (one guard, one host sync per backward, named after the loss)."""
    ref_logp, old_logp = _constants(ref_logp, old_logp)
    if not corrected:
        return k3(ref_logp - logp)  # r = pi_ref / pi_theta
    return _WeightedK3.apply(logp, ref_logp, old_logp, "reverse")


def anchored_kl_term(
    logp: torch.Tensor,
    anchor_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    *,
    direction: Direction,
    mask: torch.Tensor | None = None,
    log_scale: float = 0.0,
) -> torch.Tensor:
    """Importance-weighted KL to an anchor pi_a that differs from the sampler pi_s (spec 3.4, last paragraph).

    reverse:  (pi_theta / pi_s) * k3(pi_a / pi_theta)   E_s[grad .] = grad KL(pi_theta || pi_a)
    forward:  (pi_a / pi_s)     * k3(pi_theta / pi_a)   E_s[grad .] = grad KL(pi_a || pi_theta);
              per-sample gradient ((pi_theta - pi_a) / pi_s) * s

    With anchor = sampler, `reverse` is RPG's URKL term w log w - w + 1 and `forward` is UFKL's k3(w).
    `grpo_kl_term(corrected=True)` is `reverse` with anchor = ref and sampler = old.

    Shapes: logp, anchor_logp, sampler_logp, mask: equal shapes, e.g. (B, T) -> (B, T); the log-probs float32 or
    float64, of one dtype. Anchor and sampler are constants. `mask` as in `grpo_kl_term`; where the k3 factor is 0 the
    term is 0 even if the weight overflows. `log_scale`: the term times exp(log_scale), added to the weight's log, value
    and gradient (a scale beta brings back in range a term that alone overflows); a finite number.
    """
    require_tensors(("mask",), logp=logp, anchor_logp=anchor_logp, sampler_logp=sampler_logp, mask=mask)
    if not (logp.shape == anchor_logp.shape == sampler_logp.shape):
        raise ValueError(
            f"logp {tuple(logp.shape)}, anchor_logp {tuple(anchor_logp.shape)} and sampler_logp "
            f"{tuple(sampler_logp.shape)} must have the same shape"
        )
    if direction not in ("reverse", "forward"):
        raise ValueError(f"unknown direction {direction!r}; valid: forward, reverse")
    require_floats("anchored_kl_term", "log-probs", _why("anchor_logp"), logp=logp, anchor_logp=anchor_logp,
                   sampler_logp=sampler_logp)  # fmt: skip
    log_scale = _log_scale(log_scale)
    logp = finite_gradient(logp, "anchored_kl_term", KL_WHY)  # a finite term whose gradient overflows: one line
    return anchored_k3(*_unmasked(mask, logp, anchor_logp, sampler_logp), direction, log_scale)


def anchored_k3(logp, anchor_logp, sampler_logp, direction: Direction, log_scale: float = 0.0) -> torch.Tensor:
    """`anchored_kl_term` without its checks and its guard, as `grpo_k3`; `log_scale` a finite Python float."""
    return _WeightedK3.apply(logp, anchor_logp, sampler_logp, direction, log_scale)


def _log_scale(v) -> float:
    """`anchored_kl_term`'s log_scale as a Python float (numpy's scalars and 0-dim arrays or tensors taken as their
    value); ValueError unless a finite real number: NaN gave NaN terms and gradients, inf infinite ones, a string
    of a number passed through float(), and 10**400 raised OverflowError."""
    v = scalar(v, "log_scale")
    check_size(v, "log_scale")
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        raise ValueError(f"log_scale must be a finite number, got {v!r}")
    return float(v)


def scaled_k3(log_r: torch.Tensor, log_scale: float) -> torch.Tensor:
    """exp(log_scale) k3(log_r), with the gradient exp(log_scale) expm1(log_r), both finite wherever they fit the
    dtype: a small scale (beta) brings back in range a k3 whose exp(log_r) alone overflows. `_WeightedK3`'s forward
    form with its constant weight exp(log_scale) (anchor 0, sampler -log_scale). Any shape -> the same shape."""
    zero = torch.zeros_like(log_r)
    return _WeightedK3.apply(log_r, zero, zero - log_scale, "forward")


class _WeightedK3(torch.autograd.Function):
    """The importance-weighted k3 terms of `anchored_kl_term`, with a as the anchor's and s as the sampler's log-prob:
        reverse: e^(logp - s) k3(a - logp),  d/dlogp = (logp - a) e^(logp - s)
        forward: e^(a - s) k3(logp - a),     d/dlogp = e^(a - s) expm1(logp - a)
    The value is `_times_w`'s. The gradient is formed as written, in log space: autograd's chain rule for the reverse
    form, w k3(x) - w expm1(x) with x = a - logp, cancels to 0 once x passes ~17 in float32 (~37 in float64), where
    the true gradient is -x w, and its factor w e^x overflows before the gradient does (both directions). The anchor
    and the sampler are constants: they get no gradient. Shapes: any, alike."""

    @staticmethod
    def forward(ctx, logp, anchor, sampler, direction: str, log_scale: float = 0.0):
        reverse = direction == "reverse"
        log_w, x = (logp - sampler, anchor - logp) if reverse else (anchor - sampler, logp - anchor)
        if log_scale != 0:  # the weight times exp(log_scale)
            log_w = log_w + log_scale
        ctx.save_for_backward(log_w, x)
        ctx.reverse = reverse
        return _times_w(log_w, x)

    @staticmethod
    def backward(ctx, grad):
        log_w, x = ctx.saved_tensors
        if ctx.reverse:  # -x w
            sign, log_size = -torch.sign(x), torch.log(x.abs())
        else:  # w expm1(x)
            sign, log_size = torch.sign(x), log_abs_expm1(x)
        return times_exp(grad, sign, log_w + log_size), None, None, None, None  # sign is 0 where x is


def times_exp(grad: torch.Tensor, sign: torch.Tensor, log_size: torch.Tensor) -> torch.Tensor:
    """grad * sign * exp(log_size) for a custom backward, as one exponential of log |grad| + log_size: the factor
    alone may pass the dtype's largest where the product (grad holds beta / N) fits. 0 where grad or sign is 0.
    Shapes: alike (broadcasting)."""
    zero = (grad == 0) | (sign == 0)
    size = torch.exp(torch.where(zero, 0.0, torch.log(grad.abs()) + log_size))
    return torch.where(zero, 0.0, torch.sign(grad) * sign * size)


def weight_times_w(log_w: torch.Tensor, c: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
    """c w = c e^(log w) (a policy loss's -A w), differentiable in log w (c is a constant), where `active` (bool; None:
    everywhere; elsewhere the value is unused and the gradient 0). As c x exp(log w) and backward (g x c) x w,
    autograd's order to the bit, where w and g x c are normal numbers and the product is finite; elsewhere as one
    product in float64 log space (`signed_exp`), finite wherever the result fits. There w alone over- or underflows
    while c w fits (c = 0.5 at log w = 89 in float32 was refused; c = 2e28 at log w = -119 gave 0 for -4e-25), or
    the backward's g x c does (c = 2.7e38 over a normalizer of 0.5 was refused as a gradient overflow where c w / N =
    7.8e37 fits). Shapes: alike."""
    return _WeightTimesW.apply(log_w, c, torch.ones_like(log_w, dtype=torch.bool) if active is None else active)


def weight_times_w_value(log_w: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """c e^(log w) as a value (no gradient): `weight_times_w`'s forward, 0 where c is 0 (also where w overflows).
    Both forms are taken and one chosen per unit, without asking whether any unit needs the log-space one: no host
    sync (it is called on every unclipped loss)."""
    with torch.no_grad():
        w = torch.exp(log_w)
        out = c * w
        bad = ~(torch.isfinite(out) & (w >= torch.finfo(w.dtype).tiny))
        return torch.where(bad, signed_exp(log_w, c).to(out.dtype), out)


class _WeightTimesW(torch.autograd.Function):
    """`weight_times_w`'s product c e^(log w) and its gradient in log w, c e^(log w) (0 where not `active`)."""

    @staticmethod
    def forward(ctx, log_w, c, active):
        w = torch.exp(log_w)
        out = c * w
        ctx.save_for_backward(log_w, c, w, active)
        tiny = torch.finfo(w.dtype).tiny
        bad = active & ~(torch.isfinite(out) & (w >= tiny))
        if bool(bad.any()):
            out = torch.where(bad, signed_exp(log_w, c).to(out.dtype), out)
        return out

    @staticmethod
    def backward(ctx, grad):
        log_w, c, w, active = ctx.saved_tensors
        g = grad * c
        out = g * w
        tiny = torch.finfo(w.dtype).tiny
        normal = (g.abs() >= tiny) | (grad == 0) | (c == 0)
        bad = active & ~(torch.isfinite(out) & (w >= tiny) & normal)
        if bool(bad.any()):
            out = torch.where(bad, signed_exp(log_w, grad, c).to(out.dtype), out)
        return torch.where(active, out, 0.0), None, None


def signed_exp(log_w: torch.Tensor, *factors: torch.Tensor) -> torch.Tensor:
    """prod(factors) e^log_w in float64, as sign x exp(log_w + sum log |factor|): no factor and no partial product
    overflows or underflows first. 0 where a factor is 0. Shapes: alike (broadcasting)."""
    f64 = torch.float64
    sign, log_size = torch.ones_like(log_w, dtype=f64), log_w.to(f64)
    for c in factors:
        c = c.to(f64)
        sign, log_size = sign * torch.sign(c), log_size + torch.log(c.abs())
    return torch.where(sign == 0, 0.0, sign * torch.exp(torch.where(sign == 0, 0.0, log_size)))


def _times_w(log_w: torch.Tensor, log_r: torch.Tensor) -> torch.Tensor:
    """exp(log_w) * k3(log_r), and 0 where k3 is 0: there the product is 0 whatever w is, while w = inf would give
    inf * 0 = NaN. Where the product is not finite while k3 is not 0 (w underflows while k3 overflows, log_r past
    ~88 in float32; or w overflows while k3 is tiny, |log_r| ~ 1e-7 under log_w = 100: e^100 x 5e-15 = 4.4e28) it
    is taken in log space, exp(log_w + log k3(log_r)), finite wherever the product is. So is it where a factor is below
    the dtype's smallest normal number while log_r is not 0 (w = e^-110 under k3(80) = e^80 in float32: the product
    e^-30 was 0, and a denormal w kept a few bits; k3 of |log_r| < 1.5e-19 underflows as x^2 / 2, read as k3 = 0).
    In float32 these products are first formed in float64, where both factors are normal numbers, and rounded once
    (exp of a rounded log-space sum near 88 is off by up to ~5e-6). Elsewhere exactly exp(log_w) * k3(log_r). A value:
    `_WeightedK3` forms the gradient. Shapes: any, alike."""
    term = k3(log_r)
    zero = term == 0
    w = torch.exp(torch.where(zero, 0.0, log_w))
    direct = w * term
    tiny = torch.finfo(term.dtype).tiny
    bad = (~torch.isfinite(direct) & ~zero) | (((w < tiny) | (term < tiny)) & (log_r != 0))
    if not bool(bad.any()):
        return direct
    log_r = torch.where(bad, log_r, 1.0)
    if term.dtype == torch.float32:  # there the product in float64 (both factors normal): log space loses |x| ulps
        log_w, log_r = log_w.double(), log_r.double()
    w, term, tiny = torch.exp(log_w), k3(log_r), torch.finfo(log_w.dtype).tiny
    fine = torch.isfinite(w * term) & (w >= tiny) & (term >= tiny)
    return torch.where(bad, torch.where(fine, w * term, torch.exp(log_w + log_k3(log_r))).to(direct.dtype), direct)


def log_abs_expm1(x: torch.Tensor) -> torch.Tensor:
    """log |e^x - 1| without overflow: x + log(1 - e^-x) for x > 0, log(1 - e^x) for x < 0; -inf at 0. Any shape."""
    return torch.where(x > 0, x, 0.0) + torch.log(-torch.expm1(-x.abs()))


def log_k3(x: torch.Tensor) -> torch.Tensor:
    """log k3(x) = log(e^x - 1 - x) without overflow, for any x (-inf at 0): `_log_k3` above 1; below |x| = 0.1 the
    series x^2 / 2 (1 + x / 3 + x^2 / 12 + ...) (k3's expm1(x) - x keeps only ~2 eps / |x| of relative precision
    there: 1e-4 at 1e-3 in float32); directly between. A value (no backward). Any shape."""
    big, small = x > 1, x.abs() < 0.1
    mid = torch.where(big | small, 0.5, x)
    out = torch.where(big, _log_k3(torch.where(big, x, 2.0)), torch.log(k3(mid)))
    s = torch.where(small, x, 0.05)
    return torch.where(small, 2 * torch.log(s.abs()) - math.log(2.0) + torch.log1p(_k3_tail(s)), out)


def _log_k3(x: torch.Tensor) -> torch.Tensor:
    """log k3(x) = log(e^x - 1 - x) = x + log1p(-(1 + x) e^-x), for x > 1 (no overflow of e^x). (1 + x) e^-x is
    taken as exp(log1p(x) - x): backward then multiplies the incoming gradient by the small factor first, where
    (1 + x) times a large gradient overflowed before e^-x = 0 (inf * 0 = NaN)."""
    return x + torch.log1p(-torch.exp(torch.log1p(x) - x))


def _constants(*logps: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The reference's or sampler's log-probs detached: constants, as the losses take them (a ref_logp that required
    grad got the uncorrected k3's and kl_penalty's gradient, e.g. into a reference sharing the policy's weights)."""
    return tuple(None if t is None else t.detach() for t in logps)


def _why(other: str) -> str:
    return f"in half precision the small differences logp - {other} are lost"


def _unmasked(mask: torch.Tensor | None, *logps: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The log-probs with 0 at padding (mask 0), so that no exponential meets what padding holds: -inf or -1e4 there
    gives NaN in backward even when the caller masks the output (0 * inf). No mask: unchanged."""
    if mask is None:
        return logps
    if mask.shape != logps[0].shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)} but must have the shape of logp {tuple(logps[0].shape)}")
    if mask.dtype != torch.bool and (mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all())):
        raise ValueError("mask must be bool or contain only 0 and 1")  # a NaN or 0.5 would keep padding in
    keep = mask if mask.dtype == torch.bool else mask != 0
    return tuple(None if t is None else torch.where(keep, t, torch.zeros((), dtype=t.dtype, device=t.device))
                 for t in logps)  # fmt: skip


def _clamp(v, name: str) -> float | None:
    """A clamp of `kl_penalty` as a Python float (numpy's scalars of any width and 0-dim arrays or tensors taken as
    their value), or None; ValueError unless finite and > 0."""
    v = scalar(v, name)
    check_size(v, name)  # float() of 10**400 raised OverflowError
    if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf):
        raise ValueError(f"{name} must be a finite number > 0 (or None), got {v!r}")
    return None if v is None else float(v)


# verl `kl_penalty` names (with the aliases of recent verl) -> what they compute from lr = logp - ref_logp.
KL_PENALTY_NAMES = ("abs", "k1", "k2", "k3", "kl", "low_var_kl", "mse")


def kl_penalty(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    name: str,
    *,
    value_clamp: float | None = None,
    log_ratio_clamp: float | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """verl's per-token `kl_penalty(logprob, ref_logprob, name)`, with every clamp an explicit, off-by-default option.

    lr = logp - ref_logp:
        kl,  k1          lr                          (k1 of KL(pi || ref) on pi samples)
        abs              |lr|
        mse, k2          lr^2 / 2
        low_var_kl, k3   exp(-lr) - 1 + lr = k3(ref/pi)    (GRPO's estimator)

    verl clamps `low_var_kl` to [-10, 10] (`value_clamp=10.0`; the only clamp in the verl 0.2 fork the RPG authors
    ran) and recent verl also clamps -lr to [-20, 20] before the exp (`log_ratio_clamp=20.0`). Both clamps zero the
    gradient where they bind (0, not NaN, even where exp overflows); they apply to `low_var_kl`/`k3` only
    (ValueError otherwise).

    Shapes: logp, ref_logp, mask: (B, T) -> (B, T); logp and ref_logp float32 or float64, of one dtype (half precision
    is refused, as by the losses); ref_logp is a constant (detached). `mask` (bool or 0/1): 0 at padding with a zero
    gradient, whatever the padding holds; without it, padding must hold finite log-probs close to ref_logp (-inf there
    gives a NaN gradient even after the output is masked, and no clamp prevents it).
    """
    if name not in KL_PENALTY_NAMES:
        raise ValueError(f"unknown kl_penalty {name!r}; valid: {', '.join(KL_PENALTY_NAMES)}")
    require_tensors(("mask",), logp=logp, ref_logp=ref_logp, mask=mask)
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} must have the same shape")
    require_floats("kl_penalty", "log-probs", _why("ref_logp"), logp=logp, ref_logp=ref_logp)
    is_k3 = name in ("low_var_kl", "k3")
    if (value_clamp is not None or log_ratio_clamp is not None) and not is_k3:
        raise ValueError(f"value_clamp/log_ratio_clamp apply to low_var_kl/k3 only, not {name!r}")
    value_clamp, log_ratio_clamp = _clamp(value_clamp, "value_clamp"), _clamp(log_ratio_clamp, "log_ratio_clamp")
    value_clamp, log_ratio_clamp = dtype_bound(value_clamp, logp.dtype), dtype_bound(log_ratio_clamp, logp.dtype)
    logp = finite_gradient(logp, "kl_penalty", KL_WHY)  # a finite term whose gradient overflows: one line
    logp, ref_logp = _unmasked(mask, logp, *_constants(ref_logp))
    lr = logp - ref_logp
    if name in ("kl", "k1"):
        return lr
    if name == "abs":
        return lr.abs()
    if name in ("mse", "k2"):
        return 0.5 * lr.square()
    neg_lr = -lr  # log(ref / pi)
    if log_ratio_clamp is not None:
        neg_lr = neg_lr.clamp(-log_ratio_clamp, log_ratio_clamp)
    if value_clamp is None:
        return k3(neg_lr)
    with torch.no_grad():  # where the clamp binds, evaluate k3 at 0: an overflowed exp's backward (inf * 0) is NaN
        raw = k3(neg_lr.detach())  # never NaN: expm1(x) - x is +inf when it overflows
        clamped = raw.abs() > value_clamp
    return torch.where(clamped, raw.clamp(-value_clamp, value_clamp), k3(torch.where(clamped, 0.0, neg_lr)))


__all__ = ["KL_PENALTY_NAMES", "anchored_kl_term", "grpo_kl_term", "k1", "k2", "k3", "kl_penalty"]
