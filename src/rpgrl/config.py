"""Every tunable of `rpgrl train`, as one tree of frozen dataclasses.

Each field is documented exactly once, by the string literal right under it; `--help` reads those strings from this
file's source (`field_docs`), the way cleanrl/tyro do. Derived values are properties, never fields filled in later.

`apply_overrides` sets `--section.field value` pairs with type checks, `config_from_dict` rebuilds a saved config,
and `check` validates ranges and cross-field constraints once, at the end. Every user-fixable problem raises
`UsageError` with one line naming it. Registry names (loss, advantage, reward) are checked by the trainer, which
imports those registries; this module imports nothing but the standard library.

Why not tyro (which reads the same field docstrings): measured with tyro 1.0.17 on this tree, a misspelt key
(`--loss.betaa 1`) prints an 11-line boxed panel with suggestions, not the one line naming the problem that every
`rpgrl` command promises (exit code 2, scripts grep it). Range and cross-field checks would stay here anyway. The
subcommands without a config tree (eval, verify, reproduce) use argparse with the same one-line error (their
parsers raise UsageError).
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from rpgrl.errors import MAX_SEED, UsageError
from rpgrl.fields import field_docs
from rpgrl.options import Agg, Analogue, Branch, Divergence, Level, OptionError, RPGOptions, Style, rpg_field

FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max, without importing torch
FLOAT32_TINY = 1.1754943508222875e-38  # torch.finfo(torch.float32).tiny
REWARD_LIMIT = 1e15  # the largest |reward| (and overlong penalty): their squares, summed over a batch, fit float32


@dataclass(frozen=True)
class ModelConfig:
    path: str | None = "tiny"
    """a Hugging Face causal-LM folder, or 'tiny' to build the small Qwen2-style model below locally"""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """parameter dtype (log-probs are always computed in float32)"""
    hidden_size: int = 128
    """tiny model only: hidden width"""
    num_layers: int = 4
    """tiny model only: transformer blocks"""
    num_heads: int = 4
    """tiny model only: attention heads"""
    num_kv_heads: int = 2
    """tiny model only: key/value heads (grouped-query attention)"""
    intermediate_size: int = 384
    """tiny model only: MLP width"""
    tie_embeddings: bool = False
    """tiny model only: share the input embedding and output head matrices (off: on the default task, tied
    embeddings made RL stall or collapse, since pushing down a wrong output token also moves its input embedding)"""
    chat_template: bool = True
    """render prompts with the tokenizer's chat template when it has one (spec 7.5); the tiny model's has one
    (`<|user|>` turns) with a data file, none on the synthetic task"""


@dataclass(frozen=True)
class DataConfig:
    train: str | None = "synthetic"
    """'synthetic' (the embedded task, generated in code) or a JSONL/parquet file of prompts and answers"""
    val: str | None = None
    """held-out JSONL/parquet file for periodic evaluation (synthetic: a generated held-out split)"""
    prompt_key: str = "prompt"
    """dataset column holding the question (a string, or a chat message list as in the paper's parquet files)"""
    answer_key: str = "answer"
    """dataset column holding the ground-truth answer"""
    num_train: int = 20000
    """synthetic only: problems generated for the training split"""
    num_val: int = 300
    """synthetic only: held-out problems (greedy accuracy is measured on these)"""
    max_prompt_length: int = 2048
    """the longest prompt in tokens; a longer one is refused or cut as data.truncation says"""
    truncation: Literal["error", "left"] = "error"
    """a prompt above data.max_prompt_length: error (refused, naming it; verl's default) or left (keep its last
    tokens, as verl's truncation=left)"""
    reward: str = "synthetic"
    """reward function name in the rpgrl.rewards registry: synthetic (the authors' exact "Answer:" rule, 1/0: what a
    data file is scored with unless this is set); math (+1/-1) or math01 (1/0) by equivalence; math_strict or
    math01_strict by the authors' exact rule"""
    shuffle: bool = True
    """reshuffle the training prompts every epoch (seeded by train.seed)"""


@dataclass(frozen=True)
class RolloutConfig:
    prompts_per_step: int = 32
    """prompts per training step (the paper's train batch: 512)"""
    group_size: int = 8
    """G: responses sampled per prompt (the paper: 16)"""
    max_new_tokens: int = 48
    """response length limit in tokens (the paper: 2048)"""
    temperature: float = 1.0
    """sampling temperature, in [1e-8, 1e4]; log-probs are computed from logits divided by it"""
    top_p: float = 1.0
    """nucleus sampling threshold (1.0 = off; top-k is always off)"""
    gen_batch_size: int = 256
    """sequences per generation call (a memory knob; each call draws from the run's seeded random stream in turn, so
    with the same seed a different gen_batch_size draws different, equally distributed, samples)"""
    decode: Literal["auto", "static", "compiled", "transformers"] = "auto"
    """decode step: 'static' (rpgrl.decode: static KV cache, fused projections; Qwen2/Qwen3/Llama), 'compiled'
    (the same step and the token draw as one torch.compile graph: seconds of compiling per rows x cache length,
    then faster on small models; needs a C++ compiler), 'transformers' (the model's own forward, any causal LM),
    'auto' = static where supported and the weights are under 2 GiB (its fused projections, on oneDNN all four layer
    weights, are per-call copies). Same distribution either way"""
    group_filter: Literal["off", "drop", "fill"] = "drop"
    """groups whose G responses are all correct or all wrong carry no signal: 'drop' leaves them out of the
    update; 'fill' is DAPO's dynamic sampling (keep generating until prompts_per_step mixed groups, spec 5.3)"""
    gen_prompts: int | None = None
    """'fill' only: prompts per generation batch (DAPO: 3 x prompts_per_step); None = prompts_per_step"""
    max_gen_batches: int = 20
    """'fill' only: give up (error) after this many generation batches without enough mixed groups"""
    overlong_buffer: int = 0
    """DAPO overlong penalty buffer in tokens (0 = off): linear penalty from max_new_tokens - buffer to the limit"""
    overlong_factor: float = 1.0
    """DAPO overlong penalty at the hard limit (the penalty reaches -factor)"""

    @property
    def batch_size(self) -> int:
        """Responses per training step before filtering (prompts_per_step x G)."""
        return self.prompts_per_step * self.group_size

    @property
    def prompts_per_gen_batch(self) -> int:
        return self.gen_prompts if self.gen_prompts is not None else self.prompts_per_step


@dataclass(frozen=True)
class LossConfig:
    """The policy loss. The rpg-only fields take their default and documentation from `rpgrl.options.RPGOptions`
    (the one declaration of RPG's options); `clip_branch` and `kl_clamp` are its `branch` and `kl_value_clamp`."""

    name: str = "rpg"
    """policy loss family in the LOSSES registry ('rpg', 'grpo', 'dapo', 'ppo', 'reinforce_pp')"""
    advantage: str = "rpg"
    """advantage estimator in the ADVANTAGES registry ('rpg' = group mean, 'grpo' = mean/std, ...)"""
    divergence: Divergence = rpg_field("divergence")
    style: Style = rpg_field("style")
    level: Level = rpg_field("level")
    agg: Agg = rpg_field("agg")
    beta: float = rpg_field("beta")
    """KL coefficient of rpg's divergence or of ppo-family losses' kl term (GRPO as released: 1e-3)"""
    clip: str | None = rpg_field("clip")
    """rpg: 'dual' (RPG-Style Clip), 'truncate' (truncated importance weights) or none; ppo-family losses always
    clip the ratio to [1-eps_low, 1+eps_high] and add the dual clip c only with 'dual'"""
    clip_branch: Branch = rpg_field("branch")
    kl_in_clip: bool = rpg_field("kl_in_clip")
    analogue: Analogue = rpg_field("analogue")
    kl: Literal["k1", "k3", "k3_corrected"] | None = None
    """ppo-family losses (ppo, grpo, reinforce_pp): the per-token KL term against the anchor (ref.mode), or none"""
    kl_clamp: float | None = rpg_field("kl_value_clamp")
    """clamp the separate per-token KL term's value to [-kl_clamp, kl_clamp] (verl: 10 for low_var_kl and the
    released rpg KL losses; zero gradient outside); counted in a metric. None = no clamp"""
    eps_low: float = rpg_field("eps_low")
    eps_high: float = rpg_field("eps_high")
    c: float = rpg_field("c")
    max_log_w: float | None = rpg_field("max_log_w")

    def rpg_options(self) -> RPGOptions:
        """This config's options for `rpg_loss` (unchecked; `.check()` validates them)."""
        names = {f.name for f in dataclasses.fields(RPGOptions)}
        mine = {k: v for k, v in dataclasses.asdict(self).items() if k in names}
        return RPGOptions(**mine, branch=self.clip_branch, kl_value_clamp=self.kl_clamp)


# RPGOptions field -> its loss.* key where the names differ
LOSS_KEYS = {"branch": "clip_branch", "kl_value_clamp": "kl_clamp"}


@dataclass(frozen=True)
class OptimConfig:
    name: Literal["adamw", "schedulefree"] = "adamw"
    """AdamW, or schedule-free AdamW (package schedulefree); see trainer/loop.py for its train/eval modes"""
    lr: float = 3.5e-5
    """peak learning rate per optimizer step (the paper: 1e-6). Adam's step does not shrink with the mini-batch, so k
    optimizer steps per rollout batch move the weights about sqrt(k) times as far per batch as one step: the
    default's 8 steps at 3.5e-5 ~ one step at 1e-4 (on-policy, 2e-4 degrades and 3e-4 collapses on this task)"""
    weight_decay: float = 0.0
    """decoupled weight decay (the paper: 0.1)"""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam betas, as 'b1,b2'"""
    eps: float = 1e-8
    """Adam epsilon"""
    warmup_steps: int = 10
    """linear warm-up counted in training steps as verl does: step k (1-based) uses lr x min(1, (k-1)/warmup)"""
    grad_clip: float = 1.0
    """max global gradient norm per optimizer step (0 = off); a non-finite norm skips the step"""


@dataclass(frozen=True)
class RefConfig:
    mode: Literal["behaviour", "periodic", "adaptive", "fixed"] = "behaviour"
    """KL anchor (spec 6): 'behaviour' = the sampler of each batch (as released, no weight copy); 'periodic' =
    refreshed every `period` steps; 'adaptive' = refreshed when the KL moving average passes `kappa`; 'fixed' =
    the initial model (GRPO)"""
    period: int = 10
    """'periodic': training steps between anchor refreshes"""
    kappa: float = 0.01
    """'adaptive': refresh when the EMA of the token-mean k3 KL(pi_theta || anchor) exceeds this"""
    ema: float = 0.1
    """'adaptive': weight of the newest step in that moving average"""


@dataclass(frozen=True)
class SFTConfig:
    max_steps: int = 300
    """supervised warm-start steps before RL (0 = none; only for the synthetic task, which has solutions)"""
    batch_size: int = 64
    """sequences per warm-start step"""
    lr: float = 2e-3
    """warm-start peak learning rate (cosine-decayed over max_steps)"""
    eval_every: int = 10
    """check held-out greedy accuracy every this many warm-start steps"""
    target_accuracy: float = 0.2
    """stop the warm start once held-out greedy accuracy reaches this (leave room for RL)"""


@dataclass(frozen=True)
class EvalConfig:
    every: int = 0
    """evaluate every this many training steps (0 = only before and after RL)"""
    max_problems: int | None = None
    """evaluate on at most this many problems per held-out set / benchmark (None = all)"""
    val_samples: int = 0
    """held-out set: also sample this many responses per problem at the rollout temperature and report their mean
    accuracy (`eval/sampled_accuracy`, mean@k; 0 = off); seeded by train.seed and the step, apart from training"""
    benchmarks: str | None = None
    """comma-separated evaluation files (the AIME/AMC parquet files of spec 10), scored with mean@k, pass@k and
    best@k by rpgrl.evaluation, with the paper's Last/Best; None = off"""
    samples: int = 32
    """benchmarks: samples per problem at the rollout temperature (k of mean@k; the paper: 32)"""
    scoring: Literal["strict", "equiv"] = "equiv"
    """benchmarks: math scoring (strict = the authors' string rule, equiv = math-verify equivalence)"""


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 120
    """total RL training steps (one step = one rollout batch); --resume continues up to this total"""
    seed: int = 0
    """seeds python, numpy, torch, the data order and the sampler"""
    epochs: int = 1
    """passes over each rollout batch"""
    mini_batch_prompts: int | None = 4
    """prompts per optimizer step (None = the whole batch, one optimizer step per epoch). The default's 4 of 32 gives
    8 optimizer steps per rollout batch (fewer when group_filter drops groups), so w moves away from 1 and the clip
    and KL act; the paper: 32 of 512, 16 steps"""
    old_logp: Literal["auto", "sampler", "forward"] = "auto"
    """off-policy updates: pi_old's log-probs from the sampler ('sampler', no extra pass; equal to a training forward
    up to float rounding in float32), from a no-grad forward pass before the update ('forward', as verl), or 'auto'
    (sampler for float32 models, forward otherwise)"""
    forward: Literal["auto", "packed", "transformers"] = "auto"
    """training forward (update, old log-probs, warm start): 'packed' (rpgrl.packed: the prompt and response tokens
    as one matrix of rows through every layer, the attention alone split by prompt; Qwen2/Qwen3/Llama),
    'transformers' (the decoder's own forward), 'auto' = packed where supported. Same log-probs to float rounding"""
    micro_batch_size: int = 128
    """sequences per forward/backward pass (memory knob; gradients are accumulated with the global normalizer)"""
    logprob_chunk: int = 1024
    """response positions per output-head chunk when computing log-probs (memory knob: at most this many x
    vocabulary float32 logits exist at once)"""
    checkpoint_every: int = 20
    """write a checkpoint every this many steps (and at the end, and on SIGTERM/SIGINT)"""
    checkpoint_minutes: float = 10.0
    """also write one when this many minutes have passed since the last (bounds the work a crash loses; 0 = off)"""
    keep_checkpoints: int = 2
    """how many recent checkpoints to keep"""
    collapse_patience: int = 15
    """stop with a warning when no sampled response is correct for this many consecutive steps (0 = off)"""
    threads: int = 2
    """torch CPU threads"""
    progress: bool = True
    """show a progress bar"""
    report_to: str = "none"
    """experiment trackers, named as in TRL/transformers: none, tensorboard, wandb or a comma list (extras
    rpgrl[tensorboard], rpgrl[wandb]); they get the metrics.jsonl keys, the eval rows and the config once"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """where the model and every tensor of the run live: 'auto' = CUDA when available (one GPU), else the CPU"""


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @property
    def synthetic(self) -> bool:
        return self.data.train == "synthetic"

    @property
    def mini_batches_per_epoch(self) -> int:
        mb = self.train.mini_batch_prompts
        return 1 if mb is None else self.rollout.prompts_per_step // mb


SECTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config))


# ---------------------------------------------------------------------------------------------------------------
# Help: each field's documentation (`fields.field_docs`: the string literal under it, or its RPGOptions doc).


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "{" + ",".join(str(a) for a in args) + "}"
    if origin in (typing.Union, types.UnionType):
        return "|".join(type_name(a) for a in args)
    if origin is tuple:
        return ",".join(type_name(a) for a in args)
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def help_text(cfg: Config) -> str:
    """One line per field: `--section.field TYPE (default: X)  doc`."""
    lines = []
    for sec in SECTIONS:
        sub = getattr(cfg, sec)
        cls = type(sub)
        docs, hints = field_docs(cls), _hints(cls)
        lines.append(f"{sec}:")
        for f in dataclasses.fields(cls):
            key = f"--{sec}.{f.name} {type_name(hints[f.name])}"
            lines.append(f"  {key:<44} (default: {_show(getattr(sub, f.name))})  {docs.get(f.name, '')}")
    return "\n".join(lines)


def _show(v: Any) -> str:
    if isinstance(v, tuple):
        return ",".join(str(x) for x in v)
    return str(v)


# ---------------------------------------------------------------------------------------------------------------
# Parsing: strings (command line) and JSON values (saved configs) -> typed values.

_TRUE, _FALSE, _NONE = ("true", "1", "yes", "on"), ("false", "0", "no", "off"), ("none", "null")


def parse_value(key: str, text: str, tp: Any) -> Any:
    """Parse the command-line string `text` as type `tp` for `key`; UsageError on mismatch."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and text.strip().lower() in _NONE:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return parse_value(key, text, a)
            except UsageError:
                pass
        raise UsageError(f"--{key}: expected {type_name(tp)}, got {text!r}")
    if origin is Literal:
        if text in args:
            return text
        raise UsageError(f"--{key}: expected one of {', '.join(map(str, args))}; got {text!r}")
    if origin is tuple:
        parts = [p for p in text.split(",")]
        if len(parts) != len(args):
            raise UsageError(f"--{key}: expected {len(args)} comma-separated values, got {text!r}")
        return tuple(parse_value(key, p.strip(), a) for p, a in zip(parts, args, strict=True))
    if tp is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise UsageError(f"--{key}: expected true or false, got {text!r}")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"--{key}: expected an integer, got {text!r}") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise UsageError(f"--{key}: expected a number, got {text!r}") from None
    if tp is str:
        return text
    raise TypeError(f"unsupported config type {tp!r} for {key}")


