"""The paper's claims as experiments: which arms (configs) each runs, and which comparisons decide its verdict.

Every arm is the embedded default's off-policy regime (synthetic task, tiny model, warm start, 32 prompts x 8
responses per step, 8 optimizer steps per rollout batch, lr 3.5e-5) with one algorithm swapped in. A method's
algorithm comes from its preset in `rpgrl.presets` (loss, advantage, KL estimator and coefficient, clip range, KL
anchor, DAPO tricks), scaled to this task:
- every method runs the same number of steps with the same rollout batch, so the sample budget is equal. DAPO's
  dynamic sampling would regenerate until 32 mixed groups exist (more samples per step), so the families that use it
  get its filter without the regeneration (`group_filter=drop`, as the default); GRPO keeps no filter, as its
  scripts. Dropping groups also drops mini-batches (8 optimizer steps per batch become ~4-6), so the methods
  claim adds GRPO with the filter ('grpo-filtered') to tell the two apart;
- the overlong penalty (2048-token limit, 512-token buffer in the paper) becomes an 8-token buffer at the 48-token
  limit: a correct answer is at most 40 tokens, so only overlong responses are penalised;
- one learning rate for all (the paper states 1e-6 for every method; its RPG-REINFORCE scripts use 5e-7).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from rpgrl.config import Config
from rpgrl.presets import DEFAULT, DIVERGENCES, get_preset

OVERLONG_BUFFER = 8

ADVANTAGE = 0.03
"""the smallest held-out accuracy advantage (3 points) that reproduces a claim that one arm trains better: about one
standard error of a 300-problem accuracy near 50%, and below the paper's smallest reported gap for RPG (+4.7 points,
AIME25 at 2K); an interval wholly below it rules the claimed advantage out ("falls short")"""
ENTROPY_GAP = 0.02
"""the entropy difference (nats per token, about 15% of the default's late-training 0.13) that "very different"
entropies must exceed"""
LENGTH_SAME = 2.0
"""response lengths (tokens, of about 38) within which two arms' lengths count as similar"""


@dataclass(frozen=True)
class Scale:
    """How long and how large each run is. `updates`: optimizer steps per rollout batch (mini-batches)."""

    steps: int
    prompts: int
    group: int
    updates: int
    eval_every: int
    val_samples: int
    max_problems: int | None
    sft_steps: int


FULL = Scale(steps=40, prompts=32, group=8, updates=8, eval_every=10, val_samples=4, max_problems=None, sft_steps=300)
QUICK = Scale(steps=3, prompts=16, group=4, updates=8, eval_every=3, val_samples=2, max_problems=40, sft_steps=150)


def base_config(scale: Scale, threads: int = 1) -> Config:
    """The default's regime at `scale`, without the warm start (each run starts from its seed's cached one)."""
    d = DEFAULT
    return replace(
        d,
        rollout=replace(d.rollout, prompts_per_step=scale.prompts, group_size=scale.group),
        sft=replace(d.sft, max_steps=0),
        eval=replace(d.eval, every=scale.eval_every, val_samples=scale.val_samples, max_problems=scale.max_problems),
        train=replace(
            d.train, max_steps=scale.steps, mini_batch_prompts=scale.prompts // scale.updates, threads=threads,
            progress=False,
        ),
    )  # fmt: skip


def warm_start_config(scale: Scale, threads: int = 1) -> Config:
    """The default's supervised warm start alone (0 RL steps); its `model/` is where every arm of a seed starts."""
    d = DEFAULT
    return replace(
        d,
        sft=replace(d.sft, max_steps=scale.sft_steps),
        eval=replace(d.eval, max_problems=scale.max_problems),
        train=replace(d.train, max_steps=0, threads=threads, progress=False),
    )


def family(preset: str) -> Callable[[Config], Config]:
    """The preset's algorithm (loss, KL anchor, DAPO tricks) on a base config's model, data, batch and schedule."""
    p = get_preset(preset)

    def apply(base: Config) -> Config:
        rollout = replace(
            base.rollout,
            group_filter="off" if p.rollout.group_filter == "off" else "drop",
            overlong_buffer=OVERLONG_BUFFER if p.rollout.overlong_buffer else 0,
        )
        return replace(base, loss=p.loss, ref=replace(base.ref, mode=p.ref.mode), rollout=rollout)

    return apply


def then(first: Callable[[Config], Config], **changes: dict) -> Callable[[Config], Config]:
    """`first`, then `changes` as {section: {field: value}}."""

    def apply(base: Config) -> Config:
        cfg = first(base)
        for sec, fields in changes.items():
            cfg = replace(cfg, **{sec: replace(getattr(cfg, sec), **fields)})
        return cfg

    return apply


@dataclass(frozen=True)
class Arm:
    name: str
    build: Callable[[Config], Config]
    updates: int | None = None
    """optimizer steps per rollout batch, if not the scale's"""

    def config(self, base: Config) -> Config:
        cfg = self.build(base)
        if self.updates is not None:
            mb = cfg.rollout.prompts_per_step // self.updates
            cfg = replace(cfg, train=replace(cfg.train, mini_batch_prompts=mb))
        return cfg


Metric = Literal["final", "best", "sampled", "entropy", "reward", "length", "max_log_w", "collapsed"]
Expect = Literal["higher", "similar", "differs"]


@dataclass(frozen=True)
class Comparison:
    """What the paper leads one to expect of arm `a` against arm `b` on `metric` (paired by seed)."""

    a: str
    b: str
    metric: Metric
    expect: Expect
    margin: float = 0.0
    """in the metric's units: 'similar', the difference that still counts as the same (equivalence margin);
    'higher', the smallest advantage that reproduces the claim; 'differs', the difference to exceed"""


@dataclass(frozen=True)
class Claim:
    name: str
    title: str
    paper: str
    """what the paper claims, in one or two sentences, with where"""
    arms: tuple[Arm, ...]
    comparisons: tuple[Comparison, ...]
    columns: tuple[Metric, ...] = ("final", "best", "sampled", "entropy", "collapsed")
    caveat: str = ""
    """what the arms do not control for, printed under the verdict"""

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


RPG_RF_URKL = family("rpg-reinforce-urkl")
BASELINES = ("grpo", "dapo", "reinforce_pp", "reinforce_pp_baseline")


def _methods() -> Claim:
    names = [*BASELINES, *(f"rpg-{d}" for d in DIVERGENCES), *(f"rpg-reinforce-{d}" for d in DIVERGENCES)]
    return Claim(
        "methods",
        "RPG against GRPO, DAPO and REINFORCE++",
        "RPG's surrogates (RPG-Style Clip, KL to the previous policy) reach higher accuracy than GRPO, DAPO, "
        "REINFORCE++ and REINFORCE++-baseline (Tables 3, 5, 6, 8); the headline variant is RPG-REINFORCE-URKL "
        "(+6 points over DAPO on AIME25 at 4K).",
        # GRPO runs without a filter, as its scripts; with 'drop' a step has fewer mini-batches (only mixed groups
        # are split into them), so the filtered GRPO arm separates that from the algorithm
        (
            *(Arm(n, family(n)) for n in names),
            Arm("grpo-filtered", then(family("grpo"), rollout={"group_filter": "drop"})),
        ),
        tuple(Comparison("rpg-reinforce-urkl", b, "final", "higher", ADVANTAGE) for b in BASELINES),
        caveat="GRPO runs without a group filter, as its scripts, so each rollout batch takes all 8 optimizer "
        "steps, while the other methods' filter drops the groups whose responses all score alike and splits only "
        "the rest into mini-batches (about 4-6 steps per batch): rpg-reinforce-urkl against grpo compares the "
        "algorithms at unequal step counts; the grpo-filtered arm is GRPO with the filter, at the others' counts.",
    )


def _off_policy() -> Claim:
    clips = {"rpg-clip": "dual", "truncated-is": "truncate", "no-clip": None}
    arms = [
        Arm(f"{name} x{k}", then(RPG_RF_URKL, loss={"clip": clip}), updates=k)
        for name, clip in clips.items()
        for k in (1, 4, 16)
    ]
    arms += [Arm(f"grpo x{k}", family("grpo"), updates=k) for k in (1, 4, 16)]
    return Claim(
        "off-policy",
        "Off-policy stability: updates per rollout batch",
        "With several optimizer steps per rollout batch, RPG-Style Clip keeps RPG-REINFORCE stable and is the best "
        "clipping variant at scale (Sec. 4.1, App. G.2); without a clip, importance weights of a moving policy "
        "make the update high-variance.",
        tuple(arms),
        (
            Comparison("rpg-clip x16", "no-clip x16", "final", "higher", ADVANTAGE),
            Comparison("rpg-clip x16", "truncated-is x16", "final", "higher", ADVANTAGE),
            Comparison("rpg-clip x16", "grpo x16", "final", "higher", ADVANTAGE),
        ),
        columns=("final", "best", "sampled", "max_log_w", "collapsed"),
        caveat="The GRPO arms run without a group filter, as GRPO's scripts, so each of their rollout batches takes "
        "all k optimizer steps, while the RPG arms' filter drops the groups whose responses all score alike and "
        "splits only the rest into mini-batches: fewer than k steps per batch (the `methods` claim's grpo-filtered "
        "arm measures that difference). rpg-clip against grpo at x16 compares the algorithms at unequal step "
        "counts.",
    )


def _kl() -> Claim:
    anchors = ("behaviour", "periodic", "fixed")
    arms = [Arm("beta 0", then(RPG_RF_URKL, loss={"beta": 0.0}))]  # no KL term: the anchor plays no part
    arms += [
        Arm(f"beta {b:g} {a}", then(RPG_RF_URKL, loss={"beta": b}, ref={"mode": a}))
        for b in (1e-4, 1e-3, 1e-2)
        for a in anchors
    ]
    return Claim(
        "kl",
        "KL coefficient and anchor",
        "beta = 1e-4 trains better than 1e-3, and the iterative reference (anchor = the previous policy) better than "
        "no reference update ('noiterref') (Fig. 9, 4K context).",
        tuple(arms),
        (
            Comparison("beta 0.0001 behaviour", "beta 0.001 behaviour", "final", "higher", ADVANTAGE),
            Comparison("beta 0.0001 behaviour", "beta 0.0001 fixed", "final", "higher", ADVANTAGE),
        ),
        columns=("final", "best", "sampled", "entropy", "collapsed"),
    )


def _clip_range() -> Claim:
    return Claim(
        "clip-range",
        "Clip range (0.2, 0.28) against (0.1, 0.1)",
        "The two clip ranges give similar reward and response length but very different entropy (Fig. 8, 2K context).",
        (
            Arm("eps 0.2/0.28", RPG_RF_URKL),
            Arm("eps 0.1/0.1", then(RPG_RF_URKL, loss={"eps_low": 0.1, "eps_high": 0.1})),
        ),
        (
            Comparison("eps 0.2/0.28", "eps 0.1/0.1", "reward", "similar", margin=0.05),
            Comparison("eps 0.2/0.28", "eps 0.1/0.1", "length", "similar", margin=LENGTH_SAME),
            Comparison("eps 0.2/0.28", "eps 0.1/0.1", "entropy", "differs", margin=ENTROPY_GAP),
        ),
        columns=("final", "sampled", "reward", "length", "entropy", "collapsed"),
    )


def _level() -> Claim:
    return Claim(
        "token-vs-sequence",
        "Token-level against sequence-level importance weights",
        "The theory is stated for whole-response ratios; the released code, and so every reported number, uses "
        "per-token ratios (spec 1.4, 2.4), whose weights have far less variance. Expected: the per-token form "
        "trains better.",
        (
            Arm("token", RPG_RF_URKL),
            Arm("sequence", then(RPG_RF_URKL, loss={"level": "sequence"})),
        ),
        (Comparison("token", "sequence", "final", "higher", ADVANTAGE),),
        columns=("final", "best", "sampled", "max_log_w", "collapsed"),
    )


# in the order `all` runs them: the methods first, the small claims next, the largest grid last
CLAIMS: dict[str, Claim] = {c.name: c for c in (_methods(), _clip_range(), _level(), _kl(), _off_policy())}
