"""The `rpgrl` command: `rpgrl train|eval|verify|reproduce ...`.

Each subcommand lives next to what it runs and is imported lazily, so `rpgrl verify` needs only torch.
Errors a user can fix (bad config key, missing file, malformed data) print one line and exit with code 2.
"""

from __future__ import annotations

import errno
import importlib
import signal
import sys
import threading

from rpgrl.errors import TermAsInterrupt, UsageError, interrupt_signal, one_line
from rpgrl.rewards._mathverify import WorkerError

# OSErrors that a path a user gave explains (too long, not readable, a file where a folder should be): one line too
PATH_ERRNOS = {errno.ENAMETOOLONG, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ELOOP}

# subcommand -> (module, function taking argv and returning an exit code, one-line help)
COMMANDS = {
    "train": ("rpgrl.trainer.cli", "main", "train a policy (no preset = the embedded CPU default)"),
    "eval": ("rpgrl.evaluation", "main", "score a model on AIME/AMC parquet files (mean@k, pass@k, maj@k)"),
    "verify": ("rpgrl.verify", "main", "prove every RPG surrogate exact by enumeration, and the clip row by row"),
    "reproduce": ("rpgrl.reproduce.cli", "main", "rerun the paper's claims at small scale, with seeds and intervals"),
    "plot": ("rpgrl.trainer.plot", "main", "draw a run's curves (metrics and evaluations) as one PNG, at any time"),
}


def _usage() -> str:
    lines = ["usage: rpgrl COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    entry = argv is None  # the process's own command line: this process ends when main returns
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"rpgrl: unknown command {name!r}; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        return _run(name, rest)
    finally:
        if entry:
            _ignore_signals()


def _run(name: str, rest: list[str]) -> int:
    module, func, _ = COMMANDS[name]
    try:
        with TermAsInterrupt():  # where the command has no handling of its own (its imports: seconds, with torch)
            return int(getattr(importlib.import_module(module), func)(rest) or 0)
    except KeyboardInterrupt as e:  # a SIGTERM there, or a Ctrl-C the command did not catch
        sig = interrupt_signal(e)
        print(f"rpgrl {name}: stopped by {sig.name}", file=sys.stderr)
        return 128 + sig
    except (UsageError, FileNotFoundError, WorkerError) as e:  # WorkerError: math-verify installed but broken
        print(f"rpgrl {name}: error: {one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in PATH_ERRNOS:
            raise
        print(f"rpgrl {name}: error: {one_line(e)}", file=sys.stderr)
        return 2


def _ignore_signals() -> None:
    """The command is done: SIGINT and SIGTERM are ignored while the interpreter shuts down (freeing torch takes a
    second, after Python's own handlers are off), so the process ends with the command's exit code, where a signal
    there was a kill (-15) or a traceback that made a finished run look failed. (Blocking them is not enough: the
    other threads, torch's among them, would still take them.) SIGKILL still ends a shutdown that hangs."""
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)


if __name__ == "__main__":
    raise SystemExit(main())
