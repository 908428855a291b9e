"""Config tree: overrides are type-checked, every field is documented once, saved configs round-trip."""

import dataclasses
import json

import pytest

from rpgrl.config import (
    SECTIONS,
    Config,
    apply_overrides,
    check,
    config_from_dict,
    config_to_dict,
    field_docs,
    help_text,
)
from rpgrl.errors import UsageError


def test_every_field_documented_once_and_in_help():
    cfg = Config()
    text = help_text(cfg)
    for sec in SECTIONS:
        cls = type(getattr(cfg, sec))
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{sec}.{f.name} has no docstring"
            assert f"--{sec}.{f.name} " in text
            assert docs[f.name] in text


@pytest.mark.parametrize(
    "key, text, expected",
    [
        ("loss.beta", "0.05", 0.05),  # float
        ("loss.beta", "1e-3", 1e-3),
        ("rollout.group_size", "4", 4),  # int
        ("train.progress", "false", False),  # bool
        ("train.progress", "1", True),
        ("rollout.gen_prompts", "none", None),  # optional -> None
        ("rollout.gen_prompts", "96", 96),  # optional -> int
        ("loss.clip", "None", None),
        ("loss.clip", "truncate", "truncate"),
        ("loss.divergence", "fkl", "fkl"),  # literal
        ("optim.betas", "0.8, 0.95", (0.8, 0.95)),  # tuple
        ("model.path", "/some/folder", "/some/folder"),  # str
        ("train.max-steps", "7", 7),  # dashes accepted for underscores
    ],
)
def test_overrides_parse_by_type(key, text, expected):
    cfg = apply_overrides(Config(), [(key, text)])
    sec, name = key.split(".")
    assert getattr(getattr(cfg, sec), name.replace("-", "_")) == expected


@pytest.mark.parametrize(
    "key, text, needle",
    [
        ("loss.bta", "0.1", "unknown config key --loss.bta"),  # unknown field, lists valid ones
        ("los.beta", "0.1", "unknown config key --los.beta"),  # unknown section
        ("beta", "0.1", "unknown config key --beta"),  # no section
        ("rollout.group_size", "4.5", "--rollout.group_size: expected an integer"),
        ("loss.beta", "big", "--loss.beta: expected a number"),
        ("train.progress", "maybe", "--train.progress: expected true or false"),
        ("loss.divergence", "kl", "--loss.divergence: expected one of fkl, rkl, ufkl, urkl"),
        ("optim.betas", "0.9", "--optim.betas: expected 2 comma-separated values"),
        ("rollout.gen_prompts", "many", "--rollout.gen_prompts"),
    ],
)
def test_bad_overrides_raise_one_line(key, text, needle):
    with pytest.raises(UsageError) as e:
        apply_overrides(Config(), [(key, text)])
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_field_error_lists_fields():
    with pytest.raises(UsageError, match="fields of loss: name, advantage, divergence"):
        apply_overrides(Config(), [("loss.nope", "1")])


def test_json_round_trip_and_type_checks():
    cfg = apply_overrides(Config(), [("optim.betas", "0.5,0.6"), ("rollout.gen_prompts", "3"), ("loss.clip", "none")])
    d = json.loads(json.dumps(config_to_dict(cfg)))
    assert config_from_dict(d) == cfg
    assert config_from_dict({}) == Config()
    bad = [
        ({"train": {"max_steps": True}}, "train.max_steps: expected int"),  # bool is not an int
        ({"train": {"max_steps": 1.5}}, "train.max_steps: expected int"),
        ({"loss": {"beta": "0.1"}}, "loss.beta: expected float"),
        ({"loss": {"style": "other"}}, "loss.style: expected one of"),
        ({"optim": {"betas": [0.9]}}, "optim.betas: expected 2 values"),
        ({"nope": {}}, "unknown config section 'nope'"),
        ({"loss": {"nope": 1}}, "unknown config key loss.nope"),
    ]
    for d, needle in bad:
        with pytest.raises(UsageError, match=needle.replace("(", r"\(")):
            config_from_dict(d)
    assert config_from_dict({"loss": {"beta": 1}}).loss.beta == 1.0  # int accepted where a float is expected


