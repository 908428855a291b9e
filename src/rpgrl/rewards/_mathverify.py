"""Equivalence checks through math-verify, in a child process with a hard wall-clock bound.

Why a child process: math-verify's own timeout uses SIGALRM, which works only on the main thread and cannot
interrupt C code (a big-integer power such as 99999999999^9999999 holds the GIL until done). Trainers score rewards
on worker threads, in DataLoader workers and in Ray actors, so instead:

* each (process, thread) pair lazily starts one long-lived worker (`python -c ...`, plain `subprocess`, so it works
  in daemonic DataLoader workers where `multiprocessing` may not start children; a forked child starts its own);
* a request is one JSON line `{"pred", "gold", "timeout"}` on the worker's stdin; the worker answers one JSON line;
* soft bound: the worker arms a SIGALRM interval timer (it runs on its own main thread) and reports a timeout;
* hard bound: the caller waits `timeout + HARD_SLACK` seconds with `select`; if nothing came back it kills the worker,
  judges the answer wrong and starts a replacement at once (the replacement imports while the caller moves on);
* the worker caps its address space (`MEMORY_LIMIT`), so a blow-up is a MemoryError (wrong), not an OOM.

Strings cross as JSON data only: nothing from a response is passed on a command line, to a shell, or to
eval/sympify; math-verify is used with `LatexExtractionConfig` only (its `ExprExtractionConfig` calls sympy's
`parse_expr`, which evaluates Python).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

HARD_SLACK = 0.3  # seconds the caller waits beyond the worker's own timeout before killing it
START_TIMEOUT = 120.0  # seconds to wait for a fresh worker to import math-verify (generous: a loaded 2-core box)
MEMORY_LIMIT = 4 << 30  # bytes of address space for a worker
_BOOT = "from rpgrl.rewards._mathverify import serve; serve()"

_local = threading.local()

# (pred, gold) judged once by each worker before it reports ready (`serve`): one answer of each kind whose first
# judgement loads or caches something in sympy or math-verify
WARM_UP = (
    ("1", "1"),
    ("x \\in [0, 1]", "[0,1]"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
    ("\\frac{1}{2}", "0.5"),
    ("\\sqrt{2}", "2^{1/2}"),
    ("x = 3", "3"),
    ("a^2-b^2", "(a-b)(a+b)"),
    ("\\sin^2 x + \\cos^2 x", "1"),
    ("\\log_2 8", "3"),
    ("3+4i", "4i+3"),
    ("1.5\\times 10^{3}", "1500"),
    ("(-\\infty, 1) \\cup (2, \\infty)", "(-\\infty,1)\\cup(2,\\infty)"),
    ("\\frac{d}{dx}x^2", "2x"),
    ("\\int_0^1 x dx", "\\frac12"),
    ("e^{2} \\cdot e", "e^3"),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
)


class WorkerError(RuntimeError):
    """The worker could not be started (e.g. math-verify is not installed): an environment problem, not an answer."""


class _Worker:
    """One child process serving equivalence checks for one (process, thread)."""

    def __init__(self) -> None:
        self.pid = os.getpid()  # the parent that owns it: a forked child must not reuse it
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # the directory holding the `rpgrl` package
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True
        )
        self._buf = b""
        self.ready = False

    def _readline(self, deadline: float) -> bytes | None:
        """One line from the worker, or None if the deadline passes or the worker died."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # EOF: the worker died
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def wait_ready(self) -> None:
        if self.ready:
            return
        line = self._readline(time.monotonic() + START_TIMEOUT)
        if line != b'"ready"':
            self.kill()
            raise WorkerError(
                "the math-verify worker did not start (is the `math` extra installed? "
                "pip install 'rpgrl[math]'); equiv mode needs it, strict mode does not"
            )
        self.ready = True

    def ask(self, pred: str, gold: str, timeout: float) -> bool | None:
        """True/False from the worker, or None if it missed the hard deadline or died (then it is dead)."""
        self.wait_ready()
        msg = json.dumps({"pred": pred, "gold": gold, "timeout": timeout}) + "\n"
        try:
            self.proc.stdin.write(msg.encode())
            self.proc.stdin.flush()
        except OSError:
            self.kill()
            return None
        line = self._readline(time.monotonic() + timeout + HARD_SLACK)
        if line is None:
            self.kill()
            return None
        return bool(json.loads(line))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.pid == os.getpid() and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def __del__(self) -> None:  # thread exit / interpreter exit: close the pipes, the worker sees EOF and leaves
        try:
            self.kill()
        except Exception:
            pass


