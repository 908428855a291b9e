"""TRL adapter (rpgrl/integrations/trl.py): RPGTrainer end to end on a tiny model built locally (no hub), CPU.

- two optimizer steps, the second on a reused batch (num_iterations=2) so pi_theta != pi_old: metrics finite, no
  reference model, parameters move;
- the gradient TRL back-propagates equals the gradient of rpgrl.rpg_loss on log-probs computed here independently
  (plain forward, log_softmax, gather) from the same inputs;
- gradient accumulation: one micro-batch of 8 or two of 4 give the same gradient (the normaliser is global);
- configs that would load a reference model or silently drop a TRL option are refused.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from trl import GRPOConfig  # noqa: E402

from rpgrl.integrations.trl import RPGConfig, RPGTrainer  # noqa: E402
from rpgrl.models import build_char_tokenizer, build_tiny_model  # noqa: E402
from rpgrl.objectives.reduce import AGG_MODES  # noqa: E402
from rpgrl.objectives.rpg import rpg_loss  # noqa: E402

PROMPTS = ["1+2=", "3+4=", "5+5=", "2+7="]


def count_ones(completions, **kwargs):
    """A reward with spread inside every group: the number of '1' characters."""
    return [float(c.count("1")) for c in completions]


class RecordingTrainer(RPGTrainer):
    """Keeps a copy of every batch the loss sees."""

    def _compute_loss(self, model, inputs):
        self.seen.append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
        return super()._compute_loss(model, inputs)


def make_trainer(tmp_path, *, seed=0, reward_funcs=count_ones, trainer_kwargs=None, **overrides):
    tok = build_char_tokenizer("0123456789+=")
    model = build_tiny_model(tok, hidden=32, layers=2, heads=2, kv_heads=1, ffn=64, seed=seed)
    settings = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        max_steps=2,
        learning_rate=3e-2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=seed,
        divergence="urkl",
        style="reinforce",
        rpg_beta=0.1,
        clip="dual",
        epsilon=0.02,  # tight clip range so the reused batch hits the clipped rows
        epsilon_high=0.02,
        clip_ratio_c=1.05,
        disable_tqdm=True,
        bf16=False,  # transformers defaults to bf16 autocast where the CPU supports it; compare in float32
    )
    settings.update(overrides)
    args = RPGConfig(**settings)
    trainer = RecordingTrainer(
        model, reward_funcs, args=args, train_dataset=datasets.Dataset.from_dict({"prompt": PROMPTS * 4}),
        processing_class=tok, **(trainer_kwargs or {}),
    )  # fmt: skip
    trainer.seen = []
    return trainer


@pytest.fixture(autouse=True)
def _accelerate_state_kept():
    """Building a TRL config resets accelerate's process-wide state (`AcceleratorState._reset_state`), after which
    the module's trained trainer fails ("make sure to properly initialize your accelerator"): each test gets the
    state it found back, so the tests pass in any order (`-k`, `--lf`)."""
    from accelerate.state import AcceleratorState, PartialState

    saved = [(cls, dict(cls._shared_state)) for cls in (PartialState, AcceleratorState)]
    yield
    for cls, state in saved:
        if state:  # a state made during the test (none before) stays: later tests may need it
            cls._shared_state.clear()
            cls._shared_state.update(state)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    trainer = make_trainer(tmp_path_factory.mktemp("rpg"), num_iterations=2)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    return trainer, before


def test_no_reference_model_and_parameters_move(trained):
    trainer, before = trained
    assert trainer.ref_model is None and trainer.beta == 0.0
    moved = [not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True)]
    assert all(moved)


def test_two_steps_log_finite_rpg_metrics(trained):
    trainer, _ = trained
    steps = [h for h in trainer.state.log_history if "loss" in h]
    assert len(steps) == 2
    for h in steps:
        for key in ("loss", "grad_norm", "kl/urkl", "kl/k3_anchor", "clip/frac_dual", "log_w/max", "entropy"):
            assert math.isfinite(h[key]), (key, h)
    # step 2 re-uses step 1's batch after one update: pi_theta != pi_old, so the KL and clips are live
    assert "old_per_token_logps" in trainer.seen[1]
    assert steps[1]["kl/k3_anchor"] > 0 and steps[1]["log_w/max"] > 0
    assert steps[1]["clip/frac_high"] + steps[1]["clip/frac_low"] + steps[1]["clip/frac_dual"] > 0


def independent_logp(model, inputs):
    """log pi(y_t | h_t) of the completion tokens from a plain forward pass. (B, T)"""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    T = inputs["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -T - 1 : -1].float()  # (B, T, V)
    return torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)


def test_gradient_equals_rpg_loss_gradient(trained):
    trainer, _ = trained
    model, args = trainer.model, trainer.args
    inputs = trainer.seen[1]  # the off-policy step
    params = [p for p in model.parameters() if p.requires_grad]

    model.train()
    model.zero_grad()
    trainer.compute_loss(model, inputs).backward()
    got = [p.grad.detach().clone() for p in params]

    model.zero_grad()
    mask = inputs["completion_mask"]
    expected = rpg_loss(
        independent_logp(model, inputs), inputs["old_per_token_logps"], inputs["advantages"], mask,
        divergence="urkl", style="reinforce", beta=0.1, clip="dual", eps_low=0.02, eps_high=0.02, c=1.05,
    )  # fmt: skip  # token-mean over this batch: 1 process, no accumulation, the batch is the generation batch
    expected.loss.backward()
    want = [p.grad.detach().clone() for p in params]
    model.zero_grad()

    assert args.gradient_accumulation_steps == 1 and args.steps_per_generation == 1
    assert sum(g.abs().sum() for g in want) > 0
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=2e-4, atol=1e-7)


def param_grads(model, loss_fns):
    model.zero_grad()
    for fn in loss_fns:
        fn().backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad()
    return grads


@pytest.mark.parametrize("agg", AGG_MODES)
def test_gradient_accumulation_gives_the_batch_gradient(trained, agg, monkeypatch):
    """The recorded generation batch of 8 in one micro-batch, or as 2 accumulated micro-batches of 4 (what TRL hands
    the loss with gradient_accumulation_steps=2): the summed gradient is the same in every aggregation mode."""
    trainer, _ = trained
    inputs = trainer.seen[1]
    monkeypatch.setattr(trainer.args, "agg", agg)
    trainer.model.train()
    whole = param_grads(trainer.model, [lambda: trainer.compute_loss(trainer.model, inputs)])

    monkeypatch.setattr(trainer, "current_gradient_accumulation_steps", 2)
    monkeypatch.setattr(trainer.args, "steps_per_generation", 2)
    halves = [{k: v[rows] if torch.is_tensor(v) and v.dim() > 0 else v for k, v in inputs.items()}
              for rows in (slice(0, 4), slice(4, 8))]  # fmt: skip
    split = param_grads(trainer.model, [lambda h=h: trainer.compute_loss(trainer.model, h) for h in halves])
    for a, b in zip(whole, split, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_a_masked_completion_counts_in_the_sequence_mean_as_in_trl(trained, agg, monkeypatch):
    """A completion masked by mask_truncated_completions has no valid token. TRL's own grpo loss averages the
    per-sequence losses over every row (`.mean()`), so it still counts in the denominator: the loss is (B - 1) / B
    of rpg_loss over the other rows alone (whose default normaliser counts the kept rows only, as verl does)."""
    trainer, _ = trained
    model = trainer.model
    inputs = dict(trainer.seen[1])
    mask = inputs["completion_mask"].clone()
    mask[2] = 0
    inputs["completion_mask"] = mask
    monkeypatch.setattr(trainer.args, "agg", agg)
    model.train()
    with torch.no_grad():
        loss = trainer.compute_loss(model, inputs)
        keep = mask.bool().any(-1)
        alone = rpg_loss(
            independent_logp(model, inputs)[keep], inputs["old_per_token_logps"][keep], inputs["advantages"][keep],
            mask[keep], divergence="urkl", style="reinforce", beta=0.1, clip="dual", eps_low=0.02, eps_high=0.02,
            c=1.05, agg=agg,
        ).loss  # fmt: skip
    B = mask.shape[0]
    assert int(keep.sum()) == B - 1 and alone.abs() > 0
    torch.testing.assert_close(loss, alone * (B - 1) / B, rtol=2e-4, atol=1e-7)


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"beta": 0.04}, "rpg_beta"),  # TRL's beta would load a reference model
        ({"divergence": "kl"}, "divergence"),
        ({"clip": "ppo"}, "clip"),
        ({"agg": "token-sum"}, "agg"),
        ({"rpg_beta": -1.0}, "rpg_beta"),
        ({"entropy_coef": 0.01}, "entropy_coef"),
        ({"importance_sampling_level": "sequence"}, "importance_sampling_level"),
        ({"loss_type": "dr_grpo"}, "loss_type"),  # TRL's normalisation: RPGConfig.agg sets it (was ignored)
        ({"kl_in_clip": "false"}, "kl_in_clip must be true or false"),  # acted as True
        (
            {"kl_in_clip": False},
            "kl_in_clip applies to style='differentiable' with clip='dual', not to style='reinforce'",
        ),  # not read (was accepted)
        ({"style": "differentiable", "clip": None, "branch": "raw"}, "branch: branch applies to clip='dual', not"),
        # the analogue with the KL outside the clip: the message named style and clip only, both as required
        (
            {"style": "differentiable", "kl_in_clip": False, "analogue": "paper"},
            "analogue applies to .* and kl_in_clip=True, not to style='differentiable', clip='dual', kl_in_clip=False",
        ),
        # sampling filters: TRL's pi_old log-probs see the temperature only (were accepted; pi_old was not the sampler)
        ({"top_k": 1}, "top_k change the distribution"),
        ({"top_p": 0.9}, "top_p change"),
        ({"min_p": 0.1}, "min_p change"),
        ({"repetition_penalty": 1.2}, "repetition_penalty change"),
        ({"generation_kwargs": {"num_beams": 2}}, r"generation_kwargs\['num_beams'\] change"),
        ({"generation_kwargs": {"temperature": 0.5}}, r"generation_kwargs\['temperature'\] change"),
        ({"generation_kwargs": {"do_sample": False}}, r"generation_kwargs\['do_sample'\] change"),
        ({"top_k": 5, "use_vllm": True, "vllm_importance_sampling_correction": False}, "top_k change"),
        ({"vllm_structured_outputs_regex": "[0-9]+"}, "vllm_structured_outputs_regex change"),
        # GDPO's normalisation ignores scale_rewards: the advantage was silently not R - group mean
        ({"multi_objective_aggregation": "normalize_then_sum"}, "normalize_then_sum"),
        ({"epsilon_high": "high"}, "epsilon_high must be a number or none"),
        # GRPOConfig takes them: 0 iterations trained nothing (exit 0), a misspelt scale failed after generating
        ({"num_iterations": 0}, r"^RPGConfig: num_iterations must be an integer >= 1 .*, got 0$"),
        ({"num_iterations": -2}, "num_iterations must be an integer >= 1"),
        ({"scale_rewards": "gruop"}, r"^RPGConfig: scale_rewards must be 'none' .*, got 'gruop'$"),
        # a NaN weight made every reward 0 under TRL's nansum (nothing trained); inf, an advantage of -+3.4e38
        ({"reward_weights": [1.0, float("nan")]}, r"^RPGConfig: reward_weights must be finite numbers, got nan$"),
        ({"reward_weights": [float("inf")]}, "reward_weights must be finite numbers, got inf"),
    ],
)
def test_bad_configs_are_refused(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        RPGConfig(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, use_cpu=True, **overrides)


def test_neutral_sampling_settings_and_corrected_filters_are_accepted(tmp_path):
    """Settings that leave softmax(logits / temperature) as the sampler pass; so do filters vLLM's importance-sampling
    correction accounts for."""
    common = dict(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, use_cpu=True)
    neutral = {"max_new_tokens": 5, "temperature": 0.7, "top_p": 1.0, "top_k": 0, "do_sample": True, "use_cache": True}
    RPGConfig(**common, temperature=0.7, generation_kwargs=neutral, top_k=0, top_p=1.0, repetition_penalty=1.0)
    vllm = {"stop": ["</s>"], "seed": 3, "skip_special_tokens": False, "top_k": -1, "num_beams": 1}  # (reviews')
    RPGConfig(**common, use_vllm=True, vllm_importance_sampling_correction=False, generation_kwargs=vllm, top_k=-1)
    RPGConfig(**common, top_k=5, top_p=0.9, use_vllm=True, vllm_importance_sampling_correction=True)
    RPGConfig(**common, multi_objective_aggregation="normalize_then_sum", scale_rewards="group")  # not RPG's estimator


def test_epsilon_high_none_is_trls_default_not_a_clip_range_set(tmp_path):
    """`--clip none --epsilon_high none` was refused ("epsilon_high: ... leave it at its default"): None is TRL's own
    default for epsilon_high (it follows epsilon), not a clip range the user set. An epsilon set with no clip is still
    refused, named alone (it was followed by "also unused: epsilon_high", which the user had not set)."""
    from transformers import HfArgumentParser

    common = dict(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, use_cpu=True)
    RPGConfig(**common, clip=None, epsilon_high=None)
    base = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--num_generations", "4",
            "--per_device_train_batch_size", "8"]  # fmt: skip
    HfArgumentParser(RPGConfig).parse_args_into_dataclasses(base + ["--clip", "none", "--epsilon_high", "none"])
    with pytest.raises(ValueError, match=r"^RPGConfig: epsilon: .* leave it at its default$"):
        RPGConfig(**common, clip=None, epsilon=0.3, epsilon_high=None)
    with pytest.raises(ValueError, match="^RPGConfig: epsilon_high: "):  # set: refused
        RPGConfig(**common, clip=None, epsilon_high=0.3)


def test_an_unused_clip_range_or_cap_is_named_as_rpgconfig_names_it(tmp_path):
    """The clip range and c set where the clip does not read them were refused as "epsilon_high: eps_high applies
    to ...", "clip_ratio_c: c applies to ...": eps_low, eps_high and c are RPGOptions' names, not RPGConfig's."""
    common = dict(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, use_cpu=True)
    for kw, name in (({"clip": None, "epsilon": 0.1}, "epsilon"), ({"clip": None, "epsilon_high": 0.3}, "epsilon_high"),
                     ({"clip": "truncate", "clip_ratio_c": 3.0}, "clip_ratio_c")):  # fmt: skip
        with pytest.raises(ValueError, match=rf"^RPGConfig: {name}: {name} applies to clip=") as e:
            RPGConfig(**common, **kw)
        assert not any(w in str(e.value) for w in ("eps_low", "eps_high", " c applies")), e.value


