"""`python -m rpgrl ...`: the `rpgrl` command (`rpgrl.cli`). Guarded: the reproduction suite's spawned workers import
this module again, as `__mp_main__`, and must not run a command."""

import sys

from rpgrl.cli import main

if __name__ == "__main__":
    sys.exit(main())