def test_derived_values_are_properties():
    cfg = apply_overrides(Config(), [("rollout.prompts_per_step", "12"), ("rollout.group_size", "3")])
    assert cfg.rollout.batch_size == 36
    assert cfg.rollout.prompts_per_gen_batch == 12
    cfg = apply_overrides(cfg, [("train.mini_batch_prompts", "4")])
    assert cfg.mini_batches_per_epoch == 3
    assert "batch_size" not in {f.name for f in dataclasses.fields(cfg.rollout)}


@pytest.mark.parametrize(
    "overrides, needle",
    [
        ([("loss.c", "1.0")], "loss.c must be > 1"),
        ([("train.mini_batch_prompts", "5")], "train.mini_batch_prompts must divide rollout.prompts_per_step"),
        ([("rollout.group_size", "0")], "rollout.group_size must be >= 1"),
        ([("rollout.top_p", "0")], "rollout.top_p must be in (0, 1]"),
        ([("model.path", "none")], "model.path is not set"),
        ([("data.train", "none")], "data.train is not set"),
        ([("loss.clip", "hard")], "loss.clip must be dual, truncate or none"),
        ([("model.num_heads", "3")], "model.hidden_size must be divisible by model.num_heads"),
        # head size 3: RoPE rotates pairs (passed every check, then a traceback in the first forward)
        ([("model.hidden_size", "12"), ("model.num_heads", "4")], "model.hidden_size / model.num_heads must be even"),
        ([("optim.eps", "-1e-8")], "optim.eps must be >= 1.175e-38"),  # torch's AdamW refuses it mid-setup
        ([("optim.eps", "0")], "optim.eps must be >= 1.175e-38 (float32's smallest normal"),  # 0 / 0 -> NaN weights
        ([("optim.eps", "1e-46")], "optim.eps must be >= 1.175e-38"),  # 0 in float32
        ([("loss.max_log_w", "-1e30")], "max_log_w must be none or finite and > 0"),  # every gradient stopped
        ([("rollout.temperature", "1e-300")], "rollout.temperature must be >= 1e-8"),  # logits / T overflow
        # above 1e4 float32 log-probs lose the logits' differences (at 1e30 the gradient was 0)
        ([("rollout.temperature", "1e30")], "rollout.temperature must be <= 1e4 (above, float32 log-probs"),
        ([("train.seed", str(2**63))], "train.seed must be in [0, 2**63 - 1]"),  # torch's generators: 64 bits
        ([("train.seed", "-1")], "train.seed must be in [0, 2**63 - 1]"),
        ([("train.threads", "100000")], "train.threads must be <= 4 x the"),  # crashed the process
        # set where the run ignores them: refused rather than silently dropped
        ([("loss.kl", "k3")], "loss.kl applies to the PPO-family losses"),
        ([("data.val", "val.jsonl")], "data.val applies to file datasets"),
        ([("rollout.gen_prompts", "64")], "rollout.gen_prompts applies to rollout.group_filter fill only"),
        ([("eval.benchmarks", " , ")], "eval.benchmarks names no file"),
        ([("ref.period", "5")], "ref.period applies to ref.mode periodic only (ref.mode is behaviour)"),
        ([("ref.mode", "periodic"), ("ref.kappa", "0.5")], "ref.kappa applies to ref.mode adaptive only"),
        ([("ref.mode", "fixed"), ("ref.ema", "0.5")], "ref.ema applies to ref.mode adaptive only (ref.mode is fixed)"),
        ([("data.prompt_key", "question")], "data.prompt_key applies to file datasets only (the synthetic task"),
        ([("data.answer_key", "solution")], "data.answer_key applies to file datasets only"),
        ([("data.train", "t.jsonl"), ("data.num_train", "5")], "data.num_train applies to the synthetic task only"),
        ([("data.train", "t.jsonl"), ("data.num_val", "5")], "data.num_val applies to the synthetic task only"),
        # (a review's probe: accepted, recorded in config.json and ignored)
        ([("loss.name", "ppo"), ("loss.divergence", "fkl")], "loss.divergence applies to loss.name rpg only"),
        ([("loss.name", "ppo"), ("loss.style", "differentiable")], "loss.style applies to loss.name rpg only"),
        ([("loss.name", "dapo"), ("loss.level", "sequence")], "loss.level applies to loss.name rpg only"),
        ([("loss.name", "ppo"), ("loss.clip_branch", "raw")], "loss.clip_branch applies to loss.name rpg only"),
        (
            [("loss.name", "grpo"), ("loss.kl", "k3"), ("loss.clip", "truncate")],
            "loss.name grpo takes loss.clip dual or none",
        ),
        ([("loss.name", "grpo")], "loss.kl is none, but loss.name grpo is PPO plus a KL term"),
        ([("loss.name", "dapo"), ("loss.kl", "k3")], "loss.kl applies to ppo, grpo and reinforce_pp; dapo has no KL"),
        ([("loss.name", "ppo"), ("loss.beta", "0.1")], "only (loss.kl is none): drop loss.beta"),
        ([("loss.name", "dapo"), ("loss.kl_clamp", "10")], "only (loss.name dapo has no KL term): drop loss.kl_clamp"),
        # a KL term weighed by beta 0 trains nothing (`dapo --loss.name grpo --loss.kl k3`: dapo's beta 0)
        ([("loss.name", "ppo"), ("loss.kl", "k1"), ("loss.beta", "0")], "set loss.beta > 0, or drop loss.kl"),
        # grpo needs loss.kl: the way out is ppo (dropping loss.kl sent the user back here, a review's)
        (
            [("loss.name", "grpo"), ("loss.kl", "k3"), ("loss.beta", "0")],
            "loss.kl k3 with loss.beta 0 adds no KL term (`dapo --loss.name grpo --loss.kl k3`: dapo's beta 0): set "
            "loss.beta > 0, or use loss.name ppo without loss.kl (GRPO without its KL term)",
        ),
        ([("loss.analogue", "paper")], "loss.analogue applies to loss.style differentiable"),
        ([("loss.kl_in_clip", "false")], "loss.kl_in_clip applies to loss.style differentiable"),
        # the dual clip's options without it (a review found verl accepting them; the gradient is the default's)
        (
            [("loss.style", "differentiable"), ("loss.clip", "none"), ("loss.clip_branch", "raw")],
            "loss.clip_branch applies to loss.clip dual only (loss.clip is none)",
        ),
        (
            [("loss.style", "differentiable"), ("loss.clip", "none"), ("loss.analogue", "paper")],
            "loss.analogue applies to loss.style differentiable with loss.clip dual",
        ),
        ([("loss.clip", "truncate"), ("loss.clip_branch", "raw")], "loss.clip_branch applies to loss.clip dual"),
        ([("eval.samples", "4")], "eval.samples applies to eval.benchmarks only (no benchmark is set)"),
        ([("eval.scoring", "strict")], "eval.scoring applies to eval.benchmarks only"),
        ([("rollout.overlong_factor", "0.5")], "rollout.overlong_factor applies to an overlong penalty"),
        ([("rollout.max_gen_batches", "3")], "rollout.max_gen_batches applies to rollout.group_filter fill only"),
        ([("model.path", "m"), ("model.hidden_size", "256")], "model.hidden_size applies to model.path tiny only"),
        ([("model.path", "m"), ("model.tie_embeddings", "true")], "model.tie_embeddings applies to model.path tiny"),
        ([("sft.max_steps", "0"), ("sft.lr", "1e-3")], "sft.lr applies to a warm start (sft.max_steps > 0) only"),
        ([("sft.max_steps", "0"), ("sft.target_accuracy", "0.5")], "sft.target_accuracy applies to a warm start"),
        ([("train.mini_batch_prompts", "none"), ("train.old_logp", "forward")], "train.old_logp applies to off-policy"),
        ([("train.mini_batch_prompts", "32"), ("train.old_logp", "sampler")], "train.old_logp applies to off-policy"),
        # an empty path is the current directory to pathlib ("`.` is not a file"): refused by name
        ([("data.train", "")], "data.train is empty"),
        ([("data.train", "t.jsonl"), ("data.val", "")], "data.val is empty"),
        ([("model.path", " ")], "model.path is empty"),
        # sizes the synthetic task cannot give, and floats a float32 tensor cannot hold
        ([("data.num_train", "324001")], "data.num_train must be <= 324000"),
        ([("data.num_val", "40501")], "data.num_val must be <= 40500"),
    ],
)
def test_check_rejects_unusable_values(overrides, needle):
    with pytest.raises(UsageError) as e:
        check(apply_overrides(Config(), overrides))
    assert needle in str(e.value)


