"""The README's loss-library example runs as written, and CI runs the README's test command."""

import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def test_readme_loss_example_runs_and_backpropagates():
    block = re.search(r"## The loss library\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - our own documentation
    out, logp = scope["out"], scope["logp"]
    assert torch.isfinite(out.loss) and logp.grad is not None and torch.isfinite(logp.grad).all()
    assert logp.grad.abs().sum() > 0


def test_ci_runs_the_readme_test_command():
    cmd = next(line for line in (ROOT / "README.md").read_text().splitlines() if "pytest" in line and "pip" in line)
    assert cmd.strip() in (ROOT / ".ci" / "run").read_text()


def test_readme_call_shows_the_option_defaults():
    """The README says RPGOptions' defaults are the call it shows."""
    from rpgrl.options import RPGOptions

    block = re.search(r"out = rpgrl\.rpg_loss\((.*?)\n\)", (ROOT / "README.md").read_text(), re.S).group(1)
    shown = dict(re.findall(r"^\s+(\w+)=(.+),$", block, re.M))
    assert len(shown) == 9
    defaults = RPGOptions()
    for name, text in shown.items():
        assert eval(text) == getattr(defaults, name), name  # noqa: S307 - literals from our own documentation
