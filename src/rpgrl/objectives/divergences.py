"""The four RPG divergences as scalar functions of a log-ratio (spec 2.1, paper Table 1).

Every variant is defined by one scalar function `phi` of the ratio `u = pi_theta / pi_a` (`pi_a` the KL anchor):

    D(theta) = E_{x~pi_a}[ phi(u(x)) ]        differentiable surrogate term:  rho * phi(u)
    REINFORCE-weight KL part:                  C = -beta * rho * u * phi'(u)

with samples from the sampler `pi_s`, `rho = pi_a / pi_s` (constant) and `w = rho * u = pi_theta / pi_s`. When the
anchor is the sampler (the paper's setting), `rho = 1` and `u = w`.

| divergence | D                     | phi(u)                | u * phi'(u)   | phi'(u)     |
|------------|-----------------------|-----------------------|---------------|-------------|
| fkl        | KL(pi_a || pi_theta)  | -log u                | -1            | -1/u        |
| rkl        | KL(pi_theta || pi_a)  | u log u               | u (log u + 1) | log u + 1   |
| ufkl       | UKL(pi_a || pi_theta) | u - 1 - log u = k3(u) | u - 1         | 1 - 1/u     |
| urkl       | UKL(pi_theta || pi_a) | u log u - u + 1       | u log u       | log u       |

All functions take `log_u` (any shape: `(B, T)` per token, `(B,)` per sequence) and optionally `u = exp(log_u)` when
the caller already has it, so no exponential is computed twice. They work in log space: nothing exponentiates a
quantity that is not itself the answer (a sequence-level `log_u` of -1e4 gives finite values).

ufkl/urkl versus fkl/rkl (spec 2.3, 11 item 20): for a normalised policy the mass term of UKL is a constant, so the
U-variants have the same objective and expected gradient as fkl/rkl; their REINFORCE weights differ only by the
zero-mean control variate -beta w (ufkl) or +beta w (urkl). All four stay selectable as the paper's rows, but they are
estimators of one gradient, not different regularisers (docs/paper-notes.md).
"""

from __future__ import annotations

import math

import torch

from rpgrl.objectives.kl import K3_SERIES_MAX, k3, log_abs_expm1, log_k3, times_exp
from rpgrl.options import DIVERGENCES  # noqa: F401 (declared with the other RPG options)


def _check(divergence: str) -> None:
    if divergence not in DIVERGENCES:
        raise ValueError(f"unknown divergence {divergence!r}; valid: {', '.join(DIVERGENCES)}")


