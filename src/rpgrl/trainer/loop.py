"""`train(cfg, out)`: the whole RL loop on one machine, read from top to bottom.

Per training step: sample G responses per prompt; score them with the reward registry (optionally add DAPO's
overlong penalty and filter groups whose responses are all right or all wrong); advantages from the ADVANTAGES
registry; old log-probs fixed for the update (the sampler's own, a no-grad pass, or, strictly on-policy, the
update's own forward); mini-batch epochs with the loss from the LOSSES registry (the global token or sequence count
of the mini-batch is the normalizer of every micro-batch); log; maybe refresh the KL anchor; maybe evaluate; maybe
checkpoint. The math is imported; nothing here differentiates anything by hand.

Choices worth knowing:
* The model stays in `eval()` mode (no dropout) for sampling and training, so at the start of each update
  `logp == old_logp` up to float rounding, as with the paper's dropout-free runs.
* Learning-rate warm-up counts training steps as verl does (spec 7.4): step k uses lr * min(1, (k-1)/warmup), so
  the first step does not move the weights. Every optimizer step inside a training step uses the same rate.
* Schedule-free AdamW (spec 7.4) evaluates gradients at its interpolated point y and averages into x. We sample,
  compute old log-probs and the anchor at y (the optimizer's train mode), so the sampler, `old_logp` and the
  gradient all refer to the same weights and the ratio starts at 1; the averaged weights x (eval mode) are used
  for evaluation and for the exported model. (The released code samples at y but computes `old_logp` at x.)
* Groups filtered out by `rollout.group_filter` still count in the `reward/*` metrics, which describe every
  sampled response; `batch/*` says how many were trained on.

Not here: multi-process training, vLLM, packing by token budget (micro-batches are fixed counts of sequences).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rpgrl import metrics as M
from rpgrl.config import Config, config_from_dict, config_to_dict, values_by_key
from rpgrl.errors import Diverged, UsageError, first_line
from rpgrl.objectives.checks import LossOverflow
from rpgrl.objectives.reduce import masked_mean
from rpgrl.trainer.checkpoint import (
    crash_point,
    latest_checkpoint,
    remove_leftovers,
    rng_state,
    save_checkpoint,
    set_rng_state,
    write_bytes_atomic,
    write_text_atomic,
)
from rpgrl.trainer.device import clip_grad_norm, model_device
from rpgrl.trainer.log import (
    MetricsFile,
    Progress,
    json_safe,
    mean_over_steps,
    missing_steps,
    non_finite,
    print0,
    read_metrics,
    reduce_micro,
    to_floats,
    truncate_metrics,
)
from rpgrl.trainer.plot import plot_run
from rpgrl.trainer.reference import Anchor, anchor_kl
from rpgrl.trainer.rundir import Interrupted, RunLock, StopSignals
from rpgrl.trainer.scoring import RewardFailed, correct_flags, score
from rpgrl.trainer.setup import (  # noqa: F401 - re-exported: loop.build_model etc. are used by name
    PromptStream,
    Run,
    RunState,
    Task,
    anchor_kwargs,
    build_model,
    load_benchmarks,
    load_task,
    loss_options,
    lr_multiplier,
    make_optimizer,
    open_run,
    resolve_components,
)
from rpgrl.trainer.trackers import make_tracker


def train(
    cfg: Config,
    out: str | Path,
    *,
    resume: bool = False,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
    stop: StopSignals | None = None,
    base: Config | None = None,
) -> dict[str, Any]:
    """Train according to `cfg`, writing everything into the run directory `out`; returns the run summary.

    `resume=True` continues the run in `out` from its newest checkpoint that loads up to `cfg.train.max_steps`.
    `on_step(step, state)` is called after every training step (tests use it to inspect the live objects).
    `base`: the config `cfg` was made from (a preset): options it holds that the run ignores are not refused.
    `stop`: installed by `rpgrl train`; after a SIGTERM/SIGINT the current step ends with a checkpoint and
    `Interrupted` is raised. Checkpoints are written every `train.checkpoint_every` steps, when
    `train.checkpoint_minutes` have passed since the last one, and at the end.
    Every user-fixable problem (bad config, missing file or column, empty dataset, an `out` that cannot hold the
    run) raises UsageError before anything in `out` is created or changed. One found mid-run (a reward that returns
    NaN; `Diverged`: a learning rate far too large) in a resume that has saved no checkpoint yet puts back the files
    the resume rewrote (`RESUME_REWRITES`), so the run stays as it was.
    """
    t_begin = time.perf_counter()
    run = open_run(cfg, Path(out), resume, base)  # all input errors surface here, before `out` is touched
    # the checkpoint's: the earlier processes' time, at least their RL time (0 in a checkpoint written before it was)
    run.began = t_begin - max(run.state.wall_seconds, run.state.rl_seconds)
    with RunLock(run.out):  # one process per run directory
        _check_unchanged(run, resume)
        kept = _read_files(run.out, RESUME_REWRITES) if run.checkpoint is not None else None
        existing = set(run.out.rglob("*")) if kept is not None else set()
        tracker = prepare_run_dir(run)
        try:
            start_rl(run, tracker, stop)
            step, stopped, rl_time = rl_loop(run, tracker, on_step, stop)
            return finish(run, tracker, step, stopped, rl_time, stop)
        except (UsageError, Diverged):  # a mistake found mid-run (a NaN reward, a learning rate far too large)
            if kept is not None and not run.saved:  # a resume that saved nothing leaves the run as it found it
                tracker.close()
                _put_back_the_end(run)
                _restore_files(run.out, kept)
                _remove_new(run.out, existing)  # e.g. its TensorBoard events, whose purge step would hide later rows
            raise
        except Interrupted as e:  # stopped before a step ran: the old end is still the run's end
            if e.step == run.start_step:
                _put_back_the_end(run)
            raise
        except OSError as e:  # the run directory's disk full or gone: the run stays at its last checkpoint
            if kept is not None and not run.saved:  # nothing saved: the old end is still the run's end
                with contextlib.suppress(OSError):
                    _put_back_the_end(run)
            full = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
            ours = e.filename is not None and run.out.resolve() in Path(e.filename).resolve().parents
            if not (full or ours):
                raise
            raise UsageError(f"cannot write in {run.out}: {e.strerror}{f' ({e.filename})' if e.filename else ''}; "
                             "the run is kept at its last checkpoint (fix that, then --resume)") from None  # fmt: skip


# What usually makes RL diverge, largest suspect first
DIVERGED_HINT = "lower optim.lr; or loss.beta, optim.weight_decay or the reward's scale, if large"

# What a resume rewrites before its first step (the new config; metrics and evaluations cut back to the checkpoint)
RESUME_REWRITES = ("config.json", "config_changes.jsonl", "metrics.jsonl", "eval.jsonl", "summary.json", "curves.png")


def _check_unchanged(run: Run, resume: bool) -> None:
    """Under the run's lock: UsageError if another process changed the run directory while this one was loading
    (its checks ran before the lock was held): it would otherwise act on a stale view, e.g. prune the other
    process's newer checkpoints."""
    from rpgrl.trainer.rundir import check_run_dir

    try:
        same = check_run_dir(run.out, resume, probe_lock=False) == run.restart
    except UsageError:  # e.g. a fresh run's directory is no longer empty
        same = False
    if not same or latest_checkpoint(run.out / "checkpoints") != run.newest_seen:
        raise UsageError(f"run directory {run.out} changed while this process was loading (another rpgrl process "
                         "wrote to it): run the command again")  # fmt: skip


