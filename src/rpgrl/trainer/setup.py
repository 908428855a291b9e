"""Setting a run up: registries, model, data, optimizer, prompt order, and the state a run carries.

Everything here runs before the first training step; every user-fixable problem (an unknown registry name, an
incompatible loss option, a missing model folder or data file) raises UsageError here, before the run directory is
touched. `open_run` builds a `Run` from a config, restoring a checkpoint when resuming.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rpgrl.config import Config, LossConfig
from rpgrl.errors import UsageError, check_token_ids
from rpgrl.trainer.device import fusable, resolve_device


def _require_scorers(cfg: Config, reward_fn: Callable) -> None:
    """math-verify installed where answers are judged by equivalence: the training reward, the benchmarks."""
    from rpgrl.rewards import _mathverify

    if getattr(reward_fn, "mode", None) == "equiv":
        _mathverify.require(f"data.reward {cfg.data.reward!r}")
    if cfg.eval.benchmarks and cfg.eval.scoring == "equiv":
        _mathverify.require("eval.scoring 'equiv' (the default)")


def resolve_components(cfg: Config) -> tuple[Callable, Callable, Callable, dict[str, Any]]:
    """(reward_fn, advantage_fn, loss_fn, loss options) from the registries, with the options checked once on a
    tiny dummy batch so that an incompatible combination fails here with one line, not mid-run."""
    from rpgrl.advantages import get_advantage
    from rpgrl.objectives import get_loss
    from rpgrl.rewards import get_reward

    try:
        reward_fn = get_reward(cfg.data.reward)
        adv_fn = get_advantage(cfg.loss.advantage)
        loss_fn = get_loss(cfg.loss.name)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _require_scorers(cfg, reward_fn)
    opts = loss_options(cfg.loss)
    logp = torch.full((2, 3), -1.0, requires_grad=True)
    try:
        mask = torch.ones(2, 3)
        adv = adv_fn(torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), mask)
        extra = anchor_kwargs(
            cfg.loss, torch.full((2, 3), -1.0) if cfg.ref.mode != "behaviour" else None, logp.detach()
        )
        loss_fn(logp, logp.detach(), adv, mask, **opts, **extra).loss.backward()
    except (TypeError, ValueError) as e:
        raise UsageError(f"loss {cfg.loss.name!r} with these loss.* options: {e}") from None
    return reward_fn, adv_fn, loss_fn, opts


def loss_options(lc: LossConfig) -> dict[str, Any]:
    """Keyword options for the registered loss `lc.name` (not the tensors, normalizer or anchor)."""
    if lc.name == "rpg":
        return lc.rpg_options().used().kwargs()  # a preset's option left unused by a flag: the same loss
    # PPO family (ppo, grpo, dapo, reinforce_pp): ratio clip always, dual clip c with clip='dual'
    opts: dict[str, Any] = dict(
        eps_low=lc.eps_low, eps_high=lc.eps_high, clip_c=lc.c if lc.clip == "dual" else None, agg=lc.agg
    )
    if lc.kl is not None:
        opts.update(kl=lc.kl, beta=lc.beta, kl_clamp=lc.kl_clamp)
    elif lc.name != "dapo":  # said, not left out: reinforce_pp's own default is k1 with beta 1e-4
        opts.update(kl=None, beta=0.0)
    return opts


def anchor_kwargs(lc: LossConfig, anchor_logp: torch.Tensor | None, old_logp: torch.Tensor) -> dict[str, Any]:
    """How the anchor reaches the loss: rpg takes `anchor_logp` (None = the sampler); PPO-family losses with a KL
    term take `ref_logp` (GRPO requires one: with the behaviour anchor that is `old_logp`, the iterative
    reference of spec 6)."""
    if lc.name == "rpg":
        return {"anchor_logp": anchor_logp}
    if lc.kl is None:
        return {}
    return {"ref_logp": old_logp if anchor_logp is None else anchor_logp}


def build_model(cfg: Config):
    """(model, tokenizer): the tiny local model (char tokenizer for the synthetic task, bytes otherwise) or a
    Hugging Face folder (`model.path`). A missing folder, or rollout.decode 'static' on a model it does not support,
    raises UsageError."""
    from rpgrl import models

    m = cfg.model
    device = resolve_device(cfg.train.device)  # first: a missing GPU fails before anything is built
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[m.dtype]
    if m.path == "tiny":
        tokenizer = build_tokenizer(cfg)
        _check_tiny_memory(cfg, len(tokenizer), device)
        model = models.build_tiny_model(
            tokenizer,
            **_tiny_sizes(m),
            max_positions=max(2048, cfg.data.max_prompt_length + cfg.rollout.max_new_tokens),
            seed=cfg.train.seed,
        ).to(dtype)
    else:
        model, tokenizer = models.load_model(m.path, dtype=dtype)
    _check_decode(cfg, model)
    return model.to(device).eval(), tokenizer


def _tiny_sizes(m) -> dict[str, Any]:
    """`build_tiny_model`'s size arguments from a ModelConfig."""
    return dict(hidden=m.hidden_size, layers=m.num_layers, heads=m.num_heads, kv_heads=m.num_kv_heads,
                ffn=m.intermediate_size, tie_embeddings=m.tie_embeddings)  # fmt: skip


