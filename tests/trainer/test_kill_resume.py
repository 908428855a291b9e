"""Kill a real `rpgrl train` process at the worst moments, resume it, and compare with a run never interrupted.

Kills: SIGKILL from inside at a named point (`RPGRL_CRASH_AT`, see `rpgrl.trainer.checkpoint.crash_point`: during
the warm start, after a step's metrics are written but before its checkpoint, while a checkpoint is written, between
its rename and the `latest` pointer, while an old one is pruned), SIGKILL from outside at seeded random moments, and
SIGINT / SIGTERM (a clean stop). After each: the metrics rows up to the last checkpoint are kept byte for byte, the
resumed run's steps are unique and contiguous, and its metrics equal the uninterrupted run's exactly (perf/* aside),
as the in-process resume test (test_loop.py) requires. A kill before the first checkpoint leaves a run `--resume`
starts over in place, with the same result."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_config import TINY

from rpgrl.trainer.checkpoint import latest_checkpoint, load_checkpoint
from rpgrl.trainer.log import read_metrics

pytestmark = pytest.mark.slow

STEPS = 6
ARGS = [f"--{k}={v}" for k, v in TINY if k != "train.max_steps"] + [
    f"--max-steps={STEPS}",
    "--train.checkpoint_every=2",
    "--train.keep_checkpoints=2",
    "--sft.max_steps=2",
    "--sft.eval_every=1",
    "--sft.batch_size=8",
]
# `test_parity` (tiny_config) is registered by importing tiny_config, so the child imports it before the CLI
CHILD = "import sys, tiny_config; from rpgrl.cli import main; sys.exit(main(sys.argv[1:]))"


def _env(crash_at: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RPGRL_CRASH_AT"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    if crash_at:
        env["RPGRL_CRASH_AT"] = crash_at
    return env


def _cmd(out: Path, resume: bool) -> list[str]:
    return [sys.executable, "-c", CHILD, "train", "--out", str(out), *(["--resume"] if resume else ARGS)]


def _run(out: Path, *, resume: bool = False, crash_at: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(out, resume), env=_env(crash_at), capture_output=True, text=True, timeout=600)


def _strip(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def _snapshot(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in d.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("kill") / "straight"
    t0 = time.monotonic()
    done = _run(out)
    assert done.returncode == 0, done.stderr
    return out, time.monotonic() - t0


def _resume_and_compare(out: Path, reference: Path, stopped_at: int | None = None) -> None:
    """Resume a killed run (killed before its first checkpoint: started over); check nothing up to its last checkpoint
    was lost and the result equals the reference.
    `stopped_at`: the step a clean stop saved its checkpoint at (besides every second step)."""
    ckpt = latest_checkpoint(out / "checkpoints")
    if ckpt is None and not (out / "config.json").is_file():  # killed before there was a run: nothing to resume
        before = _snapshot(out) if out.is_dir() else None
        done = _run(out, resume=True)
        assert done.returncode == 2 and "no run to resume" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and (_snapshot(out) if out.is_dir() else None) == before
        return
    saved_step = load_checkpoint(ckpt)["step"] if ckpt is not None else 0  # none yet: --resume starts it over
    lines = (out / "metrics.jsonl").read_text().splitlines(keepends=True) if (out / "metrics.jsonl").exists() else []
    kept = lines[:saved_step]  # rows 1..saved_step, written before the checkpoint
    done = _run(out, resume=True)
    assert done.returncode == 0, done.stderr
    after = (out / "metrics.jsonl").read_text().splitlines(keepends=True)
    assert after[: len(kept)] == kept  # nothing before the last checkpoint was rewritten or lost
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # unique and contiguous
    assert _strip(rows) == _strip(read_metrics(reference / "metrics.jsonl"))
    evals = _strip(read_metrics(out / "eval.jsonl"))
    assert evals == _strip(read_metrics(reference / "eval.jsonl"))
    leftovers = [p.name for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]
    saves = {0, 2, 4, 6} | ({stopped_at} if stopped_at is not None else set())  # keep_checkpoints=2: the newest two
    want = [f"step-{step:06d}" for step in sorted(saves)[-2:]]
    assert not leftovers and sorted(p.name for p in (out / "checkpoints").glob("step-*")) == want


# point: where the process kills itself (name:n = the n-th pass). Saves: step 0 (after the warm start), 2, 4, 6;
# pruning starts at the save of step 4.
POINTS = [
    "warm-start",
    "step-end:1",
    "step-end:3",
    "checkpoint-write:1",
    "checkpoint-write:3",
    "checkpoint-rename:2",
    "checkpoint-prune:1",
    "checkpoint-prune:2",
]


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_a_named_point_then_resume(reference, tmp_path, point):
    out = tmp_path / "run"
    done = _run(out, crash_at=point)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr[-2000:])
    _resume_and_compare(out, reference[0])


@pytest.mark.parametrize("seed", range(6))
def test_sigkill_at_a_random_moment_of_rl_then_resume(reference, tmp_path, seed):
    """SIGKILL from outside at a seeded moment between the warm start's checkpoint and the reference run's end."""
    out = tmp_path / "run"
    rl_seconds = json.loads((reference[0] / "summary.json").read_text())["rl_seconds"]
    proc = subprocess.Popen(_cmd(out, False), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (out / "checkpoints" / "step-000000").is_dir() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        proc.wait(timeout=random.Random(seed).uniform(0.0, 0.9) * rl_seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed within 0.9 x the reference's RL time, not finished
    _resume_and_compare(out, reference[0])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_clean_stop_then_resume(reference, tmp_path, sig):
    out = tmp_path / "run"
    proc = subprocess.Popen(_cmd(out, False), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(read_metrics(out / "metrics.jsonl")) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err
    stopped_at = len(read_metrics(out / "metrics.jsonl"))
    assert err.strip().splitlines()[-1].startswith(f"rpgrl train: stopped by {signal.Signals(sig).name} after step ")
    assert load_checkpoint(latest_checkpoint(out / "checkpoints"))["step"] == stopped_at  # no step lost
    _resume_and_compare(out, reference[0], stopped_at)
