"""Errors a user can fix. The `rpgrl` command prints them as one line and exits with code 2."""

import argparse
import os
import signal
import threading
from pathlib import Path


class UsageError(ValueError):
    """Bad user input: an unknown config key, a wrong type, a missing file or column, a malformed row."""


class Diverged(FloatingPointError, ValueError):
    """Training produced non-finite numbers: a loss, a metric or the model's logits (its weights) became NaN or inf,
    most often from a learning rate or reward scale far too large. Nothing of the failing step is saved; `rpgrl
    train` prints it as one line and exits with code 2, and the run keeps its last checkpoint. A FloatingPointError
    (the reproduction runner records a diverged run as a result) and a ValueError (bad numbers in)."""


class TermAsInterrupt:
    """While inside (in the main thread): SIGTERM raises KeyboardInterrupt as SIGINT does, so a command stopped
    where it has no handling of its own (imports, config checks, `rpgrl verify`) ends with one line, not a traceback
    or a silent kill. `interrupt_signal(e)` says which signal it was. Only Python's default is replaced: a handler
    the caller installed, or SIGTERM ignored, stays as it is (and so does an enclosing TermAsInterrupt's)."""

    def __init__(self) -> None:
        self.previous = None

    def __enter__(self) -> "TermAsInterrupt":
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self.previous = signal.signal(signal.SIGTERM, self._raise)
        return self

    def _raise(self, signum: int, frame) -> None:
        stop = KeyboardInterrupt(signal.Signals(signum).name)
        stop.signum = signum
        raise stop

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None


def interrupt_signal(e: KeyboardInterrupt) -> signal.Signals:
    """The signal behind a KeyboardInterrupt: the `signum` a handler gave it (`TermAsInterrupt`), else SIGINT."""
    return signal.Signals(getattr(e, "signum", signal.SIGINT))


def one_line(e: BaseException) -> str:
    """The message of a user error as one line of stderr: line breaks inside it (e.g. from a path) escaped."""
    return str(e).replace("\r", "\\r").replace("\n", "\\n")


def utf8_text(name: str) -> str:
    """`name` as text any UTF-8 output takes (a UTF-8 stdout, matplotlib, TensorBoard, W&B): a file name not in
    UTF-8, held by Python as surrogate escapes, with its stray bytes escaped as stderr shows its path."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def first_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name when it has none (for one-line errors)."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def dir_problem(path: Path) -> str | None:
    """Why `path` cannot be, or be created as, a directory this process writes in; None if it can. Reads only."""
    path = Path(path)
    try:
        return _dir_problem(path)
    except (OSError, ValueError) as e:  # a name too long, a NUL byte, a folder on the way that cannot be read
        return f"cannot use it: {getattr(e, 'strerror', None) or e}"


def _dir_problem(path: Path) -> str | None:
    if path.exists() and not path.is_dir():
        return "it is a file, not a directory"
    existing = path
    while not existing.exists() and existing != existing.parent:  # nearest existing ancestor
        if existing.is_symlink():  # mkdir would meet the link ("File exists")
            name = "it" if existing == path else str(existing)
            return f"{name} is a link to {os.readlink(existing)}, which leads to no folder (a broken link, or a loop)"
        existing = existing.parent
    if not existing.is_dir():
        return f"it lies below {existing}, which is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"no permission to write in {existing}"
    return None


MAX_SEED = 2**63 - 1  # torch generators take 64-bit seeds


def seed_arg(text: str) -> int:
    """argparse `type` of a seed: an integer in [0, MAX_SEED]."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: not an integer") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2**63 - 1], got {text}")
    return value


def check_token_ids(prompts, vocab: int, what: str = "prompt") -> None:
    """UsageError naming the first prompt (list of token ids) holding an id outside [0, vocab): a tokenizer larger
    than the model's embedding, found before any work."""
    for i, p in enumerate(prompts):
        bad = next((t for t in p if not 0 <= t < vocab), None)
        if bad is not None:
            raise UsageError(f"{what} {i} encodes to token id {bad}, outside the model's vocabulary of {vocab} "
                             "(the tokenizer does not belong to this model)")  # fmt: skip


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the `rpgrl` subcommands: a parse error raises UsageError (one line, exit code 2 from `rpgrl`)
    instead of printing the usage block and exiting. Options are taken whole, as `rpgrl train` takes them: an
    abbreviation (`--limit` for `--limit-problems`) is an unknown option, with the options it could mean named (a
    script's abbreviation would otherwise change meaning, or fail, when an option is added)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        import sys

        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        if message.startswith("the following arguments are required"):  # argparse checks these first: a
            unknown = self._unknown()  # misspelt required option reads as missing, so the misspelling is named
            message = f"unrecognized arguments: {unknown}" if unknown else message
        raise UsageError(f"{message}{self._meant(message)} (see {self.prog} --help)")

    def _unknown(self) -> str | None:
        """The first `--option` of the parsed arguments that is none of this parser's (before a `--`)."""
        known = {o for a in self._actions for o in a.option_strings}
        for arg in getattr(self, "_argv", []):
            if arg == "--":
                break
            if arg.startswith("--") and arg.split("=", 1)[0] not in known:
                return arg.split("=", 1)[0]
        return None

    def _meant(self, message: str) -> str:
        """'; did you mean --x?' for the first unknown option of an 'unrecognized arguments' message: the options it
        begins, else the closest by spelling; '' when none is near."""
        import difflib

        if not message.startswith("unrecognized arguments: "):
            return ""
        given = message.split(": ", 1)[1].split()[0].split("=", 1)[0]
        if not given.startswith("--") or given == "--":  # `--` (or `--=x`) names no option
            return ""
        known = sorted(o for a in self._actions for o in a.option_strings if o.startswith("--"))
        near = [o for o in known if o.startswith(given)] or difflib.get_close_matches(given, known, n=2, cutoff=0.75)
        return f"; did you mean {' or '.join(near)}?" if near else ""