def test_epsilon_high_from_the_command_line(tmp_path):
    """`--epsilon_high none` (TRL's rule: follow epsilon) was a parse error; a number still reads as one."""
    from transformers import HfArgumentParser

    base = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--num_generations", "4",
            "--per_device_train_batch_size", "8", "--epsilon", "0.1"]  # fmt: skip
    for words, want in ([], 0.28), (["--epsilon_high", "none"], 0.1), (["--epsilon_high", "0.3"], 0.3):
        (args,) = HfArgumentParser(RPGConfig).parse_args_into_dataclasses(base + words)
        assert args.options().eps_high == want and args.options().eps_low == 0.1


def test_optional_numbers_none_from_the_command_line(tmp_path):
    """`--max_log_w none` and `--kl_value_clamp none` (their help: "none = off") were argparse errors ("invalid float
    value: 'none'"), while `--clip none` and `--epsilon_high none` worked; numbers still read as numbers."""
    from transformers import HfArgumentParser

    base = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--num_generations", "4",
            "--per_device_train_batch_size", "8", "--style", "differentiable", "--kl_in_clip", "false"]  # fmt: skip
    (args,) = HfArgumentParser(RPGConfig).parse_args_into_dataclasses(
        base + ["--kl_value_clamp", "none", "--max_log_w", "None"]
    )
    assert args.options().kl_value_clamp is None and args.options().max_log_w is None
    (args,) = HfArgumentParser(RPGConfig).parse_args_into_dataclasses(
        base + ["--kl_value_clamp", "10", "--max_log_w", "2.5"]
    )
    assert args.rpg_options()["kl_value_clamp"] == 10.0 and args.rpg_options()["max_log_w"] == 2.5
    with pytest.raises(ValueError, match="max_log_w must be a number or none"):
        RPGConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=4, per_device_train_batch_size=8,
                  max_log_w="off")  # fmt: skip


