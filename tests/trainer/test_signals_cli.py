"""Signals outside a run's steps, in a real `rpgrl` process: while the command loads (seconds of imports and config
checks), while a finished run writes its final files, a second Ctrl-C during a run, and while the interpreter shuts
down after the command returned. Each ends with one line (never a traceback) and the exit code that says what
happened. The signal is sent by the child itself at the named point (a patched function), so the timing is exact."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_config import TINY

ARGS = [f"--{k}={v}" for k, v in TINY]

# the child: patches `target` (module attribute) to send `sig` to itself `times` times before calling through, then
# runs `rpgrl` as the console script does (main() reading sys.argv) and, with `after`, signals itself once main
# returned (the interpreter's shutdown)
CHILD = """
import importlib, os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job starts it ignored)
sys.path.insert(0, {here!r})
import tiny_config
from rpgrl.cli import main
target, sig, times, after = {target!r}, signal.Signals[{sig!r}], {times}, {after!r}
if target:
    module_name, attr = target.rsplit(".", 1)
    module = importlib.import_module(module_name)
    original, fired = getattr(module, attr), []
    def patched(*a, **k):
        while len(fired) < times:  # on the first call only
            fired.append(1)
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
        return original(*a, **k)
    setattr(module, attr, patched)
code = main()
if after:
    os.kill(os.getpid(), sig)
    time.sleep(1)  # ignored by then: the process goes on and exits with main's code