def _check_tiny_memory(cfg: Config, vocab: int, device: torch.device) -> None:
    """UsageError when training the tiny model of `cfg.model` (float32 weights, gradients and AdamW's two moments:
    16 bytes per parameter) would not fit the device's memory, before any of it is allocated."""
    from rpgrl import models
    from rpgrl.rollout import device_memory

    m = cfg.model
    n = models.tiny_model_params(vocab, **_tiny_sizes(m))
    need, have = 16 * n, device_memory(device)
    if need > have:
        raise UsageError(f"the tiny model of model.hidden_size {m.hidden_size}, model.num_layers {m.num_layers} and "
                         f"model.intermediate_size {m.intermediate_size} has {n / 1e9:.3g}B parameters: training it "
                         f"needs about {need / 2**30:.3g} GiB, more than the {have / 2**30:.3g} GiB of this "
                         f"{device.type}")  # fmt: skip


def build_tokenizer(cfg: Config):
    """The run's tokenizer alone (cheap: the data is encoded and checked before any weights load)."""
    from rpgrl import models

    if cfg.model.path != "tiny":
        return models.load_tokenizer(cfg.model.path)
    if cfg.synthetic:
        from rpgrl.rewards.synthetic import CHARS

        return models.build_char_tokenizer(CHARS)
    return models.build_byte_tokenizer()


def model_vocab(cfg: Config, tokenizer) -> int | None:
    """Rows of the model's input embedding (the tiny model: one per token of its tokenizer), read with the checks
    config.json alone allows, before the weights load (`_check_decode`); None when it does not load (`load_model`
    then reports it)."""
    from rpgrl.models import config_vocab, read_config

    if cfg.model.path == "tiny":
        return len(tokenizer)
    config = read_config(cfg.model.path)
    if config is not None:
        _check_decode(cfg, config)
    return config_vocab(config)


def _check_decode(cfg: Config, model) -> None:
    """rollout.decode 'static' / 'compiled' or train.forward 'packed' on a model (or its config) whose architecture
    `rpgrl.decode` and `rpgrl.packed` do not compute exactly, or 'compiled' without a C++ compiler: one line."""
    from rpgrl.decode import supported

    asked = [(k, v) for k, v in (("rollout.decode", cfg.rollout.decode), ("train.forward", cfg.train.forward))
             if v in ("static", "compiled", "packed")]  # fmt: skip
    reason = supported(model) if asked else None
    if reason is not None:
        key, value = asked[0]
        raise UsageError(f"{key} {value} does not support this model ({reason}); use auto or transformers")
    if cfg.rollout.decode == "compiled":
        from rpgrl.rollout import compiler_missing

        if (why := compiler_missing()) is not None:
            raise UsageError(f"rollout.decode compiled: {why}; use auto or static")


@dataclasses.dataclass
class Task:
    """Encoded prompts and answers. `*_problems` are the synthetic Problem objects (None for file datasets)."""

    train_prompts: list[list[int]]
    train_answers: list[str]
    val_prompts: list[list[int]]
    val_answers: list[str]
    train_problems: list | None = None
    val_problems: list | None = None


