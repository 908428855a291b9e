"""The `rpgrl` command: `rpgrl train|eval|verify|reproduce ...`.

Each subcommand lives next to what it runs and is imported lazily, so `rpgrl verify` needs only torch.
Errors a user can fix (bad config key, missing file, malformed data) print one line and exit with code 2.
"""

from __future__ import annotations

import errno
import importlib
import sys

from rpgrl.errors import UsageError, one_line
from rpgrl.rewards._mathverify import WorkerError

# OSErrors that a path a user gave explains (too long, not readable, a file where a folder should be): one line too
PATH_ERRNOS = {errno.ENAMETOOLONG, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ELOOP}

# subcommand -> (module, function taking argv and returning an exit code, one-line help)
COMMANDS = {
    "train": ("rpgrl.trainer.cli", "main", "train a policy (no preset = the embedded CPU default)"),
    "eval": ("rpgrl.evaluation", "main", "score a model on AIME/AMC parquet files (mean@k, pass@k, maj@k)"),
    "verify": ("rpgrl.verify", "main", "prove every RPG surrogate exact by enumeration, and the clip row by row"),
    "reproduce": ("rpgrl.reproduce.cli", "main", "rerun the paper's claims at small scale, with seeds and intervals"),
}


def _usage() -> str:
    lines = ["usage: rpgrl COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"rpgrl: unknown command {name!r}; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    try:
        return int(getattr(importlib.import_module(module), func)(rest) or 0)
    except (UsageError, FileNotFoundError, WorkerError) as e:  # WorkerError: math-verify installed but broken
        print(f"rpgrl {name}: error: {one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in PATH_ERRNOS:
            raise
        print(f"rpgrl {name}: error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
