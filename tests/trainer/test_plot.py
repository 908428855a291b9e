"""`rpgrl plot`'s messages (the drawing itself: test_loop's stopped-run test)."""

from __future__ import annotations

import json
import stat

import pytest

from rpgrl.cli import main as rpgrl_main

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("where", ["missing", "read-only"])
def test_a_picture_that_cannot_be_written_is_named_as_given(tmp_path, capsys, where):
    """The message named the hidden file the picture is drawn to first (`.c.part.png`), not the --out given."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward/mean": s / 2}) + "\n" for s in (1, 2)))
    folder = tmp_path / "pictures"
    if where == "read-only":
        folder.mkdir()
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    png = folder / "c.png"
    try:
        code = rpgrl_main(["plot", str(run), "--out", str(png)])
    finally:
        if folder.exists():
            folder.chmod(stat.S_IRWXU)
    err = capsys.readouterr().err
    if where == "read-only" and code == 0:  # (root writes anywhere)
        pytest.skip("this user can write in a read-only folder")
    assert code == 2 and err.endswith(f": {png}\n") and err.count("\n") == 1, err
    assert list(tmp_path.rglob("*.png")) == []


def _run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward/mean": s / 2}) + "\n" for s in (1, 2)))
    return run


@pytest.mark.parametrize(
    "tail, needle",
    [
        (["--outt", "c.png"], "unknown option --outt"),  # a misspelt --out was "expected one run directory, got 3"
        (["-o", "c.png"], "unknown option -o"),
        (["--out", "c.png", "--force"], "unknown option --force"),
    ],
)
def test_a_misspelt_option_is_named(tmp_path, capsys, monkeypatch, tail, needle):
    run = _run_dir(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = rpgrl_main(["plot", str(run), *tail])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"rpgrl plot: error: {needle}") and err.count("\n") == 1, err
    assert not list(tmp_path.rglob("*.png"))


def test_help_after_the_run_directory_prints_the_usage(tmp_path, capsys):
    run = _run_dir(tmp_path)
    assert rpgrl_main(["plot", str(run), "--help"]) == 0  # was "expected one run directory, got 2"
    assert capsys.readouterr().out.startswith("usage: rpgrl plot RUN_DIR")
    assert not list(tmp_path.rglob("*.png"))


def test_a_file_given_as_the_run_directory_is_named_as_a_file(tmp_path, capsys):
    """`rpgrl plot RUN/metrics.jsonl` said the file 'holds no metrics.jsonl': it names it a file and the run."""
    run = _run_dir(tmp_path)
    code = rpgrl_main(["plot", str(run / "metrics.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{run / 'metrics.jsonl'} is a file, not a run directory" in err and f"rpgrl plot {run}" in err, err