def check_value(key: str, value: Any, tp: Any) -> Any:
    """Type-check a JSON value (from a saved config) against `tp`; returns it converted (lists -> tuples)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return check_value(key, value, a)
            except UsageError:
                pass
        raise UsageError(f"{key}: expected {type_name(tp)}, got {value!r}")
    if origin is Literal:
        if value in args:
            return value
        raise UsageError(f"{key}: expected one of {', '.join(map(str, args))}; got {value!r}")
    if origin is tuple:
        if isinstance(value, (list, tuple)) and len(value) == len(args):
            return tuple(check_value(key, v, a) for v, a in zip(value, args, strict=True))
        raise UsageError(f"{key}: expected {len(args)} values, got {value!r}")
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(tp)
    if ok is None:
        raise TypeError(f"unsupported config type {tp!r} for {key}")
    if not ok:
        raise UsageError(f"{key}: expected {type_name(tp)}, got {value!r}")
    return float(value) if tp is float else value


def _split_key(key: str) -> tuple[str, str]:
    sec, dot, name = key.partition(".")
    if not dot or sec not in SECTIONS:
        raise UsageError(
            f"unknown config key --{key}; keys look like --section.field with section one of {', '.join(SECTIONS)}"
        )
    return sec, name


def apply_overrides(cfg: Config, overrides: list[tuple[str, str]]) -> Config:
    """Apply `[("loss.beta", "0.05"), ...]` (command-line strings) to `cfg`. Unknown keys and bad values raise
    UsageError naming the key. Dashes in field names are accepted for underscores (`--train.max-steps`)."""
    for key, text in overrides:
        sec, name = _split_key(key)
        name = name.replace("-", "_")
        sub = getattr(cfg, sec)
        hints = _hints(type(sub))
        if name not in hints:
            valid = ", ".join(f.name for f in dataclasses.fields(sub))
            raise UsageError(f"unknown config key --{key}; fields of {sec}: {valid}")
        value = parse_value(f"{sec}.{name}", text, hints[name])
        cfg = dataclasses.replace(cfg, **{sec: dataclasses.replace(sub, **{name: value})})
    return cfg


def config_to_dict(cfg: Config) -> dict[str, dict[str, Any]]:
    """Plain nested dict (JSON-ready: tuples become lists)."""
    return {
        sec: {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(getattr(cfg, sec)).items()}
        for sec in SECTIONS
    }


def values_by_key(d: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A `config_to_dict` dict's values by "section.field" (as flags and one-line messages name them)."""
    return {f"{s}.{k}": v for s, sec in d.items() if isinstance(sec, dict) for k, v in sec.items()}