def encode_prompt(tokenizer, prompt: Any, *, chat: bool) -> list[int]:
    """Token ids of one prompt (a string or chat messages): rendered with the chat template when `chat` and the
    tokenizer has one (spec 7.5, as `rpgrl eval` does), else the text with the tokenizer's special tokens (BOS)."""
    from rpgrl.data import prompt_text
    from rpgrl.evaluation import encode_messages, encode_text

    if chat and getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return encode_messages(tokenizer, messages)
    return encode_text(tokenizer, prompt_text(prompt))


def encode_prompts(tokenizer, prompts: list, *, chat: bool, what: str = "prompt") -> list[list[int]]:
    """`encode_prompt` of each prompt; plain texts in one tokenizer call (a call per prompt cost about a second on
    the default's 20,000), each again alone if that call fails, so the error names the prompt: `what` and its
    index ("training prompt 5: ..."), as `fit_prompt` names one too long."""
    from rpgrl.data import prompt_text

    if not (chat and getattr(tokenizer, "chat_template", None)):
        texts = [prompt_text(p) for p in prompts]
        try:
            return [list(ids) for ids in tokenizer(texts)["input_ids"]] if texts else []
        except Exception:  # the `tokenizers` library raises plain Exception
            pass
    ids = []
    for i, p in enumerate(prompts):
        try:
            ids.append(encode_prompt(tokenizer, p, chat=chat))
        except UsageError as e:
            raise UsageError(f"{what} {i}: {e}") from None
    return ids


def fit_prompt(ids: list[int], d, what: str, prompt: Any) -> list[int]:
    """`ids` within data.max_prompt_length: refused (UsageError naming the prompt) or left-truncated, as
    data.truncation says (verl's truncation=error / left: a cut prompt can lose its question)."""
    if len(ids) <= d.max_prompt_length:
        return ids
    if d.truncation == "left":
        return ids[-d.max_prompt_length :]
    from rpgrl.data import prompt_text

    raise UsageError(f"{what} ({prompt_text(prompt)[:50]!r}) has {len(ids)} tokens, above data.max_prompt_length "
                     f"{d.max_prompt_length}: raise it, or pass --data.truncation left (keep each long prompt's last "
                     f"{d.max_prompt_length} tokens, as verl's truncation=left)")  # fmt: skip


def _read_split(path: str, d) -> tuple[list, list[str]]:
    """(prompts, answers) of a data file, its duplicate rows dropped, and said (they were dropped silently)."""
    from rpgrl.data import dedupe_examples, load_examples
    from rpgrl.trainer.log import print0

    rows = load_examples(path, prompt_key=d.prompt_key, answer_key=d.answer_key, dedupe=False)
    kept = dedupe_examples(rows, path)
    if len(kept) < len(rows):
        print0(f"data: {path}: {len(rows) - len(kept)} of {len(rows)} rows repeat an earlier row's prompt and "
               f"answer and are dropped ({len(kept)} problems)")  # fmt: skip
    return [e.prompt for e in kept], [e.answer for e in kept]


def load_task(cfg: Config, tokenizer) -> Task:
    """The training and held-out prompts: generated (synthetic) or read from JSONL/parquet (`rpgrl.data`)."""
    d = cfg.data
    if cfg.synthetic:
        from rpgrl.rewards.synthetic import make_problems

        train = make_problems(d.num_train, seed=cfg.train.seed, split="train")
        val = make_problems(d.num_val, seed=0, split="val")  # one fixed held-out set, whatever the seed
        chat = False
        tp, ta = [p.prompt for p in train], [p.answer for p in train]
        vp, va = [p.prompt for p in val], [p.answer for p in val]
    else:
        chat = cfg.model.chat_template
        tp, ta = _read_split(d.train, d)
        vp, va = _read_split(d.val, d) if d.val else ([], [])
        train = val = None

    def enc(prompts, split):
        ids = encode_prompts(tokenizer, prompts, chat=chat, what=f"{split} prompt")
        return [fit_prompt(ids[i], d, f"{split} prompt {i}", p) for i, p in enumerate(prompts)]

    return Task(enc(tp, "training"), list(ta), enc(vp, "held-out"), list(va), train, val)


