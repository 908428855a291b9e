"""`rpgrl verify`: its rows, its exit code, and that it fails when a surrogate is wrong."""

from __future__ import annotations

import pytest
import torch

from rpgrl import cli, verify, verify_clip
from rpgrl.errors import UsageError
from rpgrl.objectives import divergences


def test_rows_cover_every_variant_and_are_exact():
    rows = verify.verify_rows(seed=0, vocab=3, length=3)
    by_section = {s: [r for r in rows if r.section == s] for s in verify.HEADERS}
    assert [len(v) for v in by_section.values()] == [8, 8, 8, 2]
    labels = {r.label for r in by_section["sequence"]}
    assert labels == {f"{d:<5} {s}" for d in verify.DIVERGENCES for s in verify.STYLES}
    for r in rows:
        if r.exact:
            assert r.rel_err <= 1e-12 and r.ok, r
    (unc,) = [r for r in by_section["grpo"] if not r.exact]
    assert unc.rel_err > 1e-2 and unc.ok  # visibly biased


@pytest.mark.parametrize(("seed", "vocab", "length"), [(1, 2, 4), (2, 4, 2), (3, 3, 1)])
def test_other_policies(seed, vocab, length):
    assert verify.main(["--seed", str(seed), "--vocab", str(vocab), "--length", str(length)]) == 0


@pytest.mark.parametrize("seed, needle", [(str(2**63), "seed must be in [0, 2**63 - 1]"), ("x", "not an integer")])
def test_a_seed_out_of_range_is_one_line(capsys, seed, needle):
    assert cli.main(["verify", "--seed", seed]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


@pytest.mark.parametrize(
    "argv, needle",
    [(["verify", "--voc", "2"], "--voc 2; did you mean --vocab?"),  # an abbreviation: taken before, as --vocab
     (["reproduce", "--qu"], "unrecognized arguments: --qu; did you mean --quick?"),  # was: CLAIM is required
     (["verify", "--zzz"], "unrecognized arguments: --zzz (see"),
     # `--` (or `--=3`) names no option: it was "did you mean" every option
     (["verify", "--", "x"], "unrecognized arguments: -- x (see"),
     (["verify", "--=3"], "unrecognized arguments: --=3 (see")],
)  # fmt: skip
def test_options_are_taken_whole_and_a_misspelt_one_is_named(capsys, argv, needle):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_main_prints_the_table(capsys):
    assert cli.main(["verify"]) == 0
    out = capsys.readouterr().out
    for header in verify.HEADERS.values():
        assert header in out
    assert "all RPG surrogates exact: yes; corrected GRPO KL term exact: yes" in out
    first, clip = out.split("RPG-Style Clip, row by row")
    assert first.count(" ok\n") == 25 and "biased (as expected)" in first
    for header in verify_clip.HEADERS.values():
        assert header in clip
    assert clip.count(" ok\n") == len(verify_clip.VARIANTS) * 8 and "FAIL" not in clip and "none" not in clip
    assert "every clip row has the stated gradient: yes" in out


def test_fails_on_a_wrong_reinforce_weight(monkeypatch, capsys):
    """A sign error in the REINFORCE KL component must make verify exit 1."""
    real = divergences.u_dphi

    def wrong(divergence: str, log_u: torch.Tensor, u=None) -> torch.Tensor:
        return -real(divergence, log_u, u)

    monkeypatch.setattr(divergences, "u_dphi", wrong)
    assert verify.main([]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_bad_arguments():
    with pytest.raises(UsageError, match="--vocab must be in 2..6"):
        verify.main(["--vocab", "1"])
    with pytest.raises(UsageError, match="invalid int value"):
        verify.main(["--length", "x"])