def config_from_dict(d: dict[str, Any], base: Config | None = None) -> Config:
    """Rebuild a Config from `config_to_dict` output, type-checked; missing fields keep `base`'s values."""
    cfg = base or Config()
    if not isinstance(d, dict):
        raise UsageError("config must be a mapping of sections")
    for sec, values in d.items():
        if sec not in SECTIONS:
            raise UsageError(f"unknown config section {sec!r}; valid: {', '.join(SECTIONS)}")
        sub = getattr(cfg, sec)
        hints = _hints(type(sub))
        if not isinstance(values, dict):
            raise UsageError(f"config section {sec!r} must be a mapping")
        for name in values:
            if name not in hints:
                raise UsageError(f"unknown config key {sec}.{name}")
        new = {name: check_value(f"{sec}.{name}", v, hints[name]) for name, v in values.items()}
        cfg = dataclasses.replace(cfg, **{sec: dataclasses.replace(sub, **new)})
    return cfg


# ---------------------------------------------------------------------------------------------------------------
# Validation: ranges and cross-field constraints, checked once on the final config.


def check(cfg: Config, base: Config | None = None) -> Config:
    """Raise UsageError (one line, naming the key) for values no run can use. Returns `cfg` unchanged. `base`: the
    config the user's flags were applied to (a preset, or a resumed run's saved config); an option the run would
    ignore is refused only when the user set it, not when `base` holds it."""
    _check_finite(cfg)
    _check_counts(cfg)
    _check_rollout_and_loss(cfg)
    _check_optim_and_rest(cfg)
    from rpgrl.trainer.trackers import parse_report_to  # standard library only (and rpgrl.errors)

    parse_report_to(cfg.train.report_to)
    _check_unused(cfg, base)
    return cfg


