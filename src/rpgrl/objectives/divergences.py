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


def rho_u_dphi(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor) -> torch.Tensor:
    """rho * u * phi'(u) written with w = rho u and rho, never their product: where rho underflows and u overflows
    (a sequence-level log-ratio summed over a long response, |log rho| past ~88 in float32) rho * (u phi'(u)) is
    0 * inf = NaN, while fkl -rho, rkl w (log u + 1), ufkl w - rho and urkl w log u are finite. Not a drop-in
    for the direct product in general: where both are finite they differ by rounding (callers use it where the
    direct product is not finite). Shapes: any, log_u and log_rho alike."""
    _check(divergence)
    rho = torch.exp(log_rho)
    if divergence == "fkl":
        return -rho
    w = torch.exp(log_u + log_rho)
    if divergence == "rkl":
        return w * (log_u + 1)
    return w - rho if divergence == "ufkl" else w * log_u


def rho_phi(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor) -> torch.Tensor:
    """rho * phi(u), differentiable in `log_u` (`log_rho` constant): the separate KL term of the differentiable
    surrogate with an anchor that is not the sampler. Where the direct product is not finite (rho underflows while u
    overflows, or the reverse: |log rho| past ~88 in float32 at sequence level) the term is written in w = rho u and
    rho as in `regularizer`, each form evaluated only on its own units, so neither backward meets inf * 0. Where
    every unit's direct product is finite, it is exactly `exp(log_rho) * phi(log_u)`. Shapes: any, alike."""
    with torch.no_grad():
        ok = torch.isfinite(torch.exp(log_rho) * phi(divergence, log_u.detach()))
    if bool(ok.all()):
        return torch.exp(log_rho) * phi(divergence, log_u)
    zero = torch.zeros_like(log_u)
    direct = torch.exp(torch.where(ok, log_rho, 0.0)) * phi(divergence, torch.where(ok, log_u, zero))
    lu, lr = torch.where(ok, zero, log_u), torch.where(ok, 0.0, log_rho)  # phi(1) = 0 on the direct form's units
    rho, w = torch.exp(lr), torch.exp(lu + lr)
    if divergence == "fkl":
        alt = -rho * lu
    elif divergence == "rkl":
        alt = w * lu
    else:
        alt = w - rho * (1 + lu) if divergence == "ufkl" else w * (lu - 1) + rho
    return torch.where(ok, direct, alt)


def regularizer(divergence: str, log_u: torch.Tensor, log_rho: torch.Tensor | None = None) -> torch.Tensor:
    """rho * phi(u): the per-sample divergence term of the differentiable surrogate; its mean under the sampler is D.

    `log_rho = log pi_a - log pi_s` (constant); None means the anchor is the sampler (rho = 1). For reporting: written
    so that it is never NaN (an overflowing term is +inf, e.g. urkl as u (log u - 1) + 1, not inf - inf). Where rho
    underflows while u overflows (0 * inf) the term is taken in w = rho u and rho: ufkl w - rho (1 + log u), rkl
    w log u, urkl w (log u - 1) + rho."""
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
    rho = torch.exp(log_rho)
    out = torch.where(val == 0, 0.0, rho * val)  # rho = inf times phi(1) = 0 is 0, not NaN
    nan = torch.isnan(out)
    if not bool(nan.any()):
        return out
    w = torch.exp(log_u + log_rho)
    if divergence == "ufkl":
        alt = w - rho * (1 + log_u)
    else:
        alt = w * log_u if divergence == "rkl" else w * (log_u - 1) + rho
    # still NaN: w and rho both overflow (inf - inf), a term of ufkl/urkl, both >= 0: +inf
    return torch.where(nan, torch.nan_to_num(alt, nan=math.inf, posinf=math.inf, neginf=-math.inf), out)
