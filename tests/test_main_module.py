"""`python -m rpgrl` is the `rpgrl` command (it was "No module named rpgrl.__main__")."""

import subprocess
import sys


def test_python_m_rpgrl_is_the_command():
    run = subprocess.run([sys.executable, "-m", "rpgrl", "reproduce", "bogus"], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("rpgrl reproduce: error: unknown claim 'bogus'") and run.stderr.count("\n") == 1
    usage = subprocess.run([sys.executable, "-m", "rpgrl"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: rpgrl COMMAND")