def _need(ok: bool, key: str, what: str) -> None:
    if not ok:
        raise UsageError(f"{key} {what}")


def _check_finite(cfg: Config) -> None:
    """Every float of every section finite and within float32's range."""
    for sec in SECTIONS:  # inf and nan pass every range check below (nan compares False, inf > 0)
        for name, v in dataclasses.asdict(getattr(cfg, sec)).items():
            floats = [x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, float)]
            _need(all(math.isfinite(x) for x in floats), f"{sec}.{name}", f"must be a finite number, got {_show(v)}")
            _need(all(abs(x) <= FLOAT32_MAX for x in floats), f"{sec}.{name}",  # it becomes inf in a float32 tensor
                  f"must be at most {FLOAT32_MAX:.4g} in size (float32's largest), got {_show(v)}")  # fmt: skip


def _check_counts(cfg: Config) -> None:
    """Sizes, counts and step numbers: the ones that must be >= 1 or >= 0, and how they fit together."""
    m, d, r, o, rf, s, e, t = cfg.model, cfg.data, cfg.rollout, cfg.optim, cfg.ref, cfg.sft, cfg.eval, cfg.train
    _need(m.path is not None, "model.path", "is not set: pass --model.path DIR (a Hugging Face causal-LM folder)")
    _need(d.train is not None, "data.train", "is not set: pass --data.train FILE (JSONL or parquet with prompts "
          f"and answers in columns {d.prompt_key!r}/{d.answer_key!r})")  # fmt: skip
    for key, v in (("model.path", m.path), ("data.train", d.train), ("data.val", d.val)):  # "" is "." to pathlib
        _need(v is None or v.strip() != "", key, f"is empty (got {v!r}): pass a path, or leave the option out")
    for key, v in [("model.hidden_size", m.hidden_size), ("model.num_layers", m.num_layers),
                   ("model.num_heads", m.num_heads), ("model.num_kv_heads", m.num_kv_heads),
                   ("model.intermediate_size", m.intermediate_size), ("data.num_train", d.num_train),
                   ("data.num_val", d.num_val), ("data.max_prompt_length", d.max_prompt_length),
                   ("rollout.prompts_per_step", r.prompts_per_step), ("rollout.group_size", r.group_size),
                   ("rollout.max_new_tokens", r.max_new_tokens), ("rollout.gen_batch_size", r.gen_batch_size),
                   ("rollout.max_gen_batches", r.max_gen_batches), ("ref.period", rf.period),
                   ("sft.batch_size", s.batch_size), ("sft.eval_every", s.eval_every), ("eval.samples", e.samples),
                   ("train.epochs", t.epochs), ("train.micro_batch_size", t.micro_batch_size),
                   ("train.logprob_chunk", t.logprob_chunk), ("train.checkpoint_every", t.checkpoint_every),
                   ("train.keep_checkpoints", t.keep_checkpoints), ("train.threads", t.threads)]:  # fmt: skip
        _need(v >= 1, key, f"must be >= 1, got {v}")
    for key, v in [("train.max_steps", t.max_steps), ("sft.max_steps", s.max_steps), ("eval.every", e.every),
                   ("rollout.overlong_buffer", r.overlong_buffer), ("train.collapse_patience", t.collapse_patience),
                   ("eval.val_samples", e.val_samples),
                   ("optim.warmup_steps", o.warmup_steps)]:  # fmt: skip
        _need(v >= 0, key, f"must be >= 0, got {v}")
    _need(0 <= t.seed <= MAX_SEED, "train.seed", f"must be in [0, 2**63 - 1], got {t.seed}")
    cpus = os.cpu_count() or 1
    _need(t.threads <= 4 * cpus, "train.threads", f"must be <= 4 x the {cpus} CPUs of this machine, got {t.threads}")
    if cfg.synthetic:
        from rpgrl.rewards.synthetic import max_problems  # standard library only (and rpgrl's registries)

        for key, n, split in (("data.num_train", d.num_train, "train"), ("data.num_val", d.num_val, "val")):
            _need(n <= max_problems(split), key, f"must be <= {max_problems(split)} (the synthetic task's distinct "
                  f"{split} problems), got {n}")  # fmt: skip
    _need(m.hidden_size % m.num_heads == 0, "model.hidden_size", "must be divisible by model.num_heads")
    _need(m.num_heads % m.num_kv_heads == 0, "model.num_heads", "must be divisible by model.num_kv_heads")
    head = m.hidden_size // m.num_heads
    _need(m.path != "tiny" or head % 2 == 0, "model.hidden_size", f"/ model.num_heads must be even (RoPE rotates "
          f"pairs of dimensions), got {m.hidden_size} / {m.num_heads} = {head}")  # fmt: skip
    _need(t.checkpoint_minutes >= 0, "train.checkpoint_minutes", f"must be >= 0 (0 = off), got {t.checkpoint_minutes}")


