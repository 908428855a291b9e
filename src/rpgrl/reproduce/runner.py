"""Run the suite's training runs, each once: cached by its resolved config and seed, two at a time.

Layout under the suite directory `out`:
    warmstart/<key>-s<seed>/    the seed's supervised warm start (`rpgrl train --train.max_steps 0`); every arm of
                                that seed starts RL from its model/, so arms are paired by seed; one whose
                                config.json records another seed (a copied folder) is named and made again
    runs/<key>-s<seed>/         one RL run: config.json, metrics.jsonl, eval.jsonl, summary.json, log.txt and
                                record.json (what the report reads), written last: a directory without it is an
                                unfinished run and is started again; one whose record.json is not this run's record
                                (cut short, edited, copied from another run) is named in one line and started again
The key hashes the resolved config (with the warm start's key in place of its path) and `SUITE_VERSION`, so arms of
different claims that resolve to the same config share runs, a changed arm reruns, and an interrupted suite
continues where it stopped. Checkpoints and the exported model are deleted once a record is written.

Runs execute in worker processes (`jobs` at a time, one torch thread each: on 2 cores two single-threaded runs do
~1.5x the work of one two-threaded run) by calling `rpgrl.trainer.train` directly.

A suite never loses a finished run and never leaves a worker behind: one suite per directory (`RunLock(out)`); the
first failed run, or SIGINT / SIGTERM / SIGHUP, cancels the queued runs and kills the workers at once (a run is
started over, never resumed, so a graceful stop would save nothing; record.json and a warm start's summary.json are
written atomically, so a killed run is either finished or visibly unfinished); a worker whose suite died (SIGKILL,
out of memory) exits within `PARENT_POLL_SECONDS` instead of running queued runs into a directory a restarted suite
now owns.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rpgrl import metrics as M
from rpgrl.config import TINY_SIZES, Config, ModelConfig, SFTConfig, config_from_dict, config_to_dict, values_by_key
from rpgrl.errors import TermAsInterrupt, UsageError, first_line

SUITE_VERSION = 1
"""bumped when a change to the trainer changes what a cached run would compute"""

WARM_START_PATH = "<warm start>"

ADDED_FIELDS = {("loss", "max_log_w"): None, ("rollout", "decode"): "auto", ("data", "truncation"): "error"}
"""config fields added after SUITE_VERSION's runs: left out of the key at these (their default) values, so a new
field that changes nothing does not invalidate the cache. rollout.decode 'auto' samples through the static-cache
decode, which computes the same distribution as the transformers path the cached runs used (tests/test_decode.py:
the same tokens under a fixed seed, log-probs equal to float rounding); data.truncation 'error' refuses what the
synthetic task's prompts never are (longer than data.max_prompt_length)."""


@dataclass(frozen=True)
class Job:
    """One run: `config` with model.path = the seed's warm start, `seed`, and where it goes."""

    config: Config
    seed: int
    warm_key: str

    @property
    def key(self) -> str:
        return config_key(self.config, self.seed, self.warm_key)


