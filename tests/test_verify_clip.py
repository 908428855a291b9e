"""`rpgrl verify`'s clip table: every row of Alg. 1 / Alg. 2 / truncated IS is hit and exact, its reference
gradients are right (finite differences of the spec's loss column, hand-worked numbers), and it fails when the
clipped loss is wrong (a swapped branch, a clipped row without its KL gradient)."""

from __future__ import annotations

import math

import pytest
import torch

from rpgrl import verify, verify_clip
from rpgrl.objectives import divergences
from rpgrl.objectives.rpg import rpg_loss
from rpgrl.presets import get_preset
from rpgrl.verify_clip import BETA, C_DUAL, DIVERGENCES, HI, LO, VARIANTS

DT = torch.float64
BRANCHED = [v for v in VARIANTS if v.section != "truncate" and not v.name.startswith("released")]


def variant(section: str, name: str):
    """The variant called `name` (without its bracketed preset)."""
    (v,) = [v for v in VARIANTS if v.section == section and v.name.split(" [")[0] == name]
    return v


def test_every_case_is_exact_and_hits_every_row():
    rows = verify_clip.clip_rows(seed=0)
    assert len(rows) == len(VARIANTS) * 4 * 2  # variants x divergences x levels
    for r in rows:
        assert r.ok and all(r.counts) and r.padding_ok, r
        assert r.max_abs <= 1e-12, r
    for r in rows:  # the raw and effective branches differ on some units wherever a branch is chosen
        if r.section != "truncate" and not r.label.endswith("released]"):
            assert r.flips > 0, r


def test_other_seed():
    assert all(r.ok for r in verify_clip.clip_rows(seed=3))


def test_a_row_that_is_not_hit_fails(monkeypatch):
    """Coverage is part of the verdict: with every ratio inside the clip range rows 2, 3 and 5 are empty."""
    monkeypatch.setattr(verify_clip, "W_GRID", (0.9, 1.1))
    r = verify_clip.check_case(variant("alg2", "effective"), "urkl", "token")
    assert r.counts[1] == r.counts[2] == r.counts[4] == 0 and all(r.cells_ok)
    assert not r.ok and "none" in verify_clip.format_clip_rows([r])


PHI = {  # spec 2.1, written out again
    "fkl": lambda w: -torch.log(w),
    "rkl": lambda w: w * torch.log(w),
    "ufkl": lambda w: w - 1 - torch.log(w),
    "urkl": lambda w: w * torch.log(w) - w + 1,
}