def _read_files(out: Path, names: tuple[str, ...]) -> dict[str, bytes | None]:
    return {n: (out / n).read_bytes() if (out / n).is_file() else None for n in names}


def _restore_files(out: Path, files: dict[str, bytes | None]) -> None:
    for name, data in files.items():
        if data is not None:
            write_bytes_atomic(out / name, data)
        else:
            (out / name).unlink(missing_ok=True)


def _remove_new(out: Path, existing: set[Path]) -> None:
    """Delete what is in `out` now and was not in `existing` (its listing before), deepest first."""
    for p in sorted(set(out.rglob("*")) - existing, key=lambda p: len(p.parts), reverse=True):
        _remove(p)


def _remove(p: Path) -> None:
    """Delete a file or a directory tree; nothing if it is gone."""
    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


# What a run writes before its first checkpoint: removed when --resume starts such a run over
RESTART_REMOVES = ("metrics.jsonl", "eval.jsonl", "summary.json", "wandb_run_id", "wandb", "tensorboard")
ASIDE = ".restart-aside"


def _set_aside(out: Path, names: tuple[str, ...]) -> Path:
    """Move `out`'s files of these names into `out/ASIDE` (renames: nothing is copied or lost) and return it."""
    aside = out / ASIDE
    _remove(aside)  # of an earlier attempt killed in between: its files were already being discarded
    aside.mkdir()
    for name in names:
        if (out / name).exists():
            os.replace(out / name, aside / name)
    return aside


def _put_back(aside: Path, out: Path) -> None:
    for p in aside.iterdir():
        _remove(out / p.name)
        os.replace(p, out / p.name)
    aside.rmdir()


def _log_config_changes(out: Path, step: int, new: dict) -> None:
    """A resume that changes settings (besides train.max_steps) appends {"step", "before", "after"} to
    config_changes.jsonl, the keys as section.field, before config.json is written with the new values: the steps up
    to `step` ran with the old ones, which config.json alone no longer says. A resume stopped between the two writes
    finds the same line last in the file the next time and does not write it again. The old file is read as `--resume`
    reads it: a field it lacks (written before the field existed) holds the value that run used, not null."""
    from rpgrl.trainer.cli import BEFORE_TRUNCATION

    try:
        old = json.loads((out / "config.json").read_text(encoding="utf-8"))
        old = config_to_dict(config_from_dict(old, base=BEFORE_TRUNCATION))
    except (OSError, ValueError):  # none, or not readable (open_run has checked the one a resume reads)
        return
    before, after = values_by_key(old), values_by_key(new)
    keys = sorted(k for k in before.keys() | after.keys() if k != "train.max_steps" and before.get(k) != after.get(k))
    if keys:
        change = {"step": step, "before": {k: before.get(k) for k in keys}, "after": {k: after.get(k) for k in keys}}
        line = json.dumps(json_safe(change))
        if _last_line(out / "config_changes.jsonl") == line:  # a resume killed before config.json was rewritten
            return
        with open(out / "config_changes.jsonl", "a", encoding="utf-8") as f:
            f.write(line + "\n")