def test_rpg_trainer_takes_grpo_trainers_positional_arguments(tmp_path):
    """GRPOTrainer(model, reward_funcs, args, train_dataset, ...) positionally was a TypeError."""
    tok = build_char_tokenizer("0123456789+=")
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=32)
    args = RPGConfig(str(tmp_path), num_generations=4, per_device_train_batch_size=8, report_to="none", use_cpu=True)
    data = datasets.Dataset.from_dict({"prompt": PROMPTS})
    trainer = RPGTrainer(model, count_ones, args, data, None, tok)
    assert trainer.train_dataset is data and trainer.processing_class is tok


def test_moe_router_loss_is_added_as_grpo_adds_it(tmp_path):
    """A Mixture-of-Experts model (TRL takes the config's router_aux_loss_coef by default) was refused after the
    whole of GRPOTrainer's set-up. Its gradient now is rpg_loss's on independently computed log-probs plus the
    coefficient times the model's own load-balancing loss."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    tok = build_char_tokenizer("0123456789+=")
    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_experts=4,
                         num_experts_per_tok=2, router_aux_loss_coef=0.5, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)  # fmt: skip
    model = Qwen3MoeForCausalLM(cfg)
    args = RPGConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_steps=2,
                     max_completion_length=5, use_cpu=True, report_to="none", save_strategy="no", bf16=False,
                     disable_tqdm=True, num_iterations=2, rpg_beta=0.1, learning_rate=3e-2)  # fmt: skip
    trainer = RecordingTrainer(model, count_ones, args=args, processing_class=tok,
                               train_dataset=datasets.Dataset.from_dict({"prompt": PROMPTS * 2}))  # fmt: skip
    trainer.seen = []
    trainer.train()
    assert trainer.aux_loss_enabled and trainer.router_aux_loss_coef == 0.5
    assert any("aux_loss" in h for h in trainer.state.log_history)
    inputs, params = trainer.seen[-1], [p for p in model.parameters() if p.requires_grad]
    model.train()
    got = param_grads(model, [lambda: trainer.compute_loss(model, inputs)])

    def expected():
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        aux = model(input_ids=ids, attention_mask=attn, output_router_logits=True).aux_loss
        old = inputs["old_per_token_logps"]  # the second step re-uses the first's batch: off-policy
        logp = independent_logp(model, inputs)
        loss = rpg_loss(logp, old, inputs["advantages"], inputs["completion_mask"], divergence="urkl",
                        style="reinforce", beta=0.1, clip="dual", eps_low=0.2, eps_high=0.28, c=10.0).loss  # fmt: skip
        return loss + 0.5 * aux

    want = param_grads(model, [expected])
    router = [i for i, (n, _) in enumerate(model.named_parameters()) if "gate.weight" in n and "mlp" in n]
    assert router and all(want[i].abs().sum() > 0 for i in router)
    assert len(got) == len(params)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=2e-4, atol=1e-6)

    # as GRPOTrainer: the router loss is divided by the accumulation steps in training, not in evaluation
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    for training, steps in ((True, 4), (False, 4)):
        model.train(training)
        trainer.current_gradient_accumulation_steps = steps
        with torch.no_grad():
            aux = model(input_ids=ids, attention_mask=attn, output_router_logits=True).aux_loss
            with_aux = trainer.compute_loss(model, inputs)
            trainer.aux_loss_enabled = False
            without = trainer.compute_loss(model, inputs)
            trainer.aux_loss_enabled = True
        torch.testing.assert_close(with_aux - without, 0.5 * aux / (steps if training else 1), rtol=1e-5, atol=1e-7)


def test_clip_none_from_the_command_line(tmp_path):
    """HfArgumentParser gives `--clip none` as a string; it was refused as an unknown clip (a probe's)."""
    from transformers import HfArgumentParser

    for word in ("none", "None", "null"):
        argv = ["--output_dir", str(tmp_path), "--clip", word, "--use_cpu", "true", "--num_generations", "4",
                "--per_device_train_batch_size", "8"]  # fmt: skip
        (args,) = HfArgumentParser(RPGConfig).parse_args_into_dataclasses(argv)
        assert args.clip is None and args.options().clip is None


def huge_reward(completions, **kwargs):
    """1e39 for the third completion: past float32's range, so inf in TRL's reward tensor."""
    return [1e39 if i == 2 else 0.0 for i in range(len(completions))]


def test_an_infinite_reward_is_named(tmp_path):
    """A reward function's inf (or 1e39, inf in float32) became an advantage of -+3.4e38 under TRL's nan_to_num, and
    the step failed with rpg_loss's overflow blaming "a ratio, beta or an advantage" (|A| up to 3.40282e+38): the
    function and the completion are named, in one line, before any update."""
    trainer = make_trainer(tmp_path, max_steps=1, reward_funcs=[count_ones, huge_reward])
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(ValueError) as info:
        trainer.train()
    message = str(info.value)
    assert message.startswith("RPGTrainer: reward function 'huge_reward' gave inf for completion 2 of the generation")
    assert "\n" not in message and "1 infinite in all" in message
    assert all(torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True))