def make_optimizer(cfg: Config, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    o = cfg.optim
    if o.name == "adamw":  # fused: one kernel per tensor, no full-size temporaries (4x faster than foreach on CPU)
        return torch.optim.AdamW(
            params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay, fused=fusable(params)
        )
    import schedulefree

    # warm-up is ours (training steps, lr_multiplier), as the released code puts LambdaLR on top
    opt = schedulefree.AdamWScheduleFree(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
    opt.train()
    return opt


def lr_multiplier(step: int, warmup: int) -> float:
    """verl's constant-with-warm-up schedule counted in training steps (1-based): min(1, (step - 1) / warmup)."""
    return 1.0 if warmup <= 0 else min(1.0, (step - 1) / warmup)


class PromptStream:
    """Training prompt order: a fresh seeded permutation every epoch; the state is (epoch, position), and the digest
    of the prompts it orders (`data_digest`), which a resume compares."""

    def __init__(self, n: int, seed: int, shuffle: bool, digest: str | None = None):
        self.n, self.seed, self.shuffle, self.digest = n, seed, shuffle, digest
        self.epoch, self.pos = 0, 0
        self._order = self._permutation()

    def _permutation(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.n))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def next(self, k: int) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._permutation()
            take = min(k - len(out), self.n - self.pos)
            out += self._order[self.pos : self.pos + take]
            self.pos += take
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos, **({"digest": self.digest} if self.digest else {})}

    def load_state_dict(self, s: dict[str, int]) -> None:
        self.epoch, self.pos = s["epoch"], s["pos"]
        self._order = self._permutation()


def data_digest(task: Task) -> str:
    """The training data's identity: its encoded prompts and answers, in order."""
    text = json.dumps([task.train_prompts, task.train_answers], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_same_data(saved: dict[str, Any], stream: PromptStream, cfg: Config, ckpt: Path) -> None:
    """UsageError if the run of checkpoint `ckpt` trained on other prompts than these (a data file edited or
    replaced since, a relative path resumed from another folder): its position in them would index other data.
    Checkpoints written before the digest was kept are not checked."""
    if saved.get("digest") in (None, stream.digest):
        return
    if cfg.synthetic:
        why = "the synthetic task draws them by train.seed and data.num_train: keep the run's values"
    else:
        why = (f"data.train {cfg.data.train} changed since it started, or a setting that encodes its prompts did: "
               "restore it")  # fmt: skip
    raise UsageError(f"--resume: the training prompts differ from those the run of {ckpt} trained on ({why}), or "
                     "start a new run")  # fmt: skip


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load_benchmarks(cfg: Config) -> list:
    """The `eval.benchmarks` files, read (and checked) up front."""
    if not cfg.eval.benchmarks:
        return []
    from rpgrl.data import load_benchmark
    from rpgrl.evaluation import _check_names

    try:
        return _check_names([load_benchmark(p.strip()) for p in cfg.eval.benchmarks.split(",") if p.strip()])
    except UsageError as e:  # data.prompt_key / answer_key are the training files' (a review's: not said)
        keys = ("; benchmark files have the columns prompt and answer (or reward_model.ground_truth), as the "
                "paper's: data.prompt_key and data.answer_key apply to data.train and data.val")  # fmt: skip
        raise UsageError(f"eval.benchmarks: {e}{keys if 'missing column' in str(e) else ''}") from None


def _check_prompts(vocab: int | None, tokenizer, task: Task, benchmarks: list, cfg: Config) -> int:
    """Every benchmark prompt encodes (as `rpgrl.evaluation` will encode it), fits data.max_prompt_length as
    data.truncation says (`fit_prompt`; `evaluate` cuts them with `left`), and every prompt the run will sample from
    fits a vocabulary of `vocab` tokens (None: unknown, not checked): found now, not at the first step or evaluation.
    Returns the length of the longest prompt (tokens)."""
    from rpgrl.evaluation import encode_named

    limit = cfg.eval.max_problems
    bench_ids = {b.name: [fit_prompt(encode_named(tokenizer, p.prompt, f"{b.name} prompt {i}"), cfg.data,
                                     f"{b.name} prompt {i}", p.prompt)
                          for i, p in enumerate(b.problems[:limit])] for b in benchmarks}  # fmt: skip
    every = [task.train_prompts, task.val_prompts, *bench_ids.values()]
    if vocab is not None:
        for name, ids in zip(["training", "held-out", *bench_ids], every, strict=True):
            check_token_ids(ids, vocab, f"{name} prompt")
    return max((len(p) for ids in every for p in ids), default=0)


def _tracker(cfg: Config):
    if not cfg.eval.benchmarks:
        return None
    from rpgrl.evaluation import EvalTracker

    return EvalTracker(metric=f"mean@{cfg.eval.samples}")


@dataclasses.dataclass
class RunState:
    """What a run carries from step to step besides weights, optimizer, anchor, data order and RNG (saved in every
    checkpoint as a plain dict under "trainer")."""

    start_accuracy: float | None = None
    """held-out greedy accuracy when RL starts (after the warm start)"""
    collapse_run: int = 0
    """consecutive steps with no correct sampled response (the collapse guard)"""
    best_accuracy: float | None = None
    """the best held-out greedy accuracy of any evaluation so far"""
    sft: dict | None = None
    """the warm start's statistics (steps, seconds, accuracies), None without one"""
    tracker: Any = None
    """`rpgrl.evaluation.EvalTracker` of the benchmarks' Last/Best, None without `eval.benchmarks`"""
    rl_seconds: float = 0.0
    """seconds of RL up to the last checkpoint, over every process of the run (summary.json's rl_seconds)"""
    wall_seconds: float = 0.0
    """seconds of the whole run (setup, warm start, RL, evaluations) up to the last checkpoint, over every process
    of the run, each counted to its last checkpoint (summary.json's wall_seconds)"""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass
class Run:
    """Everything a run holds while it trains: the config, its directory, the resolved components and the live
    objects. `start_step` is 0 for a new run, the checkpoint's step when resuming."""

    cfg: Config
    out: Path
    model: torch.nn.Module
    tokenizer: Any
    task: Task
    benchmarks: list
    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer
    generator: torch.Generator
    stream: PromptStream
    state: RunState
    reward_fn: Callable
    adv_fn: Callable
    loss_fn: Callable
    loss_opts: dict[str, Any]
    anchor: Any = None
    start_step: int = 0
    checkpoint: Path | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)
    saved: bool = False  # a checkpoint was written by this process
    restart: bool = False  # --resume of a run that stopped before its first checkpoint: it starts over
    newest_seen: Path | None = None  # the newest checkpoint when the run directory was checked (before the lock)
    last_eval: dict | None = None  # the latest periodic evaluation's row (`eval.every`), which `finish` may reuse
    end_aside: list = dataclasses.field(default_factory=list)  # (renamed, name): a finished run's end set aside
    began: float = 0.0  # time.perf_counter() less the earlier processes' wall_seconds: the run's time is now - began


