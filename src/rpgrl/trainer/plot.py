"""`rpgrl plot RUN_DIR [--out FILE]`: a run's curves as one PNG, from its metrics.jsonl and eval.jsonl.

The trainer draws `curves.png` at the end of a run and when a signal stops it; this command draws it at any time,
from a run in progress too (it only reads the run's files; the picture is written whole, by a rename). The held-out
and benchmark evaluations come from eval.jsonl (before RL, periodic and final), everything else from metrics.jsonl.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rpgrl.errors import UsageError, one_line

USAGE = "usage: rpgrl plot RUN_DIR [--out FILE]   (FILE: default RUN_DIR/curves.png; .png, .pdf, .svg)"
_FORMATS = ("png", "pdf", "svg")


def run_rows(out: Path) -> list[dict]:
    """The rows to plot: each training step's metrics without their evaluation keys, then every evaluation (the
    evaluation rows also hold the step-0 and final ones, which metrics.jsonl has not)."""
    from rpgrl.trainer.log import check_metrics_file, read_metrics

    rows = {}
    for name in ("metrics.jsonl", "eval.jsonl"):
        check_metrics_file(out / name)  # one line naming a row that is not one (not UTF-8, not an object)
        read = read_metrics(out / name) if (out / name).is_file() else []
        rows[name] = [{k: v for k, v in r.items() if _plottable(v)} for r in read if isinstance(r.get("step"), int)]
    steps = [{k: v for k, v in r.items() if not k.startswith("eval/")} for r in rows["metrics.jsonl"]]
    return steps + rows["eval.jsonl"]


def _plottable(v) -> bool:
    """A value a curve can hold: a number (null: no value), not text or a nested object a hand edit left."""
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def plot_run(out: Path, png: Path | None = None) -> Path | None:
    """Draw the run in `out` to `png` (default out/curves.png), written whole; None without rows or matplotlib."""
    from rpgrl.trainer.log import plot_metrics

    png = Path(png) if png is not None else out / "curves.png"
    part = png.with_name(f".{png.stem}.part{png.suffix}")  # matplotlib writes the format the suffix names
    try:
        drawn = plot_metrics(run_rows(out), part)
        if drawn is not None:
            os.replace(part, png)
            return png
        return None
    except OSError as e:  # the picture's folder missing or read-only: named as given, not as the hidden part file
        if e.filename is None or Path(e.filename) != part:
            raise
        raise OSError(e.errno, e.strerror, str(png)) from None
    finally:
        part.unlink(missing_ok=True)


def _is_run(folder: Path) -> bool:
    return (folder / "metrics.jsonl").is_file() or (folder / "eval.jsonl").is_file()


def main(argv: list[str]) -> int:
    args = list(argv)
    if not args or any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return 0
    try:
        png = None
        args = [x for a in args for x in (a.split("=", 1) if a.startswith("--out=") else [a])]  # --out=FILE too
        if "--out" in args:
            i = args.index("--out")
            if i + 1 >= len(args) or not args[i + 1]:
                raise UsageError("--out needs a file name")
            png = Path(args.pop(i + 1))
            args.pop(i)
        if png is not None and png.suffix.lower().lstrip(".") not in _FORMATS:
            raise UsageError(f"--out {png}: name a picture file ({', '.join('.' + f for f in _FORMATS)})")
        unknown = [a for a in args if a.startswith("-")]
        if unknown:  # a misspelt --out was counted as a second and third run directory
            raise UsageError(f"unknown option {unknown[0]}; usage: rpgrl plot RUN_DIR [--out FILE.png|pdf|svg]")
        if len(args) != 1:
            raise UsageError(f"expected one run directory, got {len(args)}: {' '.join(args) or 'none'}")
        out = Path(args[0])
        if out.is_file():
            hint = f": rpgrl plot {out.parent} draws the run it is in" if _is_run(out.parent) else ""
            raise UsageError(f"{out} is a file, not a run directory{hint}")
        if not _is_run(out):
            raise UsageError(f"{out} holds no metrics.jsonl or eval.jsonl: not a run directory (rpgrl train --out)")
        try:
            import matplotlib  # noqa: F401
        except ModuleNotFoundError:
            raise UsageError("plotting needs matplotlib: pip install 'rpgrl[train]'") from None
        drawn = plot_run(out, png)
    except UsageError as e:
        print(f"rpgrl plot: error: {one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # the picture's folder missing or read-only, a file unreadable
        print(f"rpgrl plot: error: {e.strerror or e}: {e.filename}", file=sys.stderr)
        return 2
    if drawn is None:
        print(f"rpgrl plot: {out} has no rows to plot yet")
        return 0
    print(drawn)
    return 0