def alg1_loss(analogue: str, branch: str, div: str, log_w: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """The loss column of the spec 4.1 table (branch on A_hat, or on A for "raw"), plus the separate KL term."""
    w = torch.exp(log_w)
    phi, sep = PHI[div](w), torch.zeros_like(w)
    if analogue == "exact":
        a_hat = A - BETA * phi / w
    elif analogue == "paper" and div == "urkl":
        a_hat = A - BETA * log_w
    elif analogue == "paper" and div == "rkl":
        a_hat = A - BETA * (log_w + 1)
    else:
        a_hat = A
        clamp = analogue == "released" and div != "fkl"
        sep = BETA * (phi.clamp(-10, 10) if clamp else phi)
    pos = (a_hat >= 0) if branch == "effective" else (A > 0)
    table = torch.where(pos, -a_hat * torch.clamp(w, max=HI), -a_hat * torch.clamp(w, LO, C_DUAL))
    if branch == "effective":  # the table is the paper's max/min form
        lc = torch.maximum(-w * a_hat, -torch.clamp(w, LO, HI) * a_hat)
        assert torch.allclose(table, torch.where(pos, lc, torch.minimum(lc, -C_DUAL * a_hat)), rtol=0, atol=1e-15)
    return table + sep


@pytest.mark.parametrize("div", DIVERGENCES)
def test_alg1_reference_is_the_derivative_of_the_table_loss(div):
    """Central finite differences in log w of the table's loss column equal the reference gradient per row."""
    _, _, _, _, w, A = verify_clip.clip_inputs("sequence")
    h = 1e-6
    for analogue, branch in (("exact", "effective"), ("exact", "raw"), ("paper", "effective"), ("released", "raw")):
        _, g, _ = verify_clip.alg1_reference(analogue, branch)(div, w, A, BETA)
        lw = torch.log(w)
        fd = (alg1_loss(analogue, branch, div, lw + h, A) - alg1_loss(analogue, branch, div, lw - h, A)) / (2 * h)
        assert torch.allclose(g, fd, rtol=1e-7, atol=1e-7), (analogue, branch, (g - fd).abs().max())


@pytest.mark.parametrize("div", DIVERGENCES)
def test_kl_weight_is_minus_beta_w_dphi(div):
    """C of spec 4.2 against phi of spec 2.1: C = -beta w phi'(w), phi' by central differences."""
    w = torch.tensor(verify_clip.W_GRID, dtype=DT)
    h = 1e-6 * w
    dphi = (PHI[div](w + h) - PHI[div](w - h)) / (2 * h)
    assert torch.allclose(verify_clip._kl_weight(div, w, BETA), -BETA * w * dphi, rtol=1e-7, atol=1e-9)


def test_alg2_and_truncate_references_by_hand():
    """URKL, w = 2, A = 0.1: A' = 0.1 - beta log 2 < 0, so the paper's branch is row 4 (gradient -(w A + C),
    C = -beta w log w) and sign(A) is row 2 (0); truncated IS uses wc = 1.28 in both terms."""
    w, A = torch.tensor([2.0], dtype=DT), torch.tensor([0.1], dtype=DT)
    row, g, flip = verify_clip.alg2_reference("effective")("urkl", w, A, BETA)
    assert (row.item(), flip.item()) == (4, True)
    assert math.isclose(g.item(), -(0.2 - BETA * 2 * math.log(2)), rel_tol=1e-14)
    row, g, _ = verify_clip.alg2_reference("raw")("urkl", w, A, BETA)
    assert (row.item(), g.item()) == (2, 0.0)
    region, g, _ = verify_clip.truncate_reference("urkl", w, A, BETA)
    assert region.item() == 3 and math.isclose(g.item(), -(1.28 * 0.1 - BETA * 1.28 * math.log(1.28)), rel_tol=1e-14)
    # Alg. 1, paper's URKL analogue, A_hat > 0 and w >= 1 + eps_high: d loss / d lp = beta (1 + eps_high) (spec 4.1)
    row, g, _ = verify_clip.alg1_reference("paper", "effective")("urkl", w, torch.tensor([2.0], dtype=DT), BETA)
    assert row.item() == 2 and math.isclose(g.item(), BETA * 1.28, rel_tol=1e-14)


def test_units_are_away_from_every_boundary():
    """No ratio within 1e-2 of a clip bound; every branch variable is either an exact tie (A = 0 with A_hat = A,
    deliberately: ties go to the positive branch) or at least 1e-3 from 0, so float rounding cannot move a unit."""
    _, _, _, _, w, A = verify_clip.clip_inputs("token")
    for bound in (LO, HI, C_DUAL):
        assert (w - bound).abs().min() > 1e-2
    for div in DIVERGENCES:
        C, phi, lw = verify_clip._kl_weight(div, w, BETA), PHI[div](w), torch.log(w)
        for x in (A + C / w, A - BETA * phi / w, A - BETA * lw, A - BETA * (lw + 1), A):
            assert ((x == 0) & (A == 0) | (x.abs() > 1e-3)).all(), div


def swap_branch(*args, **kw):
    if "branch" in kw:  # truncated IS has none
        kw["branch"] = {"effective": "raw", "raw": "effective"}[kw["branch"]]
    return rpg_loss(*args, **kw)


def test_a_swapped_branch_fails():
    rows = verify_clip.clip_rows(loss_fn=swap_branch)
    for r in rows:
        kl_in_a_hat = "exact" in r.label or r.section == "alg2" or r.label.startswith(("rkl   paper", "urkl  paper"))
        if kl_in_a_hat:  # the branches differ where A > 0 > A_hat (A' ), and that changes the gradient
            assert not r.ok and not all(r.cells_ok), r
        else:  # A_hat = A: the branches differ only at A = 0, where both rows give the same gradient
            assert r.ok, r


def test_a_wrong_effective_advantage_in_rpg_fails_verify(monkeypatch, capsys):
    """Mutating rpg.py's helper: phi'(u) = 0 makes Alg. 2 branch on sign(A) instead of sign(A'): `rpgrl verify`
    exits 1 and exactly the Alg. 2 effective-branch rows fail."""
    monkeypatch.setattr(divergences, "dphi", lambda div, log_u, u=None: torch.zeros_like(log_u))
    assert verify.main([]) == 1
    assert "every clip row has the stated gradient: NO" in capsys.readouterr().out
    for r in verify_clip.clip_rows():
        assert r.ok == (not (r.section == "alg2" and "effective" in r.label)), r


def clipped_rows_without_gradient(v, div, level):
    """A deliberately wrong loss: rpg_loss with logp cut in the units of rows 2, 3 and 5 (so Alg. 1's clipped rows
    lose the gradient of A_hat and of a separate KL term, i.e. their KL part)."""
    _, _, _, mask, w, A = verify_clip.clip_inputs(level)
    row, _, _ = v.reference(div, w, A, BETA)
    clipped = (row == 2) | (row == 3) | (row == 5)
    if level == "token":
        cut = torch.zeros(mask.shape, dtype=torch.bool)
        cut[mask] = clipped
    else:
        cut = clipped[:, None].expand(mask.shape)

    def loss(logp, *args, **kw):
        return rpg_loss(torch.where(cut, logp.detach(), logp), *args, **kw)

    return loss


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_dropping_the_kl_part_of_a_clipped_row_fails(level):
    """Alg. 1's clipped rows carry the gradient of A_hat or of the separate KL (spec 4.1): every such cell fails.
    Alg. 2's clipped rows have no gradient at all (spec 4.2), and neither do released rows whose KL value is
    clamped: there the mutation is invisible and the cell stays ok."""
    _, _, _, _, w, A = verify_clip.clip_inputs(level)
    n_caught = 0
    for v in VARIANTS:
        if v.section == "truncate":
            continue
        for div in DIVERGENCES:
            r = verify_clip.check_case(v, div, level, loss_fn=clipped_rows_without_gradient(v, div, level))
            row, g, _ = v.reference(div, w, A, BETA)
            assert r.cells_ok[0] and r.cells_ok[3], r  # active rows untouched
            for k in (2, 3, 5):
                has_gradient = bool((g[row == k] != 0).any())
                assert r.cells_ok[k - 1] == (not has_gradient), (r, k)
                n_caught += has_gradient
            assert r.ok == (v.section == "alg2"), r
    assert n_caught == 4 * 4 * 3 - 2  # all Alg. 1 clipped cells but rkl/urkl released row 5 (w >= 10: |phi| > 10)


def test_detached_a_hat_in_rpg_fails_the_clipped_rows(monkeypatch):
    """Mutating rpg.py's helper: A_hat = A - beta phi(u)/u with phi/u detached drops its gradient, which is all
    the clipped rows of the exact analogue have."""
    real = divergences.phi_over_u
    monkeypatch.setattr(divergences, "phi_over_u", lambda div, log_u, u=None, **kw: real(div, log_u.detach(), **kw))
    for div in DIVERGENCES:
        r = verify_clip.check_case(variant("alg1", "exact"), div, "token")
        assert not any((r.cells_ok[1], r.cells_ok[2], r.cells_ok[4])), r


@pytest.mark.parametrize("div", DIVERGENCES)
def test_variants_are_the_presets_options(div):
    """The bracketed preset names in the table are honest: same clip options as the presets' loss config."""
    for prefix, preset in (("paper", f"rpg-{div}"), ("released", f"rpg-{div}-released")):
        kw, lc = variant("alg1", prefix).kwargs(div), get_preset(preset).loss
        assert (kw["style"], kw["clip"], kw.get("kl_in_clip", True)) == (lc.style, lc.clip, lc.kl_in_clip)
        assert (kw.get("analogue", "exact"), kw["branch"]) == (lc.analogue, lc.clip_branch), preset
        assert kw.get("kl_value_clamp") == lc.kl_clamp
        assert (kw["eps_low"], kw["eps_high"], kw["c"]) == (lc.eps_low, lc.eps_high, lc.c)
    kw, lc = variant("alg2", "effective").kwargs(div), get_preset(f"rpg-reinforce-{div}").loss
    assert (kw["style"], kw["clip"], kw["branch"]) == (lc.style, lc.clip, lc.clip_branch)
