"""RPG's loss options, declared once: names, types, defaults, documentation and validation.

`RPGOptions` is what `rpg_loss` validates its keywords into; the trainer's config (`loss.*`), TRL's `RPGConfig` and
verl's `RPGPolicyLossConfig` build one and call `check()`, so a value is accepted or refused with the same rule and
message everywhere. Where an engine already owns a setting, the adapter keeps the engine's name and maps it here:

    RPGOptions      rpgrl train        TRL RPGConfig          verl
    beta            loss.beta          rpg_beta (TRL's beta   policy_loss.beta
                                       loads a reference)
    eps_low/high    loss.eps_low/high  epsilon/epsilon_high   clip_ratio_low/high
    c               loss.c             clip_ratio_c           clip_ratio_c
    branch          loss.clip_branch   branch                 policy_loss.branch
    kl_value_clamp  loss.kl_clamp      kl_value_clamp         policy_loss.kl_value_clamp
    divergence,     loss.divergence,   divergence, style      the loss mode name rpg_<divergence>_<style>
    style           loss.style

Every other option has the same name everywhere. The config and TRL field documentation is read from here
(`rpg_field`). Standard library only (no torch).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal, get_args

from rpgrl.fields import field_docs

Divergence = Literal["fkl", "rkl", "ufkl", "urkl"]
Style = Literal["differentiable", "reinforce"]
Level = Literal["token", "sequence"]
Agg = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
Clip = Literal["dual", "truncate"]
Branch = Literal["effective", "raw"]
Analogue = Literal["exact", "paper"]

DIVERGENCES: tuple[str, ...] = get_args(Divergence)
STYLES: tuple[str, ...] = get_args(Style)
LEVELS: tuple[str, ...] = get_args(Level)
AGG_MODES: tuple[str, ...] = get_args(Agg)
CLIPS: tuple[str | None, ...] = (None, *get_args(Clip))
BRANCHES: tuple[str, ...] = get_args(Branch)
ANALOGUES: tuple[str, ...] = get_args(Analogue)


class OptionError(ValueError):
    """An invalid RPG option; `option` is its `RPGOptions` field name (adapters rename it to their own key)."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class RPGOptions:
    """The keyword options of `rpgrl.rpg_loss` (its docstring gives the math of each). Defaults: the paper's
    RPG-REINFORCE-URKL with RPG-Style Clip, beta 1e-4, clip range 0.2/0.28, c = 10, token-mean."""

    divergence: Divergence = "urkl"
    """the KL regulariser D(pi_theta, pi_anchor): fkl, rkl, or their unnormalized forms ufkl, urkl (spec 2.2)"""
    style: Style = "reinforce"
    """fully 'differentiable' surrogate, or 'reinforce' (stop-gradient weight times log-prob)"""
    beta: float = 1e-4
    """KL coefficient (>= 0)"""
    level: Level = "token"
    """'token': per-token ratios as the released code; 'sequence': whole-response ratios as the paper's theory"""
    agg: Agg = "token-mean"
    """how per-token losses are reduced (verl's loss_agg_mode); pass the global count as the normalizer"""
    clip: Clip | None = "dual"
    """'dual' (RPG-Style Clip, Alg. 1/2), 'truncate' (truncated importance weights, reinforce only) or none"""
    eps_low: float = 0.2
    """clip range low side, in [0, 1]: ratios below 1 - eps_low are clipped (1 = no lower clip)"""
    eps_high: float = 0.28
    """clip range high side (>= 0): ratios above 1 + eps_high are clipped"""
    c: float = 10.0
    """dual-clip cap (> 1) on the ratio for negative advantages"""
    branch: Branch = "effective"
    """dual clip branch: on the sign of the effective advantage as the paper ('effective'), or of A as the released
    code ('raw')"""
    kl_in_clip: bool = True
    """differentiable dual clip: the KL inside the clipped advantage (paper, Alg. 1), or false for a separate
    unclipped KL term added to a PPO-clipped reward term (the released code, spec 4.3 iv)"""
    analogue: Analogue = "exact"
    """differentiable dual clip: the advantage analogue A_hat; 'exact' matches the unclipped surrogate per sample,
    'paper' is Sec. 3.3's A - beta log w (urkl) / A - beta (log w + 1) (rkl) / A (fkl, ufkl)"""
    kl_value_clamp: float | None = None
    """clamp the separate KL term's value to [-K, K] (the authors' 10; zero gradient outside), counted in a metric;
    none = off"""
    max_log_w: float | None = None
    """clamp log w per unit to <= this before anything else (zero gradient above), counted in clip/frac_max_log_w;
    none = off"""

    @property
    def separate_kl(self) -> bool:
        """Is the KL a separate, unclipped term (differentiable style without clip, or the released dual clip)?"""
        if self.style != "differentiable":
            return False
        released = not self.kl_in_clip or (self.analogue == "paper" and self.divergence in ("fkl", "ufkl"))
        return self.clip is None or released

    def unused(self) -> list[str]:
        """The options set away from their defaults that `rpg_loss` does not read with these settings: the clip
        range without a clip, the dual clip's cap `c` and branch without the dual clip, the differentiable dual
        clip's `kl_in_clip` and `analogue` with the REINFORCE style or without the dual clip, `analogue` with
        `kl_in_clip` false (the loss is the same whatever they are), and `kl_value_clamp` without a separate KL term
        (which `check` refuses). Configs refuse them: a user who sets one expects an effect."""
        dual_differentiable = self.clip == "dual" and self.style == "differentiable"
        idle = {
            "eps_low": self.clip is None,  # no clip: w enters unclipped
            "eps_high": self.clip is None,
            "c": self.clip != "dual",  # 'truncate' clamps w to the clip range only
            "branch": self.clip != "dual",
            "kl_in_clip": not dual_differentiable,
            "analogue": not (dual_differentiable and self.kl_in_clip),  # kl_in_clip false: the KL is separate
            "kl_value_clamp": not self.separate_kl,
        }
        return [k for k, off in idle.items() if off and getattr(self, k) != getattr(RPGOptions, k)]

    def applies(self, key: str, name: str | None = None) -> str:
        """Where an option `unused` names is read, and these options' settings that leave it idle (one phrase for a
        message). `name`: the option as the adapter names it (TRL's `epsilon_high` for `eps_high`), else `key`."""
        where = {
            "eps_low": "clip='dual' or 'truncate'",
            "eps_high": "clip='dual' or 'truncate'",
            "c": "clip='dual'",
            "branch": "clip='dual'",
            "kl_in_clip": "style='differentiable' with clip='dual'",
            "analogue": "style='differentiable' with clip='dual' and kl_in_clip=True",
            "kl_value_clamp": "a separate KL term (style='differentiable' with clip=None or kl_in_clip=False)",
        }
        return (f"{name or key} applies to {where[key]}, not to style={self.style!r}, clip={self.clip!r}, "
                f"kl_in_clip={self.kl_in_clip}")  # fmt: skip

    def used(self) -> RPGOptions:
        """These options with the `unused` ones at their defaults: the same loss, and `check` passes where only an
        unused option failed it (a preset's KL clamp after a flag folds the KL into the clip)."""
        return dataclasses.replace(self, **{k: getattr(RPGOptions, k) for k in self.unused()})

    def check(self) -> RPGOptions:
        """Raise `OptionError` (one line, naming the option) for options `rpg_loss` cannot use. Returns the options
        with each number as a Python float or int (a numpy scalar, a one-number array or tensor, or a Fraction is
        accepted; torch takes these) and `kl_in_clip` as a Python bool."""
        o = self.check_values()
        _need(o.clip != "truncate" or o.style == "reinforce", "clip",
              "clip='truncate' (truncated importance weights, Remark F.2) needs style='reinforce'")  # fmt: skip
        _need(o.kl_value_clamp is None or o.separate_kl, "kl_value_clamp", "kl_value_clamp clamps a separate "
              "KL term: use style='differentiable' with clip=None or kl_in_clip=False")  # fmt: skip
        return dataclasses.replace(o, **{name: _plain(getattr(o, name)) for name in _NUMBERS})

    def check_values(self) -> RPGOptions:
        """Each option on its own (choices, ranges), not the rules that tie two options together. Returns the options
        with numpy's and torch's single values as Python's (`scalar`)."""
        o = dataclasses.replace(self, **{f.name: scalar(getattr(self, f.name), f.name) for f in _FIELDS})
        for name, valid in _CHOICES.items():
            value = getattr(o, name)
            if value not in valid:
                raise OptionError(name, f"unknown {name} {value!r}; valid: {', '.join(repr(v) for v in valid)}")
        _need(isinstance(o.kl_in_clip, bool), "kl_in_clip",  # "false" would act as True
              f"kl_in_clip must be true or false (a bool), got {o.kl_in_clip!r}")  # fmt: skip
        for name in _NUMBERS:
            value = getattr(o, name)
            if value is None and name in ("kl_value_clamp", "max_log_w"):
                continue
            check_size(value, name)
            if not _real(value):
                raise OptionError(name, f"{name} must be a real number, got {value!r}")
        _need(0 <= o.beta < math.inf, "beta", f"beta must be finite and >= 0, got {o.beta}")
        _need(0 <= o.eps_low <= 1, "eps_low", f"eps_low must be in [0, 1] (lower bound 1 - eps_low >= 0), got "
              f"{o.eps_low}")  # fmt: skip
        _need(o.eps_high >= 0, "eps_high", f"eps_high must be >= 0, got {o.eps_high}")
        _need(o.c > 1, "c", f"c must be > 1 (dual-clip cap on w for negative advantages), got {o.c}")
        k, m = o.kl_value_clamp, o.max_log_w
        _need(k is None or (_real(k) and k > 0), "kl_value_clamp", f"kl_value_clamp must be none or > 0, got {k!r}")
        _need(m is None or (_real(m) and 0 < m < math.inf), "max_log_w",  # log w is 0 on policy: M <= 0 stops it all
              f"max_log_w must be none or finite and > 0, got {m!r}")  # fmt: skip
        return o

    def kwargs(self) -> dict[str, Any]:
        """The options as `rpg_loss` keyword arguments."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


_CHOICES = {
    "divergence": DIVERGENCES,
    "style": STYLES,
    "level": LEVELS,
    "agg": AGG_MODES,
    "clip": CLIPS,
    "branch": BRANCHES,
    "analogue": ANALOGUES,
}


def none_word(value: Any) -> Any:
    """None for the words a command line gives for it (`None`, `none`, `null`: TRL's HfArgumentParser and Hydra's
    `+key=None` pass them as strings), else `value` itself."""
    return None if isinstance(value, str) and value.strip().lower() in ("none", "null") else value


_NUMBERS = ("beta", "eps_low", "eps_high", "c", "kl_value_clamp", "max_log_w")
_FIELDS = dataclasses.fields(RPGOptions)


def scalar(x: Any, name: str = "value") -> Any:
    """`x` as Python's bool, int or float where it is one value of numpy or torch (a numpy scalar of any width, a
    0-dim array or tensor: `.item()`, exact), else `x` itself, to be checked as given. A tensor that requires grad
    or holds no data (meta) is refused: options are constants (`.item()` would cut a graph its caller may mean).
    Only numbers are taken so: a numpy date or duration is refused (`.item()` of a datetime64 in ns is an int, of NaT
    None; a timedelta64 passes as numpy's integer), a numpy string or object stays itself, named by the checks."""
    if x is None or type(x) in (bool, int, float, str) or getattr(x, "ndim", None) != 0 or not hasattr(x, "item"):
        return x  # Python's own, a Fraction, a list, an array of several values: the checks name them
    kind = None if hasattr(x, "requires_grad") else getattr(getattr(x, "dtype", None), "kind", None)  # numpy's
    if kind in ("m", "M"):
        raise OptionError(name, f"{name} must be a real number, got a numpy {x.dtype} ({x!r})")
    if kind is not None and kind not in "biufc":
        return x  # numpy's str, bytes, void, object
    if getattr(x, "requires_grad", False) or getattr(x, "is_meta", False):
        what = "requires grad" if x.requires_grad else "is on the meta device (no value)"
        raise OptionError(name, f"{name} must be a constant number, got a tensor that {what}: pass a float")
    return x.item()


def past_float(x: Any) -> str | None:
    """How a number torch or `float()` cannot take reads in a message, else None: an int of 2**63 or more (torch
    takes a Python int as int64, or fails) or another real number past float's range (`float()` of a Fraction of
    10**400 raised OverflowError)."""
    if isinstance(x, (bool, float)) or not isinstance(x, numbers.Real):
        return None
    if isinstance(x, numbers.Integral):
        return f"an int of {len(str(abs(int(x))))} digits" if abs(x) >= 2**63 else None
    try:
        float(x)
    except OverflowError:
        return f"a {type(x).__name__} past float's range"
    return None


def check_size(x: Any, name: str) -> None:
    """OptionError (one line, naming `name`) for a number `past_float` names; every option's rule."""
    what = past_float(x)
    if what is not None:
        raise OptionError(name, f"{name} must be a float or an int below 2**63, got {what}")


def _real(x: Any) -> bool:
    """A real number that is not a bool or NaN: Python's, numpy's (float32 too) or a Fraction."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return False
    return isinstance(x, numbers.Integral) or not math.isnan(x)  # (math.isnan of an int past float's range overflows)


def _plain(x: Any) -> Any:
    """A checked number as a Python int or float (None as is)."""
    return x if x is None else int(x) if isinstance(x, numbers.Integral) else float(x)


def _need(ok: bool, option: str, message: str) -> None:
    if not ok:
        raise OptionError(option, message)


def rpg_field(name: str, help: str | None = None) -> Any:
    """A dataclass field with `RPGOptions.<name>`'s default and documentation (`metadata["help"]`, which
    HfArgumentParser shows and `fields.field_docs` falls back to), for configs that embed an RPG option. `help`
    replaces the documentation where the embedding config renames the option."""
    default = next(f.default for f in dataclasses.fields(RPGOptions) if f.name == name)
    return dataclasses.field(default=default, metadata={"help": help or field_docs(RPGOptions)[name]})


__all__ = ["RPGOptions", "OptionError", "rpg_field", "none_word", "scalar", "check_size", "past_float", "DIVERGENCES",
           "STYLES", "LEVELS", "AGG_MODES", "CLIPS", "BRANCHES", "ANALOGUES"]  # fmt: skip