def test_a_weighted_reward_sum_past_float32_is_named(tmp_path):
    """Finite rewards whose weighted sum (TRL's reward) leaves float32 (a weight 1e30 on a reward 1e10) failed as
    rpg_loss's overflow, as an infinite reward did: the completion is named, before any update."""

    def large(completions, **kwargs):
        return [1e10 if i == 3 else 0.0 for i in range(len(completions))]

    trainer = make_trainer(tmp_path, max_steps=1, reward_funcs=[count_ones, large], reward_weights=[1.0, 1e30])
    with pytest.raises(ValueError, match=r"^RPGTrainer: the weighted sum of the rewards of completion 3 \(reward_"):
        trainer.train()


def nan_at_1(completions, **kwargs):
    """NaN for the second completion, as a float."""
    return [math.nan if i == 1 else 0.0 for i in range(len(completions))]


async def nan_at_1_async(completions, **kwargs):
    """NaN for the second completion, as numpy's float32, from an async function (TRL runs it on its own loop)."""
    import numpy as np

    return [np.float32("nan") if i == 1 else 0.0 for i in range(len(completions))]


class NaNAt1:
    """A callable object (no __name__ of its own) giving a one-element tensor NaN for the second completion."""

    def __call__(self, completions, **kwargs):
        return [torch.tensor(math.nan) if i == 1 else 0.0 for i in range(len(completions))]


