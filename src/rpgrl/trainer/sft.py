"""Supervised warm start on worked solutions, and the accuracy measure used before and after RL.

`warm_start` trains on (prompt, solution + EOS) pairs with the loss on solution tokens only, checks held-out greedy
accuracy every `cfg.eval_every` steps, and stops as soon as it reaches `cfg.target_accuracy`: RL needs a weak but
not hopeless start (docs/cpu-default-notes.md: stopping at ~20% left the most room for RL; long SFT at a constant
2e-3 became unstable, hence the cosine decay).

Left out: packing, gradient accumulation, mixed precision (the warm start only runs on the tiny default model).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from rpgrl.errors import Diverged
from rpgrl.rewards import get_reward
from rpgrl.rollout import make_rollout, sample, token_logprobs
from rpgrl.trainer.device import clip_grad_norm, fusable, model_device
from rpgrl.trainer.scoring import correct_flags

if TYPE_CHECKING:
    from rpgrl.config import SFTConfig
    from rpgrl.rewards.synthetic import Problem


class WarmStartStopped(Exception):
    """Raised by `warm_start` when its `stop()` turns true: the warm start is left unfinished (nothing saved)."""


@dataclass
class SFTStats:
    """What the warm start did: optimizer `steps`, wall-clock `seconds`, held-out accuracies at the end (greedy and
    one temperature-1 sample per problem), whether the target was reached, and the periodic evaluations
    (`history`: dicts with `step`, `loss`, `greedy_acc`)."""

    steps: int
    seconds: float
    greedy_acc: float
    sampled_acc: float
    reached_target: bool
    history: list[dict[str, float]] = field(default_factory=list)


def encode_prompts(tokenizer, problems: Sequence[Problem]) -> list[list[int]]:
    """Prompt token ids as the model sees them (the tokenizer's special tokens, e.g. BOS, included)."""
    return tokenizer([p.prompt for p in problems])["input_ids"]


def accuracy(
    model,
    tokenizer,
    problems: Sequence[Problem],
    *,
    greedy: bool,
    n: int = 1,
    max_new_tokens: int = 48,
    temperature: float = 1.0,
    batch_size: int | None = 256,
    generator: torch.Generator | None = None,
    reward: str = "synthetic",
) -> float:
    """Fraction of correct responses over `problems` x `n` samples (greedy: one argmax response per problem).

    Correctness is the `correct` flag of the named reward (the training reward, so the metric cannot drift).
    The model is put in eval mode for sampling and returned to its previous mode.
    """
    if not problems:
        raise ValueError("accuracy: no problems")
    score = get_reward(reward)
    was_training = model.training
    model.eval()
    try:
        r = sample(
            model,
            tokenizer,
            encode_prompts(tokenizer, problems),
            n=1 if greedy else n,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            greedy=greedy,
            batch_size=batch_size,
            generator=generator,
        )
    finally:
        model.train(was_training)
    answers = [problems[int(g)].answer for g in r.group]
    return sum(correct_flags(score, reward, r.texts, answers)) / len(r)


def encode_targets(tokenizer, problems: Sequence[Problem]) -> list[list[int]]:
    """Solution token ids followed by EOS (the supervised target; no BOS)."""
    ids = tokenizer([p.solution for p in problems], add_special_tokens=False)["input_ids"]
    return [t + [tokenizer.eos_token_id] for t in ids]


def sft_loss(model, tokenizer, prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
             forward: str = "auto") -> torch.Tensor:  # fmt: skip
    """Token-mean negative log-likelihood of `targets` (solution + EOS) given `prompts`; prompt tokens carry no loss.

    Goes through `make_rollout` + `token_logprobs` (`forward` as there), the same left-padded layout and position
    ids as RL updates.
    """
    batch = make_rollout(tokenizer, prompts, targets, device=model_device(model))
    logp, _ = token_logprobs(model, batch, forward=forward)  # (B, T)
    return -(logp * batch.response_mask).sum() / batch.response_mask.sum()


def cosine_lr(step: int, *, peak: float, warmup: int, total: int, min_ratio: float) -> float:
    """Learning rate for 0-based `step`: linear warm-up over `warmup` steps, then cosine decay to peak x min_ratio
    at `total` steps."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def warm_start(
    model,
    tokenizer,
    train_problems: Sequence[Problem],
    val_problems: Sequence[Problem],
    cfg: SFTConfig,
    *,
    seed: int = 0,
    warmup_steps: int = 10,
    min_lr_ratio: float = 0.1,
    grad_clip: float = 1.0,
    max_new_tokens: int = 48,
    progress: bool = False,
    log: Callable[[int, dict[str, float]], None] | None = None,
    forward: str = "auto",
    stop: Callable[[], bool] | None = None,
) -> SFTStats:
    """Supervised fine-tuning of `model` in place until held-out greedy accuracy reaches `cfg.target_accuracy`.

    cfg: `max_steps`, `batch_size`, `lr` (peak; linear warm-up then cosine decay to lr x `min_lr_ratio` at
    `max_steps`), `eval_every`, `target_accuracy`. Loss: token-mean negative log-likelihood of the solution tokens
    and EOS (prompt tokens are context only). Batches are drawn without replacement, reshuffled each epoch
    (seeded). Greedy accuracy on `val_problems` is measured every `cfg.eval_every` steps and at the last step;
    `log(step, metrics)` receives `sft/loss`, `sft/lr` each step and `eval/greedy_acc` at evaluations.
    `forward`: the training forward of `rollout.token_logprobs` (auto, packed or transformers). `stop()`, asked before
    every step: true raises `WarmStartStopped` (a SIGTERM should not wait for the whole warm start).
    Returns SFTStats; the model is left in eval mode. A non-finite loss raises `Diverged`.
    """
    if cfg.max_steps < 0 or cfg.batch_size < 1 or cfg.eval_every < 1 or not cfg.lr > 0:
        raise ValueError(f"warm_start: bad config {cfg}")
    if not train_problems or not val_problems:
        raise ValueError("warm_start: needs training and held-out problems")
    t0 = time.perf_counter()
    prompts, targets = encode_prompts(tokenizer, train_problems), encode_targets(tokenizer, train_problems)
    gen = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0, fused=fusable(params))
    batches = _epochs(len(prompts), cfg.batch_size, gen)
    history, step, greedy_acc, reached = [], 0, float("nan"), False
    bar = _bar(progress, cfg.max_steps)
    while step < cfg.max_steps and not reached:
        if stop is not None and stop():
            raise WarmStartStopped(f"warm start stopped at step {step}")
        idx = next(batches)
        lr = cosine_lr(step, peak=cfg.lr, warmup=warmup_steps, total=cfg.max_steps, min_ratio=min_lr_ratio)
        loss = _sft_step(model, tokenizer, opt, [prompts[i] for i in idx], [targets[i] for i in idx], lr, grad_clip,
                         forward)  # fmt: skip
        step += 1
        if not math.isfinite(loss):  # the weights a NaN loss came from, or are left with after an inf, are broken
            raise Diverged(f"warm start step {step}: the loss is {loss}, the weights diverged (lower sft.lr, now "
                           f"{cfg.lr:g})")  # fmt: skip
        metrics = {"sft/loss": loss, "sft/lr": lr}
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            greedy_acc = accuracy(model, tokenizer, val_problems, greedy=True, max_new_tokens=max_new_tokens)
            history.append({"step": step, "loss": loss, "greedy_acc": greedy_acc})
            metrics["eval/greedy_acc"] = greedy_acc
            reached = greedy_acc >= cfg.target_accuracy
        if log is not None:
            log(step, metrics)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", acc=f"{greedy_acc:.2f}")
    if bar is not None:
        bar.close()
    model.eval()
    if step == 0 or math.isnan(greedy_acc):
        greedy_acc = accuracy(model, tokenizer, val_problems, greedy=True, max_new_tokens=max_new_tokens)
    if model_device(model).type != "cpu":  # sampling draws on the model's device; the data order stays on the CPU
        gen = torch.Generator(device=model_device(model)).manual_seed(seed)
    sampled_acc = accuracy(model, tokenizer, val_problems, greedy=False, max_new_tokens=max_new_tokens, generator=gen)
    return SFTStats(
        steps=step,
        seconds=time.perf_counter() - t0,
        greedy_acc=greedy_acc,
        sampled_acc=sampled_acc,
        reached_target=greedy_acc >= cfg.target_accuracy,
        history=history,
    )


def _epochs(n: int, batch_size: int, gen: torch.Generator) -> Iterator[list[int]]:
    """Index batches drawn without replacement, reshuffled (with `gen`) at each epoch; a partial tail is skipped.
    The first epoch's order is drawn now, before any batch is asked for (`gen` goes on to seed sampling)."""
    first = torch.randperm(n, generator=gen).tolist()

    def batches() -> Iterator[list[int]]:
        order, cursor = first, 0
        while True:
            if cursor + batch_size > len(order):  # new epoch
                order, cursor = torch.randperm(n, generator=gen).tolist(), 0
            yield order[cursor : cursor + batch_size]
            cursor += batch_size

    return batches()


def _sft_step(model, tokenizer, opt, prompts, targets, lr: float, grad_clip: float, forward: str = "auto") -> float:
    """One AdamW step on the NLL of `targets` given `prompts` at learning rate `lr`; returns the loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    model.train()
    loss = sft_loss(model, tokenizer, prompts, targets, forward)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        clip_grad_norm(list(model.parameters()), grad_clip)
    opt.step()
    return loss.item()


def _bar(enabled: bool, total: int):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="warm start", unit="step")