def _check_rollout_and_loss(cfg: Config) -> None:
    """Sampling, reward shaping and the loss's options (the cross-option rules as rpg_loss applies them)."""
    r, lo = cfg.rollout, cfg.loss
    # one response per prompt: always all right or all wrong (filtered out), and no group baseline
    g1_ok = r.group_filter == "off" and lo.advantage.startswith("reinforce_pp")  # a batch baseline can use G = 1
    _need(r.group_size >= 2 or g1_ok, "rollout.group_size", "must be >= 2: a group of one response has no baseline "
          "and the group filter drops it (only reinforce_pp advantages with group_filter off can use 1)")  # fmt: skip
    _need(r.temperature >= 1e-8, "rollout.temperature",  # rollout.MIN_TEMPERATURE and MAX_TEMPERATURE
          f"must be >= 1e-8 (logits / temperature stay finite in float32), got {r.temperature}")  # fmt: skip
    _need(r.temperature <= 1e4, "rollout.temperature", f"must be <= 1e4 (above, float32 log-probs of logits / "
          f"temperature lose the logits' differences, and the gradient with them), got {r.temperature}")  # fmt: skip
    _need(0 < r.top_p <= 1, "rollout.top_p", f"must be in (0, 1], got {r.top_p}")
    _need(r.overlong_buffer <= r.max_new_tokens, "rollout.overlong_buffer", "must be <= rollout.max_new_tokens")
    _need(0 <= r.overlong_factor <= REWARD_LIMIT, "rollout.overlong_factor",
          f"must be in [0, {REWARD_LIMIT:g}] (a reward's scale; advantages square it in float32)")  # fmt: skip
    _need(r.gen_prompts is None or r.gen_prompts >= 1, "rollout.gen_prompts", "must be >= 1")
    _need(lo.beta >= 0, "loss.beta", f"must be >= 0, got {lo.beta}")
    _need(lo.clip in (None, "dual", "truncate"), "loss.clip", f"must be dual, truncate or none, got {lo.clip!r}")
    _need(0 <= lo.eps_low <= 1, "loss.eps_low", f"must be in [0, 1] (1 = no lower clip), got {lo.eps_low}")
    _need(lo.eps_high >= 0, "loss.eps_high", f"must be >= 0, got {lo.eps_high}")
    _need(lo.c > 1, "loss.c", f"must be > 1, got {lo.c}")
    _need(lo.kl_clamp is None or lo.kl_clamp > 0, "loss.kl_clamp", f"must be > 0 or none, got {lo.kl_clamp}")
    _need(lo.max_log_w is None or lo.name == "rpg", "loss.max_log_w", f"applies to loss.name rpg only, not {lo.name}")
    _need(lo.kl is None or lo.name != "dapo", "loss.kl", f"applies to ppo, grpo and reinforce_pp; dapo has no KL term "
          f"(DAPO drops it): drop loss.kl, or use loss.name ppo with it (got {lo.kl!r})")  # fmt: skip
    _need(lo.kl is not None or lo.name != "grpo", "loss.kl", "is none, but loss.name grpo is PPO plus a KL term "
          "to a reference: set --loss.kl k3 (GRPO as published, the grpo preset), or use loss.name ppo")  # fmt: skip
    if lo.name == "rpg":  # the cross-option rules (e.g. truncate needs reinforce), as rpg_loss applies them
        try:  # an unused KL clamp is refused as unused (below), unless a preset or saved run set it
            lo.rpg_options().used().check()
        except OptionError as e:
            raise UsageError(f"loss.{LOSS_KEYS.get(e.option, e.option)}: {e}") from None