def test_an_ignored_option_a_saved_run_holds_is_not_refused_on_resume():
    """A run saved before an option was refused holds it in config.json, where --resume cannot drop it: the saved
    config is the check's base, so it passes there; set by the user, the one line says to drop it."""
    saved = apply_overrides(Config(), [("train.mini_batch_prompts", "none"), ("train.old_logp", "forward")])
    check(saved, base=saved)
    with pytest.raises(UsageError, match=r"train.old_logp applies to off-policy .*: drop train.old_logp \(got"):
        check(saved)
    check(apply_overrides(Config(), [("train.mini_batch_prompts", "none"), ("train.old_logp", "auto")]))


def test_default_passes_check():
    assert check(Config()) == Config()


def _float_keys():
    cfg = Config()
    for sec in SECTIONS:
        for f in dataclasses.fields(getattr(cfg, sec)):
            value = getattr(getattr(cfg, sec), f.name)
            if isinstance(value, float) or (isinstance(value, tuple) and isinstance(value[0], float)):
                yield f"{sec}.{f.name}", value


@pytest.mark.parametrize("bad", ["inf", "-inf", "nan"])
def test_check_rejects_non_finite_floats_in_every_field(bad):
    keys = list(_float_keys())
    named = {"optim.lr", "loss.c", "loss.eps_high", "rollout.temperature", "ref.kappa", "optim.betas"}
    assert named <= dict(keys).keys()
    for key, value in keys:
        text = f"{value[0]},{bad}" if isinstance(value, tuple) else bad
        with pytest.raises(UsageError, match=f"^{key} must be a finite number"):
            check(apply_overrides(Config(), [(key, text)]))


