"""Supervised warm start: the loss against Hugging Face's labelled cross-entropy, the schedule by hand, accuracy and
early stopping on a tiny model that memorises four problems."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest
import torch
import torch.nn.functional as F

from rpgrl.models import build_char_tokenizer, build_tiny_model
from rpgrl.rewards.synthetic import CHARS, Problem, make_problems
from rpgrl.trainer.sft import accuracy, cosine_lr, encode_prompts, encode_targets, sft_loss, warm_start


@dataclass(frozen=True)
class Cfg:  # the fields warm_start reads from rpgrl.config.SFTConfig
    max_steps: int = 200
    batch_size: int = 8
    lr: float = 1e-2
    eval_every: int = 10
    target_accuracy: float = 1.0


@pytest.fixture()
def tok():
    return build_char_tokenizer(CHARS)


def tiny(tok, seed=0):
    return build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=seed)


def test_cosine_lr_by_hand():
    kw = dict(peak=1.0, warmup=4, total=24, min_ratio=0.1)
    assert [cosine_lr(s, **kw) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]  # linear warm-up, peak at step 3
    assert cosine_lr(4, **kw) == 1.0  # decay starts after the warm-up
    assert cosine_lr(14, **kw) == pytest.approx(0.55)  # halfway: (1 + 0.1) / 2
    assert cosine_lr(24, **kw) == pytest.approx(0.1) and cosine_lr(99, **kw) == pytest.approx(0.1)
    assert cosine_lr(9, **kw) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.25)))


def test_sft_loss_matches_labelled_cross_entropy(tok):
    """Reference: per-row unpadded full-logits forward, float64 cross-entropy with the prompt positions ignored
    (label -100), summed over rows / total target tokens."""
    model = tiny(tok).double()
    problems = make_problems(5, seed=0, split="train") + [Problem("Q:1+2\n", "3", "1+2+0=3\nAnswer: 3")]
    prompts, targets = encode_prompts(tok, problems), encode_targets(tok, problems)
    assert all(t[-1] == tok.eos_token_id for t in targets) and all(p[0] == tok.bos_token_id for p in prompts)

    model.zero_grad()
    loss = sft_loss(model, tok, prompts, targets)
    loss.backward()
    got = {k: p.grad.clone() for k, p in model.named_parameters()}

    model.zero_grad()
    total, count = 0.0, 0
    for p, t in zip(prompts, targets, strict=True):
        x = torch.tensor([p + t])
        labels = torch.tensor([-100] * len(p) + t)
        logits = model(input_ids=x).logits[0]  # (L, V) float64
        total = total + F.cross_entropy(logits[:-1], labels[1:], ignore_index=-100, reduction="sum")
        count += len(t)
    ref = total / count
    ref.backward()
    torch.testing.assert_close(loss, ref, atol=1e-12, rtol=0)
    for k, p in model.named_parameters():
        torch.testing.assert_close(got[k], p.grad, atol=1e-11, rtol=1e-9, msg=k)


def test_warm_start_memorises_and_stops_at_first_eval_reaching_target(tok):
    model = tiny(tok)
    problems = make_problems(4, seed=0, split="val")
    seen = []
    stats = warm_start(model, tok, problems, problems, Cfg(), warmup_steps=5, log=lambda s, m: seen.append((s, m)))
    assert stats.reached_target and stats.greedy_acc == 1.0
    assert stats.steps < Cfg.max_steps and stats.steps % Cfg.eval_every == 0
    assert [h["step"] for h in stats.history] == list(range(10, stats.steps + 1, 10))
    assert all(h["greedy_acc"] < 1.0 for h in stats.history[:-1])  # stopped at the first evaluation that reached it
    assert [s for s, _ in seen] == list(range(1, stats.steps + 1))
    assert seen[0][1]["sft/lr"] == pytest.approx(Cfg.lr / 5)  # warm-up
    assert seen[-1][1]["sft/loss"] < seen[0][1]["sft/loss"] / 5
    assert not model.training
    # accuracy scores with the task's reward: the memorised problems are right, the same prompts with other
    # ground truths are wrong
    assert accuracy(model, tok, problems, greedy=True) == 1.0
    wrong = [replace(p, answer=str(int(p.answer) + 1)) for p in problems]
    assert accuracy(model, tok, wrong, greedy=True) == 0.0
    # sampled accuracy is a fraction of problems x n
    g = torch.Generator().manual_seed(0)
    acc = accuracy(model, tok, problems, greedy=False, n=5, generator=g)
    assert acc * 20 == pytest.approx(round(acc * 20))


def test_warm_start_zero_steps_and_bad_input(tok):
    model = tiny(tok)
    problems = make_problems(3, seed=0, split="val")
    before = [p.clone() for p in model.parameters()]
    stats = warm_start(model, tok, problems, problems, Cfg(max_steps=0))
    assert stats.steps == 0 and stats.history == [] and stats.greedy_acc == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(ValueError, match="config"):
        warm_start(model, tok, problems, problems, Cfg(batch_size=0))
    with pytest.raises(ValueError, match="problems"):
        warm_start(model, tok, [], problems, Cfg())
    with pytest.raises(ValueError, match="no problems"):
        accuracy(model, tok, [], greedy=True)


@pytest.mark.parametrize("n, batch", [(12, 4), (10, 4)])
def test_epochs_draw_every_index_once_per_epoch(n, batch):
    """Each epoch is a permutation cut into full batches (a partial tail skipped): with n a multiple of the batch,
    every index is trained on once per epoch (a review's mutant started a new epoch one batch early)."""
    from rpgrl.trainer.sft import _epochs

    batches = _epochs(n, batch, torch.Generator().manual_seed(0))
    per_epoch = n // batch
    for _ in range(3):
        epoch = [i for _ in range(per_epoch) for i in next(batches)]
        assert len(set(epoch)) == len(epoch) == per_epoch * batch


def test_sft_step_clips_the_gradient(tok):
    """The warm start's grad_clip: AdamW's first step moves each weight by about lr whatever the gradient's scale,
    unless the gradient is far below eps: clipped to a norm of 1e-12, every weight moves by far less."""
    from rpgrl.trainer.sft import _sft_step

    problems = make_problems(8, seed=0, split="train")
    prompts, targets = encode_prompts(tok, problems), encode_targets(tok, problems)
    moved = {}
    for clip in (0.0, 1e-12):
        model = tiny(tok)
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8, weight_decay=0.0)
        _sft_step(model, tok, opt, prompts, targets, lr=1e-3, grad_clip=clip)
        moved[clip] = max((p.detach() - b).abs().max().item() for p, b in zip(model.parameters(), before, strict=True))
    assert moved[0.0] > 5e-4 and moved[1e-12] < 1e-6