# Bytes each position of a step's rollouts holds until its update, at the least: token ids and attention mask (int64),
# the response mask, the sampler's log-prob and entropy (float32).
ROLLOUT_BYTES = 28


def _check_generation_batch(cfg: Config, n_prompts: int) -> None:
    """DAPO's generation batch (`rollout.gen_prompts`, a preset's 3 x 512) of twice the training set or more would
    draw every prompt several times over in each batch (a review: a 70-row file sampled 22 times over at every
    step, 45 s per step for 16 trained responses): refused. `rollout.prompts_per_step` is the batch the user trains
    on and stays theirs to choose (a small file repeats prompts within a step), and so does a generation batch no
    larger than it (what `gen_prompts` none generates)."""
    r = cfg.rollout
    g = r.gen_prompts
    if r.group_filter == "fill" and g is not None and g >= 2 * n_prompts and g > r.prompts_per_step:
        raise UsageError(f"rollout.gen_prompts {g} is twice the {n_prompts} training prompts or more: each "
                         f"generation batch would draw every prompt {g / n_prompts:.3g} times on average; set it "
                         f"below {max(2 * n_prompts, r.prompts_per_step + 1)}")  # fmt: skip


def _check_generation_memory(cfg: Config, model, longest_prompt: int) -> None:
    """The largest generation chunk the run will sample (training groups; held-out and benchmark evaluation, at
    most rollout.gen_batch_size rows unless one group is larger) and one step's rollouts, held until its update,
    must fit the device's memory: refused here, before the run directory is written, not out of memory mid-run
    (1e11 prompts per step filled a Python list of prompt indices until the machine ran out)."""
    from rpgrl.rollout import check_kv_cache, device_memory

    r, e = cfg.rollout, cfg.eval
    length = longest_prompt + r.max_new_tokens
    rows = max(r.gen_batch_size, r.group_size, e.samples if e.benchmarks else 1, e.val_samples)  # k samples: k rows
    check_kv_cache(model, rows, length, "lower rollout.max_new_tokens, rollout.group_size, rollout.gen_batch_size "
                   "or eval.val_samples")  # fmt: skip
    step_rows = r.group_size * max(r.prompts_per_step, r.gen_prompts or 0)
    device = next(model.parameters()).device
    need, have = step_rows * length * ROLLOUT_BYTES, device_memory(device)
    if need > have:
        raise UsageError(f"one step's {step_rows} rollouts of {length} positions need at least {need / 2**30:.3g} "
                         f"GiB, more than the {have / 2**30:.3g} GiB of this {device.type}: lower "
                         "rollout.prompts_per_step, rollout.gen_prompts or rollout.group_size")  # fmt: skip


