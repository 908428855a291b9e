"""Experiment trackers behind one interface: `NullTracker`, TensorBoard, Weights & Biases (`train.report_to`).

A tracker receives the same flat rows as `metrics.jsonl` (`log(row)`, with the row's own `step`) plus the evaluation
rows of `eval.jsonl` that are not already part of a training row (before RL, and the final one), and the resolved
config once. `NullTracker` is the single code path when nothing is tracked (nanochat's `DummyWandb`).

Resume (`resume_step` = the checkpoint's step) continues the same logs without duplicating steps:
* TensorBoard writes into `<run>/tensorboard` with `purge_step = resume_step + 1`, so events a crashed run wrote past
  its checkpoint are discarded by readers, and rows at or before the checkpoint are not written again.
* W&B stores the run id in `<run>/wandb_run_id` and resumes that run (`resume="allow"`); rows at or before the
  checkpoint are not logged again. Steps a crashed run logged past its checkpoint cannot be deleted from W&B: the
  service keeps the first values it received for a step and drops later ones (W&B only accepts increasing steps).
The project is `$WANDB_PROJECT` (default `rpgrl`); offline runs (`WANDB_MODE=offline`) sync later with `wandb sync`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Protocol

from rpgrl.errors import UsageError, first_line, utf8_text

REPORT_TO = ("none", "tensorboard", "wandb")
_NOT_SCALARS = ("step", "final")


class Tracker(Protocol):
    def log(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def parse_report_to(text: str) -> tuple[str, ...]:
    """`'tensorboard,wandb'` -> ('tensorboard', 'wandb'); `'none'` -> (). UsageError for unknown names."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in REPORT_TO]
    if bad:
        raise UsageError(f"train.report_to: unknown tracker {bad[0]!r}; valid: {', '.join(REPORT_TO)} or a comma list")
    return tuple(dict.fromkeys(n for n in names if n != "none"))


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics of a row (not `step` or the `final` flag)."""
    return {
        k: float(v)
        for k, v in row.items()
        if k not in _NOT_SCALARS and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class NullTracker:
    """Tracks nothing: one code path whether or not a tracker is configured."""

    def log(self, row: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardTracker:
    """Scalars under the metrics.jsonl keys in `<out>/tensorboard`, the config once as JSON text (tag `config`)."""

    def __init__(self, out: Path, config: dict[str, Any], resume_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.resume_step = resume_step
        purge = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(log_dir=str(Path(out) / "tensorboard"), purge_step=purge)
        if resume_step is None:
            self.writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```", global_step=0)

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        if self.resume_step is not None and step <= self.resume_step:
            return
        for k, v in scalars(row).items():
            self.writer.add_scalar(utf8_text(k), v, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run whose id lives in `<out>/wandb_run_id`, so a resume continues the same run."""

    def __init__(self, out: Path, config: dict[str, Any], resume_step: int | None):
        import wandb

        out = Path(out)
        id_file = out / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:12]
        self.resume_step = resume_step
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "rpgrl"),
                name=out.resolve().name,
                id=run_id,
                resume="allow",
                dir=str(out),
                config=config if resume_step is None else None,
            )
        except wandb.errors.Error as e:  # no login, no network, a refused run id
            raise UsageError(f"train.report_to wandb: {first_line(e)}") from None
        id_file.write_text(run_id + "\n")

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        if self.resume_step is not None and step <= self.resume_step:
            return
        # W&B stores NaN as a string-typed value in some views; keep it out of the charts
        self.run.log({utf8_text(k): v for k, v in scalars(row).items() if math.isfinite(v)}, step=step)

    def close(self) -> None:
        self.run.finish()


class MultiTracker:
    def __init__(self, trackers: list[Tracker]):
        self.trackers = trackers

    def log(self, row: dict[str, Any]) -> None:
        for t in self.trackers:
            t.log(row)

    def close(self) -> None:
        for t in self.trackers:
            t.close()


_EXTRA = {"tensorboard": "tensorboard", "wandb": "wandb"}  # tracker -> module it needs (= the rpgrl extra)


def check_installed(report_to: str) -> None:
    """UsageError naming the pip command when a requested tracker's package is missing."""
    import importlib.util

    for name in parse_report_to(report_to):
        if importlib.util.find_spec(_EXTRA[name]) is None:
            raise UsageError(f"train.report_to {name} needs the {name} package: pip install 'rpgrl[{name}]'")


def make_tracker(report_to: str, out: Path, config: dict[str, Any], resume_step: int | None = None) -> Tracker:
    """The tracker(s) named in `report_to` writing into the run directory `out` (created if needed).

    `config` is logged once, on a fresh run; `resume_step` is the checkpoint step a resumed run continues from."""
    check_installed(report_to)  # before anything in `out` is created
    out = Path(out)
    before = set(out.iterdir()) if out.is_dir() else None
    if parse_report_to(report_to):
        out.mkdir(parents=True, exist_ok=True)
    kinds = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker}
    trackers: list[Tracker] = []
    try:
        for name in parse_report_to(report_to):
            trackers.append(kinds[name](out, config, resume_step))
    except UsageError:  # a tracker refused to start: close the others and take back what this call created
        for t in trackers:
            t.close()
        for p in [out] if before is None else set(out.iterdir()) - before:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        raise
    if not trackers:
        return NullTracker()
    return trackers[0] if len(trackers) == 1 else MultiTracker(trackers)
