"""The suite runner never loses a run and never leaves a worker behind: a failed run or a signal stops the suite at
once (queued runs cancelled, workers gone, finished records kept), one suite per directory, a worker does not outlive
its suite, a corrupted record is rerun, and a diverged run scores zero.

Runs here are fakes passed as `run_fn` / `warm_fn`: top-level functions of this module, which the spawned workers
import by name (pytest puts this folder on sys.path, and spawn passes sys.path on; the subprocess tests set
PYTHONPATH). What a fake run does is set by its seed: below SLOW it finishes within half a second (seed 0 last),
from SLOW it sleeps SLOW_SECONDS, from FAIL it raises at once."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rpgrl.config import Config
from rpgrl.errors import UsageError
from rpgrl.reproduce.runner import Job, RunFailed, cached_record, config_key, run_all, run_dir, summarize_run
from rpgrl.trainer.rundir import RunLock, lock_holder

SLOW, FAIL = 100, 900
SLOW_SECONDS = 60.0  # far longer than any test waits for a stop (a failure must stop the suite within half of it,
# spawning workers that import torch included: 1.5-4 s measured), short enough that a regression fails in minutes
WARM = Config()
HERE = Path(__file__).parent
posix_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs POSIX signals and /proc")


def _write_pid(out: Path) -> None:
    """Atomically: the suite may kill a worker at any instant, and a half-written pid file would read as ''."""
    (out / "pid.tmp").write_text(f"{os.getpid()}\n")
    (out / "pid.tmp").replace(out / "pid")


def _fake_warm(cfg_dict: dict, seed: int, path: str) -> None:
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    _write_pid(out)
    (out / "config.json").write_text(json.dumps({"train": {"seed": seed}}) + "\n")  # as `train` writes it, first
    (out / "model").mkdir(exist_ok=True)
    (out / "model" / "config.json").write_text("{}\n")
    (out / "summary.json").write_text("{}\n")


def _fake_run(cfg_dict: dict, seed: int, path: str, warm_model: str, commit: str, val_samples: int) -> dict:
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    _write_pid(out)
    if seed >= FAIL:
        raise RuntimeError(f"boom in seed {seed}\nsecond line of the message")
    time.sleep(SLOW_SECONDS if seed >= SLOW else max(0.0, 0.1 * (5 - seed)))
    record = {"seed": seed, "start": 0.5, "final": 0.5, "wall_seconds": 0.0}
    (out / "record.json.tmp").write_text(json.dumps(record))
    (out / "record.json.tmp").replace(out / "record.json")
    return record


def _full_disk_run(cfg_dict: dict, seed: int, path: str, warm_model: str, commit: str, val_samples: int) -> dict:
    raise OSError(errno.ENOSPC, "No space left on device", str(Path(path) / "log.txt"))


def _jobs(seeds: list[int]) -> list[Job]:
    return [Job(WARM, s, config_key(WARM, s)) for s in seeds]


def _suite(out, seeds: list[int], **kw) -> dict:
    return run_all(Path(out), WARM, _jobs(seeds), workers=2, run_fn=_fake_run, warm_fn=_fake_warm, **kw)


def _child(out: str) -> None:
    """The subprocess tests' suite: seed 0 finishes, then two slow runs go on while three more are queued."""
    from rpgrl.errors import TermAsInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even if pytest runs in background
    with TermAsInterrupt():  # as `rpgrl reproduce` runs it: the suite's own handling replaces this one inside
        _suite(out, [0, *range(SLOW, SLOW + 5)])


def _started(out: Path) -> dict[str, int]:
    """{run directory name: PID of the worker that started it}."""
    return {p.parent.name: int(p.read_text()) for p in out.glob("runs/*/pid")}


def _alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie is dead: it only waits for a parent that may never reap it)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return False
    except OSError:
        return True
    return state != "Z"


PF_EXITING = 0x4
"""/proc/PID/stat's flags bit for a process whose exit has begun (its memory, and so its command line, already gone)"""