@pytest.mark.parametrize(
    "func, name", [(nan_at_1, "nan_at_1"), (nan_at_1_async, "nan_at_1_async"), (NaNAt1(), "NaNAt1")]
)
def test_a_nan_reward_is_named(tmp_path, func, name):
    """TRL reads a NaN reward as None ("does not apply"): a function whose rewards were all NaN trained nothing,
    with only TRL's warning. A NaN (float, numpy, tensor; sync or async function) is named as an infinite reward is,
    in one line, before any update; the name is TRL's for the function."""
    trainer = make_trainer(tmp_path, max_steps=1, reward_funcs=[count_ones, func])
    assert trainer.reward_func_names == ["count_ones", name]
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(ValueError) as info:
        trainer.train()
    message = str(info.value)
    assert message.startswith(f"RPGTrainer: reward function {name!r} gave NaN for completion 1 of the generation")
    assert "\n" not in message and "1 NaN in all" in message
    assert all(torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True))


def test_none_rewards_still_do_not_apply(tmp_path):
    """None is TRL's "does not apply" and stays so: a function giving None for every other completion trains, its
    Nones NaN in TRL's reward table, and the function keeps its signature for whoever inspects it."""
    import inspect

    def some_none(completions, trainer_state=None, **kwargs):
        return [None if i % 2 else 1.0 for i in range(len(completions))]

    trainer = make_trainer(tmp_path, max_steps=1, reward_funcs=[count_ones, some_none])
    assert "trainer_state" in inspect.signature(trainer.reward_funcs[1]).parameters
    trainer.train()
    assert trainer.state.global_step == 1