def phi(divergence: str, log_u: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """phi(u) of the table above; `phi(1) = 0` for all four. ufkl's is `kl.k3(log u)` and urkl's u k3(-log u) below
    |log u| = 0.5 (`_urkl`): as (u - 1) - log u and u log u - (u - 1) they cancelled to ~(log u)^2 / 2 there, keeping
    ~2 eps / (log u)^2 of relative precision (all of it at log u = -1e-7 in float32: -1.9e-8 for 5e-15), and their
    gradients ~eps / |log u|."""
    _check(divergence)
    if divergence == "fkl":
        return -log_u
    if divergence == "ufkl":
        return k3(log_u)
    u = torch.exp(log_u) if u is None else u
    if divergence == "rkl":
        return u * log_u
    return _urkl(log_u, u, u * log_u - (u - 1))


def _urkl(log_u: torch.Tensor, u: torch.Tensor, far: torch.Tensor) -> torch.Tensor:
    """u log u - u + 1: `far` (the caller's form of it), and u k3(-log u) below |log u| = 0.5, where `far` cancels.
    The near form sees only its own units (log u = 0, u = 1 elsewhere: u k3(-log u) is 0 x inf where u underflows)."""
    small = _near_one(log_u)
    if small is None:
        return far
    return torch.where(small, torch.where(small, u, 1.0) * k3(-torch.where(small, log_u, 0.0)), far)


def _near_one(log_u: torch.Tensor) -> torch.Tensor | None:
    """Where |log u| < `kl.K3_SERIES_MAX` (the units that take the k3 forms near u = 1), or None if none does."""
    small = log_u.detach().abs() < K3_SERIES_MAX
    return small if bool(small.any()) else None


def u_dphi(divergence: str, log_u: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """u * phi'(u): the derivative of phi(u) with respect to log u (so d(rho phi(u))/d logp = rho u phi'(u)). ufkl's
    u - 1 is expm1(log u) below |log u| = `kl.K3_SERIES_MAX`: as u - 1 it kept ~eps / |log u| of relative precision
    there (6% at log u = 1e-6 in float32, 0 below 6e-8): the REINFORCE gradient's KL part on-policy. (Chosen per unit
    without asking whether any unit is near 1: no host sync in the loss's hot path.)"""
    _check(divergence)
    if divergence == "fkl":
        return torch.full_like(log_u, -1.0)
    u = torch.exp(log_u) if u is None else u
    if divergence == "rkl":
        return u * (log_u + 1)
    if divergence == "ufkl":
        small = log_u.detach().abs() < K3_SERIES_MAX
        return torch.where(small, torch.expm1(torch.where(small, log_u, 0.0)), u - 1)
    return u * log_u  # urkl


def dphi(divergence: str, log_u: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """phi'(u). Equals C / (-beta w): the KL part of the effective advantage A' = A - beta phi'(u) (spec 4.2).

    For fkl/ufkl this is 1/u, which is +inf when u underflows; only its sign is used downstream."""
    _check(divergence)
    if divergence == "rkl":
        return log_u + 1
    if divergence == "urkl":
        return log_u
    inv_u = torch.exp(-log_u) if u is None else 1 / u
    return -inv_u if divergence == "fkl" else 1 - inv_u


def phi_over_u(divergence: str, log_u: torch.Tensor, u: torch.Tensor | None = None, scale: float = 1.0) -> torch.Tensor:
    """scale x phi(u) / u, so that `A_hat = A - phi_over_u(u, scale=beta)` gives `-w * A_hat = -w A + beta * rho *
    phi(u)` exactly (the per-sample exact Algorithm-1 advantage analogue, spec 4.1 last bullet). `scale` (> 0)
    multiplies 1/u in before it can leave the dtype: fkl's beta (-log u) / u at log u = -90 is 8.8e36 in float32, where
    1/u is not a float32 number. Below |log u| = 0.5 ufkl's is (scale / u) k3(log u) and urkl's scale k3(-log u)
    (`kl.k3`): as scale - (1 + log u) / u and scale (log u - 1) + 1/u they cancelled to ~(log u)^2 / 2."""
    _check(divergence)
    if divergence == "rkl":
        return log_u if scale == 1.0 else scale * log_u
    s_inv = _scaled_inverse(log_u, u, scale)
    if divergence == "fkl":
        return -log_u * s_inv
    far = scale - (1 + log_u) * s_inv if divergence == "ufkl" else scale * (log_u - 1) + s_inv
    small = _near_one(log_u)
    if small is None:
        return far
    lu = torch.where(small, log_u, 0.0)  # the near form on its own units (k3 of a large log u overflows)
    near = torch.where(small, s_inv, scale) * k3(lu) if divergence == "ufkl" else scale * k3(-lu)
    return torch.where(small, near, far)


def _scaled_inverse(log_u: torch.Tensor, u: torch.Tensor | None, scale: float) -> torch.Tensor:
    """scale / u: as scale x exp(-log u) (or scale / u) where 1/u and the result are normal floats, else as exp(log
    scale - log u), each form on its own units (the other's set to log u = 0), so neither backward meets 0 x inf."""
    if scale == 1.0:
        return torch.exp(-log_u) if u is None else 1 / u
    info = torch.finfo(log_u.dtype)
    lo, hi = math.log(info.tiny), math.log(info.max)
    lu, log_scale = log_u.detach(), math.log(scale)
    ok = (-lu > lo) & (-lu < hi) & (log_scale - lu > lo) & (log_scale - lu < hi)
    if bool(ok.all()):
        return scale * (torch.exp(-log_u) if u is None else 1 / u)
    direct = scale * torch.exp(-torch.where(ok, log_u, 0.0))
    return torch.where(ok, direct, torch.exp(log_scale - torch.where(ok, 0.0, log_u)))


def direct_ok(log_u: torch.Tensor, log_rho: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Where rho = exp(log_rho) and u = exp(log_u) are both normal floats of their dtype and every function of u
    here (u log u, u (log u + 1), ...) fits it, as does scale x rho x (1 + |log u|) (bool, their shape), so that
    scale x rho times a function of u is exact to rounding and so is its backward. Elsewhere (a separate anchor far
    from the sampler: a sequence-level log rho summed over a long response passes float32's ~87 easily) rho or u is
    0, a denormal or inf, or u log u overflows under an rho that brings the product back (log u = 85, log rho = -85:
    rho u log u = 85), and the product is 0 * inf = NaN, inf times a tiny value, or a denormal's few digits: the
    terms are then taken in log space, from log u and log rho (`_in_w`; `rho_u_dphi`, `rho_phi`, `regularizer`)."""
    info = torch.finfo(log_u.dtype)
    limit, log_max = -math.log(info.tiny), math.log(info.max)  # 87.3 / 708.4 and 88.7 / 709.8 (float32 / 64)
    top = log_max - math.log1p(log_max)  # u (log u + 1) fits below: 84.2 / 703.2
    lu = log_u.detach()
    ok = (lu > -limit) & (lu < top) & (log_rho.abs() < limit)
    # backward multiplies scale x rho into phi's factors (log u, log u + 1, ...) before u: keep scale rho (1 + |log
    # u|) within the dtype (log u = -87, log rho = 87; beta = 10 at log rho = 83), and scale rho a normal float (beta
    # = 1e-30 at log rho = -60 gave 0). Near log u = 0 this asks no more than rho itself. What the loss multiplies in
    # first (1 / normalizer) may still overflow an intermediate, which the losses' backward guard reports
    log_scaled = log_rho + math.log(scale)
    return ok & (log_scaled > -limit) & (log_scaled + torch.log1p(lu.abs()) < log_max)


def _signed_logs(divergence: str, lu: torch.Tensor, lr: torch.Tensor, derivative: bool):
    """(sign, log size) of rho phi(u) (or of rho u phi'(u) with `derivative`), from log u and log rho alone:
    fkl -rho log u, rkl w log u, ufkl rho k3(log u), urkl w k3(-log u) (u log u - u + 1 = u k3(-log u)); their
    derivatives in log u -rho, w (log u + 1), rho (u - 1), w log u. log |0| = -inf gives the 0 at u = 1."""
    lw = lu + lr
    if derivative:
        if divergence == "fkl":
            return torch.full_like(lu, -1.0), lr
        if divergence == "rkl":
            return torch.sign(lu + 1), lw + torch.log(torch.abs(lu + 1))
        if divergence == "ufkl":
            return torch.sign(lu), lr + log_abs_expm1(lu)
        return torch.sign(lu), lw + torch.log(lu.abs())
    if divergence == "fkl":
        return -torch.sign(lu), lr + torch.log(lu.abs())
    if divergence == "rkl":
        return torch.sign(lu), lw + torch.log(lu.abs())
    if divergence == "ufkl":
        return torch.ones_like(lu), lr + log_k3(lu)
    return torch.ones_like(lu), lw + log_k3(-lu)


def _in_w(divergence: str, lu: torch.Tensor, lr: torch.Tensor, derivative: bool) -> torch.Tensor:
    """rho phi(u) (or rho u phi'(u) with `derivative`) as sign x exp(log size), each size's log taken from log u
    and log rho (`_signed_logs`), so the result is finite wherever it fits the dtype, whatever rho, u or w alone
    do: as w (log u - 1) + rho, urkl was inf - inf = NaN at log rho = 90, log u = -0.01, where the term is 6e34 in
    float32. Differentiable in `lu` through `_RhoPhi` (never autograd's product rule: ufkl's divided by k3 first).
    The exponent costs ~|log size| eps of relative precision, so the direct forms stay where they fit (`direct_ok`)."""
    if derivative:
        sign, log_size = _signed_logs(divergence, lu, lr, True)
        return sign * torch.exp(log_size)
    return _RhoPhi.apply(lu, lr, divergence)


class _RhoPhi(torch.autograd.Function):
    """rho phi(u) = sign exp(log size) (`_signed_logs`), with its derivative in log u, rho u phi'(u), in the same
    form: the incoming gradient is multiplied in log space (`times_exp`), before the factor alone can overflow."""

    @staticmethod
    def forward(ctx, log_u: torch.Tensor, log_rho: torch.Tensor, divergence: str) -> torch.Tensor:
        ctx.save_for_backward(log_u, log_rho)
        ctx.divergence = divergence
        sign, log_size = _signed_logs(divergence, log_u, log_rho, False)
        return sign * torch.exp(log_size)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        log_u, log_rho = ctx.saved_tensors
        return times_exp(grad, *_signed_logs(ctx.divergence, log_u, log_rho, True)), None, None


def rho_u_dphi(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """scale x rho x u x phi'(u) (the REINFORCE weight's KL part, -C, with `scale` = beta > 0 multiplied in before
    anything can overflow): `u_dphi` times scale x rho where that fits (`direct_ok`), else in log space (`_in_w`):
    fkl -rho, rkl w (log u + 1), ufkl rho (u - 1), urkl w log u, each as sign x exp(log size). For a detached
    coefficient. Shapes: any, alike."""
    _check(divergence)
    ok = direct_ok(log_u, log_rho, scale)
    direct = u_dphi(divergence, log_u) * (scale * torch.exp(log_rho))
    if bool(ok.all()):
        return direct
    return torch.where(ok, direct, _in_w(divergence, log_u, log_rho + math.log(scale), True))


def rho_phi(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """scale x rho x phi(u), differentiable in `log_u` (`log_rho` constant; `scale` > 0, a loss's beta, multiplied
    in before anything can overflow: beta rho phi(u) may fit where rho phi(u) does not): the KL term of the
    differentiable surrogate with an anchor that is not the sampler. Exactly `scale * exp(log_rho) * phi(log_u)`
    where that and its backward fit (`direct_ok`); elsewhere in log space (`_in_w`, which has u = 1's zero and its
    gradient, -+rho for fkl / rkl, without meeting 0 x inf), each form evaluated only on its own units (the other's
    inputs set to 0), so neither backward meets inf * 0. Shapes: any, alike."""
    _check(divergence)
    ok = direct_ok(log_u, log_rho, scale)
    if bool(ok.all()):
        return (scale * torch.exp(log_rho)) * phi(divergence, log_u)
    zero = torch.zeros_like(log_u)
    direct = (scale * torch.exp(torch.where(ok, log_rho, 0.0))) * phi(divergence, torch.where(ok, log_u, zero))
    alt = _in_w(divergence, torch.where(ok, zero, log_u), torch.where(ok, 0.0, log_rho + math.log(scale)), False)
    return torch.where(ok, direct, alt)


def regularizer(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor | None = None) -> torch.Tensor:
    """rho * phi(u): the per-sample divergence term of the differentiable surrogate; its mean under the sampler is D.

    `log_rho = log pi_a - log pi_s` (constant); None means the anchor is the sampler (rho = 1). For reporting: written
    so that it is never NaN (an overflowing term is +inf, e.g. urkl as u (log u - 1) + 1, not inf - inf). Where rho
    or u is not a normal float (`direct_ok`) the term is taken in log space (`_in_w`)."""
    _check(divergence)
    if divergence == "fkl":
        val = -log_u
    elif divergence == "ufkl":
        val = k3(log_u)
    else:
        u = torch.exp(log_u)
        val = u * log_u if divergence == "rkl" else _urkl(log_u, u, u * (log_u - 1) + 1)
    if log_rho is None:
        return val
    out = torch.where(val == 0, 0.0, torch.exp(log_rho) * val)  # rho = inf times phi(1) = 0 is 0, not NaN
    ok = direct_ok(log_u, log_rho)
    if bool(ok.all()):
        return out
    return torch.where(ok, out, _in_w(divergence, log_u, log_rho, False))  # +-inf where it overflows, never NaN


def log_regularizer(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log |rho phi(u)|) of `regularizer`'s term, from log u and log rho alone (log |0| = -inf at u = 1): a
    term past the dtype's largest number as a sign and a finite log, for a metric that scales it (beta) before it
    bounds it. A value, no host sync. Shapes: any, alike."""
    _check(divergence)
    return _signed_logs(divergence, log_u, log_rho, False)