def config_key(cfg: Config, seed: int, warm_key: str = "") -> str:
    """12 hex digits identifying what a run computes: config (model.path abstracted to the warm start), seed."""
    blob = json.dumps({"config": _keyed(cfg, seed, warm_key), "suite": SUITE_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _keyed(cfg: Config, seed: int, warm_key: str = "") -> dict:
    """The config dict `config_key` hashes: the seed set, model.path abstracted to the warm start (if `warm_key`),
    fields added since the suite began left out at their defaults (so older keys stay valid)."""
    d = config_to_dict(cfg)
    d["model"]["path"] = f"{WARM_START_PATH} {warm_key}" if warm_key else d["model"]["path"]
    d["train"]["seed"] = seed
    for (sec, name), default in ADDED_FIELDS.items():
        if d[sec].get(name, default) == default:
            d[sec].pop(name, None)
    return d


def warm_dir(out: Path, warm_cfg: Config, seed: int) -> Path:
    return out / "warmstart" / f"{config_key(warm_cfg, seed)}-s{seed}"


def run_dir(out: Path, job: Job) -> Path:
    return out / "runs" / f"{job.key}-s{job.seed}"


def cached_record(path: Path) -> dict | None:
    """The run's record, or None when it has none usable (`read_record`): such a run is started again, never a
    traceback in the suite or the report."""
    return read_record(path)[0]


def read_record(path: Path) -> tuple[dict | None, str | None]:
    """(the record of the run in `path`, None); (None, None) when it has no record.json (an unfinished run); (None,
    why) when its record.json is no usable record of this run: unreadable, not UTF-8 or not JSON (cut short,
    edited), not a JSON object, another run's (`_record_problem`). The suite names such a file in one line and runs
    it again (`run_all`); `--no-run` names it and leaves it out."""
    try:
        record = json.loads((path / "record.json").read_bytes())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, RecursionError) as e:  # ValueError: JSONDecodeError and UnicodeDecodeError
        return None, f"it does not read as JSON: {type(e).__name__}: {first_line(e)}"
    why = _record_problem(record, path.name)
    return (None, why) if why else (record, None)


CURVES = ("reward", "entropy", "length")
"""a record's per-step curves (`summarize_run`), which the report averages over seeds"""
RECORD_NUMBERS = ("start", "final", "best", "sampled", "entropy", "reward", "length", "max_log_w", "wall_seconds")
"""a record's fields the report takes as numbers (null where there is none)"""


def _record_problem(record: Any, name: str) -> str | None:
    """Why `record` is not the finished record of the run directory `name` (`<key>-s<seed>`); None if it is. A
    record names its run (`run`, since records kept it) and its seed: one copied from another run, another arm or
    another seed, is not this run's result."""
    if not isinstance(record, dict):
        return f"it holds a JSON {type(record).__name__}, not a run's record"
    if record.get("run", name) != name:
        return f"it is the record of run {record['run']!r}, not of {name}"
    seed = record.get("seed")
    if type(seed) is not int or f"-s{seed}" != name[name.rfind("-s") :]:
        return f"it records seed {seed!r}, not this run's ({name})"
    for key in ("start", "final"):
        if key not in record:
            return f"it has no {key!r}"
    for key in RECORD_NUMBERS:
        value = record.get(key)
        if value is not None and (type(value) not in (int, float)):
            return f"its {key!r} is {value!r}, not a number"
    curves = record.get("curves") or {}  # none: the report leaves the run out of the mean curves
    if not isinstance(curves, dict) or (curves and not all(isinstance(curves.get(k), list) for k in CURVES)):
        return "its 'curves' are not the report's (an object of lists: reward, entropy, length)"
    return None


FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""a write failed for want of space: the suite's folder is full, which the user fixes (one line, exit 2)"""


class RunFailed(RuntimeError):
    """A run or warm start raised (a bug, a broken install): one line naming its directory and its error, raised from
    the worker's exception and its traceback (an error inside training also leaves that traceback in the run's log)."""


class SuiteInterrupted(SystemExit):
    """SIGINT, SIGTERM or SIGHUP stopped the suite: queued runs cancelled, workers killed, one line printed on stderr.
    A SystemExit with code 128 + the signal number, so `rpgrl reproduce` ends as `rpgrl train` does after a signal
    (130 for Ctrl-C, 143 for SIGTERM) and without a traceback (`rpgrl.cli` maps no KeyboardInterrupt)."""

    def __init__(self, signum: int, message: str):
        super().__init__(128 + signum)
        self.signum, self.message = signum, message


def run_all(
    out: Path,
    warm_cfg: Config,
    jobs: list[Job],
    workers: int = 2,
    commit: str = "",
    val_samples: int = 0,
    on_done: Callable[[Job, dict], None] | None = None,
    *,
    say: Callable[[str], None] | None = None,
    run_fn: Callable[..., dict] | None = None,
    warm_fn: Callable[..., None] | None = None,
) -> dict[str, dict]:
    """Make sure every job has a record (the warm starts of the seeds with a run to do first); returns {run directory
    name: record}.

    Holds the suite's lock, `RunLock(out)`, while it runs anything: a second suite on `out` is refused (UsageError
    naming the holder's PID) before it changes a file, so two suites never delete each other's runs. The first failed
    run or warm start raises at once (RunFailed; a UsageError raised by a run stays one), and SIGINT / SIGTERM / SIGHUP
    raise SuiteInterrupted: either way queued runs are cancelled and the workers killed, and the records written so
    far are kept, so the same call continues from there. `on_done(job, record)` is called in the order of `jobs` (a run
    that finishes before an earlier one waits for it) for the runs done here. `say(line)` gets the plan (the runs to
    do, the warm starts first and their logs) and each finished warm start, minutes apart at the default scale.
    `run_fn` / `warm_fn` replace the worker functions `_run` / `_warm_start` (tests: top-level functions, pickled by
    name, same arguments)."""
    from rpgrl.trainer.rundir import RunLock  # here, not at the top: it imports torch, which the workers import late

    run_fn, warm_fn = run_fn or _run, warm_fn or _warm_start
    unique = _unique(jobs)
    records = _records(out, unique)
    if len(records) == len(unique):
        return records  # all cached: nothing runs (no warm start either: only a run to do needs its seed's)
    with RunLock(out), _StopOnSignals() as signals:
        read = [(j, *read_record(run_dir(out, j))) for j in unique]  # again under the lock: a suite that just
        records = {run_dir(out, j).name: r for j, r, _ in read if r is not None}  # ended may have added some
        todo = [j for j, r, _ in read if r is None]
        todo_warm = _missing_warm(out, warm_cfg, todo)
        for j, _, why in read:  # a record.json that cannot be used: named, and the run starts again (never silently)
            if why is not None:
                _say(f"rpgrl reproduce: {run_dir(out, j) / 'record.json'} cannot be used ({why}): the run starts again")
        say = say or (lambda line: None)
        say(_plan_line(out, warm_cfg, len(todo), len(unique), todo_warm))
        pool = _Workers(workers)
        try:
            wcfg = config_to_dict(warm_cfg)
            warm = {pool.submit(warm_fn, wcfg, s, str(warm_dir(out, warm_cfg, s))): s for s in todo_warm}
            made = lambda f: say(f"warm start of seed {warm[f]} done: {warm_dir(out, warm_cfg, warm[f])}")  # noqa: E731
            _gather(warm, lambda f: f"warm start {warm_dir(out, warm_cfg, warm[f])}", made)
            futures = {
                pool.submit(
                    run_fn,
                    config_to_dict(j.config),
                    j.seed,
                    str(run_dir(out, j)),
                    str(_warm_model(out, warm_cfg, j)),
                    commit,
                    val_samples,
                ): j
                for j in todo  # in the jobs' order: the report's claims fill up seed by seed
            }

            def done(f: Future) -> None:
                record = records[run_dir(out, futures[f]).name] = f.result()
                if on_done is not None:
                    on_done(futures[f], record)

            _gather(futures, lambda f: f"run {run_dir(out, futures[f])}", done)
            pool.close()
        except KeyboardInterrupt as e:  # SIGINT, or SIGTERM / SIGHUP made one by _StopOnSignals
            signum = getattr(e, "signum", signal.SIGINT)
            finished = len(_records(out, unique))
            message = (
                f"rpgrl reproduce: stopped by {signal.Signals(signum).name}: {finished} of {len(unique)} runs "
                f"finished, their records kept in {out / 'runs'}; the same command again continues from there"
            )
            _say(message)
            raise SuiteInterrupted(signum, message) from None
        finally:
            signals.quiet()  # a second Ctrl-C must not break off the cleanup (it is bounded: KILL_WAIT)
            pool.kill()
    return records


def _records(out: Path, jobs: list[Job]) -> dict[str, dict]:
    return {run_dir(out, j).name: r for j in jobs if (r := cached_record(run_dir(out, j))) is not None}


def _plan_line(out: Path, warm_cfg: Config, todo: int, total: int, warm_seeds: list[int]) -> str:
    """What the suite is about to do, in one line: the runs to do, and the warm starts first with their logs."""
    line = f"{todo} of {total} runs to do ({total - todo} cached)"
    if warm_seeds:
        seeds = ", ".join(map(str, warm_seeds))
        logs = warm_dir(out, warm_cfg, warm_seeds[0]).parent  # each seed's <key>-s<seed>.log
        line += f"; first the warm start of seed{'s' if len(warm_seeds) > 1 else ''} {seeds} (logs in {logs})"
    return line


def _missing_warm(out: Path, warm_cfg: Config, jobs: list[Job]) -> list[int]:
    """The seeds whose warm start is to be made: it has no summary.json (written last, atomically, by `train`), no
    model next to it (deleted by hand: every run of the seed would fail on it, and the same command again with it),
    or it is not this seed's (`_warm_problem`; named in one line, as an unusable record.json is)."""
    missing = []
    for seed in sorted({j.seed for j in jobs}):
        d = warm_dir(out, warm_cfg, seed)
        if not ((d / "summary.json").is_file() and (d / "model" / "config.json").is_file()):
            missing.append(seed)  # unfinished, or never started: made again without a word, as an unfinished run
        elif (why := _warm_problem(d, seed, warm_cfg)) is not None:
            _say(f"rpgrl reproduce: warm start {d} cannot be used ({why}): it is made again")
            missing.append(seed)
    return missing


def _warm_problem(d: Path, seed: int, warm_cfg: Config) -> str | None:
    """Why the finished warm start in `d` is not the one of seed `seed` and `warm_cfg` (None if it is): its
    config.json, which `train` writes first, records the seed and settings it ran with. A folder copied from another
    seed's would start every run of this seed from that seed's model, so the arms would no longer be paired by seed;
    one copied from another warm-start config's (another model size, other sft.* steps) would start them from a
    model the suite's settings do not describe."""
    try:
        saved = json.loads((d / "config.json").read_bytes())
        recorded = saved["train"]["seed"]
    except FileNotFoundError:
        return "it has no config.json, which records its seed"
    except (OSError, ValueError, RecursionError) as e:  # ValueError: JSONDecodeError and UnicodeDecodeError
        return f"its config.json does not read as JSON: {type(e).__name__}: {first_line(e)}"
    except (KeyError, TypeError, IndexError):
        return "its config.json records no train.seed"
    if type(recorded) is not int or recorded != seed:
        return f"its config.json records seed {recorded!r}, not {seed}: another seed's warm start"
    try:
        was = _keyed(config_from_dict(saved), seed)
    except (ValueError, TypeError) as e:  # UsageError is a ValueError: a key this version does not know
        return f"its config.json is no config of this version: {first_line(e)}"
    was, want = values_by_key(was), values_by_key(_keyed(warm_cfg, seed))
    changed = [
        f"{k} {was.get(k)!r}, not {want.get(k)!r}"
        for k in sorted(was.keys() | want.keys())
        if was.get(k) != want.get(k)
    ]
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return f"its config.json records {', '.join(changed[:3])}{more}: another config's warm start"
    return None


def _gather(futures: dict[Future, Any], what: Callable[[Future], str], done: Callable[[Future], None]) -> None:
    """Wait for `futures`; `done(f)` for each in the dict's order once it and all before it succeeded. The first
    failure, whichever finishes first, raises at once (`_failure`), not after the futures submitted before it."""
    order, pending, n = list(futures), set(futures), 0
    while pending:
        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
        for f in finished:
            if f.exception() is not None:
                raise _failure(what(f), f.exception()) from f.exception()
        while n < len(order) and order[n].done():
            done(order[n])
            n += 1


def _failure(what: str, e: BaseException) -> Exception:
    """The one-line error of a failed run or warm start: UsageError if the run's was one or a full disk's (exit 2,
    one line), else RunFailed (raised from `e`, which carries the worker's traceback)."""
    from concurrent.futures.process import BrokenProcessPool

    full = isinstance(e, OSError) and e.errno in FULL_DISK_ERRNOS  # no bug: the place the user chose is full
    if isinstance(e, BrokenProcessPool):
        reason = "its worker process died (killed from outside, or out of memory)"
    elif full:
        reason = f"cannot write{f' {e.filename}' if e.filename else ''}: {e.strerror}"
    else:
        reason = first_line(e) if isinstance(e, UsageError) else f"{type(e).__name__}: {first_line(e)}"
    message = f"{what} failed: {reason}; finished runs are kept (the same command again continues)"
    return UsageError(message) if isinstance(e, UsageError) or full else RunFailed(message)


def _say(line: str) -> None:
    """`line` on stderr if it can still be written (after SIGHUP the terminal may be gone)."""
    try:
        if sys.stderr is not None:
            print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class _StopOnSignals:
    """While inside, on the main thread: the first SIGINT, SIGTERM or SIGHUP raises KeyboardInterrupt (with
    `signum`) wherever the main thread is waiting, so the suite stops cleanly whichever signal a user, a scheduler or
    a closed terminal sends; later ones, and any after `quiet()`, are ignored (the cleanup is short and bounded).
    A signal ignored when entering (nohup's SIGHUP, SIGINT in a background job) stays ignored, and a SIGTERM or
    SIGHUP handler someone else installed (not `TermAsInterrupt`'s) is left in place. The old handlers are restored
    on exit."""

    SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

    def __init__(self) -> None:
        self.armed = True
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopOnSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for s in self.SIGNALS:
            current = signal.getsignal(s)
            if _replaceable(s, current):
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def quiet(self) -> None:
        self.armed = False

    def _handle(self, signum: int, frame) -> None:
        if self.armed:
            self.armed = False
            stop = KeyboardInterrupt(signal.Signals(signum).name)
            stop.signum = signum
            raise stop


def _replaceable(s: int, current: Any) -> bool:
    """Python's own handling of signal `s`, or `rpgrl.errors.TermAsInterrupt`'s (`rpgrl.cli` runs every command in
    one: outside the suite, a SIGTERM there is one line)."""
    ours = isinstance(getattr(current, "__self__", None), TermAsInterrupt)
    return ours or current in (signal.SIG_DFL, signal.default_int_handler) or (s == signal.SIGINT and current is None)


KILL_WAIT = 10.0
"""seconds to wait for a killed worker to be reaped (SIGKILL: it takes milliseconds)"""


class _Workers:
    """The suite's worker processes: a spawn ProcessPoolExecutor (no inherited state: torch threads, CUDA) whose
    processes `kill()` ends at once. They are the `multiprocessing.active_children()` that appeared after the pool
    was made: a public API (the executor's own list, `_processes`, is private), which also holds a worker still
    starting (a PID list reported by an initializer would miss it) and gives handles to reap them (no zombies).
    Likewise its manager thread is the non-daemon thread that appeared after: `kill()` joins it, for
    `shutdown(wait=False)` lets it go on ending, and one still ending at interpreter exit races CPython 3.11's exit
    hook, which then prints a "Bad file descriptor" traceback after the suite's last line."""

    def __init__(self, n: int):
        self.before = {p.pid for p in multiprocessing.active_children()}
        self.threads_before = set(threading.enumerate())
        ctx = multiprocessing.get_context("spawn")
        self.pool = ProcessPoolExecutor(
            max(1, n), mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(), max(1, n))
        )
        self.submit = self.pool.submit

    def close(self) -> None:
        """Every future is done: the workers exit as usual."""
        self.pool.shutdown(wait=True)

    def kill(self) -> None:
        """Cancel what is queued, SIGKILL the workers and reap them; nothing if `close()` ran."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        procs = [p for p in multiprocessing.active_children() if p.pid not in self.before]
        for p in procs:
            p.kill()
        for p in procs:
            p.join(KILL_WAIT)
        for t in [t for t in threading.enumerate() if t not in self.threads_before and not t.daemon]:
            t.join(KILL_WAIT)  # the executor's manager thread: it sees the workers dead and ends


def _unique(jobs: Iterable[Job]) -> list[Job]:
    seen, out = set(), []
    for j in jobs:
        if (j.key, j.seed) not in seen:
            seen.add((j.key, j.seed))
            out.append(j)
    return out


def _warm_model(out: Path, warm_cfg: Config, job: Job) -> Path:
    return warm_dir(out, warm_cfg, job.seed) / "model"


# ---------------------------------------------------------------------------------------------------------------
# Worker side (top-level functions: they are pickled by name into the worker processes)

PARENT_POLL_SECONDS = 1.0


_SUITE_WORKERS = 1
"""runs at a time in the suite this worker belongs to (set by `_worker_init`; recorded by each run)"""


def _worker_init(parent: int, workers: int = 1) -> None:
    """Each worker, before its first run. Ctrl-C reaches the whole process group, but the main process alone decides
    (it kills the workers): a worker ignores SIGINT, through a no-op handler rather than SIG_IGN, which exec would
    pass on to the runs' own child processes. And a worker whose suite is gone (SIGKILL, out of memory) exits: a
    daemon thread compares the parent's PID every PARENT_POLL_SECONDS (portable, unlike Linux's PR_SET_PDEATHSIG,
    which also fires when the parent *thread* that started the worker ends, and would miss a parent that died before
    it was set; a worker whose parent is already gone exits at the first check). tqdm (the trainer's printing) gets
    a thread lock: its default, a multiprocessing lock, would be left by a killed worker to the resource tracker,
    which then prints "leaked semaphore" warnings after the suite's last line; a run's output goes to its own log.
    `workers`: the suite's runs at a time, which each run records."""
    global _SUITE_WORKERS
    _SUITE_WORKERS = workers
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    with contextlib.suppress(ImportError):
        from tqdm import tqdm

        tqdm.set_lock(threading.RLock())
    threading.Thread(target=_exit_with_parent, args=(parent,), name="rpgrl-exit-with-parent", daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:  # spawn: the parent is the suite's process; an orphan is re-parented
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


def _fresh(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)  # an unfinished run of an earlier sitting: runs are short, start it again
    path.mkdir(parents=True)


@contextlib.contextmanager
def _logged(path: Path):
    """stdout and stderr into `path` (the runs' own printing and tracebacks)."""
    with open(path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        yield


def _warm_start(cfg_dict: dict, seed: int, path: str) -> None:
    from rpgrl.trainer.loop import train

    out = Path(path)
    _fresh(out)
    cfg = config_from_dict(cfg_dict)
    cfg = replace(cfg, train=replace(cfg.train, seed=seed))
    with _logged(out.parent / f"{out.name}.log"):
        try:
            train(cfg, out)
        except BaseException:
            traceback.print_exc()  # the suite stops with its first line; the log keeps the whole
            raise
    shutil.rmtree(out / "checkpoints", ignore_errors=True)


def _run(cfg_dict: dict, seed: int, path: str, warm_model: str, commit: str, val_samples: int) -> dict:
    from rpgrl.trainer.checkpoint import write_text_atomic
    from rpgrl.trainer.loop import train

    out = Path(path)
    _fresh(out)
    cfg = config_from_dict(cfg_dict)
    # the warm start's folder has the model (its sizes and sft.*, which the key holds through warm_key): the tiny
    # model's size fields and sft.*, refused beside a folder and without a warm start, go back to their defaults
    model = replace(cfg.model, path=warm_model, **{k: getattr(ModelConfig, k) for k in TINY_SIZES})
    cfg = replace(cfg, model=model, sft=SFTConfig(max_steps=0), train=replace(cfg.train, seed=seed))
    t = time.perf_counter()
    error = None
    with _logged(out / "log.txt"):
        try:
            train(cfg, out / "run")
        except FloatingPointError as e:  # a diverged run (non-finite metrics) is a result; other errors are bugs
            traceback.print_exc()
            error = f"{type(e).__name__}: {e}".splitlines()[0]
        except BaseException:
            traceback.print_exc()  # the suite stops with its first line; the log keeps the whole
            raise
    record = summarize_run(out / "run", error)
    record.update(run=out.name, seed=seed, wall_seconds=time.perf_counter() - t, commit=commit, env=run_environment())
    if val_samples and error is None:
        record["sampled"] = final_sampled_accuracy(cfg, out / "run" / "model", val_samples)
    for sub in ("checkpoints", "model"):
        shutil.rmtree(out / "run" / sub, ignore_errors=True)
    write_text_atomic(out / "record.json", json.dumps(record) + "\n")  # written last: the run is finished
    return record


def run_environment() -> dict[str, Any]:
    """Where a run ran, as its record keeps it (the report's header reads these, not the reporting process's)."""
    import platform

    import torch
    import transformers

    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines()
                   if x.startswith("model name"))  # fmt: skip
    return {
        "hardware": f"{cpu}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "workers": _SUITE_WORKERS,
        "threads": torch.get_num_threads(),
    }


def final_sampled_accuracy(cfg: Config, model_dir: Path, k: int) -> float:
    """Held-out mean@k of the run's exported model, at the rollout temperature, seeded by the run's seed."""
    import torch

    from rpgrl.trainer.loop import build_model, load_task, sampled_accuracy

    cfg = replace(cfg, model=replace(cfg.model, path=str(model_dir)))
    model, tokenizer = build_model(cfg)
    task = load_task(cfg, tokenizer)
    n = cfg.eval.max_problems or len(task.val_prompts)
    with torch.no_grad():
        return sampled_accuracy(model, tokenizer, task.val_prompts[:n], task.val_answers[:n], cfg, k, cfg.train.seed)


COLLAPSE_POINTS = 10.0
"""a run collapsed when the collapse guard stopped it, it diverged, or its final greedy accuracy is this many points
or more below its start (accuracies are counts over the held-out set: a drop of exactly 30/300 is 10 points, whatever
its float rounding)"""


def summarize_run(path: Path, error: str | None = None) -> dict[str, Any]:
    """What the report reads of one run directory: accuracies, curves and regime metrics.

    `error`: the run diverged (training raised FloatingPointError: its weights or metrics became NaN / inf). It
    ended with a broken policy, so nothing it learned is usable: its `final`, `best` and `sampled` accuracies are
    0.0, not the last evaluation before it broke (which may be its starting accuracy, and would score an arm that
    blows up as one that stands still) nor NaN (which the report leaves out, dropping exactly the failed seeds).
    Its `start` (the seed's warm start) is kept, and it counts as collapsed."""
    evals = _jsonl(path / "eval.jsonl")
    rows = _jsonl(path / "metrics.jsonl")
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
    start = evals[0][M.EVAL_ACCURACY] if evals else float("nan")
    during = [e for e in evals if e["step"] > 0]
    final = during[-1] if during else (evals[-1] if evals else {})
    n_tail = max(1, len(rows) // 4)
    tail = rows[-n_tail:]

    def curve(key: str) -> list[float | None]:
        return [r.get(key) for r in rows]

    def tail_mean(key: str) -> float | None:
        vals = [r[key] for r in tail if key in r]
        return sum(vals) / len(vals) if vals else None

    diverged = error is not None
    final_acc = 0.0 if diverged else final.get(M.EVAL_ACCURACY, float("nan"))
    stopped = summary.get("stopped")
    return {
        "start": start,
        "final": final_acc,
        "best": 0.0 if diverged else max((e[M.EVAL_ACCURACY] for e in during), default=float("nan")),
        "sampled": 0.0 if diverged else final.get(M.EVAL_SAMPLED),
        "steps": len(rows),
        "trained": sum(r.get("batch/trained", 0) for r in rows),  # 0: every group scored alike, nothing learned
        "stopped": stopped,
        "error": error,
        "collapsed": bool(error or stopped or start - final_acc >= COLLAPSE_POINTS / 100 - 1e-9),
        "entropy": tail_mean(M.ENTROPY),
        "reward": tail_mean(M.REWARD_MEAN),
        "length": tail_mean(M.LENGTH_MEAN),
        "max_log_w": max((max(r[M.LOG_W_MAX], -r[M.LOG_W_MIN]) for r in rows if M.LOG_W_MAX in r), default=None),
        "curves": {
            "reward": curve(M.REWARD_MEAN),
            "entropy": curve(M.ENTROPY),
            "length": curve(M.LENGTH_MEAN),
        },
        "eval_curve": [[e["step"], e[M.EVAL_ACCURACY]] for e in evals],
        "rl_seconds": summary.get("rl_seconds"),
    }


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