def _worker() -> _Worker:
    w = getattr(_local, "worker", None)
    if w is None or w.pid != os.getpid() or not w.alive():
        w = _local.worker = _Worker()
    return w


def require(what: str) -> None:
    """Raise a `UsageError` naming `what` (e.g. "--mode equiv") if math-verify is not installed, so a run that
    scores by equivalence fails before it loads a model and samples, not at its first answer."""
    import importlib.util

    from rpgrl.errors import UsageError

    if importlib.util.find_spec("math_verify") is None:
        raise UsageError(f"{what} scores answers with math-verify, which is not installed: pip install "
                         "'rpgrl[math]', or score with the strict rule (it needs nothing)")  # fmt: skip


def start() -> None:
    """Start this thread's worker without waiting for it (it imports math-verify in the background)."""
    _worker()


def warm_up() -> None:
    """Start this thread's worker now and wait until it is ready (e.g. before a timed evaluation)."""
    _worker().wait_ready()


def equivalent(pred: str, gold: str, timeout: float = 1.0) -> bool:
    """True iff math-verify proves `pred` equivalent to `gold` within `timeout` seconds of the worker's time.

    Wall-clock bound for the caller: `timeout + HARD_SLACK` once the worker is ready (plus its one-time start).
    A killed worker is replaced at once, so the next call does not wait for the hung one.
    """
    ok = _worker().ask(pred, gold, timeout)
    if ok is None:
        _local.worker = _Worker()  # start the replacement now; it imports while the caller carries on
        return False
    return ok


# --------------------------------------------------------------------------------------------------------------
# the child side
# --------------------------------------------------------------------------------------------------------------


class _Timeout(BaseException):
    """Raised by the alarm. A BaseException so sympy's and math-verify's `except Exception` do not swallow it."""


def serve() -> None:
    """Worker main loop: JSON line in, JSON `true`/`false` out, until stdin closes."""
    import functools
    import logging
    import resource
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the trainer: the parent closes our stdin instead
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > MEMORY_LIMIT:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))
    logging.disable(logging.CRITICAL)  # math-verify warns about disabled timeouts and failed parses

    from math_verify import LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig(boxed_match_priority=0)]

    def parse_one(expr: str):
        # `\boxed{...}` makes math-verify parse the whole answer as one expression (its own timeouts disabled:
        # their alarm(0) would cancel ours)
        return parse("\\boxed{" + expr + "}", config, fallback_mode="no_fallback", parsing_timeout=None)

    parse_gold = functools.lru_cache(maxsize=4096)(parse_one)

    def judge(pred: str, gold: str) -> bool:
        g, p = parse_gold(gold), parse_one(pred)
        return bool(g and p and verify(g, p, timeout_seconds=None))

    def on_alarm(signum, frame):
        raise _Timeout

    signal.signal(signal.SIGALRM, on_alarm)
    # Warm up before saying ready: the ANTLR parser, and sympy's lazily imported sets, intervals, fractions and
    # radicals, so their one-time import is not charged to the first real answer's time limit (under load it took
    # over a second and judged a correct interval wrong). Also the first polynomial, trigonometric, logarithmic,
    # complex, exponential, scientific-notation, union, derivative, integral and matrix answers: each kind's first
    # judgement took 0.1-0.65 s on an idle worker (0.001-0.05 s after), over the 1 s limit on a loaded machine.
    for pred, gold in WARM_UP:
        judge(pred, gold)
    out = sys.stdout
    out.write('"ready"\n')
    out.flush()
    for line in sys.stdin:
        ok = False
        try:
            req = json.loads(line)
            signal.setitimer(signal.ITIMER_REAL, float(req["timeout"]))
            try:
                ok = judge(str(req["pred"]), str(req["gold"]))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException:  # _Timeout, RecursionError, MemoryError, parser errors: the answer is wrong
            ok = False
        out.write("true\n" if ok else "false\n")
        out.flush()