def test_a_reward_models_nan_is_named(tmp_path):
    """A reward model has no None: a NaN score (here every one, from a NaN head) trained nothing under TRL's rule.
    It is named as a function's NaN is."""
    from transformers import AutoModelForSequenceClassification

    tok = build_char_tokenizer("0123456789+=")
    config = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=32).config
    config.num_labels, config.name_or_path = 1, "tiny-scorer"
    scorer = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():
        scorer.score.weight.fill_(math.nan)
    trainer = make_trainer(
        tmp_path,
        max_steps=1,
        reward_funcs=[count_ones, scorer],
        trainer_kwargs={"reward_processing_classes": [None, tok]},
    )
    with pytest.raises(
        ValueError, match=r"^RPGTrainer: reward function 'tiny-scorer' gave NaN for completion 0 .*\(8 NaN "
    ):
        trainer.train()


def test_a_nan_on_another_process_is_refused_on_every_process(tmp_path, monkeypatch):
    """Each process scores its own completions, so a NaN on one process must stop every process (one raising
    alone leaves the others waiting in their next collective): the NaN marks are gathered as the rewards are. Here
    this process's rewards hold no NaN and the gather brings another process's mark for its completion 1, which is
    completion 9 of the generation batch."""
    trainer = make_trainer(tmp_path, max_steps=1, reward_funcs=[count_ones, count_ones])
    real_gather = trainer.accelerator.gather
    gathered = []

    def gather_two(tensor):
        if tensor.dim() == 2 and not tensor.is_floating_point():  # the NaN marks: (completions, functions)
            other = torch.zeros_like(tensor)
            other[1, 1] = 1
            gathered.append(tensor)
            return torch.cat([tensor, other])
        return real_gather(tensor)

    monkeypatch.setattr(trainer.accelerator, "gather", gather_two)
    with pytest.raises(ValueError, match=r"^RPGTrainer: reward function 'count_ones' gave NaN for completion 9 of "):
        trainer.train()
    assert len(gathered) == 1 and not gathered[0].any()