def test_check_rejects_floats_beyond_float32_in_every_field():
    """Finite in Python but inf in a float32 tensor (a learning rate, a clip bound, a reward factor): refused by
    name; float32's largest passes the range check (and then each key's own rule)."""
    keys = list(_float_keys())
    for key, value in keys:
        for big in ("1e39", "-3.5e38"):
            text = f"{value[0]},{big}" if isinstance(value, tuple) else big
            with pytest.raises(UsageError, match=f"^{key} must be at most 3.403e\\+38 in size"):
                check(apply_overrides(Config(), [(key, text)]))
    edge = apply_overrides(Config(), [("loss.c", "3.4028234663852886e38")])
    assert check(edge).loss.c == 3.4028234663852886e38


def test_options_that_apply_are_accepted():
    cases = [
        [("ref.mode", "periodic"), ("ref.period", "5")],
        [("ref.mode", "adaptive"), ("ref.kappa", "0.5"), ("ref.ema", "0.5")],
        [("data.train", "t.jsonl"), ("data.prompt_key", "q"), ("data.answer_key", "a"), ("sft.max_steps", "0")],
        [("data.num_train", "5"), ("data.num_val", "5")],  # the synthetic task's sizes
    ]
    for overrides in cases:
        check(apply_overrides(Config(), overrides))


def test_group_of_one_is_refused_unless_a_batch_baseline_can_use_it():
    for filt in ("drop", "fill", "off"):
        with pytest.raises(UsageError, match="rollout.group_size must be >= 2"):
            check(apply_overrides(Config(), [("rollout.group_size", "1"), ("rollout.group_filter", filt)]))
    ok = [("rollout.group_size", "1"), ("rollout.group_filter", "off"), ("loss.advantage", "reinforce_pp")]
    check(apply_overrides(Config(), ok))  # REINFORCE++ whitens over the batch: G = 1 is a real algorithm


