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