def activation_bytes(model, tokens: int) -> int:
    """A generous estimate of what a forward and backward over `tokens` positions keeps: per layer about 12 hidden
    and 4 intermediate activations per token, and 4 vocabulary-sized rows (logits, log-softmax, their gradients)."""
    c = model.config.get_text_config()
    per_token = c.num_hidden_layers * (12 * c.hidden_size + 4 * c.intermediate_size) + 4 * c.vocab_size
    return tokens * per_token * next(model.parameters()).element_size()


def _check_warm_start_memory(cfg: Config, model, n_problems: int, length: int) -> None:
    """One warm-start step (sft.batch_size worked solutions, at most the training set: a larger batch is the whole
    set) must fit the device's memory: refused here, not killed out of memory in the warm start (a review's:
    sft.batch_size 1e8 ran the 20,000 problems as one batch)."""
    from rpgrl.rollout import device_memory

    rows = min(cfg.sft.batch_size, n_problems)
    need = activation_bytes(model, rows * length)  # length: the longest prompt and worked solution
    have = device_memory(next(model.parameters()).device)
    if need > have:
        raise UsageError(f"a warm-start step of {rows} sequences needs about {need / 2**30:.3g} GiB, more than the "
                         f"{have / 2**30:.3g} GiB of this device: lower sft.batch_size")  # fmt: skip


def _misfit(cfg: Config, out: Path, error: Exception) -> str:
    """Why a checkpoint's state does not load, named: the model.* fields that differ from the saved run's config,
    else the first specific line of torch's message (a size mismatch, a missing key), not its header."""
    from rpgrl.config import config_to_dict

    try:
        saved = json.loads((out / "config.json").read_text()).get("model", {})
    except (OSError, ValueError, AttributeError):
        saved = {}
    now = config_to_dict(cfg)["model"]
    diff = [f"model.{k} {now[k]!r} here, {saved[k]!r} in the saved run" for k in now
            if k in saved and now[k] != saved[k]]  # fmt: skip
    if diff:
        return "; ".join(diff)
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()] or [type(error).__name__]
    return lines[min(1, len(lines) - 1)][:300]  # torch's header line ends at a colon: the next one says what


