"""rpgrl: Regularized Policy Gradient (RPG) for LLM reasoning.

`import rpgrl` needs only torch; names that need an extra (transformers, math-verify) load on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it (imported lazily)
_EXPORTS = {
    "rpg_loss": "rpgrl.objectives.rpg",
    "LossOutput": "rpgrl.objectives",
    "LOSSES": "rpgrl.objectives",
    "get_loss": "rpgrl.objectives",
    "aggregate": "rpgrl.objectives",
    "ADVANTAGES": "rpgrl.advantages",
    "get_advantage": "rpgrl.advantages",
    "math_score": "rpgrl.rewards.math",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rpgrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


__all__ = list(_EXPORTS)
