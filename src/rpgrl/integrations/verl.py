"""verl plug-in: every RPG variant as a verl policy-loss mode, and the `rpg` advantage estimator verl lacks.

Registered names (a public contract; `LOSS_MODES` below):

    actor_rollout_ref.actor.policy_loss.loss_mode = rpg_<divergence>_<style>
        divergence in fkl, rkl, ufkl, urkl; style in differentiable, reinforce   (e.g. rpg_urkl_reinforce)
    algorithm.adv_estimator = rpg          A_i = R_i - mean of R over the prompt's group (spec 5.1)

Loading. verl >= 0.9.1 imports every entry point of the group `verl.plugins` at the end of `verl/__init__.py`
(`VERL_USE_EXTERNAL_PLUGINS=auto`, the default; `none` disables it, a comma list selects names). rpgrl declares
`rpgrl = "rpgrl.integrations.verl"` in that group, so `import verl` in the driver and in every Ray worker registers
the names below. verl swallows a failing plug-in import (logged at DEBUG), which then shows up as "Unsupported loss
mode"; `import rpgrl.integrations.verl` directly shows the real error.

Configuration. verl calls a policy loss as `fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
config, rollout_is_weights)` with `config` the actor config (`verl.workers.config.ActorConfig`):
  - clip parameters are verl's own: eps_low = clip_ratio_low, eps_high = clip_ratio_high (each falling back to
    clip_ratio), c = clip_ratio_c;
  - RPG's own settings live in the policy_loss sub-config. verl builds it with Hydra `instantiate` from its
    `_target_`, and a plain `PolicyLossConfig` rejects unknown keys, so point `_target_` at `RPGPolicyLossConfig`
    (below) and add its fields with `+`:
        actor_rollout_ref.actor.policy_loss._target_=rpgrl.integrations.verl.RPGPolicyLossConfig
        actor_rollout_ref.actor.policy_loss.loss_mode=rpg_urkl_reinforce
        +actor_rollout_ref.actor.policy_loss.beta=1e-4
        +actor_rollout_ref.actor.policy_loss.clip=dual
    The fields are validated when verl builds the actor config (in the driver's `validate_config`, before Ray
    starts); a misspelt key fails there, in one line naming the key (`RPGConfigError`; Hydra's own wrapping took
    three).
  - verl's own KL loss (`actor.use_kl_loss`, computed against a reference worker) must be off: RPG's KL is inside
    the loss and its anchor is pi_old (`old_log_prob`). The loss refuses a config with both, on its first call.
    `algorithm.use_kl_in_reward` is a reward-side penalty that the actor cannot see; leave it False as well.
  - pi_old must be the sampler: verl's actor recomputes `old_log_prob` with the rollout temperature but without
    the rollout's top-p / top-k, so keep `rollout.top_p=1`, `rollout.top_k=-1`, or let verl's rollout correction
    account for the sampler (bypass mode or token-level IS weights). The plug-in sees only the actor config and
    cannot check this.

Aggregation. `rpg_loss` gives the per-token loss; it is reduced with verl's `agg_loss(..., loss_agg_mode,
**config.global_batch_info)`, so the global token/sequence count and the data-parallel scaling stay verl's, and
every verl `loss_agg_mode` works. `rollout_is_weights` (verl's rollout correction) multiply the per-token loss, as
in verl's own losses. The one variant without a per-token form (style=differentiable at level=sequence) is reduced
by `rpg_loss` itself with the same normaliser agg_loss uses (global count / dp_size); it supports the three
shared modes and no rollout weights.

Precision. With verl's default mixed precision (param_dtype=bf16) and no flash-attn cross-entropy, `log_prob` arrives
in bfloat16. The loss upcasts half-precision inputs to float32 at this boundary (the gradient flows back through
the cast) and then reports `actor/logp_upcast` = 1; `rpg_loss` itself still refuses half precision.

Metrics are returned as detached 0-dim tensors under `actor/<rpgrl name>` (`actor/kl/urkl`, `actor/clip/frac_dual`,
...); verl converts them and averages them over micro-batches. The loss itself is logged by verl as actor/pg_loss.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from hydra.errors import InstantiationException
from omegaconf import MISSING
from verl.models.transformers import monkey_patch as _verl_monkey_patch
from verl.trainer.ppo.core_algos import agg_loss, register_adv_est, register_policy_loss
from verl.utils import config as _verl_config
from verl.utils import import_utils as _verl_import_utils
from verl.workers.config import PolicyLossConfig

from rpgrl.advantages import get_advantage
from rpgrl.integrations._common import rpg_loss_nonempty
from rpgrl.options import AGG_MODES, DIVERGENCES, STYLES, OptionError, RPGOptions, none_word, rpg_field

_HALF = (torch.float16, torch.bfloat16)
LOSS_MODES = tuple(f"rpg_{d}_{s}" for d in DIVERGENCES for s in STYLES)


@dataclass
class RPGPolicyLossConfig(PolicyLossConfig):
    """verl's policy_loss sub-config plus RPG's settings (passed to `rpgrl.rpg_loss` under the same names).

    `beta` and `clip` have no default on purpose: an RPG run states its KL coefficient and whether it clips.
    """

    beta: float = MISSING
    """KL coefficient (the paper: 1e-4)"""
    clip: str | None = MISSING
    """'dual' (RPG-Style Clip, Alg. 1/2), 'truncate' (truncated importance weights, reinforce only) or null"""
    level: str = rpg_field("level")
    branch: str = rpg_field("branch")
    kl_in_clip: bool = rpg_field("kl_in_clip")
    analogue: str = rpg_field("analogue")
    kl_value_clamp: float | None = rpg_field("kl_value_clamp")
    max_log_w: float | None = rpg_field("max_log_w")

    def __post_init__(self):
        for name in ("clip", "kl_value_clamp", "max_log_w"):  # Hydra passes `clip=None` as the string 'None'
            object.__setattr__(self, name, none_word(getattr(self, name)))
        if self.beta == MISSING or self.clip == MISSING:
            raise ValueError(
                "RPGPolicyLossConfig needs beta and clip: add +actor_rollout_ref.actor.policy_loss.beta=<float> and "
                "+actor_rollout_ref.actor.policy_loss.clip=<dual|truncate|null>"
            )
        mode = getattr(self, "loss_mode", None)
        if isinstance(mode, str) and mode not in LOSS_MODES:  # verl's own loss would run, without these settings
            raise ValueError(
                f"RPGPolicyLossConfig's settings (beta, clip, ...) are read by the rpg_* loss modes only, not "
                f"loss_mode {mode}: set actor_rollout_ref.actor.policy_loss.loss_mode to one of {', '.join(LOSS_MODES)}"
            )
        try:
            options = RPGOptions(**self.rpg_options())
            if mode in LOSS_MODES:  # the mode names the divergence and style: the rules tying options together too
                _, divergence, style = mode.split("_")
                options = dataclasses.replace(options, divergence=divergence, style=style).check()
                idle = options.unused()
                if idle:  # refused as `rpgrl train` refuses them: a user who sets one expects an effect
                    more = f" (also unused: {', '.join(idle[1:])})" if len(idle) > 1 else ""
                    raise OptionError(idle[0], f"{options.applies(idle[0])}: drop it, from the run script "
                                               f"too{more}")  # fmt: skip
            else:  # the mode is set elsewhere: the cross-option rules wait for the first call
                options.check_values()
        except OptionError as e:
            raise ValueError(f"policy_loss.{e.option} with loss_mode {mode}: {e}") from None

    def rpg_options(self) -> dict[str, Any]:
        """The keyword arguments of `rpg_loss` this config sets (the clip range and c come from verl's actor)."""
        return {name: getattr(self, name) for name in _OWN}


# The RPGOptions fields set in policy_loss (divergence and style come from the mode name, the clip range from verl)
_OWN = ("beta", "clip", "level", "branch", "kl_in_clip", "analogue", "kl_value_clamp", "max_log_w")


def _options(config: Any, mode: str) -> dict[str, Any]:
    """rpg_loss keyword arguments from verl's actor config, refusing what cannot work together."""
    if config is None:
        raise ValueError(f"policy loss {mode} needs verl's actor config")
    if config.get("use_kl_loss", False):
        raise ValueError(
            f"policy loss {mode} applies the KL itself (anchor pi_old); set actor_rollout_ref.actor.use_kl_loss=False "
            "so verl does not add its own KL loss on top"
        )
    policy_loss = config.policy_loss
    if not isinstance(policy_loss, RPGPolicyLossConfig):
        raise ValueError(
            f"policy loss {mode} reads its settings from actor.policy_loss: set "
            "actor_rollout_ref.actor.policy_loss._target_=rpgrl.integrations.verl.RPGPolicyLossConfig "
            "and add +actor_rollout_ref.actor.policy_loss.beta=... and .clip=..."
        )
    clip_ratio = config.clip_ratio
    low, high = config.get("clip_ratio_low"), config.get("clip_ratio_high")
    opts = {
        **policy_loss.rpg_options(),
        "eps_low": clip_ratio if low is None else low,
        "eps_high": clip_ratio if high is None else high,
        "c": config.get("clip_ratio_c", 3.0),  # verl's default when unset
    }
    keys = {"eps_low": "clip_ratio_low" if low is not None else "clip_ratio",
            "eps_high": "clip_ratio_high" if high is not None else "clip_ratio", "c": "clip_ratio_c"}  # fmt: skip
    try:
        RPGOptions(**opts).check_values()
    except OptionError as e:  # verl's names for the clip settings, which it holds in the actor config
        where = f"actor_rollout_ref.actor.{keys[e.option]}" if e.option in keys else f"policy_loss.{e.option}"
        raise ValueError(f"policy loss {mode}: {where}: {e}") from None
    return opts


def _normalizer(agg: str, batch: dict[str, Any]) -> float | torch.Tensor | None:
    """The `normalizer` that makes `rpgrl.aggregate` equal verl's `agg_loss` for the three shared modes:
    agg_loss divides by the global count and multiplies by dp_size (DDP averages gradients over ranks)."""
    dp_size = batch.get("dp_size") or 1
    count = batch.get("batch_num_tokens") if agg == "token-mean" else batch.get("global_batch_size")
    if count is None:
        if dp_size > 1:
            raise ValueError(f"loss_agg_mode {agg} with dp_size {dp_size} needs the global count in global_batch_info")
        return None
    return count / dp_size


def _sequence_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's (B, T) outcome advantages -> (B,): the value each response carries on its tokens. (B, T) -> (B,)"""
    m, on = mask.to(advantages.dtype), mask.bool()
    per_seq = torch.where(on, advantages, 0.0).sum(-1) / m.sum(-1).clamp(min=1)  # (B,); padding may hold anything
    spread = torch.where(on, (advantages - per_seq[:, None]).abs(), 0.0).amax()
    if spread > 1e-6 * (1 + per_seq.abs().amax()):
        raise ValueError(
            "level=sequence needs one advantage per response, but verl's advantages vary along the response "
            f"(max deviation {spread.item():.3g}); use an outcome estimator (rpg, grpo, rloo) or level=token"
        )
    return per_seq


def _make_policy_loss(divergence: str, style: str):
    mode = f"rpg_{divergence}_{style}"

    def policy_loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        opts = _options(config, mode)
        batch = dict(config.global_batch_info or {})
        upcast = log_prob.dtype in _HALF  # verl's mixed precision hands bf16 log-probs; rpg_loss refuses them
        log_prob, old_log_prob, advantages = (
            x.float() if x.dtype in _HALF else x for x in (log_prob, old_log_prob, advantages)
        )
        if rollout_is_weights is not None and rollout_is_weights.dtype in _HALF:
            rollout_is_weights = rollout_is_weights.float()
        shared = loss_agg_mode in AGG_MODES
        if opts["level"] == "sequence" and advantages.dim() == 2:
            advantages = _sequence_advantages(advantages, response_mask)
        out = rpg_loss_nonempty(  # responses with no valid token contribute nothing
            log_prob,  # (B, T), verl's log_prob = our logp
            old_log_prob,  # (B, T), pi_old: the sampler and the KL anchor
            advantages,  # (B, T) from verl's estimators, or (B,) at sequence level
            response_mask,
            divergence=divergence,
            style=style,
            agg=loss_agg_mode if shared else "token-mean",
            normalizer=_normalizer(loss_agg_mode, batch) if shared else None,
            empty_metric=0.0,  # an all-masked micro-batch: as verl's own losses report it (masked means of nothing)
            **opts,
        )
        if out.per_token is not None and not bool(response_mask.bool().any()):
            loss = out.per_token.sum()  # 0 with a zero gradient; agg_loss without global counts divides 0 by 0
        elif out.per_token is not None:
            per_token = out.per_token if rollout_is_weights is None else out.per_token * rollout_is_weights
            loss = agg_loss(loss_mat=per_token, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch)
        elif not shared or rollout_is_weights is not None:
            raise ValueError(
                f"{mode} at level=sequence has no per-token loss, so it supports loss_agg_mode in {AGG_MODES} and no "
                f"rollout correction weights (got loss_agg_mode={loss_agg_mode!r}, "
                f"rollout_is_weights={'set' if rollout_is_weights is not None else 'None'})"
            )
        else:
            loss = out.loss  # aggregated by rpg_loss with agg_loss's normaliser (see _normalizer)
        # verl logs the loss itself (actor/pg_loss); rpgrl's loss/* values would be averaged over micro-batches.
        metrics = {f"actor/{k}": v for k, v in out.metrics.items() if not k.startswith("loss/")}
        if upcast:
            metrics["actor/logp_upcast"] = torch.ones((), device=loss.device)
        return loss, metrics

    policy_loss.__name__ = policy_loss.__qualname__ = f"compute_policy_loss_{mode}"
    policy_loss.__doc__ = (
        f"verl policy loss `{mode}`: `rpgrl.rpg_loss(divergence={divergence!r}, style={style!r})` with verl's clip "
        "parameters and `RPGPolicyLossConfig` options, reduced by verl's agg_loss. Shapes: (B, T) tensors."
    )
    return policy_loss


def _trl_has_value_head() -> bool:
    """True when verl's trl patch can find its class (trl.experimental.ppo or trl, as verl looks it up)."""
    try:
        from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401
    except ImportError:
        try:
            from trl import AutoModelForCausalLMWithValueHead  # noqa: F401
        except ImportError:
            return False
    return True


# Guard (issue 16). verl's apply_monkey_patch, run when its FSDP engine builds the actor, patches trl's
# AutoModelForCausalLMWithValueHead whenever trl is importable; trl >= 1.14 no longer has the class, so with rpgrl's
# trl extra (trl >= 1.16) every actor build fails with ImportError. Its trl check gets a stricter test: "is the
# class there", evaluated when the actor is built. Only verl's own function is replaced, so a verl that fixes this
# keeps its fix.
if getattr(_verl_monkey_patch, "is_trl_available", None) is _verl_import_utils.is_trl_available:
    _verl_monkey_patch.is_trl_available = _trl_has_value_head


class RPGConfigError(InstantiationException):
    """A refused `RPGPolicyLossConfig`, in one line. Hydra's `instantiate` wraps the refusal as "Error in call to
    target ...:\nValueError('...')\nfull_key: ...", which verl's driver prints as is; still an
    InstantiationException for whoever catches that."""


_TARGET = f"{__name__}.{RPGPolicyLossConfig.__name__}"
_UNKNOWN_KEY = re.compile(r"unexpected keyword argument '([^']+)'")


def _one_line(error: Exception, full_key: str) -> str:
    """The refusal `error` raised while Hydra built the config at `full_key`, as one line."""
    unknown = _UNKNOWN_KEY.search(str(error)) if isinstance(error, TypeError) else None
    if unknown:
        return (f"{full_key}.{unknown.group(1)} is not a setting of RPGPolicyLossConfig (RPG's: {', '.join(_OWN)}; "
                "the others are verl's PolicyLossConfig's)")  # fmt: skip
    text = " ".join(str(error).split())  # RPGPolicyLossConfig's own refusals start "policy_loss.<key>"
    return f"{full_key.removesuffix('policy_loss')}{text}" if text.startswith("policy_loss.") else text


def _rpg_errors_in_one_line(build):
    """verl's `omega_conf_to_dataclass` with Hydra's wrapping of RPGPolicyLossConfig's refusals undone."""

    @functools.wraps(build)
    def omega_conf_to_dataclass(*args: Any, **kwargs: Any) -> Any:
        try:
            return build(*args, **kwargs)
        except InstantiationException as e:
            lines = str(e).split("\n")
            first, last = lines[0], lines[-1]
            if e.__cause__ is None or f"'{_TARGET}'" not in first or isinstance(e, RPGConfigError):
                raise
            full_key = last.removeprefix("full_key: ") if last.startswith("full_key: ") else "policy_loss"
            raise RPGConfigError(_one_line(e.__cause__, full_key)) from e.__cause__

    omega_conf_to_dataclass.rpgrl_one_line = True
    return omega_conf_to_dataclass


# verl's driver builds the actor config with `omega_conf_to_dataclass` (in `validate_config`, looked up in its module
# when called): its Hydra errors about RPGPolicyLossConfig become one line. Replaced once, and only verl's function;
# a verl without it (renamed or moved) keeps its own messages, and the plug-in works as before.
_build = getattr(_verl_config, "omega_conf_to_dataclass", None)
if callable(_build) and not getattr(_build, "rpgrl_one_line", False):
    _verl_config.omega_conf_to_dataclass = _rpg_errors_in_one_line(_build)


for _d in DIVERGENCES:
    for _s in STYLES:
        register_policy_loss(f"rpg_{_d}_{_s}")(_make_policy_loss(_d, _s))


@register_adv_est("rpg")
def compute_rpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RPG's advantage, `rpgrl.advantages` estimator `rpg`: A_i = R_i - mean of R over the responses sharing the
    prompt uid (`index`); a group of one gets mean 0 (spec 5.1). Equals verl's grpo with
    norm_adv_by_std_in_grpo=False for single-turn rollouts (for multi-output agent sessions verl's v1 trainer
    groups grpo by each session's last output, which this estimator does not). Shapes: token_level_rewards,
    response_mask (B, T); index (B,) uids.
    Returns (advantages, returns), both (B, T), zero on padding."""
    rewards = token_level_rewards.sum(-1)  # (B,) outcome reward R_i
    _, group = np.unique(np.asarray(index), return_inverse=True)
    group = torch.as_tensor(group.reshape(-1), dtype=torch.long, device=rewards.device)  # (B,)
    mask = response_mask.to(rewards.dtype)
    adv = get_advantage("rpg")(rewards, group, mask)
    adv = (adv[:, None] if adv.dim() == 1 else adv) * mask  # (B, T)
    return adv, adv
