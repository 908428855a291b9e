"""The run directory's guards: which `--out` can hold a run, and a clean stop on SIGTERM / SIGINT.

* `check_run_dir(out, resume)` runs before anything is loaded or written. A fresh run needs `out` to be absent or
  empty, a directory (not a file, not below a file) in a place we can write; `--resume` needs a saved config. A run
  that stopped before its first checkpoint (killed in the warm start, a crash in the first steps) has nothing to
  continue from: `--resume` starts it over from step 0 in the same directory, so every run that wrote its
  config.json can be resumed (one stopped in its first seconds wrote nothing: its command is run again).
* `RunLock(out)`: one process per run directory (an advisory lock on `<out>/.lock`, released when the process ends,
  however it ends); a second `rpgrl train` on a directory in use is refused, so two processes never interleave
  their metrics and checkpoints.
* `StopSignals` turns the first SIGTERM or SIGINT into a request: the trainer finishes the current step, writes a
  checkpoint and raises `Interrupted`; `rpgrl train` prints one line and exits with 128 + the signal number (130
  for Ctrl-C, 143 for SIGTERM, the shell's convention), so a scheduler sees that the run did not finish. A second
  signal is not caught: it acts as if no handler were installed (KeyboardInterrupt, which `rpgrl train` prints as
  one line, or the default termination). Once the last checkpoint is written, a first signal lets the run finish.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from rpgrl.errors import UsageError, dir_problem
from rpgrl.trainer.checkpoint import latest_checkpoint


def check_run_dir(out: Path, resume: bool, probe_lock: bool = True) -> bool:
    """UsageError (one line) when `out` cannot hold the run; reads only, so a refused command changes nothing.
    Returns True for a resume of a run that stopped before its first checkpoint (it starts over), else False.
    `probe_lock=False`: the caller holds the run's lock (a re-check under it)."""
    out = Path(out)
    problem = dir_problem(out)
    if problem is not None:
        raise UsageError(f"--out {out}: {problem}")
    holder = lock_holder(out) if probe_lock else None
    if holder is not None:
        raise UsageError(_in_use(out, holder))
    try:
        has_checkpoint = latest_checkpoint(out / "checkpoints") is not None
    except OSError as e:
        raise UsageError(f"--out {out}: cannot read its checkpoints folder: {e.strerror or e}") from None
    if resume:
        if not out.exists():
            raise UsageError(f"--resume: {out} does not exist: check --out (the folder of the run to continue)")
        if _foreign_config(out / "config.json"):
            raise UsageError(f"--resume: {out} holds no rpgrl run (its config.json is not a run's: a model "
                             "folder?): check --out")  # fmt: skip
        if not (out / "config.json").is_file():
            raise UsageError(f"--resume: no run to resume in {out} (no config.json: a run stopped in its first "
                             "seconds saved nothing): run its command again without --resume")  # fmt: skip
        if has_checkpoint:
            return False
        further = _got_further(out)
        if further is not None:
            raise UsageError(f"--resume: {out} has no checkpoint to continue from, but {further}: its checkpoints "
                             "were removed; nothing was changed (start a new run with another --out)")  # fmt: skip
        return True
    if out.is_dir() and any(not _nothing_yet(p) for p in out.iterdir()):
        if has_checkpoint:
            raise UsageError(f"run directory {out} is not empty: pass --resume to continue it, or choose another --out")
        if is_run_config(out / "config.json"):
            raise UsageError(f"run directory {out} holds a run that stopped before its first checkpoint: pass "
                             "--resume to start it over, or choose another --out")  # fmt: skip
        if (out / "config.json").is_file():
            raise UsageError(f"run directory {out} holds a config.json that is not a run's (a model folder?): "
                             "choose another --out")  # fmt: skip
        raise UsageError(f"run directory {out} is not empty and holds no run: choose another --out")
    return False


def _nothing_yet(p: Path) -> bool:
    """Whether `p`, in a run directory, is what a run leaves before its config.json: the lock file, or an empty
    checkpoints folder (made before config.json by earlier versions: a run killed in between left both)."""
    return p.name == RunLock.NAME or (p.name == "checkpoints" and p.is_dir() and not any(p.iterdir()))


def is_run_config(path: Path) -> bool:
    """Whether `path` is a config.json as `rpgrl train` writes it (its train and loss sections), not a model's."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and isinstance(saved.get("train"), dict) and isinstance(saved.get("loss"), dict)


def _foreign_config(path: Path) -> bool:
    """Whether `path` is a JSON object that is no run's config.json (a model's): not when unreadable or garbled,
    which the resume names as such."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and not is_run_config(path)


def _got_further(out: Path) -> str | None:
    """What shows that the run in `out` (no checkpoint now) got past its first checkpoint, or None if nothing does:
    so that starting over never replaces a finished run whose checkpoints were deleted (the reproduction runner
    deletes them; so do users short of space). The first checkpoint comes after the warm start (step 0) when there
    is one, else at train.checkpoint_every steps (or earlier by the clock)."""
    if (out / "summary.json").exists() or (out / "model").exists():
        return "it finished"
    try:
        cfg = json.loads((out / "config.json").read_text())
        sft, every = int(cfg["sft"]["max_steps"]), int(cfg["train"]["checkpoint_every"])
    except (OSError, ValueError, KeyError, TypeError):
        return "its config.json does not say when it checkpoints"
    rows = 0
    if (out / "metrics.jsonl").is_file():
        rows = sum(1 for line in (out / "metrics.jsonl").read_bytes().splitlines() if line.strip())
    if sft > 0:  # step 0's checkpoint is complete before step 1's row is written
        return f"metrics.jsonl holds {rows} steps" if rows >= 1 else None
    # A step's row is written before its checkpoint: with exactly `every` rows the process may have died writing the
    # first one. The checkpoints folder is made when the run starts, so it is still there in that case (partial
    # writes or nothing), and gone when the checkpoints were deleted.
    if rows > every or (rows == every and not (out / "checkpoints").is_dir()):
        return f"metrics.jsonl holds {rows} steps"
    return None