TWO_PROCESS_SCRIPT = """
import math, os, sys
import datasets
from rpgrl.integrations.trl import RPGConfig, RPGTrainer
from rpgrl.models import build_char_tokenizer, build_tiny_model

rank = int(os.environ["RANK"])
def count_ones(completions, **kwargs):
    return [float(c.count("1")) for c in completions]
def nan_on_rank_1(completions, **kwargs):
    return [math.nan if rank == 1 and i == 1 else 0.0 for i in range(len(completions))]

tok = build_char_tokenizer("0123456789+=")
model = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=32)
args = RPGConfig(output_dir=sys.argv[1], per_device_train_batch_size=4, num_generations=4, max_completion_length=4,
                 max_steps=1, report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True, bf16=False)
trainer = RPGTrainer(model, [count_ones, nan_on_rank_1], args=args, processing_class=tok,
                     train_dataset=datasets.Dataset.from_dict({"prompt": ["1+2=", "3+4="] * 8}))
try:
    trainer.train()
    outcome = "trained"
except ValueError as e:
    outcome = str(e)
with open(os.path.join(sys.argv[1], f"rank{rank}.txt"), "w") as f:
    f.write(outcome)
"""


@pytest.mark.slow  # two real processes, ~45 s: `pytest -m slow`; the gather is checked in the default run by
@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed (gloo)")  # a simulated one
def test_a_nan_on_one_process_stops_both_processes_alike(tmp_path):
    """Two real processes (torch.distributed.run, gloo, CPU): the NaN is process 1's alone, and each process raises
    the same one line naming completion 5 of the gathered batch (process 1's second); none trains on, none hangs."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "two.py").write_text(TWO_PROCESS_SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import rpgrl

    src = str(Path(rpgrl.__file__).parents[1])  # this rpgrl, whatever the environment installed
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(port), str(tmp_path / "two.py"), str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    outcomes = [p.read_text() if p.exists() else None for p in (tmp_path / "out" / f"rank{r}.txt" for r in (0, 1))]
    message = "RPGTrainer: reward function 'nan_on_rank_1' gave NaN for completion 5 of the generation batch"
    assert all(o is not None and o.startswith(message) for o in outcomes), (outcomes, done.stderr[-3000:])
    assert outcomes[0] == outcomes[1] and "\n" not in outcomes[0]


def test_rpg_trainer_needs_rpg_config(tmp_path):
    tok = build_char_tokenizer("0123456789+=")
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=32)
    args = GRPOConfig(str(tmp_path), num_generations=4, per_device_train_batch_size=8, report_to="none", use_cpu=True)
    with pytest.raises(TypeError, match="RPGConfig"):
        RPGTrainer(model, count_ones, args=args, processing_class=tok)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_an_all_masked_micro_batch_reports_every_metric_as_nan(level):
    """TRL gathers each metric over processes one by one; a process whose micro-batch had no valid token (all its
    completions truncated under mask_truncated_completions) reported none and left the others waiting in their
    collectives. Now the same names, each NaN, which the trainer's nanmean leaves out; loss and gradient 0."""
    from rpgrl.integrations._common import rpg_loss_nonempty

    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 6, generator=g, dtype=torch.float64)).requires_grad_()
    old = logp.detach() - 0.1
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    opts = RPGConfig(output_dir="unused", use_cpu=True, level=level, rpg_beta=0.05).rpg_options()
    full = rpg_loss_nonempty(logp, old, adv, torch.ones(4, 6, dtype=torch.bool), **opts).metrics
    empty = rpg_loss_nonempty(logp, old, adv, torch.zeros(4, 6, dtype=torch.bool), **opts)
    assert sorted(empty.metrics) == sorted(full) and all(math.isnan(float(v)) for v in empty.metrics.values())
    (grad,) = torch.autograd.grad(empty.loss, logp)
    assert empty.loss.item() == 0 and grad.abs().sum() == 0
    assert torch.tensor([float(full["kl/urkl"]), float("nan")]).nanmean() == float(full["kl/urkl"])