def _group(pgid: int) -> list[str]:
    """The command lines of the running processes in process group `pgid` (the suite's process and its workers).
    Multiprocessing's resource tracker is left out: not a worker, it leaves by itself once the suite's process has
    ended (it reads until its pipe closes), a moment after. So is a process already exiting (PF_EXITING; a CI run
    caught the resource tracker there, with an empty command line): it runs no more code of ours."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        exiting = fields[0] == "Z" or int(fields[6]) & PF_EXITING
        if int(fields[2]) == pgid and not exiting and "resource_tracker" not in cmdline:
            found.append(f"{stat.parent.name}: {cmdline}")
    return found


@contextlib.contextmanager
def _child_suite(out: Path):
    """A suite in its own process group (as a shell's job), yielded once seed 0 is done and two slow runs started.
    On the way out whatever is left of the group is killed, so a failing test leaves no process behind."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    code = "import sys, test_runner_reliability as t; t._child(sys.argv[1])"
    with open(out / "stderr.txt", "w") as err:  # a file, not a pipe: orphaned workers would hold a pipe open
        proc = subprocess.Popen([sys.executable, "-c", code, str(out)], env=env, stderr=err, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (cached_record(run_dir(out, _jobs([0])[0])) is not None and len(_started(out)) >= 3):
        assert proc.poll() is None, (out / "stderr.txt").read_text()
        assert time.monotonic() < deadline, "the suite did not start its runs"
        time.sleep(0.1)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_failed_run_stops_the_suite_at_once(tmp_path):
    """The failing run is the second submitted, beside a slow first one: the error comes at once (not after the slow
    runs), in one line naming the run, and no worker is left running a queued run."""
    seeds = [SLOW, FAIL, SLOW + 1, SLOW + 2]
    t = time.monotonic()
    with pytest.raises(RunFailed) as info:
        _suite(tmp_path, seeds)
    assert time.monotonic() - t < SLOW_SECONDS / 2
    message = str(info.value)
    assert "\n" not in message and "RuntimeError: boom in seed 900" in message
    assert run_dir(tmp_path, _jobs([FAIL])[0]).name in message
    started = _started(tmp_path)
    assert started and not [pid for pid in started.values() if _alive(pid)]
    assert not list(tmp_path.glob("runs/*/record.json"))
    assert lock_holder(tmp_path) is None


def test_a_stopped_suite_leaves_no_thread_behind(tmp_path, monkeypatch):
    """The executor's manager thread is joined before the suite returns, however slowly it tears down (here 0.5 s
    more, as on a loaded machine): one still ending at interpreter exit races CPython 3.11's exit hook, which then
    prints a "Bad file descriptor" traceback after the suite's one-line message."""
    from concurrent.futures import process

    teardown = process._ExecutorManagerThread.join_executor_internals

    def slow_teardown(self):
        time.sleep(0.5)
        teardown(self)

    monkeypatch.setattr(process._ExecutorManagerThread, "join_executor_internals", slow_teardown)
    threads = set(threading.enumerate())
    with pytest.raises(RunFailed):
        _suite(tmp_path, [SLOW, FAIL])
    assert [t for t in threading.enumerate() if t not in threads and not t.daemon] == []


def test_records_come_in_the_jobs_order_and_are_cached(tmp_path):
    """on_done follows the jobs' order though later runs finish first; a second call runs nothing."""
    seeds = [0, 1, 2, 3]  # seed 0 takes longest
    done = []
    records = _suite(tmp_path, seeds, on_done=lambda job, rec: done.append((job.seed, rec["seed"])))
    assert done == [(s, s) for s in seeds]
    assert sorted(r["seed"] for r in records.values()) == seeds
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/record.json")}
    done.clear()
    assert _suite(tmp_path, seeds, on_done=lambda job, rec: done.append(job.seed)) == records
    assert done == [] and {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/record.json")} == stamps


def test_a_second_suite_on_the_same_folder_is_refused(tmp_path):
    with RunLock(tmp_path), pytest.raises(UsageError, match=f"PID {os.getpid()}\\)") as info:
        _suite(tmp_path, [0])
    assert "\n" not in str(info.value)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "warmstart").exists()


@posix_only
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_suite_and_its_workers(tmp_path, signum):
    """SIGTERM to the suite's process (a scheduler), SIGINT to its process group (Ctrl-C in a terminal, which the
    workers receive too): it ends within seconds with 128 + the signal number and one line, its workers are gone and
    no queued run starts; the finished run's record is kept. While it ran, a second suite on its folder was refused."""
    with _child_suite(tmp_path) as proc:
        with pytest.raises(UsageError, match=f"PID {proc.pid}\\)"):
            _suite(tmp_path, [0, SLOW])
        t = time.monotonic()
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        proc.wait(timeout=30)
        assert time.monotonic() - t < 10
        err = (tmp_path / "stderr.txt").read_text()
        assert proc.returncode == 128 + signum, err
        assert "Traceback" not in err and err.strip().count("\n") == 0, err
        assert f"stopped by {signal.Signals(signum).name}: 1 of 6 runs finished" in err and "continues" in err
        assert _group(proc.pid) == []
    started = _started(tmp_path)
    time.sleep(2)
    assert _started(tmp_path) == started and len(started) <= 4  # seed 0, two slow runs, at most one more queued
    assert [p.parent.name for p in tmp_path.glob("runs/*/record.json")] == [run_dir(tmp_path, _jobs([0])[0]).name]
    assert lock_holder(tmp_path) is None


@posix_only
def test_workers_exit_when_the_suite_is_killed(tmp_path):
    """SIGKILL (or the OOM killer) gives the suite no chance to clean up: its workers notice and exit within seconds,
    so none runs a queued run into a folder a restarted suite now owns."""
    with _child_suite(tmp_path) as proc:
        started = _started(tmp_path)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while _group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _group(proc.pid) == []
    time.sleep(2)
    assert len(_started(tmp_path)) <= len(started) + 1  # at most the one queued run a worker took before the check
    assert len(list(tmp_path.glob("runs/*/record.json"))) == 1


def test_runs_all_cached_need_no_warm_start(tmp_path):
    """Every run cached and the warm starts deleted (to save space, or a copied runs/ folder): the suite made each
    seed's warm start again (the default's 300 supervised steps a seed) and ran nothing from it. Only a seed with a
    run to do gets one."""
    from rpgrl.reproduce.runner import warm_dir

    records = _suite(tmp_path, [1, 2])
    shutil.rmtree(tmp_path / "warmstart")
    assert _suite(tmp_path, [1, 2]) == records and not (tmp_path / "warmstart").exists()
    (run_dir(tmp_path, _jobs([2])[0]) / "record.json").unlink()
    _suite(tmp_path, [1, 2])
    assert [p.name for p in (tmp_path / "warmstart").iterdir()] == [warm_dir(tmp_path, WARM, 2).name]


def test_the_suite_says_what_it_does_before_the_first_run_ends(tmp_path):
    """`rpgrl reproduce --quick` printed nothing for minutes (a probe's): the warm starts came first, their logs
    elsewhere. `say` gets the plan and each finished warm start, in order; a fully cached suite says nothing."""
    from rpgrl.reproduce.runner import warm_dir

    lines: list[str] = []
    _suite(tmp_path, [1, 2], say=lines.append)
    assert lines == [
        f"2 of 2 runs to do (0 cached); first the warm start of seeds 1, 2 (logs in {tmp_path / 'warmstart'})",
        f"warm start of seed 1 done: {warm_dir(tmp_path, WARM, 1)}",
        f"warm start of seed 2 done: {warm_dir(tmp_path, WARM, 2)}",
    ]
    lines.clear()
    _suite(tmp_path, [1, 2], say=lines.append)
    assert lines == []
    (run_dir(tmp_path, _jobs([2])[0]) / "record.json").unlink()
    _suite(tmp_path, [1, 2, 3], say=lines.append)
    assert (
        lines[0] == f"2 of 3 runs to do (1 cached); first the warm start of seed 3 (logs in {tmp_path / 'warmstart'})"
    )


def test_a_warm_start_whose_model_was_deleted_is_made_again(tmp_path):
    """Its summary.json alone marked a warm start done: with its model deleted every run of the seed failed, and
    the same command again failed the same way."""
    from rpgrl.reproduce.runner import warm_dir

    _suite(tmp_path, [1])
    warm = warm_dir(tmp_path, WARM, 1)
    shutil.rmtree(warm / "model")
    (warm / "pid").write_text("gone\n")
    for p in tmp_path.glob("runs/*/record.json"):
        p.unlink()
    _suite(tmp_path, [1])
    assert (warm / "model" / "config.json").is_file() and (warm / "pid").read_text() != "gone\n"


def test_a_warm_start_of_another_seed_is_named_and_made_again(tmp_path, capsys):
    """A warm-start folder copied from another seed's was used as it was: every run of the seed then started from
    another seed's model, and the arms were paired by nothing. It is named in one line and made again; a cached warm
    start that is the seed's own is used as it is."""
    from rpgrl.reproduce.runner import warm_dir

    _suite(tmp_path, [1, 2])
    one, two = warm_dir(tmp_path, WARM, 1), warm_dir(tmp_path, WARM, 2)
    shutil.rmtree(two)
    shutil.copytree(one, two)
    (one / "kept").write_text("")  # making a warm start again empties its folder first
    for p in tmp_path.glob("runs/*/record.json"):
        p.unlink()
    capsys.readouterr()
    _suite(tmp_path, [1, 2])
    err = capsys.readouterr().err.splitlines()
    why = "its config.json records seed 1, not 2: another seed's warm start"
    assert err == [f"rpgrl reproduce: warm start {two} cannot be used ({why}): it is made again"]
    assert json.loads((two / "config.json").read_text())["train"]["seed"] == 2
    assert (one / "kept").exists() and json.loads((one / "config.json").read_text())["train"]["seed"] == 1


@pytest.mark.parametrize(
    "config, why",
    [
        (b'{"train": {"se', "its config.json does not read as JSON: JSONDecodeError: "),
        (b'{"train": {}}', "its config.json records no train.seed"),
        (b"", "its config.json does not read as JSON: "),
        (b"\xff", "its config.json does not read as JSON: UnicodeDecodeError: "),
        (b'{"train": {"seed": true}}', "its config.json records seed True, not 1: another seed's warm start"),
        (b'{"train": {"seed": 1}, "sft": {"lr": 0.5}}', "its config.json records sft.lr 0.5, not 0.002: another "),
        (b'{"train": {"seed": 1}, "sft": {"nope": 1}}', "its config.json is no config of this version: "),
        (None, "it has no config.json, which records its seed"),
    ],
)
def test_a_warm_start_whose_config_json_is_not_the_suites_is_named(tmp_path, config, why):
    """What `_missing_warm` names before making a warm start again: a config.json that does not read, records no
    seed or another one, or records another warm-start config at the same seed (a folder copied from a suite of
    another model size or sft.* steps, whose runs would have started from a model the suite does not describe)."""
    from rpgrl.reproduce.runner import _warm_problem

    cfg = Config()
    if config is not None:
        (tmp_path / "config.json").write_bytes(config)
    assert _warm_problem(tmp_path, 1, cfg).startswith(why)
    (tmp_path / "config.json").write_text(json.dumps({"train": {"seed": 1}, "sft": {"lr": cfg.sft.lr}}))
    assert (
        _warm_problem(tmp_path, 1, cfg) is None
    )  # fields left out read as their defaults, as the folder key reads them


def test_a_record_that_is_not_a_json_object_is_missing(tmp_path):
    """Each such record.json reads as no record; the suite runs one of them again (the others take the same path)."""
    job = _jobs([1])[0]
    path = run_dir(tmp_path, job)
    path.mkdir(parents=True)
    for content in (b"\xff\xfe{}", b"[]", b"null", b'"text"', b"[" * 100_000, b"", b"{"):
        (path / "record.json").write_bytes(content)
        assert cached_record(path) is None, content[:10]
    records = _suite(tmp_path, [1])  # the run is started again
    assert records[path.name]["seed"] == 1 and cached_record(path)["seed"] == 1


def _good(seed: int) -> dict:
    return {"seed": seed, "start": 0.5, "final": 0.5, "wall_seconds": 0.0}  # as _fake_run records it


_UNUSABLE = {  # seed -> (its record.json, the reason named)
    0: (b'{"seed": 0, "start": 0.25, "fin', "does not read as JSON: JSONDecodeError: "),  # cut short
    1: (b"[]", "it holds a JSON list, not a run's record"),
    2: ({**_good(4), "final": 0.9}, "it records seed 4, not this run's"),  # another seed's record
    3: ({**_good(3), "run": "0123456789ab-s3", "final": 0.9}, "it is the record of run '0123456789ab-s3', not of"),
    4: ({"seed": 4, "start": 0.5}, "it has no 'final'"),
    5: ({**_good(5), "final": "0.9"}, "its 'final' is '0.9', not a number"),
    6: ({**_good(6), "curves": {"reward": [0.1]}}, "its 'curves' are not the report's"),
}


def test_an_unusable_record_is_named_in_one_line_and_run_again(tmp_path, capsys):
    """A record.json cut short or edited was run again without a word, and one copied from another run (another
    arm's or seed's: the results of other settings) was used as this run's result, or raised in the report. Each is
    named in one line and its run starts again."""
    for seed, (record, _) in _UNUSABLE.items():
        path = run_dir(tmp_path, _jobs([seed])[0])
        path.mkdir(parents=True)
        (path / "record.json").write_bytes(record if isinstance(record, bytes) else json.dumps(record).encode())
        assert cached_record(path) is None
    capsys.readouterr()
    records = _suite(tmp_path, list(_UNUSABLE))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(_UNUSABLE), err
    for line, (seed, (_, why)) in zip(err, _UNUSABLE.items(), strict=True):
        path = run_dir(tmp_path, _jobs([seed])[0])
        assert line.startswith(f"rpgrl reproduce: {path / 'record.json'} cannot be used (") and why in line, line
        assert line.endswith("): the run starts again")
        assert records[path.name] == cached_record(path) == _good(seed)


def test_a_full_disk_is_one_line_not_a_bug(tmp_path):
    """A run that cannot write for want of space (its log's last flush, its record) failed as RunFailed, a bug's
    error with the worker's traceback (exit 1): it is the folder the user chose, one line and exit 2."""
    with pytest.raises(UsageError) as info:
        run_all(tmp_path, WARM, _jobs([1]), workers=1, run_fn=_full_disk_run, warm_fn=_fake_warm)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"run {run_dir(tmp_path, _jobs([1])[0])} failed: cannot write ")
    assert "log.txt: No space left on device; finished runs are kept" in message


def test_a_diverged_run_scores_zero(tmp_path):
    evals = [{"step": 0, "eval/accuracy": 0.4}, {"step": 10, "eval/accuracy": 0.6, "eval/sampled_accuracy": 0.5}]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "reward/mean": 0.1}) + "\n" for i in (1, 2)))
    fine = summarize_run(tmp_path)
    assert (fine["start"], fine["final"], fine["best"], fine["sampled"], fine["collapsed"]) == (
        0.4,
        0.6,
        0.6,
        0.5,
        False,
    )
    r = summarize_run(tmp_path, "FloatingPointError: non-finite loss at step 12")
    assert (r["start"], r["final"], r["best"], r["sampled"]) == (0.4, 0.0, 0.0, 0.0)
    assert r["collapsed"] and r["error"].startswith("FloatingPointError")


def test_the_suite_takes_sigterm_over_from_the_command_and_gives_it_back():
    """`rpgrl reproduce` runs inside `TermAsInterrupt`; the suite's own handling (whose `quiet()` keeps a second
    signal from breaking off the workers' cleanup) must replace it there, not leave it in place as another's."""
    from rpgrl.errors import TermAsInterrupt
    from rpgrl.reproduce.runner import _StopOnSignals

    with TermAsInterrupt():
        command = signal.getsignal(signal.SIGTERM)
        with _StopOnSignals() as stop:
            assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert signal.getsignal(signal.SIGTERM) == command
