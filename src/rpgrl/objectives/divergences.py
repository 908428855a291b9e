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

from rpgrl.objectives.kl import log_abs_expm1, log_k3, times_exp
from rpgrl.options import DIVERGENCES  # noqa: F401 (declared with the other RPG options)


def _check(divergence: str) -> None:
    if divergence not in DIVERGENCES:
        raise ValueError(f"unknown divergence {divergence!r}; valid: {', '.join(DIVERGENCES)}")


def phi(divergence: str, log_u: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """phi(u) of the table above; `phi(1) = 0` for all four."""
    _check(divergence)
    if divergence == "fkl":
        return -log_u
    u = torch.exp(log_u) if u is None else u
    if divergence == "rkl":
        return u * log_u
    if divergence == "ufkl":
        return (u - 1) - log_u
    return u * log_u - (u - 1)  # urkl


def u_dphi(divergence: str, log_u: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """u * phi'(u): the derivative of phi(u) with respect to log u (so d(rho phi(u))/d logp = rho u phi'(u))."""
    _check(divergence)
    if divergence == "fkl":
        return torch.full_like(log_u, -1.0)
    u = torch.exp(log_u) if u is None else u
    if divergence == "rkl":
        return u * (log_u + 1)
    if divergence == "ufkl":
        return u - 1
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


def phi_over_u(divergence: str, log_u: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """phi(u) / u, so that `A_hat = A - beta * phi(u)/u` gives `-w * A_hat = -w A + beta * rho * phi(u)` exactly
    (the per-sample exact Algorithm-1 advantage analogue, spec 4.1 last bullet)."""
    _check(divergence)
    if divergence == "rkl":
        return log_u
    inv_u = torch.exp(-log_u) if u is None else 1 / u
    if divergence == "fkl":
        return -log_u * inv_u
    if divergence == "ufkl":
        return 1 - (1 + log_u) * inv_u
    return log_u - 1 + inv_u  # urkl


def direct_ok(log_u: torch.Tensor, log_rho: torch.Tensor) -> torch.Tensor:
    """Where rho = exp(log_rho) and u = exp(log_u) are both normal floats of their dtype and every function of u
    here (u log u, u (log u + 1), ...) fits it, as does rho times |log u| (bool, their shape), so that rho times
    a function of u is exact to rounding and so is its backward. Elsewhere (a separate anchor far from the sampler:
    a sequence-level log rho summed over a long response passes float32's ~87 easily) rho or u is 0, a denormal or
    inf, or u log u overflows under an rho that brings the product back (log u = 85, log rho = -85: rho u log u =
    85), and the product is 0 * inf = NaN, inf times a tiny value, or a denormal's few digits: the terms are then
    written in w = rho u and rho (`rho_u_dphi`, `rho_phi`, `regularizer`)."""
    info = torch.finfo(log_u.dtype)
    limit, log_max = -math.log(info.tiny), math.log(info.max)  # 87.3 / 708.4 and 88.7 / 709.8 (float32 / 64)
    top = log_max - math.log1p(log_max)  # u (log u + 1) fits below: 84.2 / 703.2
    lu = log_u.detach()
    ok = (lu > -limit) & (lu < top) & (log_rho.abs() < limit)
    # backward multiplies rho into phi's factor log u before u: keep rho |log u| within the dtype (log u = -87, log
    # rho = 87). Only where it is large: near log u = 0 the w-and-rho forms lose precision (urkl's w (log u - 1) + rho
    # cancels), and rho itself is a normal float here; what the loss multiplies in first (beta, 1 / normalizer) may
    # still overflow an intermediate, which the losses' backward guard reports
    return ok & (log_rho + torch.log(lu.abs()) < log_max)


def _in_w(divergence: str, lu: torch.Tensor, lr: torch.Tensor, derivative: bool) -> torch.Tensor:
    """rho phi(u) (or rho u phi'(u) with `derivative`) from w = exp(log u + log rho) and rho, never their product;
    0 where log u = 0 for the terms that vanish at u = 1, which w and rho alone could give as inf - inf. ufkl's,
    rho k3(u) and rho (u - 1), are taken as exp(log rho + log of the factor): as w - rho (1 + log u) they were -inf
    or NaN where rho overflows under u < 1 (log rho = 88.73, log u = -0.3: a term of 1.4e37)."""
    rho, w = torch.exp(lr), torch.exp(lu + lr)
    one = torch.where(lu == 0, 1.0, lu)  # log u with 1 where it is 0: the log forms' backward stays finite there
    if derivative:  # u phi'(u) at u = 1: fkl -1, rkl 1, ufkl and urkl 0
        if divergence in ("fkl", "rkl"):
            return -rho if divergence == "fkl" else w * (lu + 1)
        ufkl = torch.sign(lu) * torch.exp(lr + log_abs_expm1(one))
        return torch.where(lu == 0, 0.0, ufkl if divergence == "ufkl" else w * lu)
    if divergence == "fkl":
        val = -rho * lu
    elif divergence == "rkl":
        val = w * lu
    else:
        val = _RhoK3.apply(one, lr) if divergence == "ufkl" else w * (lu - 1) + rho
    return torch.where(lu == 0, 0.0, val)  # phi(1) = 0 for all four


class _RhoK3(torch.autograd.Function):
    """rho k3(u) = exp(log rho + log k3(u)) with its derivative in log u, rho (u - 1), formed as exp(log rho +
    log |u - 1|): autograd's would divide by k3 first (rho k3 / k3 passes float32's largest where k3 is small)."""

    @staticmethod
    def forward(ctx, log_u: torch.Tensor, log_rho: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(log_u, log_rho)
        return torch.exp(log_rho + log_k3(log_u))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        log_u, log_rho = ctx.saved_tensors
        return times_exp(grad, torch.sign(log_u), log_rho + log_abs_expm1(log_u)), None


def rho_u_dphi(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor) -> torch.Tensor:
    """rho * u * phi'(u) (the REINFORCE weight's KL part without -beta): `u_dphi` times rho where rho and u are
    normal floats (`direct_ok`), else in w and rho: fkl -rho, rkl w (log u + 1), ufkl rho (u - 1) = sign(log u)
    exp(log rho + log |u - 1|), urkl w log u. For a detached coefficient. Shapes: any, alike."""
    _check(divergence)
    ok = direct_ok(log_u, log_rho)
    direct = u_dphi(divergence, log_u) * torch.exp(log_rho)
    return direct if bool(ok.all()) else torch.where(ok, direct, _in_w(divergence, log_u, log_rho, True))


def rho_phi(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor) -> torch.Tensor:
    """rho * phi(u), differentiable in `log_u` (`log_rho` constant): the separate KL term of the differentiable
    surrogate with an anchor that is not the sampler. Exactly `exp(log_rho) * phi(log_u)` where rho and u are normal
    floats (`direct_ok`); elsewhere in w and rho, each form evaluated only on its own units (the other's inputs set
    to 0), so neither backward meets inf * 0. Shapes: any, alike."""
    _check(divergence)
    ok = direct_ok(log_u, log_rho)
    if bool(ok.all()):
        return torch.exp(log_rho) * phi(divergence, log_u)
    zero = torch.zeros_like(log_u)
    # u = 1 exactly (pi_theta = pi_anchor, as right after an anchor reset) under an rho that is not a normal float:
    # the term is 0, and so is its gradient for ufkl/urkl (fkl/rkl's, -+rho, overflows: `_gradient_weight_finite`
    # refuses it); any form of it multiplies rho by 0, so those units take neither form's inputs
    off = ok | (log_u.detach() == 0)
    direct = torch.exp(torch.where(ok, log_rho, 0.0)) * phi(divergence, torch.where(ok, log_u, zero))
    alt = _in_w(divergence, torch.where(off, zero, log_u), torch.where(off, 0.0, log_rho), False)
    return torch.where(ok, direct, alt)


def regularizer(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor | None = None) -> torch.Tensor:
    """rho * phi(u): the per-sample divergence term of the differentiable surrogate; its mean under the sampler is D.

    `log_rho = log pi_a - log pi_s` (constant); None means the anchor is the sampler (rho = 1). For reporting: written
    so that it is never NaN (an overflowing term is +inf, e.g. urkl as u (log u - 1) + 1, not inf - inf). Where rho
    or u is not a normal float (`direct_ok`) the term is taken in w = rho u and rho: fkl -rho log u, ufkl
    exp(log rho + log k3(u)), rkl w log u, urkl w (log u - 1) + rho."""
    _check(divergence)
    if divergence == "fkl":
        val = -log_u
    elif divergence == "ufkl":
        val = torch.expm1(log_u) - log_u
    else:
        u = torch.exp(log_u)
        val = u * log_u if divergence == "rkl" else u * (log_u - 1) + 1
    if log_rho is None:
        return val
    out = torch.where(val == 0, 0.0, torch.exp(log_rho) * val)  # rho = inf times phi(1) = 0 is 0, not NaN
    ok = direct_ok(log_u, log_rho)
    if bool(ok.all()):
        return out
    # still NaN in w and rho: both overflow (inf - inf), a term of ufkl/urkl, both >= 0: +inf
    alt = torch.nan_to_num(_in_w(divergence, log_u, log_rho, False), nan=math.inf, posinf=math.inf, neginf=-math.inf)
    return torch.where(ok, out, alt)