def _check_optim_and_rest(cfg: Config) -> None:
    """The optimizer, the KL anchor, the warm start, evaluation and the mini-batch split."""
    r, o, rf, s, e, t = cfg.rollout, cfg.optim, cfg.ref, cfg.sft, cfg.eval, cfg.train
    _need(o.lr >= 0, "optim.lr", f"must be >= 0, got {o.lr}")
    _need(o.weight_decay >= 0, "optim.weight_decay", "must be >= 0")
    _need(all(0 <= b < 1 for b in o.betas), "optim.betas", f"must be in [0, 1), got {o.betas}")
    _need(o.grad_clip >= 0, "optim.grad_clip", "must be >= 0 (0 = off)")
    _need(o.eps >= FLOAT32_TINY, "optim.eps", f"must be >= {FLOAT32_TINY:.4g} (float32's smallest normal number: "
          f"at 0, a weight whose gradient stays 0 is updated by 0 / 0), got {o.eps}")  # fmt: skip
    _need(rf.kappa > 0, "ref.kappa", "must be > 0")
    _need(0 < rf.ema <= 1, "ref.ema", "must be in (0, 1]")
    _need(s.lr > 0 or s.max_steps == 0, "sft.lr", f"must be > 0 (sft.max_steps 0 turns the warm start off), got {s.lr}")
    _need(0 <= s.target_accuracy <= 1, "sft.target_accuracy", "must be in [0, 1]")
    _need(e.max_problems is None or e.max_problems >= 1, "eval.max_problems", "must be >= 1")
    mb = t.mini_batch_prompts
    _need(mb is None or (mb >= 1 and r.prompts_per_step % mb == 0), "train.mini_batch_prompts",
          f"must divide rollout.prompts_per_step ({r.prompts_per_step}), got {mb}")  # fmt: skip


