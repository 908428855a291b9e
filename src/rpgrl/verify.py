"""`rpgrl verify`: prove every RPG surrogate exact by enumerating a small autoregressive policy (float64, CPU).

A tabular policy (vocabulary V, responses of at most L tokens, token 0 = EOS) is small enough to list every
response x with its exact probability. For each variant, the pi_old-weighted sum of per-response surrogate gradients
sum_x pi_old(x) grad l(x) is compared with the exact gradient of the objective that variant claims to follow, at a
theta != theta_old:

  sequence level     -grad J,  J = E_theta[R] - beta D(pi_theta, pi_old)              (paper, spec 2.1)
  token level        KL part only (A = 0): beta grad sum_h P_old(h) D(pi_theta(.|h), pi_old(.|h))   (spec 2.4;
                     the token-level reward term is a first-order surrogate, exact only at theta_old)
  separate anchor    -grad (E_theta[R] - beta D(pi_theta, pi_a)), samples from pi_old     (spec 3.4)
  GRPO KL term       grad sum_h P_old(h) KL(pi_theta(.|h) || pi_ref(.|h)), uncorrected vs corrected (spec 3.4)

Per-response gradients come from one batched `rpg_loss` call: with agg="seq-mean-token-sum" and normalizer 1 the
loss is sum_x l(x) and l(x) depends on row x only, so d l(x)/d logp[x, t] is read off the batch gradient and chained
through the table (exact, no sampling).

A second table (`verify_clip`, same helper) checks RPG-Style Clip row by row: Alg. 1, Alg. 2, truncated IS.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rpgrl.errors import ArgumentParser, UsageError, seed_arg
from rpgrl.objectives.divergences import DIVERGENCES
from rpgrl.objectives.kl import grpo_kl_term
from rpgrl.objectives.rpg import STYLES, rpg_loss

TOL = 1e-9
BIASED = 1e-3  # the uncorrected GRPO term must be visibly off
BETA = 0.37


@dataclass(frozen=True)
class Row:
    """One comparison: `rel_err` = |g - g_exact| / |g_exact|. `exact` rows pass iff rel_err <= TOL; the others
    (the uncorrected GRPO term) are shown to be biased: rel_err > BIASED."""

    section: str
    label: str
    rel_err: float
    exact: bool = True

    @property
    def ok(self) -> bool:
        return self.rel_err <= TOL if self.exact else self.rel_err > BIASED


class _Tabular:
    """Every response of a tabular autoregressive policy. theta: (H, V) logits, one row per history."""

    def __init__(self, vocab: int, length: int):
        hists: dict[tuple[int, ...], int] = {}
        seqs: list[tuple[int, ...]] = []

        def grow(prefix: tuple[int, ...]) -> None:
            hists[prefix] = len(hists)
            for y in range(vocab):
                x = prefix + (y,)
                if y == 0 or len(x) == length:
                    seqs.append(x)
                else:
                    grow(x)

        grow(())
        self.H, self.V, self.N, self.L = len(hists), vocab, len(seqs), length
        self.tok = torch.zeros(self.N, length, dtype=torch.long)  # (N, L)
        self.hist = torch.zeros(self.N, length, dtype=torch.long)  # (N, L)
        self.mask = torch.zeros(self.N, length, dtype=torch.bool)  # (N, L)
        self.through = torch.zeros(self.H, self.N, dtype=torch.float64)  # 1 if response n emits a token after h
        for n, x in enumerate(seqs):
            for t, y in enumerate(x):
                self.tok[n, t], self.hist[n, t], self.mask[n, t] = y, hists[x[:t]], True
                self.through[hists[x[:t]], n] = 1.0

    def token_logp(self, theta: torch.Tensor) -> torch.Tensor:  # (N, L), 0 at padding
        lp = torch.log_softmax(theta, -1)[self.hist, self.tok]
        return torch.where(self.mask, lp, 0.0)

    def seq_logp(self, theta: torch.Tensor) -> torch.Tensor:  # (N,)
        return self.token_logp(theta).sum(-1)


def _grad(f, theta: torch.Tensor) -> torch.Tensor:
    th = theta.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(th), th)
    return g


def _rel(g: torch.Tensor, exact: torch.Tensor) -> float:
    return ((g - exact).norm() / exact.norm()).item()


def unit_grads(logp, old_logp, advantages, mask, loss_fn=rpg_loss, **kw) -> torch.Tensor:
    """d l(x) / d logp[x, t] for every response x of a batch, from one `loss_fn` call (default `rpg_loss`).

    With agg="seq-mean-token-sum" and normalizer 1 the batch loss is sum_x l(x), and l(x) depends on row x only,
    so the batch gradient holds each response's own gradient (at token level each token's: l_t depends on
    logp_t only). Shapes: logp, old_logp, mask: (B, T); advantages: (B,) or (B, T). Returns (B, T)."""
    lp = logp.detach().clone().requires_grad_(True)
    out = loss_fn(lp, old_logp, advantages, mask, agg="seq-mean-token-sum", normalizer=1.0, **kw)
    (G,) = torch.autograd.grad(out.loss, lp)
    return G


def _seq_divergence(div: str, lp: torch.Tensor, la: torch.Tensor) -> torch.Tensor:
    """D(pi_theta, anchor) from sequence log-probs (N,), straight from the definitions."""
    P, Pa = lp.exp(), la.exp()
    if div in ("fkl", "ufkl"):
        return (Pa * (la - lp)).sum() + ((P - Pa).sum() if div == "ufkl" else 0.0)
    return (P * (lp - la)).sum() + ((Pa - P).sum() if div == "urkl" else 0.0)


def _objective(toy: _Tabular, th, R, div: str, anchor_seq_lp) -> torch.Tensor:
    """J = E_theta[R] - beta D(pi_theta, anchor), exactly."""
    lp = toy.seq_logp(th)
    return lp.exp() @ R - BETA * _seq_divergence(div, lp, anchor_seq_lp)


def _history_divergence(toy: _Tabular, div: str, th, th_anchor, P_sampler) -> torch.Tensor:
    """sum_h P_sampler(h) D(pi_theta(.|h), pi_anchor(.|h)) (per-history conditionals are normalised: UKL = KL)."""
    Ph = toy.through @ P_sampler  # (H,)
    lt, la = torch.log_softmax(th, -1), torch.log_softmax(th_anchor, -1)
    d = (la.exp() * (la - lt)).sum(-1) if div in ("fkl", "ufkl") else (lt.exp() * (lt - la)).sum(-1)
    return (Ph * d).sum()


def verify_rows(seed: int = 0, vocab: int = 3, length: int = 3) -> list[Row]:
    """All comparisons of the module docstring, for one random policy pair (float64)."""
    toy = _Tabular(vocab, length)
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    th_old = randn(toy.H, toy.V)
    th = th_old + 0.8 * randn(toy.H, toy.V)
    th_anchor = th_old + 0.8 * randn(toy.H, toy.V)
    th_ref = randn(toy.H, toy.V)
    R = randn(toy.N)
    old_lp = toy.token_logp(th_old)  # (N, L)
    P_old = toy.seq_logp(th_old).exp()  # (N,)

    def expected_grad(adv, **kw) -> torch.Tensor:
        """sum_x P_old(x) grad l(x)."""
        G = unit_grads(toy.token_logp(th), old_lp, adv, toy.mask, **kw)  # (N, L): d l(x) / d logp[x, t]
        return _grad(lambda t: (P_old[:, None] * G * toy.token_logp(t)).sum(), th)

    rows = []
    anchor_lp = toy.token_logp(th_anchor)
    for div in DIVERGENCES:
        gJ = _grad(lambda t, d=div: _objective(toy, t, R, d, toy.seq_logp(th_old)), th)
        gJa = _grad(lambda t, d=div: _objective(toy, t, R, d, toy.seq_logp(th_anchor)), th)
        gD = _grad(lambda t, d=div: BETA * _history_divergence(toy, d, t, th_old, P_old), th)
        for style in STYLES:
            kw = dict(divergence=div, style=style, beta=BETA)
            rows.append(Row("sequence", f"{div:<5} {style}", _rel(expected_grad(R, level="sequence", **kw), -gJ)))
            zero = torch.zeros(toy.N, dtype=torch.float64)
            rows.append(Row("token", f"{div:<5} {style}", _rel(expected_grad(zero, level="token", **kw), gD)))
            ga = expected_grad(R, level="sequence", anchor_logp=anchor_lp, **kw)
            rows.append(Row("anchor", f"{div:<5} {style}", _rel(ga, -gJa)))

    # GRPO's KL term against a frozen reference, samples from pi_old (spec 3.4)
    ref_lp = toy.token_logp(th_ref)
    g_kl = _grad(lambda t: _history_divergence(toy, "rkl", t, th_ref, P_old), th)
    for corrected in (False, True):
        gk = _grad(
            lambda t, c=corrected: (
                P_old[:, None] * toy.mask * grpo_kl_term(toy.token_logp(t), ref_lp, old_lp, corrected=c)
            ).sum(),
            th,
        )
        label = "corrected   w k3(pi_ref/pi_theta)" if corrected else "uncorrected k3(pi_ref/pi_theta)"
        rows.append(Row("grpo", label, _rel(gk, g_kl), exact=corrected))
    return rows


HEADERS = {
    "sequence": "sequence level: sum_x pi_old(x) grad l(x)  vs  -grad [E_theta R - beta D(pi_theta, pi_old)]",
    "token": "token level, KL part (A = 0): sum_x pi_old(x) grad l(x)  vs  "
    "beta grad sum_h P_old(h) D(pi_theta(.|h), pi_old(.|h))",
    "anchor": "separate anchor pi_a, sequence level: sum_x pi_old(x) grad l(x)  vs  "
    "-grad [E_theta R - beta D(pi_theta, pi_a)]",
    "grpo": "GRPO KL term vs reference pi_ref: sum_x pi_old(x) sum_t grad term_t  vs  "
    "grad sum_h P_old(h) KL(pi_theta(.|h) || pi_ref(.|h))",
}


def format_rows(rows: list[Row]) -> str:
    lines = []
    for section, header in HEADERS.items():
        lines += ["", header, f"  {'variant':<36}{'rel err':>10}  result"]
        for r in rows:
            if r.section == section:
                verdict = ("ok" if r.ok else "FAIL") if r.exact else ("biased (as expected)" if r.ok else "FAIL")
                lines.append(f"  {r.label:<36}{r.rel_err:>10.2e}  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="rpgrl verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=seed_arg, default=0, help="seed of the random policies and rewards")
    parser.add_argument("--vocab", type=int, default=3, help="vocabulary size, 2..6 (token 0 is EOS)")
    parser.add_argument("--length", type=int, default=3, help="maximum response length, 1..5")
    args = parser.parse_args(argv)
    if not 2 <= args.vocab <= 6 or not 1 <= args.length <= 5:
        raise UsageError(f"--vocab must be in 2..6 and --length in 1..5, got {args.vocab} and {args.length}")
    from rpgrl import verify_clip  # imports this module's helpers

    rows = verify_rows(args.seed, args.vocab, args.length)
    n_resp = _Tabular(args.vocab, args.length).N
    print(
        f"rpgrl verify: tabular autoregressive policy, vocab {args.vocab} (token 0 = EOS), length <= {args.length}, "
        f"{n_resp} responses enumerated exactly; float64, seed {args.seed}, theta != theta_old, beta = {BETA}, "
        f"A(x) = R(x). Exact means rel err <= {TOL:g}."
    )
    print(format_rows(rows))
    rpg_exact = all(r.ok for r in rows if r.section != "grpo")
    grpo_exact = all(r.ok for r in rows if r.section == "grpo" and r.exact)
    biased = all(r.ok for r in rows if not r.exact)
    print(
        f"\nall RPG surrogates exact: {'yes' if rpg_exact else 'NO'}; corrected GRPO KL term exact: "
        f"{'yes' if grpo_exact else 'NO'}; uncorrected GRPO KL term biased: {'yes' if biased else 'NO'}"
    )
    clip = verify_clip.clip_rows(args.seed)
    print(
        f"\nRPG-Style Clip, row by row: every divergence x clip variant x level, {len(verify_clip.W_GRID)} ratios x "
        f"{len(verify_clip.A_GRID)} advantages per case (w != 1, so theta != theta_old); eps_low = "
        f"{verify_clip.EPS_LOW}, eps_high = {verify_clip.EPS_HIGH}, c = {verify_clip.C_DUAL}, beta = {BETA}. Each "
        "cell: units in that row of the algorithm's table and whether all match the stated gradient (rel err <= "
        f"{TOL:g}); 'flips': units whose branch differs between sign(A) and sign(A_hat) / sign(A')."
    )
    print(verify_clip.format_clip_rows(clip))
    clip_ok = all(r.ok for r in clip)
    print(f"\nevery clip row has the stated gradient: {'yes' if clip_ok else 'NO'}")
    return 0 if all(r.ok for r in rows) and clip_ok else 1  # any FAIL line fails the command