def test_max_log_w_reaches_rpg_loss_and_is_refused_elsewhere():
    from rpgrl.config import Config, apply_overrides, check
    from rpgrl.errors import UsageError
    from rpgrl.trainer.setup import loss_options

    cfg = check(apply_overrides(Config(), [("loss.max_log_w", "2.5"), ("loss.eps_low", "1")]))
    assert loss_options(cfg.loss)["max_log_w"] == 2.5 and loss_options(cfg.loss)["eps_low"] == 1.0
    assert loss_options(Config().loss)["max_log_w"] is None
    with pytest.raises(UsageError, match="loss.max_log_w applies to loss.name rpg only"):
        check(apply_overrides(Config(), [("loss.name", "grpo"), ("loss.max_log_w", "1")]))
    with pytest.raises(UsageError, match=r"loss.eps_low must be in \[0, 1\]"):
        check(apply_overrides(Config(), [("loss.eps_low", "1.5")]))


def test_options_a_preset_or_saved_run_sets_are_not_refused_as_unused():
    """`rpg-urkl-released --loss.clip none`: the preset's branch, kl_in_clip and analogue go unused, but the user set
    none of them; they were refused one at a time, each named as if the user had. Refused all at once without a
    base (the Python API), and not at all against the preset the flags were applied to."""
    from rpgrl.presets import get_preset

    preset = get_preset("rpg-urkl-released")
    flags = [("data.train", "t.jsonl"), ("data.reward", "math"), ("model.path", "m"), ("loss.clip", "none")]
    with pytest.raises(UsageError, match=r"loss.clip_branch .*\(also unused: loss.kl_in_clip\)"):
        check(apply_overrides(preset, flags))
    check(apply_overrides(preset, flags), base=preset)
    paper = get_preset("rpg-urkl")  # the paper's: branch 'effective'
    with pytest.raises(UsageError, match="loss.clip_branch applies to loss.clip dual"):  # the user's own value
        check(apply_overrides(paper, [*flags, ("loss.clip_branch", "raw")]), base=paper)


def test_a_presets_kl_clamp_left_without_a_separate_kl_term_is_dropped_not_refused():
    """`rpg-urkl-released --loss.kl_in_clip true`: the KL moves into the clip, so the preset's clamp of a separate KL
    term has nothing to clamp. It was refused as if the user had set it (a review's); now the run drops it, and
    rpg_loss takes the options. Set by the user, it is refused as unused, naming why."""
    import torch

    from rpgrl import rpg_loss
    from rpgrl.presets import get_preset
    from rpgrl.trainer.setup import loss_options

    preset = get_preset("rpg-urkl-released")
    assert preset.loss.kl_clamp == 10.0
    flags = [("data.train", "t.jsonl"), ("data.reward", "math"), ("model.path", "m"), ("loss.kl_in_clip", "true")]
    cfg = check(apply_overrides(preset, flags), base=preset)
    opts = loss_options(cfg.loss)
    assert opts["kl_value_clamp"] is None and opts["kl_in_clip"] is True and opts["branch"] == "raw"
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    rpg_loss(logp, logp.detach() - 0.3, torch.tensor([1.0]), torch.ones(1, 2), **opts).loss.backward()
    with pytest.raises(UsageError, match=r"loss.kl_clamp applies to a separate KL term .*loss.kl_in_clip true"):
        check(apply_overrides(preset, flags))
    with pytest.raises(UsageError, match="loss.kl_clamp applies to a separate KL term"):  # the user's own clamp
        check(apply_overrides(Config(), [("loss.style", "differentiable"), ("loss.kl_clamp", "5")]))
    separate = check(apply_overrides(Config(), [("loss.style", "differentiable"), ("loss.clip", "none"),
                                                ("loss.kl_clamp", "5")]))  # fmt: skip
    assert loss_options(separate.loss)["kl_value_clamp"] == 5.0


