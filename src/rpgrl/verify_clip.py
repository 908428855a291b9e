"""`rpgrl verify`, second table: RPG-Style Clip row by row (paper Alg. 1 and 2, spec 4.1 and 4.2, Remark F.2).

For every variant below x divergence x level, units (tokens, or whole responses) are placed on purpose in every
row of the algorithm's table, at theta != theta_old: ratios w on a grid below 1 - eps_low, inside the clip range,
between 1 + eps_high and c, and above c, times advantages of both signs, zero, and small ones whose sign the KL
term flips (A > 0 but A_hat or A' < 0: there the paper's and the released code's branch differ). The per-unit
gradient d l / d log pi of the clipped `rpg_loss` (read off one call by `verify.unit_grads`; at sequence level every
token of a response carries the response's value) is compared with the gradient the algorithm states for that
row, computed here in float64 from the spec's formulas alone (phi and C of spec 2.1/4.2; nothing from
`rpgrl.objectives`):

  Alg. 2, style="reinforce", clip="dual"      rows 1/4: -(w A + C);  rows 2/3/5: 0 (the KL part too)
  truncated IS, clip="truncate"               every unit: -(wc A + C(wc)),  wc = clip(w, 1-eps_low, 1+eps_high)
  Alg. 1, style="differentiable", clip="dual" l = -A_hat(w) clip_row(w): active rows -w A_hat - w dA_hat/dlog w,
                                              clipped rows (bound b) -b dA_hat/dlog w; plus beta w phi'(w) where
                                              the KL is a separate unclipped term

with C = -beta w phi'(w) the KL part of the REINFORCE weight and A' = A + C/w. A_hat per variant (`rpg_loss`
options; the presets named in brackets): exact = A - beta phi(w)/w (the default: -w A_hat is l_diff);
paper [rpg-<d>] = A - beta log w (urkl), A - beta (log w + 1) (rkl), A with a separate KL (fkl, ufkl); released
[rpg-<d>-released] = A with a separate KL clamped to +-10 (not fkl), branch sign(A). Branch "effective" is
A_hat >= 0 (A' >= 0), "raw" is A > 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rpgrl.objectives.divergences import DIVERGENCES
from rpgrl.objectives.rpg import LEVELS, rpg_loss
from rpgrl.verify import BETA, TOL, unit_grads

EPS_LOW, EPS_HIGH, C_DUAL = 0.2, 0.28, 10.0  # the paper's RPG clip (spec 7.1) and the scripts' c (spec 4.4)
LO, HI = 1 - EPS_LOW, 1 + EPS_HIGH
KL_CLAMP = 10.0  # the authors' value clamp on the separate KL loss (spec 2.2)
W_GRID = (0.3, 0.7, 0.9, 1.1, 1.5, 3.0, 12.0, 40.0)  # below lo, inside [lo, hi], in (hi, c), above c
A_GRID = (-2.0, -0.5, -0.05, 0.0, 0.05, 0.5, 2.0)  # +-0.05: the KL term flips the sign of A_hat / A'
DT = torch.float64


def _phi(div: str, w: torch.Tensor) -> torch.Tensor:
    """phi(w) of spec 2.1 (anchor = sampler, so u = w)."""
    lw = torch.log(w)
    return {"fkl": -lw, "rkl": w * lw, "ufkl": w - lw - 1, "urkl": w * lw - w + 1}[div]


def _kl_weight(div: str, w: torch.Tensor, beta: float) -> torch.Tensor:
    """C of spec 4.2 (the KL part of the REINFORCE weight w A + C; C = -beta w phi'(w))."""
    lw = torch.log(w)
    return {"fkl": torch.full_like(w, beta), "rkl": -beta * w * (lw + 1), "ufkl": -beta * (w - 1),
            "urkl": -beta * w * lw}[div]  # fmt: skip


def _rows(pos: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Row 1..5 of the tables of spec 4.1/4.2 from the branch (True = positive) and the ratio."""
    neg = torch.where(w <= LO, 3, torch.where(w < C_DUAL, 4, 5))
    return torch.where(pos, torch.where(w < HI, 1, 2), neg)


def alg2_reference(branch: str):
    """Alg. 2 (spec 4.2 table): gradient -(w A + C) in rows 1/4, 0 in rows 2/3/5. Returns a function
    (div, w, A, beta) -> (row, grad, flip) on units (U,); flip marks where the raw and effective branches differ."""

    def ref(div, w, A, beta):
        C = _kl_weight(div, w, beta)
        a_eff = A + C / w
        row = _rows(a_eff >= 0 if branch == "effective" else A > 0, w)
        grad = torch.where((row == 1) | (row == 4), -(w * A + C), 0.0)
        return row, grad, (A > 0) != (a_eff >= 0)

    return ref


def truncate_reference(div, w, A, beta):
    """Remark F.2: gradient -(wc A + C(wc)) everywhere; 'rows' are the regions w < lo, inside, w > hi."""
    wc = w.clamp(LO, HI)
    region = torch.where(w < LO, 1, torch.where(w > HI, 3, 2))
    return region, -(wc * A + _kl_weight(div, wc, beta)), None


def alg1_reference(analogue: str, branch: str):
    """Alg. 1 (spec 4.1 table) with A_hat as a function of w: l = -A_hat(w) * (w in active rows, the bound b in
    clipped ones), so d l / d log w = -w A_hat - w A_hat' (active) or -b A_hat' (clipped), A_hat' = dA_hat/dlog w;
    plus beta w phi'(w) (= -C) where the KL is a separate term. Returns a function like `alg2_reference`'s."""

    def ref(div, w, A, beta):
        C, phi, lw = _kl_weight(div, w, beta), _phi(div, w), torch.log(w)
        sep = torch.zeros_like(w)
        if analogue == "exact":  # A_hat = A - beta phi/w; d(phi/w)/dlog w = phi' - phi/w and beta phi' = -C/w
            a_hat, da = A - beta * phi / w, (C + beta * phi) / w
        elif analogue == "paper" and div in ("rkl", "urkl"):  # A - beta (log w + 1), A - beta log w
            a_hat, da = A - beta * (lw + (1.0 if div == "rkl" else 0.0)), torch.full_like(w, -beta)
        else:  # A_hat = A, KL separate and unclipped (paper fkl/ufkl, released); released clamps |phi| to 10
            a_hat, da, sep = A, torch.zeros_like(w), -C
            if analogue == "released" and div != "fkl":
                sep = torch.where(phi.abs() > KL_CLAMP, 0.0, sep)
        row = _rows(a_hat >= 0 if branch == "effective" else A > 0, w)
        bound = torch.tensor([0.0, 0.0, HI, LO, 0.0, C_DUAL], dtype=DT)[row]  # rows 2, 3, 5 (float64: no scalar where)
        active = (row == 1) | (row == 4)
        grad = torch.where(active, -w * a_hat - w * da, -bound * da) + sep
        return row, grad, (A > 0) != (a_hat >= 0)

    return ref


@dataclass(frozen=True)
class Variant:
    """One clip setting: `rpg_loss` options (besides divergence, level, beta) and its reference gradient."""

    section: str  # "alg1", "alg2" or "truncate"
    name: str
    options: dict
    reference: object = field(compare=False)

    def kwargs(self, div: str) -> dict:
        kw = dict(self.options, eps_low=EPS_LOW, eps_high=EPS_HIGH, c=C_DUAL)
        if self.name.startswith("released") and div != "fkl":
            kw["kl_value_clamp"] = KL_CLAMP  # the authors never clamp fkl (spec 2.2)
        return kw


_DIFF = dict(style="differentiable", clip="dual")
_RF = dict(style="reinforce")
VARIANTS = (
    Variant("alg1", "exact", dict(_DIFF, analogue="exact", branch="effective"), alg1_reference("exact", "effective")),
    Variant("alg1", "exact, raw branch", dict(_DIFF, analogue="exact", branch="raw"), alg1_reference("exact", "raw")),
    Variant("alg1", "paper [rpg-<d>]", dict(_DIFF, analogue="paper", branch="effective"),
            alg1_reference("paper", "effective")),
    Variant("alg1", "released [rpg-<d>-released]", dict(_DIFF, kl_in_clip=False, branch="raw"),  # (no analogue)
            alg1_reference("released", "raw")),
    Variant("alg2", "effective [rpg-reinforce-<d>]", dict(_RF, clip="dual", branch="effective"),
            alg2_reference("effective")),
    Variant("alg2", "raw branch", dict(_RF, clip="dual", branch="raw"), alg2_reference("raw")),
    Variant("truncate", "truncate", dict(_RF, clip="truncate"), truncate_reference),
)  # fmt: skip


def clip_inputs(level: str, seed: int = 0):
    """`rpg_loss` inputs with one unit per (w, A) pair of W_GRID x A_GRID (U = 56 units).

    token level: B = len(W_GRID) responses of len(A_GRID) tokens + 1 padding token, per-token advantages (B, T).
    sequence level: B = U responses of 1..4 tokens; log w(x) is split at random over the response's tokens.
    old_logp is random; padding holds garbage (50.0) that must reach neither value nor gradient.
    Returns logp, old_logp (B, T), advantages (B, T) or (B,), mask (B, T) bool, and the units' w, A (U,)."""
    g = torch.Generator().manual_seed(seed)
    log_w = torch.log(torch.tensor(W_GRID, dtype=DT)).repeat_interleave(len(A_GRID))  # (U,)
    A = torch.tensor(A_GRID, dtype=DT).repeat(len(W_GRID))  # (U,)
    if level == "token":
        B, T = len(W_GRID), len(A_GRID) + 1
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[:, -1] = False
        split = torch.zeros(B, T, dtype=DT)
        split[mask] = log_w  # row-major: response b holds W_GRID[b] with every advantage
        adv = torch.zeros(B, T, dtype=DT)
        adv[mask] = A
    else:
        B, T = log_w.numel(), 4
        lengths = 1 + torch.arange(B) % T
        mask = torch.arange(T) < lengths[:, None]  # (B, T)
        split = torch.randn(B, T, generator=g, dtype=DT) * mask
        split[torch.arange(B), lengths - 1] += log_w - split.sum(-1)  # the tokens' log-ratios sum to log w(x)
        adv = A
    old_logp = -3 * torch.rand(B, T, generator=g, dtype=DT) - 0.05
    logp = torch.where(mask, old_logp + split, 50.0)
    return logp, old_logp, adv, mask, log_w.exp(), A


@dataclass(frozen=True)
class ClipRow:
    """One (variant, divergence, level): per table row, the number of units and whether all match."""

    section: str
    label: str
    level: str
    counts: tuple[int, ...]
    cells_ok: tuple[bool, ...]
    flips: int | None  # units where the raw and effective branches differ (None: branch-free)
    padding_ok: bool
    max_abs: float
    max_rel: float

    @property
    def ok(self) -> bool:
        covered = all(self.counts) and (self.flips is None or self.flips > 0)
        return covered and all(self.cells_ok) and self.padding_ok


def check_case(variant: Variant, div: str, level: str, seed: int = 0, loss_fn=rpg_loss) -> ClipRow:
    """Compare `loss_fn`'s per-unit gradients with the variant's reference in every row (tolerance TOL, relative
    to max(1, |reference|)). `loss_fn` is `rpg_loss` unless a test feeds a deliberately wrong one."""
    logp, old_logp, adv, mask, w, A = clip_inputs(level, seed)
    kw = dict(variant.kwargs(div), divergence=div, level=level, beta=BETA)
    G = unit_grads(logp, old_logp, adv, mask, loss_fn=loss_fn, **kw)  # (B, T)
    row, grad, flip = variant.reference(div, w, A, BETA)  # (U,)
    ref = torch.zeros_like(G)
    if level == "token":
        ref[mask] = grad
    else:
        ref = torch.where(mask, grad[:, None], 0.0)
    err = (G - ref).abs()
    bad = err > TOL * ref.abs().clamp(min=1.0)
    unit_bad = bad[mask] if level == "token" else (bad & mask).any(-1)  # (U,)
    n_rows = 3 if variant.section == "truncate" else 5
    rows = range(1, n_rows + 1)
    nonzero = ref != 0
    return ClipRow(
        section=variant.section,
        label=f"{div:<5} {variant.name}",
        level=level,
        counts=tuple(int((row == r).sum()) for r in rows),
        cells_ok=tuple(not bool(unit_bad[row == r].any()) for r in rows),
        flips=None if flip is None or variant.name.startswith("released") else int(flip.sum()),
        padding_ok=not bool((bad & ~mask).any()),
        max_abs=err.max().item(),
        max_rel=(err[nonzero] / ref[nonzero].abs()).max().item(),
    )


def clip_rows(seed: int = 0, loss_fn=rpg_loss) -> list[ClipRow]:
    """Every variant x divergence x level."""
    return [check_case(v, d, lv, seed, loss_fn) for v in VARIANTS for d in DIVERGENCES for lv in LEVELS]


HEADERS = {
    "alg1": "Alg. 1, style='differentiable', clip='dual' (spec 4.1): per-unit d l / d log pi  vs  the stated\n"
    "  -w A_hat - w A_hat' (active rows), -bound A_hat' (clipped rows), + beta w phi'(w) if the KL is separate\n"
    "  rows: 1 A_hat>=0, w<1+eps_high | 2 A_hat>=0, w>=1+eps_high | 3 A_hat<0, w<=1-eps_low | "
    "4 A_hat<0, 1-eps_low<w<c | 5 A_hat<0, w>=c",
    "alg2": "Alg. 2, style='reinforce', clip='dual' (spec 4.2): per-unit d l / d log pi  vs  the stated\n"
    "  -(w A + C) (rows 1, 4), 0 (rows 2, 3, 5)\n"
    "  rows: 1 A'>=0, w<1+eps_high | 2 A'>=0, w>=1+eps_high | 3 A'<0, w<=1-eps_low | 4 A'<0, 1-eps_low<w<c | "
    "5 A'<0, w>=c",
    "truncate": "truncated IS, style='reinforce', clip='truncate' (Remark F.2): per-unit d l / d log pi  vs  "
    "-(wc A + C(wc)), never masked\n  regions: 1 w<1-eps_low | 2 inside | 3 w>1+eps_high",
}


def format_clip_rows(rows: list[ClipRow]) -> str:
    """One line per (variant, divergence, level): units and verdict per table row ('none' = row not hit)."""
    lines = []
    for section, header in HEADERS.items():
        n = 3 if section == "truncate" else 5
        cols = "".join(f"{'row ' + str(r):>9}" for r in range(1, n + 1))
        lines += ["", header, f"  {'variant':<38}{'level':<9}{cols}  flips   max abs   max rel  result"]
        for r in (r for r in rows if r.section == section):
            verdicts = (
                f"{k} {'ok' if ok else 'FAIL'}" if k else "none" for k, ok in zip(r.counts, r.cells_ok, strict=True)
            )
            cells = "".join(f"{v:>9}" for v in verdicts)
            flips = "-" if r.flips is None else str(r.flips)
            verdict = "ok" if r.ok else "FAIL" + ("" if r.padding_ok else " (padding)")
            lines.append(
                f"  {r.label:<38}{r.level:<9}{cells}  {flips:>5}  {r.max_abs:>8.1e}  {r.max_rel:>8.1e}  {verdict}"
            )
    return "\n".join(lines)
