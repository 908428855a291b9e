"""TRL adapter: `RPGConfig` / `RPGTrainer`, TRL's GRPOTrainer with rpgrl's `rpg_loss` for every RPG variant.

Everything else is TRL's: generation (transformers or vLLM), reward functions, the group advantage, gradient
accumulation, distributed training, logging. `RPGTrainer` overrides only `_compute_loss`, TRL's own extension
pattern (trl/experimental/gmpo); that method is private, so the extra pins `trl>=1.16,<2` and
tests/integrations/test_trl.py checks it.

What RPG changes relative to GRPO:
  - The KL anchor is pi_old, the sampler. TRL passes `old_per_token_logps` when the batch is reused (several
    iterations or steps per generation) or vLLM's importance-sampling correction is on
    (`vllm_importance_sampling_correction`), and otherwise the current log-probs detached, which is
    exactly pi_old at that point. So no reference model: TRL loads one iff its `beta != 0`, and RPGConfig refuses
    a nonzero `beta`. RPG's coefficient is `rpg_beta`, applied inside the loss.
  - The advantage defaults to RPG's estimator, R_i - group mean: TRL's `scale_rewards="none"` computes exactly that
    (`"group"` gives GRPO's mean/std).
  - Clip range: TRL's `epsilon` / `epsilon_high`, default 0.2 / 0.28 here (the paper's; TRL's `epsilon_high`
    defaults to `epsilon`, which `epsilon_high=None`, or `--epsilon_high none`, still gives), and the dual clip's
    `c` as `clip_ratio_c`, an RPGConfig field named after verl's (GRPOConfig has none).
  - Aggregation: `agg` with the global count as normaliser (token-mean: the generation batch's token count per
    process, as TRL's `dapo` loss; seq-mean-*: the accumulation window's sequence count), so gradient accumulation
    and data parallelism do not change the gradient.

TRL options that act inside GRPO's `_compute_loss` (entropy bonus, entropy masking, off-policy masking, two-sided
`delta` clipping, sequence-level importance sampling) are refused rather than silently ignored; so are sampling
filters (top-k, top-p, min-p, repetition penalty, distribution-changing `generation_kwargs`) unless vLLM's
importance-sampling correction accounts for them: TRL's pi_old log-probs see the temperature only, and RPG's anchor
and importance weights need the sampler's. vLLM's importance-sampling correction multiplies the per-token loss, as
TRL does. A Mixture-of-Experts model's router load-balancing loss is added as GRPOTrainer adds it. An infinite
reward is refused in one line naming its function (TRL would make it an advantage of +-3.4e38), and so is a NaN one
(TRL reads NaN as None, "does not apply"; None keeps that meaning).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import is_async_callable

from rpgrl.integrations._common import rpg_loss_nonempty
from rpgrl.objectives.reduce import aggregate
from rpgrl.options import OptionError, RPGOptions, none_word, rpg_field

# Inputs GRPOTrainer may hand to the model forward besides ids and mask (multimodal models).
_FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


@dataclass
class RPGConfig(GRPOConfig):
    """GRPOConfig plus the RPG loss options (`rpgrl.options.RPGOptions`, whose names, defaults and checks they take;
    `rpg_beta` where TRL's `beta` would clash; the clip range as TRL's `epsilon`/`epsilon_high`; `c` as
    `clip_ratio_c`, verl's name for it). Defaults:
    RPG-REINFORCE-URKL with RPG-Style Clip, beta 1e-4, clip 0.2/0.28, c = 10, token-mean, group-mean advantage (the
    paper's settings)."""

    divergence: str = rpg_field("divergence")
    style: str = rpg_field("style")
    rpg_beta: float = rpg_field("beta", help="RPG's KL coefficient, applied inside the loss (TRL's `beta` stays 0).")
    level: str = rpg_field("level")
    agg: str = rpg_field("agg")
    clip: str | None = rpg_field("clip")
    clip_ratio_c: float = rpg_field("c")
    branch: str = rpg_field("branch")
    kl_in_clip: bool = rpg_field("kl_in_clip")
    analogue: str = rpg_field("analogue")
    # str: HfArgumentParser then passes `--max_log_w none` (the documented "none = off") and numbers as words,
    # read in __post_init__ as epsilon_high is
    kl_value_clamp: float | str | None = rpg_field("kl_value_clamp")
    max_log_w: float | str | None = rpg_field("max_log_w")
    # GRPOConfig fields with RPG defaults
    scale_rewards: str = field(
        default="none", metadata={"help": "'none': A = R - group mean (RPG's estimator); 'group': GRPO's."}
    )
    epsilon_high: float | str | None = field(
        default=0.28,
        metadata={
            "help": "Upper clip range: 0.28 by default (the paper's), where GRPOConfig's default follows `epsilon`; "
            "None (`--epsilon_high none`) follows `epsilon` as in TRL."
        },
    )  # str: HfArgumentParser then passes `--epsilon_high none` and numbers as words, read in __post_init__

    def __post_init__(self):
        for name in ("epsilon_high", "kl_value_clamp", "max_log_w"):
            setattr(self, name, _float_or_none(name, getattr(self, name)))
        super().__post_init__()
        _check_trl_values(self)
        self.clip = none_word(self.clip)  # `--clip none` on TRL's command line
        if self.beta != 0.0:
            raise ValueError(
                f"RPGConfig: beta={self.beta} would load a reference model for TRL's own KL; RPG's KL is anchored to "
                "pi_old and applied by the loss: set rpg_beta instead and leave beta=0.0"
            )
        try:
            options = self.options().check()
        except OptionError as e:
            raise ValueError(f"RPGConfig: {_TRL_NAMES.get(e.option, e.option)}: {e}") from None
        # epsilon_high None (TRL's default) follows epsilon: not a clip range the user set, whatever epsilon is
        idle = [k for k in options.unused() if not (k == "eps_high" and self.epsilon_high is None)]
        if idle:  # as `rpgrl train` and verl refuse them: a user who sets one expects an effect
            more = f" (also unused: {', '.join(_TRL_NAMES.get(k, k) for k in idle[1:])})" if len(idle) > 1 else ""
            name = _TRL_NAMES.get(idle[0], idle[0])
            raise ValueError(f"RPGConfig: {name}: {options.applies(idle[0], name)}: leave it at its default{more}")
        unsupported = {
            "entropy_coef": self.entropy_coef != 0.0 or self.use_adaptive_entropy,
            "top_entropy_quantile": self.top_entropy_quantile < 1.0,
            "off_policy_mask_threshold": self.off_policy_mask_threshold is not None,
            "delta": self.delta is not None,
            "importance_sampling_level": self.importance_sampling_level != "token",
            "sync_ref_model": self.sync_ref_model,
            "loss_type": self.loss_type != "dapo",  # the normalisation is RPGConfig.agg's
        }
        if any(unsupported.values()):
            names = ", ".join(k for k, v in unsupported.items() if v)
            raise ValueError(f"RPGConfig: {names} act inside GRPO's loss, which RPGTrainer replaces; leave at default")
        corrected = self.use_vllm and self.vllm_importance_sampling_correction
        filters = _sampling_filters(self)
        if filters and not corrected:
            raise ValueError(
                f"RPGConfig: {', '.join(filters)} change the distribution completions are drawn from, while TRL's "
                "log-probs of pi_old see the temperature only, so RPG's anchor and importance weights would be "
                "another policy's: leave them at default, or generate with use_vllm and "
                "vllm_importance_sampling_correction=True, which corrects for the sampler"
            )
        if self.multi_objective_aggregation != "sum_then_normalize" and self.scale_rewards == "none":
            raise ValueError(
                f"RPGConfig: multi_objective_aggregation={self.multi_objective_aggregation} divides by reward "
                "standard deviations whatever scale_rewards says, so the advantage would not be RPG's R - group "
                "mean: use sum_then_normalize"
            )
        if corrected and self.level == "sequence":
            if self.style == "differentiable":
                raise ValueError(
                    "RPGConfig: style=differentiable at level=sequence has no per-token loss to apply vLLM's "
                    "importance-sampling correction to; set vllm_importance_sampling_correction=False"
                )

    def options(self) -> RPGOptions:
        """The RPG options this config sets (TRL's clip range included)."""
        eps_high = self.epsilon if self.epsilon_high is None else self.epsilon_high
        shared = [f.name for f in dataclasses.fields(RPGOptions) if f.name not in _TRL_NAMES]
        mine = {name: getattr(self, name) for name in shared}
        return RPGOptions(**mine, beta=self.rpg_beta, c=self.clip_ratio_c, eps_low=self.epsilon, eps_high=eps_high)

    def rpg_options(self) -> dict[str, Any]:
        """The keyword arguments of `rpg_loss` this config sets."""
        return self.options().kwargs()


# RPGOptions field -> RPGConfig field where the names differ
_TRL_NAMES = {"beta": "rpg_beta", "c": "clip_ratio_c", "eps_low": "epsilon", "eps_high": "epsilon_high"}

# GRPOConfig's sampling settings and generation_kwargs keys that change the distribution completions are drawn from,
# each with the values that leave it as it is
_SAMPLING_NEUTRAL = {
    "top_k": (0, -1, None),  # -1: vLLM's "off"
    "top_p": (1.0, None),
    "min_p": (0.0, None),
    "typical_p": (1.0, None),
    "repetition_penalty": (1.0, None),
    "do_sample": (True, None),
    "num_beams": (1, None),
}
# generation_kwargs keys that leave the distribution as it is: length limits, stop strings, special ids, caching,
# seeds, detokenisation (transformers' GenerationConfig and vLLM's SamplingParams)
_GENERATION_NEUTRAL = frozenset(
    {"max_new_tokens", "max_length", "max_time", "stop_strings", "eos_token_id", "pad_token_id", "bos_token_id",
     "cache_implementation", "cache_config", "use_cache", "disable_compile", "compile_config", "stop",
     "stop_token_ids", "seed", "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
     "detokenize", "logprobs", "prompt_logprobs", "max_tokens"}
)  # fmt: skip


def _sampling_filters(config: RPGConfig) -> list[str]:
    """The settings of `config` that make TRL sample from something other than softmax(logits / temperature)."""
    found = [
        k for k in ("top_k", "top_p", "min_p", "repetition_penalty") if getattr(config, k) not in _SAMPLING_NEUTRAL[k]
    ]
    if getattr(config, "vllm_structured_outputs_regex", None) is not None:  # the regex masks tokens
        found.append("vllm_structured_outputs_regex")
    for key, value in (config.generation_kwargs or {}).items():
        if key == "temperature":
            neutral = value == config.temperature
        elif key in _SAMPLING_NEUTRAL:
            neutral = value in _SAMPLING_NEUTRAL[key]
        else:
            neutral = key in _GENERATION_NEUTRAL
        if not neutral:
            found.append(f"generation_kwargs[{key!r}]")
    return found


def _check_trl_values(config: RPGConfig) -> None:
    """Values GRPOConfig takes that RPGTrainer would not train with: `num_iterations` below 1 trained nothing (no
    step, exit 0), an unknown `scale_rewards` failed only after the model was loaded and a batch generated, and a
    NaN reward weight made every reward 0 (TRL's nansum; nothing trained) and an infinite one an advantage of
    +-3.4e38."""
    n = config.num_iterations
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"RPGConfig: num_iterations must be an integer >= 1 (updates per generated batch), got {n!r}")
    bad = [w for w in config.reward_weights or [] if not (isinstance(w, (int, float)) and math.isfinite(w))]
    if bad:
        raise ValueError(f"RPGConfig: reward_weights must be finite numbers, got {bad[0]!r}")
    if config.scale_rewards not in ("none", "group", "batch"):
        raise ValueError(
            f"RPGConfig: scale_rewards must be 'none' (RPG's R - group mean), 'group' or 'batch', got "
            f"{config.scale_rewards!r}"
        )


def _is_nan(value: Any) -> bool:
    """Whether a reward function's value is a float NaN (Python, numpy or a one-element tensor); anything else,
    None included, is left to TRL."""
    if value is None or isinstance(value, (str, bytes)):
        return False
    try:
        return math.isnan(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return False


def _watch_nans(func: Any, col: int, name: str, trainer: RPGTrainer) -> Any:
    """`func`, sync or async as it is (TRL asks `is_async_callable`), marking where its rewards are float NaN in
    column `col` of `trainer._reward_nans` before TRL turns its Nones into NaNs too. Its outputs pass unchanged
    (an iterable as a list, which TRL makes of it anyway)."""

    def mark(rewards: Any) -> Any:
        marks = trainer._reward_nans
        try:
            rewards = list(rewards)
        except TypeError:  # TRL names what is wrong with it
            return rewards
        if marks is not None:
            for row, value in enumerate(rewards[: marks.size(0)]):
                marks[row, col] = _is_nan(value)
        return rewards

    if is_async_callable(func):

        async def watched(*args: Any, **kwargs: Any) -> Any:
            return mark(await func(*args, **kwargs))

    else:

        def watched(*args: Any, **kwargs: Any) -> Any:
            return mark(func(*args, **kwargs))

    functools.update_wrapper(watched, func, updated=())
    watched.__name__ = name  # TRL's name for it (a partial or a callable object has no __name__ of its own)
    return watched


def _float_or_none(name: str, value: Any) -> float | None:
    """A float or None from a config value or its command-line word ('none', '0.3')."""
    value = none_word(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"RPGConfig: {name} must be a number or none, got {value!r}") from None
    return value


class RPGTrainer(GRPOTrainer):
    """GRPOTrainer whose loss is `rpgrl.rpg_loss`. Takes the same arguments as GRPOTrainer; `args` must be an
    RPGConfig. Logs rpgrl's metrics (`kl/<divergence>`, `clip/frac_dual`, ...) next to TRL's."""

    def __init__(self, model: Any, reward_funcs: Any = None, args: RPGConfig | None = None, *rest: Any, **kwargs: Any):
        if not isinstance(args, RPGConfig):
            raise TypeError(f"RPGTrainer needs args=RPGConfig(...), got {type(args).__name__}")
        super().__init__(model, reward_funcs, args, *rest, **kwargs)
        # TRL turns a function's None into NaN before anything here sees it, so each function notes its own NaNs
        # (a new list: TRL's is the caller's); names, already taken by TRL, and sync/async stay the function's
        self._reward_nans: torch.Tensor | None = None
        self.reward_funcs = [
            f if isinstance(f, nn.Module) else _watch_nans(f, i, name, self)
            for i, (f, name) in enumerate(zip(self.reward_funcs, self.reward_func_names, strict=True))
        ]

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards (completions x reward functions, gathered over processes), refused in one line naming the
        function where one is infinite (a float32 reward past 3.4e38 is) or NaN, or naming the completion where
        their weighted sum (TRL's reward) is: TRL's advantage then turns it into +-3.4e38 (`nan_to_num`), which
        rpg_loss refused as an overflow of "a ratio, beta or an advantage". Every process sees the gathered rewards,
        and the gathered NaN marks, so all raise alike. None stays TRL's "not applicable"."""
        self._reward_nans = torch.zeros(len(prompts), len(self.reward_funcs), dtype=torch.uint8)
        try:
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            nans = self.accelerator.gather(self._reward_nans.to(rewards.device)).bool()
        finally:
            self._reward_nans = None
        for col, func in enumerate(self.reward_funcs):  # a reward model has no None: any NaN of it is refused
            if isinstance(func, nn.Module):
                nans[:, col] |= torch.isnan(rewards[:, col])
        self._refuse(nans, "NaN in all")
        self._refuse(torch.isinf(rewards), "infinite in all; a value past float32's range counts as inf", rewards)
        if self.multi_objective_aggregation == "sum_then_normalize":  # TRL's reward: the weighted sum, in float32
            total = (rewards.nan_to_num(0.0) * self.reward_weights.to(rewards.device)).sum(1)
            if not bool(torch.isfinite(total).all()):
                row = int((~torch.isfinite(total)).nonzero()[0, 0])
                raise ValueError(
                    f"RPGTrainer: the weighted sum of the rewards of completion {row} (reward_weights x rewards) "
                    "overflows float32: scale the rewards or reward_weights down"
                )
        return rewards

    def _refuse(self, bad: torch.Tensor, counted: str, rewards: torch.Tensor | None = None) -> None:
        """One line naming the reward function and the completion of the first `bad` reward, with its value from
        `rewards` (None: NaN, a function's marked by `_watch_nans` or a reward model's): TRL reads NaN as None, "does
        not apply", so a function whose every reward was NaN trained nothing with only TRL's warning. `bad` and
        `rewards` are gathered over processes."""
        if bool(bad.any()):
            row, col = bad.nonzero()[0].tolist()
            value = "NaN" if rewards is None else rewards[row, col].item()
            raise ValueError(
                f"RPGTrainer: reward function {self.reward_func_names[col]!r} gave {value} for "
                f"completion {row} of the generation batch ({int(bad.sum())} {counted}): rewards must be finite "
                "numbers, or None where the function does not apply"
            )

    def _normalizer(self, inputs: dict[str, Any], batch_size: int) -> torch.Tensor | float:
        """Global count for `aggregate` so that micro-batch losses add up over the accumulation window and DDP's
        gradient averaging over processes gives the mean over every process's tokens (or sequences)."""
        training = self.model.training
        if self.args.agg == "token-mean":
            # num_items_in_batch: valid completion tokens of the whole generation batch, all processes
            n = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if training:  # one accumulation window out of the generation batch
                n = n * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            return n
        return batch_size * (self.current_gradient_accumulation_steps if training else 1)

    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]  # (B, T)

        logp, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{k: inputs.get(k) for k in _FORWARD_KEYS},
        )  # (B, T)
        logp = logp.float()  # bf16 models: the loss works in float32
        old_logp = inputs.get("old_per_token_logps")  # pi_old; None when this batch is on-policy
        old_logp = logp.detach() if old_logp is None else old_logp.float()
        advantages = inputs["advantages"].to(logp.dtype)  # (B,) from TRL, or (B, T) from a subclass

        normalizer = self._normalizer(inputs, mask.size(0))
        # masked truncated completions (mask_truncated_completions) have no valid token and contribute nothing
        out = rpg_loss_nonempty(logp, old_logp, advantages, mask, normalizer=normalizer, **self.args.rpg_options())
        loss = out.loss
        if self.use_vllm and self.vllm_importance_sampling_correction:  # sampler (vLLM) vs trainer mismatch
            per_token = out.per_token * inputs["importance_sampling_ratio"]
            loss = aggregate(per_token, mask, self.args.agg, normalizer)

        mode = "train" if self.model.training else "eval"
        if self.aux_loss_enabled:  # MoE load balancing, outside RPG's objective: as GRPOTrainer adds it
            loss = loss + self.router_aux_loss_coef * aux_loss / (
                self.current_gradient_accumulation_steps if mode == "train" else 1.0
            )
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather(aux_loss.detach().reshape(1)).mean().item())
        for name, value in out.metrics.items():
            if not name.startswith("loss/"):  # TRL logs the loss itself
                self._metrics[mode][name].append(self.accelerator.gather(value.reshape(1)).nanmean().item())
        with torch.no_grad():
            m = mask.to(entropies.dtype)
            stats = self.accelerator.reduce(torch.stack([(entropies * m).sum(), m.sum()]), reduction="sum")
            self._metrics[mode]["entropy"].append((stats[0] / stats[1].clamp(min=1.0)).item())
        return loss