def _unused_loss_options(lo: LossConfig) -> list[tuple[str, Any, str, str]]:
    """loss.* options set (not their defaults) where the loss does not read them: rpg's own with a PPO-family loss,
    the dual clip's without it and the differentiable dual clip's with the REINFORCE style (`RPGOptions.unused`)."""
    if lo.name != "rpg":
        own = [k for k in ("divergence", "style", "level", "clip_branch", "analogue", "kl_in_clip")
               if getattr(lo, k) != getattr(LossConfig, k)]  # fmt: skip
        out = [(f"loss.{k}", getattr(lo, k), "loss.name rpg", f"loss.name is {lo.name}") for k in own]
        if lo.kl is None:  # beta (but 0: "no KL") and the clamp act on a KL term: reinforce_pp trained its k1 here
            why = "loss.name dapo has no KL term" if lo.name == "dapo" else "loss.kl is none"
            out += [(f"loss.{k}", getattr(lo, k), "a KL term (loss.kl k1, k3 or k3_corrected)", why)
                    for k in ("beta", "kl_clamp") if getattr(lo, k) not in (getattr(LossConfig, k), 0.0)]  # fmt: skip
        if lo.clip == "truncate":  # the PPO family clips the ratio always; 'dual' adds the cap c
            out.append(("loss.clip", lo.clip, "loss.name rpg", f"loss.name {lo.name} takes loss.clip dual or none"))
        elif lo.clip is None and lo.c != LossConfig.c:
            out.append(("loss.c", lo.c, "loss.clip dual (the dual clip's cap)", "loss.clip is none"))
        return out
    clip = "none" if lo.clip is None else lo.clip  # as the command line writes it
    why = {"eps_low": ("loss.clip dual or truncate", f"loss.clip is {clip}"),
           "eps_high": ("loss.clip dual or truncate", f"loss.clip is {clip}"),
           "c": ("loss.clip dual (the dual clip's cap)", f"loss.clip is {clip}"),
           "branch": ("loss.clip dual", f"loss.clip is {clip}"),
           "kl_in_clip": ("loss.style differentiable with loss.clip dual",
                          f"loss.style is {lo.style}, loss.clip {clip}"),
           "analogue": ("loss.style differentiable with loss.clip dual and loss.kl_in_clip true (the advantage "
                        "analogue of the KL inside the clip)", f"loss.style is {lo.style}, loss.clip {clip}, "
                        f"loss.kl_in_clip {str(lo.kl_in_clip).lower()}"),
           "kl_value_clamp": ("a separate KL term (loss.style differentiable with loss.clip none or loss.kl_in_clip "
                              "false)", f"loss.style is {lo.style}, loss.clip {clip}, loss.kl_in_clip "
                              f"{str(lo.kl_in_clip).lower()}")}  # fmt: skip
    return [
        (f"loss.{LOSS_KEYS.get(k, k)}", getattr(lo, LOSS_KEYS.get(k, k)), *why[k]) for k in lo.rpg_options().unused()
    ]


TINY_SIZES = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "tie_embeddings")
SFT_OPTIONS = ("batch_size", "lr", "eval_every", "target_accuracy")


def _unused_model_and_schedule(cfg: Config) -> list[tuple[str, Any, str, str]]:
    """The tiny model's sizes set with a model folder (its config.json has the sizes), sft.* set with no warm start,
    and train.old_logp set for an update that is on-policy by construction (one epoch of one mini-batch: pi_old's
    log-probs are the update's own forward, detached)."""
    m, s, t = cfg.model, cfg.sft, cfg.train
    out = []
    if m.path != "tiny":
        out += [(f"model.{k}", getattr(m, k), "model.path tiny", "a model folder's config.json sets its sizes")
                for k in TINY_SIZES if getattr(m, k) != getattr(ModelConfig, k)]  # fmt: skip
    if s.max_steps == 0:
        out += [(f"sft.{k}", getattr(s, k), "a warm start (sft.max_steps > 0)", "sft.max_steps is 0")
                for k in SFT_OPTIONS if getattr(s, k) != getattr(SFTConfig, k)]  # fmt: skip
    one_minibatch = t.mini_batch_prompts is None or t.mini_batch_prompts >= cfg.rollout.prompts_per_step
    if t.epochs == 1 and one_minibatch and t.old_logp != TrainConfig.old_logp:
        out.append(
            (
                "train.old_logp",
                t.old_logp,
                "off-policy updates (train.epochs > 1 or train.mini_batch_prompts < rollout.prompts_per_step)",
                "the update is on-policy: pi_old is its own forward, detached",
            )
        )
    return out


