"""Tiny tokenizers and models: round trips, ids, reproducible init, save/load, loud errors."""

from __future__ import annotations

import json

import pytest
import torch

from rpgrl.errors import UsageError
from rpgrl.models import build_byte_tokenizer, build_char_tokenizer, build_tiny_model, load_model

CHARS = "0123456789+-=:\nAQnswer "


def test_char_tokenizer_ids_and_round_trip():
    tok = build_char_tokenizer(CHARS)
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2)
    assert len(tok) == 3 + len(CHARS)
    text = "Q:12+3\n2+3=5\nAnswer: 15"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id  # BOS prepended when encoding with special tokens
    assert ids[1:] == [3 + CHARS.index(c) for c in text]  # one token per character, in charset order
    assert tok(text, add_special_tokens=False)["input_ids"] == ids[1:]
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == text


def test_char_tokenizer_rejects_unknown_and_duplicate_chars():
    tok = build_char_tokenizer("0123")
    with pytest.raises(Exception):  # noqa: B017 - the tokenizers library raises a bare Exception
        tok("x")
    with pytest.raises(ValueError, match="duplicate"):
        build_char_tokenizer("00")


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii",
        "Let $x^2 + y^2 = 1$. Find \\frac{1}{2}.\n\nAnswer: 42",
        "héllo ∑ 日本語 😀 tabs\tand  double  spaces\n",
        "",
    ],
)
def test_byte_tokenizer_round_trips_utf8(text):
    tok = build_byte_tokenizer()
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert len(ids) - 1 == len(text.encode("utf-8"))  # one token per byte, no merges
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_chat_template_renders_user_message():
    tok = build_byte_tokenizer()
    msgs = [{"role": "user", "content": "What is 1+1?"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == "<|user|>\nWhat is 1+1?\n<|assistant|>\n"


def test_tiny_model_shape_params_and_reproducible_init():
    tok = build_char_tokenizer(CHARS)
    m = build_tiny_model(tok)
    assert m.dtype == torch.float32 and not m.training
    assert m.config.vocab_size == len(tok)
    # embeddings (tied) + 4 layers of attention (q 128x128+b, k/v 128x64+b, o 128x128) + SwiGLU MLP + 2 norms
    h, f, kv, v = 128, 384, 64, len(tok)
    per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * f + 2 * h
    assert sum(p.numel() for p in m.parameters()) == v * h + 4 * per_layer + h
    state = torch.random.get_rng_state()
    m2 = build_tiny_model(tok, seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values(), strict=True))
    m3 = build_tiny_model(tok, seed=1)
    assert not torch.equal(m.lm_head.weight, m3.lm_head.weight)


@pytest.mark.parametrize(
    "sizes",
    [dict(), dict(hidden=64, layers=3, heads=8, kv_heads=2, ffn=96, tie_embeddings=False),
     dict(hidden=48, layers=1, heads=3, kv_heads=3, ffn=20, tie_embeddings=True)],
)  # fmt: skip
def test_tiny_model_params_counts_the_built_model(sizes):
    from rpgrl.models import tiny_model_params

    tok = build_char_tokenizer(CHARS)
    model = build_tiny_model(tok, **sizes)
    full = dict(hidden=128, layers=4, heads=4, kv_heads=2, ffn=384, tie_embeddings=True) | sizes
    assert tiny_model_params(len(tok), **full) == sum(p.numel() for p in model.parameters())


def test_qwen3_and_bad_shapes():
    tok = build_char_tokenizer(CHARS)
    m = build_tiny_model(tok, arch="qwen3", hidden=32, layers=1, heads=4, kv_heads=2, ffn=64)
    out = m(torch.tensor([tok("Q:1+2")["input_ids"]]))
    assert out.logits.shape == (1, 6, len(tok))
    with pytest.raises(ValueError, match="heads"):
        build_tiny_model(tok, hidden=30, heads=4)
    with pytest.raises(ValueError, match="arch"):
        build_tiny_model(tok, arch="gpt2")


@pytest.mark.parametrize("builder", [lambda: build_char_tokenizer(CHARS), build_byte_tokenizer])
def test_save_and_load_round_trip(tmp_path, builder):
    tok = builder()
    m = build_tiny_model(tok, hidden=32, layers=1, heads=4, kv_heads=2, ffn=64)
    m.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    m2, tok2 = load_model(tmp_path)
    text = "Q:12+3\nAnswer: 15 "
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]
    assert tok2.decode(tok2(text)["input_ids"], skip_special_tokens=True) == text
    assert (tok2.pad_token_id, tok2.eos_token_id, tok2.padding_side) == (0, 1, "left")
    x = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        assert torch.equal(m(x).logits, m2(x).logits)
    m3, _ = load_model(tmp_path, dtype=torch.float64)
    assert m3.dtype == torch.float64