def open_run(cfg: Config, out: Path, resume: bool, base: Config | None = None) -> Run:
    """Resolve names, build the model, load the data and, when resuming, restore the newest checkpoint that loads.
    Reads only: every user-fixable problem raises UsageError before anything in `out` is created or changed."""
    from rpgrl.config import check
    from rpgrl.trainer.checkpoint import latest_checkpoint, load_newest, set_rng_state
    from rpgrl.trainer.device import model_device
    from rpgrl.trainer.log import check_metrics_file
    from rpgrl.trainer.reference import Anchor
    from rpgrl.trainer.rundir import check_run_dir

    cfg = check(cfg, base)
    restart = check_run_dir(out, resume)  # a resume with no checkpoint yet starts over
    newest_seen = latest_checkpoint(out / "checkpoints")
    resume = resume and not restart
    ckpt, saved, skipped = load_newest(out / "checkpoints") if resume else (None, None, [])
    if resume and ckpt is None:
        raise UsageError(f"--resume: no checkpoint in {out / 'checkpoints'} loads: {'; '.join(skipped)}")
    if resume:
        for name in ("metrics.jsonl", "eval.jsonl"):  # the resume cuts them back: unreadable rows stop it first
            check_metrics_file(out / name)
    if resume and saved["step"] > cfg.train.max_steps:
        raise UsageError(f"--resume: train.max_steps {cfg.train.max_steps} is below the step of {ckpt} "
                         f"({saved['step']}): pass --max-steps {saved['step']} or more")  # fmt: skip
    torch.set_num_threads(cfg.train.threads)
    reward_fn, adv_fn, loss_fn, loss_opts = resolve_components(cfg)
    _seed_everything(cfg.train.seed)
    tokenizer = build_tokenizer(cfg)
    task = load_task(cfg, tokenizer)  # every prompt is read and checked before the weights load
    if ckpt is None and cfg.sft.max_steps > 0 and task.train_problems is None:
        raise UsageError("sft.max_steps > 0 needs the synthetic task (solutions to imitate); set --sft.max_steps 0")
    _check_generation_batch(cfg, len(task.train_prompts))
    benchmarks = load_benchmarks(cfg)
    longest = _check_prompts(model_vocab(cfg, tokenizer), tokenizer, task, benchmarks, cfg)
    model, tokenizer = build_model(cfg)
    _check_generation_memory(cfg, model, longest)
    if ckpt is None and cfg.sft.max_steps > 0:  # (a token has a character at least: solutions bound their tokens)
        solution = max(len(p.solution) for p in task.train_problems) + 1  # and EOS
        _check_warm_start_memory(cfg, model, len(task.train_prompts), longest + solution)
    params = [p for p in model.parameters() if p.requires_grad]
    run = Run(
        cfg, out, model, tokenizer, task, benchmarks, params, make_optimizer(cfg, params),
        torch.Generator(device=model_device(model)).manual_seed(cfg.train.seed),
        PromptStream(len(task.train_prompts), cfg.train.seed, cfg.data.shuffle, data_digest(task)),
        RunState(tracker=_tracker(cfg)),
        reward_fn, adv_fn, loss_fn, loss_opts, checkpoint=ckpt, skipped=skipped, restart=restart,
        newest_seen=newest_seen,
    )  # fmt: skip
    if ckpt is None:
        return run
    # restore everything now, so a checkpoint that does not fit the config changes nothing
    _check_same_data(saved["data"], run.stream, cfg, ckpt)
    if saved.get("optimizer_name", cfg.optim.name) != cfg.optim.name:  # the states would load but mean nothing
        raise UsageError(f"checkpoint {ckpt} was written by {saved['optimizer_name']}, not {cfg.optim.name}")
    try:
        model.load_state_dict(saved["model"])
        run.opt.load_state_dict(saved["optimizer"])
        for group in run.opt.param_groups:  # the config's, as config.json records them (the state's were kept)
            group.update(betas=tuple(cfg.optim.betas), eps=cfg.optim.eps, weight_decay=cfg.optim.weight_decay)
        run.anchor = Anchor(cfg.ref, model)
        run.anchor.load_state_dict(saved["anchor"])
    except (RuntimeError, ValueError, KeyError) as e:
        raise UsageError(f"checkpoint {ckpt} does not fit this config: {_misfit(cfg, out, e)}") from None
    run.stream.load_state_dict(saved["data"])
    set_rng_state(saved["rng"], run.generator)
    run.start_step = saved["step"]
    run.state = RunState(**saved["trainer"])
    run.state.tracker = _resumed_tracker(cfg, run.state.tracker, benchmarks, run.start_step)
    return run


def _resumed_tracker(cfg: Config, saved, benchmarks: list, step: int):
    """The benchmarks' Last/Best to continue on a resume: the saved tracker while it tracks this config's metric, a
    new one (announced) where the saved run had no benchmarks or `eval.samples` changed the metric, None without
    benchmarks. Benchmarks no longer evaluated leave it. (The saved tracker was taken as it was: benchmarks added on
    a resume crashed the final evaluation, and a changed `eval.samples` was never counted.)"""
    fresh = _tracker(cfg)
    if fresh is None:
        return None
    if saved is None or saved.metric != fresh.metric:
        from rpgrl.trainer.log import print0

        print0(f"--resume: the benchmarks' Last and Best ({fresh.metric}) count the evaluations from step {step} on "
               f"(the saved run tracked {'none' if saved is None else saved.metric})")  # fmt: skip
        return fresh
    names = {b.name for b in benchmarks}
    for record in (saved.last, saved.best):
        for name in set(record) - names:
            del record[name]
    return saved