def _check_unused(cfg: Config, base: Config | None = None) -> None:
    """Raise UsageError for an option set where the run would ignore it (a user who sets it expects an effect),
    unless `base` (the preset or saved config the flags were applied to) holds the same value."""
    lo, r, e = cfg.loss, cfg.rollout, cfg.eval

    def mine(sec: str, name: str) -> bool:  # the user set it: `base` (a preset, a saved run) holds another value
        return base is None or getattr(getattr(base, sec), name) != getattr(getattr(cfg, sec), name)

    if lo.kl is not None and lo.name == "rpg" and mine("loss", "kl"):
        raise UsageError(
            f"loss.kl applies to the PPO-family losses with a KL term (ppo, grpo, reinforce_pp), "
            f"not rpg, whose KL term is loss.divergence x loss.beta: drop loss.kl (got {lo.kl!r})"
        )
    if lo.name != "rpg" and lo.kl is not None and lo.beta == 0 and mine("loss", "kl"):  # weighed by 0: trains none
        instead = (
            "use loss.name ppo without loss.kl (GRPO without its KL term)" if lo.name == "grpo" else "drop loss.kl"
        )
        raise UsageError(f"loss.kl {lo.kl} with loss.beta 0 adds no KL term (`dapo --loss.name grpo --loss.kl k3`: "
                         f"dapo's beta 0): set loss.beta > 0, or {instead}")  # fmt: skip
    if cfg.data.val is not None and cfg.synthetic and mine("data", "val"):
        raise UsageError(f"data.val applies to file datasets; the synthetic task generates its own held-out set "
                         f"(data.num_val): drop data.val (got {cfg.data.val!r})")  # fmt: skip
    if r.gen_prompts is not None and r.group_filter != "fill" and mine("rollout", "gen_prompts"):
        raise UsageError(f"rollout.gen_prompts applies to rollout.group_filter fill only, not {r.group_filter!r} "
                         f"(got {r.gen_prompts})")  # fmt: skip
    ref, data = cfg.ref, cfg.data
    unused = [(f"ref.{k}", v, f"ref.mode {mode}", f"ref.mode is {ref.mode}") for k, v, mode in
              (("period", ref.period, "periodic"), ("kappa", ref.kappa, "adaptive"), ("ema", ref.ema, "adaptive"))
              if ref.mode != mode and v != getattr(RefConfig, k)]  # fmt: skip
    if cfg.synthetic:  # its prompts and answers are generated, not read from columns
        unused += [(f"data.{k}", getattr(data, k), "file datasets", "the synthetic task generates its own")
                   for k in ("prompt_key", "answer_key") if getattr(data, k) != getattr(DataConfig, k)]  # fmt: skip
    else:  # a file's rows are all read; the sizes choose how many problems the synthetic task generates
        why = {
            "num_train": "data.train is a file, read whole",
            "num_val": "data.train is a file; eval.max_problems limits the held-out problems evaluated",
        }
        unused += [(f"data.{k}", getattr(data, k), "the synthetic task", why[k])
                   for k in ("num_train", "num_val") if getattr(data, k) != getattr(DataConfig, k)]  # fmt: skip
    unused += _unused_loss_options(lo) + _unused_model_and_schedule(cfg)
    if not e.benchmarks:
        unused += [(f"eval.{k}", getattr(e, k), "eval.benchmarks", "no benchmark is set")
                   for k in ("samples", "scoring") if getattr(e, k) != getattr(EvalConfig, k)]  # fmt: skip
    if r.overlong_buffer == 0 and r.overlong_factor != RolloutConfig.overlong_factor:
        unused.append(("rollout.overlong_factor", r.overlong_factor, "an overlong penalty (rollout.overlong_buffer "
                       "> 0)", "rollout.overlong_buffer is 0"))  # fmt: skip
    if r.group_filter != "fill" and r.max_gen_batches != RolloutConfig.max_gen_batches:
        unused.append(("rollout.max_gen_batches", r.max_gen_batches, "rollout.group_filter fill",
                       f"rollout.group_filter is {r.group_filter}"))  # fmt: skip
    if base is not None:  # set by the preset (`rpg-urkl`'s analogue with --loss.clip none), not by the user
        unused = [u for u in unused if getattr(getattr(base, u[0].split(".")[0]), u[0].split(".")[1]) != u[1]]
    if unused:
        key, value, applies, why = unused[0]  # (a saved run's own values are in `base`: never refused on --resume)
        more = f" (also unused: {', '.join(u[0] for u in unused[1:])})" if len(unused) > 1 else ""
        raise UsageError(f"{key} applies to {applies} only ({why}): drop {key} (got {value!r}){more}")
    if e.benchmarks and not any(p.strip() for p in e.benchmarks.split(",")):
        raise UsageError(f"eval.benchmarks names no file (got {e.benchmarks!r}): give comma-separated parquet or "
                         "JSONL paths, or none")  # fmt: skip
