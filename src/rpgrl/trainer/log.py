"""Logging for the trainer: printing, metric reduction, `metrics.jsonl`, the progress bar and the final plot.

Metrics are one flat dict with slash-separated names (`reward/mean`, `kl/...`, `clip/...`, `perf/...`), kept as
detached 0-dim tensors until an optimizer step ends; `reduce_micro` then combines the micro-batches and
`to_floats` converts everything with one host sync. `metrics.jsonl` holds one JSON object per training step;
`truncate_metrics` cuts it back to a checkpoint's step on resume so every step appears exactly once.
Single process: `print0` prints (kept so multi-process code has one call site).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

import torch

from rpgrl import metrics as M
from rpgrl.errors import UsageError
from rpgrl.metrics import CLIP_KEYS
from rpgrl.trainer.checkpoint import write_text_atomic


def print0(*args, **kwargs) -> None:
    """Print on the main process (the only process here). Goes through tqdm so it does not break the bar. What the
    stream's encoding cannot take (a path holding a non-UTF-8 byte, read as a lone surrogate) is escaped."""
    file = kwargs.get("file", sys.stdout)
    text = " ".join(str(a) for a in args)
    encoding = getattr(file, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        text = text.encode(encoding, "backslashreplace").decode(encoding)
    try:
        from tqdm.auto import tqdm

        tqdm.write(text, file=file)
    except ImportError:  # pragma: no cover
        print(text, file=file)


# ---------------------------------------------------------------------------------------------------------------
# Reduction


def reduce_micro(parts: list[dict[str, torch.Tensor]], weights: list[float], rows: list[float] | None = None,
                 per_sequence: Collection[str] = ()) -> dict[str, torch.Tensor]:  # fmt: skip
    """Combine per-micro-batch metrics into one optimizer step's values.

    `loss/*` metrics and `kl/penalty` (`metrics.SUMMED`) are computed with the global normalizer, so they add up
    across micro-batches (summed).
    `*/max` and `*/min` (e.g. `log_w/max`) are extremes: the max (min) over micro-batches. Everything else is a
    local mean (clip fractions, KL estimates): averaged with `weights` (token counts), or with `rows` (sequence
    counts) for the keys in `per_sequence` (`metrics.per_sequence`: means over sequences). A key missing from some
    micro-batches is reduced over those that have it.
    """
    out: dict[str, torch.Tensor] = {}
    keys = {k for p in parts for k in p}
    for k in sorted(keys):
        w_k = rows if rows is not None and k in per_sequence else weights
        vals = [(p[k].detach().float(), w) for p, w in zip(parts, w_k, strict=True) if k in p]
        extreme = _extreme(k)
        if extreme is not None:
            out[k] = extreme(torch.stack([v for v, _ in vals]))
        elif k.startswith(M.SUMMED):
            out[k] = torch.stack([v for v, _ in vals]).sum()
        else:
            total = sum(w for _, w in vals)
            out[k] = sum(v * (w / total) for v, w in vals) if total > 0 else torch.stack([v for v, _ in vals]).mean()
    return out


def mean_over_steps(steps: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Average each metric over the optimizer steps of one training step (keys present in any step); `*/max` and
    `*/min` keys take the max (min) over the steps instead."""
    keys = {k for s in steps for k in s}
    out = {}
    for k in sorted(keys):
        vals = torch.stack([s[k].float() for s in steps if k in s])
        out[k] = (_extreme(k) or torch.mean)(vals)
    return out


def _extreme(key: str) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """torch.amax for `*/max` metrics, torch.amin for `*/min`, None for the rest."""
    return torch.amax if key.endswith("/max") else torch.amin if key.endswith("/min") else None


def to_floats(metrics: dict[str, torch.Tensor | float | int]) -> dict[str, float]:
    """Tensors -> Python floats with a single host sync."""
    tkeys = [k for k, v in metrics.items() if isinstance(v, torch.Tensor)]
    out = {k: float(v) for k, v in metrics.items() if not isinstance(v, torch.Tensor)}
    if tkeys:
        dev = metrics[tkeys[0]].device  # on CUDA some metrics are host scalars (optim/skipped): gather on one device
        values = torch.stack([metrics[k].detach().float().reshape(()).to(dev) for k in tkeys]).tolist()
        out.update(zip(tkeys, values, strict=True))
    return out


def json_safe(obj):
    """`obj` with every non-finite float as None (JSON null): strict JSON parsers refuse a bare NaN, which an accuracy
    without a held-out set is."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def non_finite(metrics: dict[str, float]) -> list[str]:
    return [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]


# ---------------------------------------------------------------------------------------------------------------
# metrics.jsonl


class MetricsFile:
    """Append-only `metrics.jsonl`: one JSON object per training step, flushed line by line."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._f = open(self.path, "a")

    def write(self, row: dict) -> None:
        self._f.write(json.dumps(json_safe(row), allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_metrics(path: Path) -> list[dict]:
    """The complete rows of a metrics file (a torn last line from a kill is skipped)."""
    rows = []
    path = Path(path)
    if not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def check_metrics_file(path: Path) -> None:
    """UsageError naming the file and line when a metrics file holds a row `truncate_metrics` cannot read: not UTF-8,
    not a JSON object, or a `step` that is not an integer. A torn last line (a kill mid-write) is allowed."""
    path = Path(path)
    if not path.is_file():
        return
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UsageError(f"{path} is not UTF-8 text (byte {e.start}): restore it from a copy, or remove the "
                         "broken part, then --resume") from None  # fmt: skip
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # torn by a kill: skipped when read
                continue
            row = None
        step = row.get("step", 0) if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise UsageError(f"{path} line {i + 1} is not a metrics row (a JSON object with an integer step): "
                             f"{line[:60]!r}; fix or remove that line, then --resume")  # fmt: skip


def truncate_metrics(path: Path, step: int, keep: Callable[[dict], bool] | None = None) -> list[dict]:
    """Keep only rows with `row["step"] <= step` (and `keep(row)`), atomically, so a resumed run rewrites later
    steps exactly once. Returns the rows kept (none for a missing file)."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = [r for r in read_metrics(path) if r.get("step", 0) <= step and (keep is None or keep(r))]
    write_text_atomic(path, "".join(json.dumps(json_safe(r), allow_nan=False) + "\n" for r in rows))
    return rows


def missing_steps(rows: list[dict], step: int) -> str | None:
    """The steps 1..`step` with no row among a metrics file's `rows` (deleted or cut by hand: a resume cannot write
    them again), as ranges ("3-4, 7"); None when every one is there."""
    have = {r.get("step") for r in rows}
    gone = [s for s in range(1, step + 1) if s not in have]
    if not gone:
        return None
    runs: list[list[int]] = []
    for s in gone:
        if runs and runs[-1][1] == s - 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


# ---------------------------------------------------------------------------------------------------------------
# Progress bar and plot


class Progress:
    """A tqdm bar over training steps showing reward and tokens/s; a no-op when disabled or tqdm is missing."""

    def __init__(self, total: int, initial: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc="rl", unit="step", dynamic_ncols=True)

    def update(self, row: dict) -> None:
        if self.bar is None:
            return
        self.bar.set_postfix(
            reward=f"{row.get(M.REWARD_MEAN, float('nan')):.3f}",
            clip=f"{100 * clip_fraction(row):.2f}%",
            tok_s=f"{row.get(M.TOKENS_PER_S, float('nan')):.0f}",
            refresh=False,
        )
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def clip_fraction(row: dict) -> float:
    """Fraction of tokens (units) in any clipped row of the step: the sum of the clip/frac_* metrics (disjoint)."""
    return sum(row.get(k, 0.0) for k in CLIP_KEYS)


# Panels of curves.png: the learning curves, then the off-policy regime (clip rows, spread of log w, KL).
PLOT_KEYS = (
    (M.REWARD_MEAN, M.REWARD_CORRECT),
    (M.EVAL_ACCURACY, M.EVAL_SAMPLED),
    (M.LENGTH_MEAN,),
    CLIP_KEYS,
    M.LOG_W_KEYS,
    (M.KL_PPO, M.KL_K3_ANCHOR, M.KL_ANCHOR),
    (M.KL_GRAD_SHARE,),
    (M.OPTIM_STEPS,),
    (M.ENTROPY,),
)


def plot_metrics(rows: Iterable[dict], out_png: Path) -> Path | None:
    """Save a grid of the main curves (matplotlib, Agg backend). Returns the path, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return None
    rows = list(rows)
    panels = [keys for keys in PLOT_KEYS if any(r.get(k) is not None for r in rows for k in keys)]  # null: no value
    if not rows or not panels:
        return None
    ncols = 3
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.0 * nrows), squeeze=False)
    for ax, keys in zip(axes.flat, panels, strict=False):
        for k in keys:
            pts = [(r["step"], r[k]) for r in rows if k in r and r[k] is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), label=k, marker="." if k.startswith("eval/") else None)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return Path(out_png)