sys.exit(code)
"""


def _child(argv: list[str], target: str = "", sig: str = "SIGTERM", times: int = 1, after: bool = False):
    code = CHILD.format(here=str(Path(__file__).parent), target=target, sig=sig, times=times, after=after)
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("target", ["importlib.import_module", "rpgrl.trainer.cli.resolve_config"])
def test_a_signal_while_the_command_loads_is_one_line_and_writes_nothing(tmp_path, sig, target):
    """Was: Ctrl-C in the first seconds a KeyboardInterrupt traceback from inside the imports (exit -2), SIGTERM a
    silent kill (-15)."""
    out = tmp_path / "run"
    done = _child(["train", "--out", str(out), *ARGS], target=target, sig=sig)
    assert done.returncode == 128 + signal.Signals[sig], done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"rpgrl train: stopped by {sig}"), done.stderr
    if target.endswith("resolve_config"):
        assert "before the run started; nothing was written" in done.stderr
    assert not out.exists()


def test_a_signal_while_the_final_files_are_written_lets_the_run_finish(tmp_path):
    """Was: "stopping at the end of this step", then the run finished with exit 0 and no stop: the line now says
    the run is complete, and the run is."""
    out = tmp_path / "run"
    done = _child(["train", "--out", str(out), *ARGS], target="rpgrl.trainer.loop.plot_run")
    assert done.returncode == 0, done.stderr
    assert "rpgrl train: SIGTERM: the run is complete, writing its model, curves and summary first" in done.stderr
    assert "stopping at the end of this step" not in done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and (out / "curves.png").is_file() and (out / "model").is_dir()


def test_a_second_ctrl_c_stops_at_once_with_one_line_and_the_run_resumes(tmp_path):
    """Was: the second Ctrl-C's KeyboardInterrupt escaped as a traceback (exit -2)."""
    out = tmp_path / "run"
    done = _child(["train", "--out", str(out), *ARGS], target="rpgrl.trainer.loop.update_policy", sig="SIGINT",
                  times=2)  # fmt: skip
    assert done.returncode == 130, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"rpgrl train: stopped by SIGINT at once; continue with: rpgrl train --out {out} --resume"
    assert "Traceback" not in done.stderr and not (out / "summary.json").exists()
    resumed = _child(["train", "--out", str(out), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "summary.json").read_text())["steps"] == 3


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_after_the_command_returned_keeps_its_exit_code(sig):
    """Was: a SIGTERM while the interpreter shut down after a finished run was a kill (-15), and a scheduler
    recorded the finished run as failed; a Ctrl-C there a traceback. Python's own handlers are off for most of the
    shutdown (freeing torch), so the signals are ignored once the command is done."""
    ok = _child(["train", "--help"], sig=sig, after=True)
    assert ok.returncode == 0 and "Traceback" not in ok.stderr, ok.stderr
    bad = _child(["train", "--no-such-flag"], sig=sig, after=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    ignored = subprocess.run([sys.executable, "-c", "import signal, sys; from rpgrl.cli import main; main(); "
                              "print(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))", "train",
                              "--help"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ignored.stdout.strip().splitlines()[-1] == f"{signal.SIG_IGN} {signal.SIG_IGN}", ignored.stdout
    from rpgrl.cli import main

    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    main(["train", "--help"])  # from Python (argv given): the caller's process keeps its handlers
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers


def test_a_second_sigterm_during_a_run_stops_at_once_with_one_line(tmp_path):
    """Was: a silent kill (-15), though the first SIGTERM's line says "again to stop now"."""
    out = tmp_path / "run"
    done = _child(["train", "--out", str(out), *ARGS], target="rpgrl.trainer.loop.update_policy", times=2)
    assert done.returncode == 143, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"rpgrl train: stopped by SIGTERM at once; continue with: rpgrl train --out {out} --resume"
    assert _child(["train", "--out", str(out), "--resume"]).returncode == 0


def test_stopped_before_the_config_was_written_the_command_runs_again(tmp_path):
    """A second Ctrl-C just before config.json is written: "run the command again" must work (a review found the
    directory then held the lock and an empty checkpoints folder, refused as "not empty and holds no run", while
    --resume found no config.json)."""
    out = tmp_path / "run"
    done = _child(["train", "--out", str(out), *ARGS], target="rpgrl.trainer.loop.write_text_atomic", sig="SIGINT",
                  times=2)  # fmt: skip
    assert done.returncode == 130 and done.stderr.strip().endswith("before the run saved anything; run the command "
                                                                   "again"), done.stderr  # fmt: skip
    assert not (out / "config.json").exists()
    again = _child(["train", "--out", str(out), *ARGS])
    assert again.returncode == 0, again.stderr
    from rpgrl.trainer.rundir import check_run_dir

    debris = tmp_path / "older"  # what an earlier version left: the lock and an empty checkpoints folder
    (debris / "checkpoints").mkdir(parents=True)
    (debris / ".lock").write_text("")
    assert check_run_dir(debris, resume=False) is False


def test_term_as_interrupt_replaces_only_pythons_default():
    """A caller's SIGTERM handler, or SIGTERM ignored, stays in place inside; the default is replaced and restored."""
    from rpgrl.errors import TermAsInterrupt

    outer = signal.getsignal(signal.SIGTERM)
    try:
        for handler in (signal.SIG_IGN, lambda s, f: None):
            signal.signal(signal.SIGTERM, handler)
            with TermAsInterrupt():
                assert signal.getsignal(signal.SIGTERM) is handler
            assert signal.getsignal(signal.SIGTERM) is handler
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with TermAsInterrupt() as term:
            assert signal.getsignal(signal.SIGTERM) == term._raise
            with TermAsInterrupt():  # nested: the outer one's stays
                assert signal.getsignal(signal.SIGTERM) == term._raise
            assert signal.getsignal(signal.SIGTERM) == term._raise
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, outer)


def test_a_sigterm_before_the_reproduction_suite_starts_is_one_line(tmp_path):
    """`rpgrl reproduce` checks its arguments and imports torch before its suite installs its own handling: a
    SIGTERM there was a silent kill (-15)."""
    out = tmp_path / "suite"
    done = _child(["reproduce", "token-vs-sequence", "--quick", "--seeds", "1", "--out", str(out)],
                  target="rpgrl.reproduce.cli.base_config")  # fmt: skip
    assert done.returncode == 143 and done.stderr == "rpgrl reproduce: stopped by SIGTERM\n", done.stderr
    assert not out.exists()


def test_a_sigterm_during_rpgrl_verify_is_one_line():
    """`rpgrl verify` has no handling of its own: a SIGTERM in it was a silent kill (-15)."""
    done = _child(["verify"], target="rpgrl.verify.verify_rows")
    assert done.returncode == 143 and done.stderr == "rpgrl verify: stopped by SIGTERM\n", done.stderr
