"""The run directory's guards: which `--out` can hold a run, and a clean stop on SIGTERM / SIGINT.

* `check_run_dir(out, resume)` runs before anything is loaded or written. A fresh run needs `out` to be absent or
  empty, a directory (not a file, not below a file) in a place we can write; `--resume` needs a saved config and at
  least one complete checkpoint, so a resume can never restart from step 0 and replace the metrics of a run.
* `StopSignals` turns the first SIGTERM or SIGINT into a request: the trainer finishes the current step, writes a
  checkpoint and raises `Interrupted`; `rpgrl train` prints one line and exits with 128 + the signal number (130
  for Ctrl-C, 143 for SIGTERM, the shell's convention), so a scheduler sees that the run did not finish. A second
  signal is not caught: it acts as if no handler were installed (KeyboardInterrupt, or the default termination).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from rpgrl.errors import UsageError, dir_problem
from rpgrl.trainer.checkpoint import latest_checkpoint


def check_run_dir(out: Path, resume: bool) -> None:
    """UsageError (one line) when `out` cannot hold the run; reads only, so a refused command changes nothing."""
    out = Path(out)
    problem = dir_problem(out)
    if problem is not None:
        raise UsageError(f"--out {out}: {problem}")
    has_checkpoint = latest_checkpoint(out / "checkpoints") is not None
    if resume:
        if not (out / "config.json").is_file():
            raise UsageError(f"--resume: no run to resume in {out} (no config.json)")
        if not has_checkpoint:
            raise UsageError(
                f"--resume: {out} has no checkpoint to continue from (the run stopped before its first one); "
                "nothing was changed: start the run again with another --out"
            )
    elif out.is_dir() and any(out.iterdir()):
        if has_checkpoint:
            raise UsageError(f"run directory {out} is not empty: pass --resume to continue it, or choose another --out")
        raise UsageError(
            f"run directory {out} is not empty and has no checkpoint to resume from: choose another --out "
            "(or delete it)"
        )


class Interrupted(Exception):
    """Raised by `train` after the checkpoint that follows a SIGTERM / SIGINT."""

    def __init__(self, signum: int, step: int, out: Path):
        self.signum, self.step, self.out = signum, step, out
        name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {name} after step {step}, checkpoint saved; continue with: rpgrl train --out {out} --resume"
        )

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """Context manager: while inside, the first SIGTERM / SIGINT sets `received` (the signal number) instead of
    stopping the process; a second one is handled as if we had installed nothing. Outside the main thread (where
    Python cannot install handlers) it does nothing."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

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
            os.write(2, f"rpgrl train: {name}: stopping after this step's checkpoint (again to stop now)\n".encode())
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        self._restore()  # the second signal: as if no handler had been installed
        if callable(previous):
            previous(signum, frame)  # Python's own SIGINT handler raises KeyboardInterrupt
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), signum)