def test_a_clip_range_or_cap_the_clip_does_not_read_is_refused_as_unused():
    """`--loss.clip none --loss.eps_high 0.3` ran as if the range were unset, and `--loss.clip truncate --loss.c 5`
    ignored c: both refused in one line naming the key and why. The PPO family clips with its range whatever
    loss.clip is ('dual' adds c): there only c is refused without the dual clip."""
    from rpgrl.presets import get_preset

    cases = [([("loss.clip", "none"), ("loss.eps_high", "0.3")], "loss.eps_high applies to loss.clip dual or "
              r"truncate only \(loss.clip is none\)"),
             ([("loss.clip", "none"), ("loss.eps_low", "0.1"), ("loss.c", "5")], r"loss.eps_low .*\(also unused: "
              r"loss.c\)"),
             ([("loss.clip", "truncate"), ("loss.c", "5")], r"loss.c applies to loss.clip dual .*loss.clip is "
              "truncate")]  # fmt: skip
    for flags, message in cases:
        with pytest.raises(UsageError, match=message):
            check(apply_overrides(Config(), flags), base=Config())
    check(apply_overrides(Config(), [("loss.clip", "truncate"), ("loss.eps_high", "0.3")]), base=Config())
    grpo = get_preset("grpo")
    files = [("data.train", "t.jsonl"), ("data.reward", "math"), ("model.path", "m"), ("loss.clip", "none")]
    check(apply_overrides(grpo, [*files, ("loss.eps_high", "0.3")]), base=grpo)  # PPO's range: read
    with pytest.raises(UsageError, match=r"loss.c applies to loss.clip dual .*\(loss.clip is none\)"):
        check(apply_overrides(grpo, [*files, ("loss.c", "5")]), base=grpo)


def test_a_presets_own_kl_and_generation_batch_are_not_refused_as_unused():
    """`dapo --rollout.group_filter off` refused the preset's gen_prompts, `grpo --loss.name rpg` its loss.kl (a
    review's): not the user's settings. Set by the user, still refused."""
    from rpgrl.presets import get_preset

    common = [("data.train", "t.jsonl"), ("data.reward", "math"), ("model.path", "m")]
    for name, flags, key in (("dapo", [("rollout.group_filter", "off")], "rollout.gen_prompts"),
                             ("grpo", [("loss.name", "rpg")], "loss.kl")):  # fmt: skip
        preset = get_preset(name)
        cfg = apply_overrides(preset, [*common, *flags])
        check(cfg, base=preset)
        with pytest.raises(UsageError, match=key):
            check(cfg)
    grpo = get_preset("grpo")  # GRPO with its KL weighed by 0: the user's beta, the preset's loss.kl
    check(apply_overrides(grpo, [*common, ("loss.beta", "0")]), base=grpo)
    dapo = get_preset("dapo")  # the user's loss.kl at dapo's beta 0: trains no KL term
    with pytest.raises(UsageError, match=r"loss.kl k3 with loss.beta 0 adds no KL term .*or use loss.name ppo"):
        check(apply_overrides(dapo, [*common, ("loss.name", "grpo"), ("loss.kl", "k3")]), base=dapo)


def test_a_ppo_family_loss_without_loss_kl_trains_no_kl_term():
    """`--loss.name reinforce_pp` with loss.kl none trained reinforce_pp's own default k1 at beta 1e-4 (the config
    said no KL; a review's): loss_options says kl=None, and the loss equals the KL-free PPO loss."""
    import torch

    from rpgrl.objectives import get_loss, ppo_loss
    from rpgrl.trainer.setup import loss_options

    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old, adv, mask = torch.tensor([[-1.3, -1.8, -0.9]]), torch.tensor([1.0]), torch.ones(1, 3)
    for name in ("reinforce_pp", "ppo", "dapo"):
        cfg = check(apply_overrides(Config(), [("loss.name", name), ("loss.advantage", "grpo")]))
        opts = loss_options(cfg.loss)
        assert opts.get("kl") is None
        out = get_loss(name)(lp, old, adv, mask, **opts)
        plain = ppo_loss(lp, old, adv, mask, eps_low=opts["eps_low"], eps_high=opts["eps_high"], clip_c=opts["clip_c"])
        assert float(out.loss.detach()) == float(plain.loss.detach()) and "kl/penalty" not in out.metrics
    with_kl = check(apply_overrides(Config(), [("loss.name", "reinforce_pp"), ("loss.kl", "k1"), ("loss.beta", "0.5")]))
    out = get_loss("reinforce_pp")(lp, old, adv, mask, **loss_options(with_kl.loss))
    assert float(out.metrics["loss/kl"]) == pytest.approx(0.5 * float(out.metrics["kl/penalty"]))