def _in_use(out: Path, holder: str) -> str:
    return f"run directory {out} is in use by another rpgrl process (PID {holder}): wait for it to end, or stop it"


def lock_holder(out: Path) -> str | None:
    """The PID written in `<out>/.lock` if a process holds that lock, else None. Reads only (a shared lock taken
    and released at once; `RunLock` retries for a moment, so this probe cannot make a starting run fail)."""
    path = Path(out) / RunLock.NAME
    try:
        import fcntl

        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return f.read().strip() or "unknown"
    except (ImportError, OSError):  # not POSIX, no lock file, unreadable
        return None
    return None


class RunLock:
    """Context manager holding an exclusive advisory lock on `<out>/.lock` (created with `out`), which holds the
    holder's PID. UsageError naming that PID when another process holds it. No-op where `fcntl` is missing."""

    NAME = ".lock"
    TRIES = 20  # x 50 ms: a `lock_holder` probe holds the lock for microseconds

    def __init__(self, out: Path):
        self.path = Path(out) / self.NAME
        self.file = None
        self.created_dir = False

    def __enter__(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # not POSIX
            return self
        try:
            self.created_dir = not self.path.parent.exists()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "a+")  # noqa: SIM115 - held open for the lock's lifetime
        except OSError as e:  # e.g. a read-only or virtual file system that os.access did not reveal
            raise UsageError(f"--out {self.path.parent}: cannot write there: {e.strerror}") from None
        for attempt in range(self.TRIES):
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if attempt < self.TRIES - 1:
                    time.sleep(0.05)
        else:
            self.file.seek(0)
            holder = self.file.read().strip() or "unknown"
            self.file.close()
            self.file = None
            raise UsageError(self._busy(holder))
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"{os.getpid()}\n")
        self.file.flush()
        return self

    def _busy(self, holder: str) -> str:
        return _in_use(self.path.parent, holder)

    def __exit__(self, *exc) -> None:
        if self.file is None:
            return
        out = self.path.parent
        alone = [p.name for p in out.iterdir()] == [self.NAME]  # the run wrote nothing (refused at once)
        if alone:  # take back what this lock created, as a refused run leaves its --out
            self.path.unlink(missing_ok=True)
        self.file.close()  # releases the lock
        self.file = None
        if alone and self.created_dir:
            out.rmdir()


class ResultsLock(RunLock):
    """`<out>/.results.lock`, held by `rpgrl reproduce` from reading OUT/results.json to writing it and its report
    (seconds): a suite read the claims stored there, then rewrote the file with them, so two suites writing at once
    lost the claims of the one that wrote first. Another suite waits for it, where `RunLock` refuses at once: the
    suite's RunLock is held only while it runs, so a suite whose runs are all cached, or `--no-run`, never waits for
    a running suite's runs, only for its write."""

    NAME = ".results.lock"
    TRIES = 2400  # x 50 ms: two minutes, far beyond a report's plots on a busy machine

    def _busy(self, holder: str) -> str:
        return (
            f"another rpgrl reproduce (PID {holder}) has been writing the results in {self.path.parent} for "
            f"{self.TRIES * 0.05:.0f} s: wait for it to end, or stop it"
        )


class Interrupted(Exception):
    """Raised by `train` after the checkpoint that follows a SIGTERM / SIGINT."""

    def __init__(self, signum: int, step: int, out: Path, saved: bool = True):
        self.signum, self.step, self.out = signum, step, out
        name = signal.Signals(signum).name
        if saved:
            what = f"after step {step}, checkpoint saved; continue"
        else:
            what = "in the warm start, before the first checkpoint; start the run over"
        super().__init__(f"stopped by {name} {what} with: rpgrl train --out {out} --resume")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


STEP_ACTION = "stopping at the end of this step"
WARM_START_ACTION = ("stopping after this warm-start step; a warm start stopped before its end is not saved "
                     "(--resume starts the run over)")  # fmt: skip


class StopSignals:
    """Context manager: while inside, the first SIGTERM / SIGINT sets `received` (the signal number) instead of
    stopping the process; a second one is handled as if we had installed nothing. Outside the main thread (where
    Python cannot install handlers) it does nothing."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}
        self._action = STEP_ACTION

    def warming(self, on: bool) -> None:
        """While the warm start runs (`on`): a first signal stops it after its current step, with nothing saved (the
        run starts over on --resume); after it, at the end of the RL step again."""
        self._action = WARM_START_ACTION if on else STEP_ACTION

    def finishing(self) -> None:
        """The run's steps are done and its last checkpoint written: a first signal from now on lets it finish."""
        self._action = "the run is complete, writing its model, curves and summary first"

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
            name = signal.Signals(signum).name
            os.write(2, f"rpgrl train: {name}: {self._action} (again to stop now)\n".encode())
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        self._restore()  # the second signal: as if no handler had been installed
        if callable(previous):
            previous(signum, frame)  # Python's own SIGINT handler raises KeyboardInterrupt
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), signum)