def _last_line(path: Path) -> str | None:
    """The last non-empty line of a text file, or None (no file, or not readable)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        return None
    return next((s for s in reversed(lines) if s.strip()), None)


def prepare_run_dir(run: Run):
    """The run directory: resolved config; metrics and evaluations cut back to the checkpoint (or, starting a run
    over, the files of the attempt that stopped before its first checkpoint removed). Returns the tracker."""
    cfg, out, resumed = run.cfg, run.out, run.checkpoint is not None
    aside = _set_aside(out, RESTART_REMOVES) if run.restart else None
    try:  # a tracker that refuses to start (W&B without a login) must not cost the attempt's files
        # rows after `logged` are new to the trackers; a warm start saved without its evaluation logs step 0 again
        logged = run.start_step if run.state.start_accuracy is not None else run.start_step - 1
        tracker = make_tracker(cfg.train.report_to, out, config_to_dict(cfg), logged if resumed else None)
    except BaseException:
        if aside is not None:
            _put_back(aside, out)
        raise
    if aside is not None:
        print0(f"--resume: {out} has no checkpoint yet (the run stopped before its first one): starting it over")
        _remove(aside)
    out.mkdir(parents=True, exist_ok=True)
    if resumed:
        _log_config_changes(out, run.start_step, config_to_dict(cfg))
    write_text_atomic(out / "config.json", json.dumps(config_to_dict(cfg), indent=2) + "\n")  # first: a run killed
    (out / "checkpoints").mkdir(exist_ok=True)  # after it is resumed. Made now: a missing folder means deleted ones
    remove_leftovers(out / "checkpoints")  # of a kill mid-write or mid-prune (a finished run saves no more)
    step_rows = truncate_metrics(out / "metrics.jsonl", run.start_step)
    gone = missing_steps(step_rows, run.start_step) if resumed else None
    if gone:  # the file was deleted or cut by hand: said, since every step is otherwise logged exactly once
        print0(f"--resume: {out / 'metrics.jsonl'} has no row for step {gone} (deleted or cut since it was written); "
               f"the run goes on from step {run.start_step + 1}")  # fmt: skip
    # a warm start saved without its evaluation (the reward failed there) evaluates again: an earlier row of that
    # evaluation (a resume killed before its checkpoint) goes, so step 0 has one row
    evaluated = not resumed or run.state.start_accuracy is not None
    truncate_metrics(out / "eval.jsonl", run.start_step if evaluated else -1, keep=lambda r: not r.get("final"))
    if resumed and 0 < run.start_step == cfg.train.max_steps:  # only the end-of-run phase is left: it reuses the
        kept = [r for r in read_metrics(out / "eval.jsonl") if r["step"] == run.start_step]  # step's periodic row
        run.last_eval = {k: math.nan if v is None else v for k, v in kept[-1].items()} if kept else None
    if resumed and run.start_step < cfg.train.max_steps and not _collapsed(cfg, run.state):  # a step will run
        _set_aside_the_end(run)
    _print_config(cfg, out)
    if resumed:
        fallback = f"; newer checkpoints do not load, skipped: {', '.join(run.skipped)}" if run.skipped else ""
        print0(f"resuming from {run.checkpoint} (step {run.start_step}){fallback}")
    return tracker


def _set_aside_the_end(run: Run) -> None:
    """A resume that trains on past a finished run's end: the end's files describe a step the run leaves (stopped
    again, `rpgrl eval --model OUT/model` took the old end's weights for the new run's). The exported model and the
    summary (the final evaluation's only record) are kept, renamed `model-step<N>/` and `summary-step<N>.json` (N:
    the summary's step); curves.png goes (`rpgrl plot` draws it). If the resume fails before saving, all is put
    back (`train`; summary.json and curves.png are RESUME_REWRITES)."""
    out = run.out
    try:
        step = int(json.loads((out / "summary.json").read_text())["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        step = None
    tag = "previous" if step is None else f"step{step}"
    for name, stem, suffix in (("model", f"model-{tag}", ""), ("summary.json", f"summary-{tag}", ".json")):
        if (out / name).exists():
            aside = _free_name(out, stem, suffix)
            os.replace(out / name, aside)
            run.end_aside.append((aside, out / name))
    if run.end_aside:
        print0(f"--resume: the run trains on past its end, so that end's files are now "
               f"{' and '.join(a.name for a, _ in run.end_aside)} (written again at the new end)")  # fmt: skip
    _remove(out / "curves.png")


def _drop_the_same_end_aside(out: Path, step: int) -> None:
    """After the end at `step` is written: an end set aside at the same step (`_set_aside_the_end`, by a resume past
    it that was killed before its next checkpoint, then resumed to this step again) is this end again, from the same
    checkpoint's weights: not kept twice (model-step<N>/ and summary-step<N>.json beside model/ and summary.json)."""
    for aside in (out / f"model-step{step}", out / f"summary-step{step}.json"):
        _remove(aside)


def _put_back_the_end(run: Run) -> None:
    """Undo `_set_aside_the_end` (a resume that ended before any step was saved: the old end is the run's end)."""
    for aside, name in run.end_aside:
        if aside.exists() and not name.exists():
            os.replace(aside, name)
    run.end_aside.clear()


def _free_name(out: Path, stem: str, suffix: str) -> Path:
    """out/<stem><suffix>, or with -2, -3, ... before the suffix if taken."""
    path, n = out / f"{stem}{suffix}", 1
    while path.exists():
        n += 1
        path = out / f"{stem}-{n}{suffix}"
    return path


def start_rl(run: Run, tracker, stop: StopSignals | None) -> None:
    """Supervised warm start (synthetic task only) and the held-out accuracy RL starts from, checkpointed."""
    cfg = run.cfg
    if run.checkpoint is None and cfg.sft.max_steps > 0:
        from rpgrl.trainer.sft import WarmStartStopped

        try:
            run.state.sft = _warm_start(run.model, run.tokenizer, run.task, cfg, stop)
        except WarmStartStopped:  # nothing to save yet: --resume starts the run over
            tracker.close()
            raise Interrupted(stop.received, 0, run.out, saved=False) from None
    if run.anchor is None:
        run.anchor = Anchor(cfg.ref, run.model)  # after the warm start: `fixed` anchors the model RL starts from
    if run.state.start_accuracy is None:
        try:
            first = run_eval(run.model, run.tokenizer, run.task, run.benchmarks, cfg, 0, run.state, run.out)
        except RewardFailed as e:  # the warm start trained: kept, and the resume evaluates it again
            if run.state.sft is None:  # no warm start (or none in this run's checkpoint): nothing to keep
                raise
            _save(run, 0)
            tracker.close()
            raise UsageError(f"{e}; in the evaluation before RL, after the warm start, which is saved: fix the "
                             "reward, then --resume") from None  # fmt: skip
        tracker.log(first)
        run.state.start_accuracy = first[M.EVAL_ACCURACY]
        if math.isfinite(run.state.start_accuracy):  # NaN: no held-out set (a file dataset without data.val)
            print0(f"held-out greedy accuracy before RL: {100 * run.state.start_accuracy:.1f}%")
        if run.state.sft is not None:  # a checkpoint after the warm start, so a resume never repeats it
            _save(run, 0)
    if stop is not None and stop.received is not None:  # signalled during the warm start or the first evaluation
        _save(run, run.start_step)
        _stop_if_signalled(stop, run.start_step, run.out, tracker)


def rl_loop(run: Run, tracker, on_step, stop: StopSignals | None) -> tuple[int, str | None, float]:
    """The training steps, each followed by logging, the collapse guard and maybe a checkpoint.
    Returns (last step, why it stopped early or None, seconds of RL in this run, the earlier processes' included)."""
    cfg, state = run.cfg, run.state
    metrics_file = MetricsFile(run.out / "metrics.jsonl")
    progress = Progress(cfg.train.max_steps, run.start_step, cfg.train.progress)
    rl_begin = last_save = time.perf_counter()
    before = state.rl_seconds  # the checkpoint's: the steps a resume repeats are not counted twice
    step, stopped = run.start_step, _collapsed(cfg, state)  # a resumed run saved as it stopped: no further step
    last = run.start_step if stopped else cfg.train.max_steps
    for step in range(run.start_step + 1, last + 1):
        drawn = run.stream.state_dict(), rng_state(run.generator)  # where this step's draws start
        try:
            row = training_step(run, step)
        except EvalRewardFailed as e:  # the step trained: kept, with its row, and resumed after it
            state.rl_seconds = before + time.perf_counter() - rl_begin  # as every checkpoint counts its steps' time
            _give_up_after(run, step, e.row, (metrics_file, tracker, progress))
            raise UsageError(f"{e}; in the evaluation of step {step}, which is saved without it: fix the reward, "
                             "then --resume") from None  # fmt: skip
        except (FillExhausted, RewardFailed) as e:  # raised while sampling and scoring: nothing of this step was
            state.rl_seconds = before + time.perf_counter() - rl_begin  # applied (the steps saved count their time).
            run.stream.load_state_dict(drawn[0])  # The run is kept up to the previous step, with the data
            set_rng_state(drawn[1], run.generator)  # and random streams before this one's draws (a resume then
            if step - 1 > run.start_step or not (run.saved or run.checkpoint):  # continues as a run never stopped
                _save(run, step - 1)  # would); else that step's checkpoint exists (a resume's is put back as found)
            progress.close()
            metrics_file.close()
            tracker.close()
            then = ("fix the reward, then --resume" if isinstance(e, RewardFailed) else
                    "continue with --resume and a larger --rollout.max_gen_batches")  # fmt: skip
            raise UsageError(f"{e}; the run is saved at step {step - 1}: {then}") from None
        metrics_file.write(row)
        tracker.log(row)
        progress.update(row)

        # --- Collapse guard: stop when nothing has been correct for a while
        state.collapse_run = state.collapse_run + 1 if row[M.REWARD_CORRECT] == 0 else 0
        stopped = _collapsed(cfg, state)
        # --- Checkpoint: every N steps, every M minutes, at the end, on SIGTERM/SIGINT
        crash_point("step-end")
        signalled = stop is not None and stop.received is not None
        overdue = cfg.train.checkpoint_minutes and time.perf_counter() - last_save >= 60 * cfg.train.checkpoint_minutes
        if step % cfg.train.checkpoint_every == 0 or step == cfg.train.max_steps or stopped or signalled or overdue:
            state.rl_seconds = before + time.perf_counter() - rl_begin
            _save(run, step)
            last_save = time.perf_counter()
        if on_step is not None:
            on_step(step, {"model": run.model, "optimizer": run.opt, "anchor": run.anchor, "row": row})
        if signalled:
            progress.close()
            metrics_file.close()
            tracker.close()
            _draw(run.out)
            raise Interrupted(stop.received, step, run.out)
        if stopped:
            break
    if stopped:
        print0(f"stopping at step {step}: {stopped}")
    progress.close()
    metrics_file.close()
    return step, stopped, before + time.perf_counter() - rl_begin


def _give_up_after(run: Run, step: int, row: dict[str, Any], outputs: tuple) -> None:
    """Keep a step that trained but cannot go on (its evaluation failed): its row logged, its checkpoint written,
    the metrics file, tracker and progress bar closed."""
    metrics_file, tracker, progress = outputs
    metrics_file.write(row)
    tracker.log(row)
    run.state.collapse_run = run.state.collapse_run + 1 if row[M.REWARD_CORRECT] == 0 else 0  # as rl_loop counts
    _save(run, step)
    progress.close()
    metrics_file.close()
    tracker.close()


def _collapsed(cfg: Config, state) -> str | None:
    """Why the collapse guard stops the run (no correct sampled response for collapse_patience steps), or None."""
    if cfg.train.collapse_patience and state.collapse_run >= cfg.train.collapse_patience:
        return f"collapsed: no correct response for {state.collapse_run} steps (lower optim.lr?)"
    return None


class FillExhausted(RuntimeError):
    """rollout.group_filter 'fill' found too few mixed groups within rollout.max_gen_batches generation batches."""


def training_step(run: Run, step: int) -> dict[str, Any]:
    """One training step: sample and score, update, then the anchor refresh and a periodic evaluation. Returns the
    step's metrics row (floats)."""
    cfg, model, opt = run.cfg, run.model, run.opt
    t0 = time.perf_counter()
    lr = cfg.optim.lr * lr_multiplier(step, cfg.optim.warmup_steps)
    for g in opt.param_groups:
        g["lr"] = lr
    row: dict[str, Any] = {"step": step, "optim/lr": lr}

    # --- Sample and score; with dynamic sampling ('fill') keep generating until enough mixed groups
    batch, rewards, sampled, timing = collect_batch(
        model, run.tokenizer, run.task, run.stream, run.generator, run.reward_fn, cfg
    )
    row.update(sampled)
    if len(batch) > 0:
        row.update(update_policy(model, opt, run.params, batch, rewards, run.anchor, run.adv_fn, run.loss_fn,
                                 run.loss_opts, cfg, sampled, timing))  # fmt: skip

    # --- Log: one row per training step, converted to floats once
    n_tokens = sampled["batch/sampled_tokens"]
    step_time = time.perf_counter() - t0
    row.update({f"perf/{k}_s": v for k, v in timing.items()})
    row["perf/step_s"] = step_time
    row[M.TOKENS_PER_S] = n_tokens / step_time
    row["perf/gen_tokens_per_s"] = n_tokens / max(timing["generation"], 1e-9)
    row = to_floats(row)
    row["step"] = step
    bad = [k for k in non_finite(row) if not k.startswith("perf/")]
    if bad:
        raise Diverged(f"step {step}: non-finite metrics {', '.join(bad)}: training diverged ({DIVERGED_HINT})")

    # --- Anchor refresh (periodic / adaptive), then periodic evaluation
    if run.anchor.after_step(step, model, row.get(M.KL_ANCHOR)):
        row["ref/refreshed"] = 1.0
    # (the last step's too, before its checkpoint: a resume that continues past it keeps it, as a run never stopped)
    if cfg.eval.every and step % cfg.eval.every == 0:
        try:
            with _averaged_weights(opt):
                run.last_eval = run_eval(model, run.tokenizer, run.task, run.benchmarks, cfg, step, run.state, run.out)
        except RewardFailed as e:  # after the update: the step is kept without its evaluation
            raise EvalRewardFailed(str(e), row) from None
        row.update(run.last_eval)
    return row


class EvalRewardFailed(RewardFailed):
    """The reward failed in a step's periodic evaluation, after its update: `row` is the step's metrics."""

    def __init__(self, message: str, row: dict[str, Any]):
        super().__init__(message)
        self.row = row


def finish(run: Run, tracker, step: int, stopped: str | None, rl_time: float, stop) -> dict:
    """Final evaluation on the averaged weights, exported model, curves, summary."""
    cfg, out, state = run.cfg, run.out, run.state
    if latest_checkpoint(out / "checkpoints") is None:  # no step and no warm start ran (--max-steps 0): the end's
        _save(run, step)  # checkpoint, so that --resume --max-steps N continues it
    _stop_if_signalled(stop, step, out, tracker)  # after the last step's checkpoint: a resume runs the final phase
    if hasattr(run.opt, "eval"):
        run.opt.eval()  # schedule-free: x, the averaged weights; the last checkpoint keeps the y point to resume from
    last = run.last_eval
    if last is None or last["step"] != step:  # else the periodic evaluation of this step, on the same weights
        last = run_eval(run.model, run.tokenizer, run.task, run.benchmarks, cfg, step, state, out, final=True)
        tracker.log(last)
    tracker.close()
    end_acc = last[M.EVAL_ACCURACY]
    _stop_if_signalled(stop, step, out)  # before writing model/, which a follow-up SIGKILL could leave half-written
    if stop is not None:
        stop.finishing()  # a signal from here on: the few seconds left finish the run (exit 0), not a stop
    _export(run.model, run.tokenizer, out / "model", progress=cfg.train.progress)
    _draw(out)  # never in the way of the summary
    summary = {
        "steps": step,
        "start_accuracy": state.start_accuracy,
        "end_accuracy": end_acc,
        "best_accuracy": state.best_accuracy,
        "gain_points": 100 * (end_acc - state.start_accuracy),
        "benchmarks": state.tracker.summary() if state.tracker is not None else None,
        "stopped": stopped,
        "sft": state.sft,
        "rl_seconds": rl_time,
        "wall_seconds": time.perf_counter() - run.began,
        "eval_problems": len(_eval_slice(run.task, cfg)[0]),
    }
    write_text_atomic(out / "summary.json", json.dumps(json_safe(summary), indent=2) + "\n")
    _drop_the_same_end_aside(out, step)
    if summary["eval_problems"]:
        print0(
            f"held-out greedy accuracy ({summary['eval_problems']} problems): start of RL "
            f"{100 * state.start_accuracy:.1f}% -> end {100 * end_acc:.1f}% ({summary['gain_points']:+.1f} points)"
        )
    for bench, r in (summary["benchmarks"] or {}).items():
        print0(f"{bench}: mean@{cfg.eval.samples} last {r['last']:.4f}, best {r.get('best', float('nan')):.4f}")
    print0(f"{step} RL steps, {summary['wall_seconds']:.0f} s in total; run directory {out}")
    return summary


# ---------------------------------------------------------------------------------------------------------------
# Pieces of a step


def update_policy(model, opt, params, batch, rewards, anchor, adv_fn, loss_fn, loss_opts, cfg: Config, sampled,
                  timing) -> dict[str, Any]:  # fmt: skip
    """The update phase of one training step on the kept rollout batch: advantages, pi_old's (and a separate
    anchor's) log-probs, then `train.epochs` x mini-batches optimizer steps. Returns the step's adv/*, loss/*, kl/*,
    clip/*, log_w/*, optim/* (averaged over optimizer steps; */max, */min as extremes), entropy/mean and
    response/neg_logp_mean; adds the old_logp and update phases to `timing`."""
    mask = batch.response_mask  # (B, T)
    # --- Advantages (from the registry), over the kept batch
    adv = adv_fn(rewards, batch.group, mask).detach()  # (B,) or (B, T)
    adv_tok = adv[:, None].expand_as(mask) if adv.dim() == 1 else adv
    row = {"adv/mean": masked_mean(adv_tok, mask), "adv/abs_mean": masked_mean(adv_tok.abs(), mask)}

    # --- Old log-probs (and the anchor's, if it is a separate model), fixed for the whole update. A strictly
    # on-policy update (one epoch, one mini-batch: every micro-batch sees the weights that sampled it) takes them
    # from its own forward, detached: pi_old is pi_theta there, so w == 1 exactly (TRL does the same). Off-policy
    # they are the sampler's own log-probs ('sampler') or a separate no-grad pass ('forward').
    mbs = minibatches(batch.group, cfg.train.mini_batch_prompts)
    source = old_logp_source(cfg, len(mbs), batch)
    t = time.perf_counter()
    with torch.no_grad():
        old_logp, entropy = None, None
        if source == "forward":
            old_logp, entropy = _batched_logprobs(model, batch, cfg, with_entropy=True)
        elif source == "sampler":  # and the entropy of the distribution each token was drawn from
            old_logp, entropy = batch.sampler_logp, batch.sampler_entropy
        anchor_logp = _batched_logprobs(anchor.model, batch, cfg)[0] if anchor.separate else None
    timing["old_logp"] = time.perf_counter() - t

    # --- Mini-batch epochs: whole prompt groups per mini-batch, micro-batches share its normalizer.
    t = time.perf_counter()
    scale = _dropped_scale(cfg, batch, sampled)
    step_metrics, opt_steps = [], 0
    captured: list = []  # on-policy: (micro-batch rows, detached logp, entropy) of the update's own forward
    capture = captured if source == "own" else None
    for _ in range(cfg.train.epochs):
        for rows in mbs:
            normalizer = (mask[rows].sum() if cfg.loss.agg == "token-mean" else float(len(rows))) * scale
            reduced, stepped = _optimizer_step(model, opt, params, batch, rows, adv, old_logp, anchor_logp,
                                               normalizer, loss_fn, loss_opts, cfg, capture)  # fmt: skip
            step_metrics.append(reduced)
            opt_steps += stepped
    opt.zero_grad(set_to_none=True)
    timing["update"] = time.perf_counter() - t
    row.update(mean_over_steps(step_metrics))
    row[M.OPTIM_STEPS] = opt_steps  # optimizer steps taken on this rollout batch (skipped steps excluded)
    if captured:  # one mini-batch of micro-batches: each row's values exactly once
        old_logp, entropy = _scatter_rows(captured, 1, mask), _scatter_rows(captured, 2, mask)
    row[M.ENTROPY] = masked_mean(entropy, mask)  # of pi_old, the policy that sampled the batch
    row["response/neg_logp_mean"] = masked_mean(-old_logp, mask)
    return row


def _dropped_scale(cfg: Config, batch, sampled: dict) -> float:
    """'drop' keeps the normalizer of the full batch: dropped groups count as the zero-advantage responses they are,
    so with one mini-batch and no KL term the update equals the unfiltered one (only cheaper); with mini-batches,
    each one's count is scaled by the same sampled / kept ratio. Renormalising over the kept groups instead gives a step
    with one informative group the size of a step with thirty, under Adam a full-size step of noise; on the default
    task that degraded the warm-started model. Returns (sampled count) / (kept count), 1 without 'drop'."""
    if cfg.rollout.group_filter != "drop":
        return 1.0
    token_mean = cfg.loss.agg == "token-mean"
    kept = batch.response_mask.sum() if token_mean else float(len(batch))
    return sampled["batch/sampled_tokens" if token_mean else "batch/sampled"] / kept


def _optimizer_step(model, opt, params, batch, rows, adv, old_logp, anchor_logp, normalizer, loss_fn, loss_opts,
                    cfg: Config, capture: list | None) -> tuple[dict[str, torch.Tensor], int]:  # fmt: skip
    """One optimizer step on the mini-batch `rows` (B_mb,), micro-batched; every micro-batch's loss uses the
    mini-batch's `normalizer`, so the gradients add up to the mini-batch's. `old_logp` (B, T), or None on-policy
    (the forward's own log-probs, detached). `capture`: receives (micro rows, detached logp, entropy) per micro-batch.
    Returns the step's reduced metrics and 1 if the step was taken (0: non-finite gradient norm, skipped)."""
    from rpgrl.rollout import token_logprobs

    opt.zero_grad(set_to_none=True)
    micro, weights, counts = [], [], []
    for mrows in rows.split(cfg.train.micro_batch_size):
        mb = batch.select(mrows)
        logp, ent = token_logprobs(model, mb, temperature=cfg.rollout.temperature, chunk_size=cfg.train.logprob_chunk,
                                   with_entropy=capture is not None, forward=cfg.train.forward)  # fmt: skip
        if capture is not None:
            capture.append((mrows, logp.detach(), ent.detach()))
        old = logp.detach() if old_logp is None else old_logp[mrows]
        a_lp = None if anchor_logp is None else anchor_logp[mrows]
        try:
            out = loss_fn(logp, old, adv[mrows], mb.response_mask, normalizer=normalizer, **loss_opts,
                          **anchor_kwargs(cfg.loss, a_lp, old))  # fmt: skip
        except LossOverflow as e:  # ratios too extreme for the dtype: the policy moved far from the sampler
            raise Diverged(f"{first_line(e)} ({DIVERGED_HINT})") from None
        except ValueError:  # the losses refuse non-finite inputs; NaN log-probs: weights an earlier step sent too far
            if not bool((logp.isfinite() | ~mb.response_mask.bool()).all()):
                raise Diverged(f"the policy's log-probs are not finite (NaN or inf) after an optimizer step: its "
                               f"weights diverged ({DIVERGED_HINT})") from None  # fmt: skip
            raise
        try:
            out.loss.backward()
        except LossOverflow as e:  # a finite loss whose gradient overflows (the losses' backward guard)
            raise Diverged(f"{first_line(e)} ({DIVERGED_HINT})") from None
        m = dict(out.metrics)
        m[M.KL_ANCHOR] = anchor_kl(logp, old, old if a_lp is None else a_lp, mb.response_mask)
        micro.append(m)
        weights.append(float(mb.response_mask.sum()))
        counts.append(float(len(mrows)))
    grad_norm = clip_grad_norm(params, cfg.optim.grad_clip or math.inf)
    stepped = bool(torch.isfinite(grad_norm))
    if stepped:
        opt.step()
    else:  # spec 7.4: a non-finite gradient norm skips the step
        opt.zero_grad(set_to_none=True)
    reduced = reduce_micro(micro, weights, counts, M.per_sequence(cfg.loss.name, cfg.loss.divergence, cfg.loss.level))
    reduced["optim/grad_norm"] = grad_norm.detach()
    reduced["optim/skipped"] = torch.tensor(0.0 if stepped else 1.0)
    return reduced, int(stepped)


def _scatter_rows(pieces: list, field: int, mask: torch.Tensor) -> torch.Tensor:
    """Reassemble per-row tensors (B, T) from (rows, logp, entropy) micro-batch pieces; `field` 1 = logp, 2 = ent."""
    out = torch.zeros(mask.shape, dtype=pieces[0][field].dtype, device=pieces[0][field].device)
    for piece in pieces:
        out[piece[0]] = piece[field]
    return out


def collect_batch(model, tokenizer, task: Task, stream: PromptStream, generator, reward_fn, cfg: Config):
    """Sample G responses for the step's prompts and score them; drop or (DAPO 'fill') regenerate groups whose
    responses are all correct or all wrong. Returns (kept Rollout, its rewards (B,), metrics over every sampled
    response, timings). The rows of a group stay adjacent; group ids are distinct across generation batches."""
    from rpgrl.rollout import sample
    from rpgrl.shaping import group_filter_keep, overlong_penalty

    r = cfg.rollout
    timing = {"generation": 0.0, "scoring": 0.0}
    kept, n_kept, rewards_all, correct_all, lengths_all, parts_all = [], 0, [], [], [], {}
    n_gen = 0
    while r.group_filter != "fill" or n_kept < r.prompts_per_step:
        if n_gen == r.max_gen_batches:
            raise FillExhausted(
                f"dynamic sampling: only {n_kept} of {r.prompts_per_step} prompt groups had mixed outcomes after "
                f"{n_gen} generation batches (rollout.max_gen_batches)"
            )
        n_gen += 1
        idx = stream.next(r.prompts_per_gen_batch if r.group_filter == "fill" else r.prompts_per_step)
        t = time.perf_counter()
        rollout = sample(
            model,
            tokenizer,
            [task.train_prompts[i] for i in idx],
            n=r.group_size,
            max_new_tokens=r.max_new_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
            batch_size=max(1, r.gen_batch_size // r.group_size),
            generator=generator,
            decode=r.decode,
        )
        timing["generation"] += time.perf_counter() - t
        t = time.perf_counter()
        answers = [task.train_answers[idx[g]] for g in rollout.group.tolist()]
        rewards, correct, parts = score(reward_fn, cfg.data.reward, rollout.texts, answers)
        rewards, correct = rewards.to(rollout.group.device), correct.to(rollout.group.device)
        if r.overlong_buffer > 0:
            rewards = rewards + overlong_penalty(
                rollout.lengths, r.max_new_tokens, r.overlong_buffer, r.overlong_factor, dtype=rewards.dtype
            )
        rewards_all.append(rewards)
        correct_all.append(correct)
        lengths_all.append(rollout.lengths)
        for k, v in parts.items():
            parts_all.setdefault(k, []).append(v)
        if r.group_filter == "off":
            keep = torch.ones(len(rollout), dtype=torch.bool)
        else:  # spec 5.3: filter on correctness, not on the shaped reward
            keep = group_filter_keep(correct, rollout.group)
        kept.append((rollout.select(keep), rewards[keep]))
        n_kept += int(rollout.group[keep].unique().numel())
        timing["scoring"] += time.perf_counter() - t
        if r.group_filter != "fill":
            break
    batch, rewards = _concat_kept(kept, r.prompts_per_step, cfg, tokenizer)
    rewards_all, correct_all, lengths_all = torch.cat(rewards_all), torch.cat(correct_all), torch.cat(lengths_all)
    n = rewards_all.numel()
    metrics = {
        M.REWARD_MEAN: rewards_all.mean(),
        "reward/std": rewards_all.std() if n > 1 else torch.zeros(()),
        M.REWARD_CORRECT: correct_all.float().mean(),
        **{f"reward/{k}": torch.cat(v).float().mean() for k, v in parts_all.items() if k != "correct"},
        M.LENGTH_MEAN: lengths_all.float().mean(),
        "response/length_max": lengths_all.max().float(),
        "response/truncated_frac": (lengths_all >= r.max_new_tokens).float().mean(),
        "batch/gen_batches": n_gen,
        "batch/sampled": n,
        "batch/sampled_tokens": lengths_all.sum(),
        "batch/trained": len(batch),
    }
    return batch, rewards, to_floats(metrics), timing


def _concat_kept(parts, max_groups: int, cfg: Config, tokenizer):
    """Concatenate the kept groups of one or more generation batches; with 'fill', keep the first `max_groups`."""
    from rpgrl.rollout import cat_rollouts

    rolls = [p[0] for p in parts if len(p[0])]
    if not rolls:
        return parts[0][0], parts[0][1]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = rolls[0] if len(rolls) == 1 else cat_rollouts(rolls, pad_id=pad)
    rewards = torch.cat([p[1] for p in parts])
    if cfg.rollout.group_filter == "fill":
        rows = torch.isin(batch.group, batch.group.unique_consecutive()[:max_groups])
        batch, rewards = batch.select(rows), rewards[rows]
    return batch.compact(), rewards


def minibatches(group: torch.Tensor, prompts_per_mb: int | None) -> list[torch.Tensor]:
    """Row indices of each mini-batch: consecutive whole prompt groups, `prompts_per_mb` groups each (None: all).
    `group` (B,) holds each row's prompt id; the rows of a group are adjacent."""
    rows = torch.arange(group.numel())
    if prompts_per_mb is None:
        return [rows]
    _, counts = group.unique_consecutive(return_counts=True)
    sizes = [int(c.sum()) for c in counts.split(prompts_per_mb)]
    return list(rows.split(sizes))


def _draw(out: Path) -> None:
    """curves.png, at the end and when a signal stops the run (a stopped run had none): a picture that cannot be
    drawn (a hand-edited metrics file) is not worth a stop or an end that fails."""
    try:
        plot_run(out)
    except Exception:  # noqa: BLE001
        pass


def _stop_if_signalled(stop: StopSignals | None, step: int, out: Path, tracker=None) -> None:
    """Raise `Interrupted` if a SIGTERM/SIGINT arrived (the checkpoint of `step` is already written), closing the
    experiment tracker first."""
    if stop is not None and stop.received is not None:
        if tracker is not None:
            tracker.close()
        _draw(out)
        raise Interrupted(stop.received, step, out)


def on_policy(cfg: Config, n_minibatches: int) -> bool:
    """Whether the update is strictly on-policy: one epoch of one mini-batch, so no optimizer step happens between
    sampling and any micro-batch's loss and the old log-probs are the update's own forward, detached."""
    return cfg.train.epochs == 1 and n_minibatches == 1


def old_logp_source(cfg: Config, n_minibatches: int, batch) -> str:
    """Where pi_old's log-probs come from: 'own' (on-policy: the update's own forward, detached), 'sampler' (the
    log-probs the sampler drew the tokens with; no extra pass) or 'forward' (a no-grad pass before the update).
    `train.old_logp="auto"` takes the sampler's for float32 models, where its cached decode agrees with the training
    forward to float rounding, and a forward pass otherwise (in bfloat16 the two paths differ by more)."""
    if on_policy(cfg, n_minibatches):
        return "own"
    choice = cfg.train.old_logp
    if choice == "auto":
        choice = "sampler" if cfg.model.dtype == "float32" else "forward"
    recorded = batch.sampler_logp is not None and batch.sampler_entropy is not None
    return "sampler" if choice == "sampler" and recorded else "forward"


def _batched_logprobs(model, batch, cfg: Config, with_entropy: bool = False):
    from rpgrl.rollout import token_logprobs

    lps, ents = [], []
    for rows in torch.arange(len(batch)).split(cfg.train.micro_batch_size):
        lp, ent = token_logprobs(
            model,
            batch.select(rows),
            temperature=cfg.rollout.temperature,
            chunk_size=cfg.train.logprob_chunk,
            with_entropy=with_entropy,
            forward=cfg.train.forward,
        )
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps), (torch.cat(ents) if with_entropy else None)


def _eval_slice(task: Task, cfg: Config) -> tuple[list[list[int]], list[str]]:
    k = cfg.eval.max_problems
    return (task.val_prompts[:k], task.val_answers[:k]) if k else (task.val_prompts, task.val_answers)


def greedy_accuracy(model, tokenizer, prompts: list[list[int]], answers: list[str], cfg: Config) -> float:
    """Fraction of prompts whose greedy response is correct (the reward's `correct`); NaN without prompts."""
    return _accuracy(model, tokenizer, prompts, answers, cfg, k=1, seed=None)


def sampled_accuracy(
    model, tokenizer, prompts: list[list[int]], answers: list[str], cfg: Config, k: int, seed: int
) -> float:
    """Mean accuracy of `k` responses per prompt sampled at the rollout temperature/top-p (mean@k), drawn from a
    generator seeded by `seed` alone, so training's sampler state is untouched; NaN without prompts."""
    return _accuracy(model, tokenizer, prompts, answers, cfg, k=k, seed=seed)


def _accuracy(model, tokenizer, prompts, answers, cfg: Config, k: int, seed: int | None) -> float:
    """Mean correctness of `k` responses per prompt: greedy when `seed` is None, else sampled."""
    from rpgrl.rewards import get_reward
    from rpgrl.rollout import sample

    if not prompts:
        return float("nan")
    reward_fn = get_reward(cfg.data.reward)
    r = sample(
        model,
        tokenizer,
        prompts,
        n=k,
        max_new_tokens=cfg.rollout.max_new_tokens,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        greedy=seed is None,
        batch_size=max(1, cfg.rollout.gen_batch_size // k),
        generator=None if seed is None else torch.Generator(device=model_device(model)).manual_seed(seed),
        decode=cfg.rollout.decode,
    )
    scored = correct_flags(reward_fn, cfg.data.reward, r.texts, [answers[i // k] for i in range(len(r.texts))])
    return sum(scored) / len(scored)


def run_eval(
    model,
    tokenizer,
    task: Task,
    benchmarks: list,
    cfg: Config,
    step: int,
    state: RunState,
    out: Path,
    final: bool = False,
) -> dict:
    """Greedy held-out accuracy (`eval/accuracy`) and, with `eval.benchmarks`, mean@k / pass@k / best@k per
    benchmark plus the running Best (spec 7.7). Appends the row to `eval.jsonl` and updates `state`."""
    prompts, answers = _eval_slice(task, cfg)
    t = time.perf_counter()
    row: dict[str, Any] = {"step": step, M.EVAL_ACCURACY: greedy_accuracy(model, tokenizer, prompts, answers, cfg)}
    if cfg.eval.val_samples:
        seed, k = cfg.train.seed * 1_000_003 + step, cfg.eval.val_samples
        row[M.EVAL_SAMPLED] = sampled_accuracy(model, tokenizer, prompts, answers, cfg, k, seed)
    if benchmarks:
        from rpgrl.evaluation import evaluate

        metrics = evaluate(
            model,
            tokenizer,
            benchmarks,
            k=cfg.eval.samples,
            max_new_tokens=cfg.rollout.max_new_tokens,
            mode=cfg.eval.scoring,
            batch_size=max(1, cfg.rollout.gen_batch_size // cfg.eval.samples),
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            seed=cfg.train.seed,
            limit_problems=cfg.eval.max_problems,
            max_prompt_length=cfg.data.max_prompt_length,
        )
        row.update(metrics)
        row.update(state.tracker.update(step, metrics))
    row["perf/eval_s"] = time.perf_counter() - t
    if final:
        row["final"] = 1  # the end-of-run evaluation (dropped when a resume continues past it)
    if math.isfinite(row[M.EVAL_ACCURACY]):
        state.best_accuracy = max(row[M.EVAL_ACCURACY], state.best_accuracy or 0.0)
    with open(out / "eval.jsonl", "a") as f:
        f.write(json.dumps(json_safe(row)) + "\n")
    return row


class _averaged_weights:
    """Context: schedule-free optimizers expose their averaged weights x (eval mode) inside; AdamW: no-op."""

    def __init__(self, opt):
        self.opt = opt

    def __enter__(self):
        if hasattr(self.opt, "eval"):
            self.opt.eval()

    def __exit__(self, *exc):
        if hasattr(self.opt, "train"):
            self.opt.train()


def _warm_start(model, tokenizer, task: Task, cfg: Config, stop: StopSignals | None) -> dict[str, Any]:
    from rpgrl.trainer.sft import warm_start

    crash_point("warm-start")
    if stop is not None:
        stop.warming(True)
    try:
        stats = warm_start(
            model,
            tokenizer,
            task.train_problems,
            task.val_problems,
            cfg.sft,
            seed=cfg.train.seed,
            max_new_tokens=cfg.rollout.max_new_tokens,
            progress=cfg.train.progress,
            forward=cfg.train.forward,
            stop=None if stop is None else lambda: stop.received is not None,
        )
    finally:
        if stop is not None:
            stop.warming(False)
    info = dataclasses.asdict(stats)
    print0(
        f"warm start: {stats.steps} steps in {stats.seconds:.0f} s, held-out greedy {100 * stats.greedy_acc:.1f}%, "
        f"sampled {100 * stats.sampled_acc:.1f}%"
    )
    return info


def _export(model, tokenizer, folder: Path, progress: bool) -> None:
    """The final model and tokenizer as a Hugging Face folder; transformers' "Writing model shards" bar only with
    `progress`."""
    from transformers.utils import logging as hf_logging

    quiet = not progress and hf_logging.is_progress_bar_enabled()
    if quiet:
        hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    finally:
        if quiet:
            hf_logging.enable_progress_bar()


def _save(run: Run, step: int) -> None:
    """The checkpoint of `step`, if the policy still computes finite logits (a diverged model is never saved: a
    resume would only meet it again), else `Diverged`. A write that fails (disk full) leaves the older checkpoints
    and raises UsageError."""
    _check_policy_finite(run, step)
    run.state.wall_seconds = time.perf_counter() - run.began
    state = {
        "step": step,
        "model": run.model.state_dict(),
        "optimizer": run.opt.state_dict(),
        "optimizer_name": run.cfg.optim.name,
        "anchor": run.anchor.state_dict(),
        "data": run.stream.state_dict(),
        "rng": rng_state(run.generator),
        "trainer": run.state.to_dict(),
    }
    run.saved = True  # from here on the run directory may hold a checkpoint of this process: never put back
    try:
        save_checkpoint(run.out / "checkpoints", step, state, keep=run.cfg.train.keep_checkpoints)
    except (OSError, RuntimeError) as e:  # torch.save reports a full disk as RuntimeError (its zip writer)
        if isinstance(e, RuntimeError) and "PytorchStreamWriter" not in str(e) and "inline_container" not in str(e):
            raise
        remove_leftovers(run.out / "checkpoints")
        raise UsageError(f"cannot write the checkpoint of step {step} in {run.out / 'checkpoints'}: "
                         f"{getattr(e, 'strerror', None) or first_line(e)}; older checkpoints are kept (make room, "
                         "then --resume)") from None  # fmt: skip


@torch.no_grad()
def _check_policy_finite(run: Run, step: int) -> None:
    """Diverged unless the policy still samples and scores with finite logits: two greedy tokens for a training
    prompt on the sampler's path, and their log-probs on the update's (weights can be finite but so large that a
    forward overflows, and the paths' roundings differ where; the model's own forward gave 0, not NaN, for weights
    scaled by 1e30). Greedy, so no RNG stream moves."""
    from rpgrl.rollout import sample, token_logprobs

    cfg = run.cfg
    try:
        decode = "auto" if cfg.rollout.decode == "compiled" else cfg.rollout.decode  # no graph of its own
        r = sample(run.model, run.tokenizer, run.task.train_prompts[:1], n=1, max_new_tokens=2, greedy=True,
                   decode=decode)  # fmt: skip
        logp, _ = token_logprobs(run.model, r, forward=cfg.train.forward)
        finite = bool((logp.isfinite() | ~r.response_mask.bool()).all())
    except Diverged:
        finite = False
    if not finite:
        raise Diverged(f"after step {step} the policy's logits are not finite: its weights diverged and are not "
                       f"saved ({DIVERGED_HINT})")  # fmt: skip


def _print_config(cfg: Config, out: Path) -> None:
    for sec, values in config_to_dict(cfg).items():
        print0(f"{sec}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    print0(f"resolved config: {out / 'config.json'}")