def test_a_config_json_that_is_not_an_object_is_one_line(saved_model):
    (saved_model / "config.json").write_text("[1, 2]")
    with pytest.raises(UsageError, match="cannot load the model in"):
        load_model(saved_model)


def test_load_model_errors_name_the_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(UsageError, match="nope"):
        load_model(missing)
    with pytest.raises(UsageError, match="config.json"):
        load_model(tmp_path)
    build_tiny_model(build_byte_tokenizer(), hidden=32, layers=1, heads=4, kv_heads=2, ffn=64).save_pretrained(tmp_path)
    with pytest.raises(UsageError, match="tokenizer"):
        load_model(tmp_path)


@pytest.fixture
def saved_model(tmp_path):
    tok = build_byte_tokenizer()
    build_tiny_model(tok, hidden=32, layers=1, heads=4, kv_heads=2, ffn=64).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return tmp_path


def _break_tokenizer_config(d):
    (d / "tokenizer_config.json").write_text("{broken")


def _truncate_weights(d):
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])


def _unknown_model_type(d):
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | {"model_type": "nosuchmodel"}))


def _more_layers(d):  # 12 tensors per Qwen2 layer (q|k|v weights and biases, o, gate|up|down, 2 norms) left random
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("layer_types", None)
    (d / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": 2}))


def _wider_ffn(d):
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | {"intermediate_size": 96}))


def _nan_weight(d):  # a checkpoint saved after a diverged step
    from safetensors.torch import load_file, save_file

    weights = load_file(d / "model.safetensors")
    weights["model.layers.0.mlp.up_proj.weight"][1, 2] = float("nan")
    save_file(weights, d / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize(
    "damage, match",
    [
        (_break_tokenizer_config, "cannot load the tokenizer of .*tokenizer_config.json is not a JSON object"),
        (_truncate_weights, "cannot load the model in .*deserializing header"),
        (_unknown_model_type, "cannot load the model in .*model type `nosuchmodel`"),
        (_more_layers, "do not match its config.json: 12 missing .e.g. model.layers.1"),
        (_wider_ffn, "do not match its config.json: tensor shapes differ"),
        (_nan_weight, "hold NaN or inf in 1 of 14 tensors .e.g. model.layers.0.mlp.up_proj.weight"),
    ],
    ids=["tokenizer-config", "truncated-weights", "model-type", "more-layers", "wider-ffn", "nan-weight"],
)
def test_broken_model_folders_are_one_line(saved_model, damage, match):
    damage(saved_model)
    with pytest.raises(UsageError, match=match) as info:
        load_model(saved_model)
    assert "\n" not in str(info.value)


def test_char_tokenizer_has_a_chat_template_only_if_it_can_spell_it():
    assert build_char_tokenizer(CHARS).chat_template is None  # the synthetic alphabet has no '<', '|', ...
    full = build_char_tokenizer(CHARS + "<|>uait")
    assert full.chat_template is not None
    ids = full.apply_chat_template([{"role": "user", "content": "1+2"}], add_generation_prompt=True)
    assert full.decode(ids if isinstance(ids, list) else ids["input_ids"]) == "<|user|>\n1+2\n<|assistant|>\n"


def test_a_training_runs_folder_given_as_the_model_names_its_model(tmp_path):
    """`rpgrl eval --model RUN` (or `--model.path RUN`) said only "no tokenizer files ... in model folder: RUN": the
    run's config.json is the trainer's; its model is RUN/model."""
    from rpgrl.models import load_tokenizer

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": {}, "loss": {}}))
    with pytest.raises(UsageError, match=f"in model folder: {run}$"):  # no model in it yet: no hint
        load_tokenizer(run)
    (run / "model" / "config.json").write_text("{}")
    with pytest.raises(UsageError, match=f"in model folder: {run} \\(a training run's folder: its model is "
                                         f"{run / 'model'}\\)$"):  # fmt: skip
        load_tokenizer(run)
    (run / "config.json").unlink()
    with pytest.raises(UsageError, match=f"not a model folder \\(no config.json\\): {run} \\(a training run"):
        load_tokenizer(run)