def test_the_warm_start_memory_bound_is_the_longest_worked_solution_not_max_new_tokens(monkeypatch, tmp_path):
    """The warm start trains on prompts + worked solutions: its memory bound took rollout.max_new_tokens for their
    length and refused a valid run (a review's). The length checked is the longest prompt + the longest solution +
    EOS, counted here from the task itself; the bound refuses exactly past the device's memory."""
    from tiny_config import tiny

    import rpgrl.rollout
    from rpgrl.errors import UsageError
    from rpgrl.trainer import setup

    check_memory, seen = setup._check_warm_start_memory, {}
    monkeypatch.setattr(
        setup, "_check_warm_start_memory", lambda cfg, model, n, length: seen.update(n=n, length=length)
    )
    cfg = tiny(("sft.max_steps", "2"), ("rollout.max_new_tokens", "500"), ("data.reward", "synthetic"))
    setup.open_run(cfg, tmp_path / "run", resume=False)
    task = setup.load_task(cfg, setup.build_tokenizer(cfg))
    solution = max(len(p.solution) for p in task.train_problems) + 1  # one character, one token; and EOS
    assert seen == {"n": 40, "length": max(len(p) for p in task.train_prompts) + solution}
    assert seen["length"] < 500  # far below the flag the old bound used

    model = build_tiny_model(build_char_tokenizer(CHARS), hidden=32, layers=1, heads=2, kv_heads=1, ffn=64, seed=0)
    need = 16 * 30 * 4 * (1 * (12 * 32 + 4 * 64) + 4 * model.config.vocab_size)  # layers x (12 h + 4 ffn) + 4 V
    assert setup.activation_bytes(model, 16 * 30) == need
    cfg = tiny(("sft.max_steps", "2"), ("sft.batch_size", "16"))
    monkeypatch.setattr(rpgrl.rollout, "device_memory", lambda device: need)
    check_memory(cfg, model, 40, 30)  # 16 rows of 30 fit exactly
    check_memory(cfg, model, 8, 60)  # a batch beyond the training set is the whole set: 8 rows of 60
    with pytest.raises(UsageError, match="a warm-start step of 16 sequences needs about"):
        check_memory(cfg, model, 40, 31)
