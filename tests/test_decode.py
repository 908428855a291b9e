"""The static-cache decode step computes the model's own forward: logits against a full forward pass of the
`transformers` model (Qwen2, Qwen3, Llama; left padding, grouped-query attention, biases, q/k norms), and sampling
through it gives the same tokens and log-probs as the `transformers` path under a fixed seed."""

from __future__ import annotations

import copy

import pytest
import torch

import rpgrl.decode as static_decode
from rpgrl.decode import StaticDecoder, onednn_available, supported
from rpgrl.models import build_char_tokenizer, build_tiny_model
from rpgrl.rollout import compiler_missing, position_ids, sample, token_logprobs

CHARS = "0123456789+="


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(CHARS)


ONEDNN = onednn_available(torch.float32, torch.device("cpu"))


def _kernels(monkeypatch, kernel: str) -> None:
    """Move the thresholds so that the small test models take `kernel`'s products."""
    monkeypatch.setattr(static_decode, "WEIGHT_LEFT_MIN_HIDDEN", 0 if kernel == "weight_left" else 10**9)
    monkeypatch.setattr(static_decode, "ONEDNN_MIN_HIDDEN", 0 if kernel == "onednn" else 10**9)


@pytest.fixture(params=["rows", "weight_left", "onednn"])
def layout(request, monkeypatch):
    """Every form of the layer products: x @ w^T (small models), w @ x^T (from WEIGHT_LEFT_MIN_HIDDEN on) and
    oneDNN on reordered weights (float32, from ONEDNN_MIN_HIDDEN on); the test models are small, so the thresholds
    are moved to reach each. oneDNN takes float32 only: a float64 model falls back to x @ w^T."""
    if request.param == "onednn" and not ONEDNN:
        pytest.skip("this torch build has no oneDNN")
    _kernels(monkeypatch, request.param)
    return request.param


def llama(tok, dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, intermediate_size=96, attention_bias=True, rope_theta=500.0,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
    torch.manual_seed(3)
    return LlamaForCausalLM(cfg).to(dtype).eval()


def _random_norms(model):
    """Norm weights away from their initial ones, so that folding them into the products is exercised."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.rand(p.shape, generator=g, dtype=torch.float64) + 0.5)
    return model


def _random_biases(model):
    """Biases away from their zero initialisation (Qwen2's q/k/v, Llama's attention biases including o_proj's), so
    that the bias terms are exercised."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)
    return model


def _scaled_attention(model, scaling=0.2):
    """An attention scale other than 1/sqrt(head_dim) (the modules' own `scaling`, which their forward uses)."""
    for layer in model.model.layers:
        layer.self_attn.scaling = scaling
    return model


def models(tok, dtype=torch.float32):
    qwen2 = build_tiny_model(tok, hidden=48, layers=2, heads=6, kv_heads=2, ffn=96, seed=1)
    yield "qwen2", _random_biases(qwen2).to(dtype)
    yield (
        "qwen3",
        build_tiny_model(tok, hidden=48, layers=2, heads=6, kv_heads=3, ffn=96, arch="qwen3", seed=2).to(dtype),
    )
    yield "llama", _random_biases(llama(tok, dtype))
    yield "llama-scaling", _scaled_attention(llama(tok, dtype))
    yield (
        "qwen3-norms",
        _random_norms(
            build_tiny_model(tok, hidden=48, layers=2, heads=6, kv_heads=3, ffn=96, arch="qwen3", seed=6).to(dtype)
        ),
    )


PROMPTS = [[2, 4, 5, 13], [2, 6, 13], [2, 7, 8, 9, 13, 4, 5]]


def _padded(seqs):
    """Left-padded ids (pad 0) and attention mask, (len(seqs), longest)."""
    width = max(map(len, seqs))
    ids = torch.tensor([[0] * (width - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    return ids, mask


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "llama", "llama-scaling", "qwen3-norms"])
def test_step_logits_equal_a_full_forward(tok, name, layout):
    """Prefill the prompts, feed 6 more tokens one at a time through the static cache, and compare the prefill's
    logits and each step's with the model's forward over the whole left-padded sequence (float64: agreement to
    ~1e-12)."""
    model = dict(models(tok, torch.float64))[name]
    assert supported(model) is None
    assert StaticDecoder(model, 1, 1).kernel == ("rows" if layout == "onednn" else layout)  # oneDNN: float32 only
    got, ref, _ = _decode_and_forward(tok, model, model)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-10)


def _decode_and_forward(tok, model, reference, steps: int = 6):
    """The prompts prefilled through a StaticDecoder of `model`, then `steps` random tokens fed one at a time:
    its logits (B, 1 + steps, V), `reference`'s forward over the whole left-padded sequence at the same positions,
    and the decoder."""
    g = torch.Generator().manual_seed(0)
    extra = torch.randint(3, len(tok), (len(PROMPTS), steps), generator=g)
    ids, mask = _padded(PROMPTS)
    P = ids.shape[1]
    full_ids, full_mask = torch.cat([ids, extra], 1), torch.cat([mask, torch.ones_like(extra)], 1)
    with torch.no_grad():
        dec = StaticDecoder(model, len(PROMPTS), P + steps)
        got = [dec.prefill(ids, mask, position_ids(mask), 1)]
        pos = position_ids(mask)[:, -1] + 1
        got += [dec.step(extra[:, t], pos + t) for t in range(steps)]
        ref = reference(input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids(full_mask)).logits
    return torch.stack(got, 1), ref[:, P - 1 :], dec


@pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN")
@pytest.mark.parametrize("name", ["qwen2", "qwen3", "llama", "llama-scaling", "qwen3-norms"])
def test_onednn_step_logits_equal_a_float64_forward(tok, name, monkeypatch):
    """oneDNN's products (float32 only) against the same weights' forward in float64: the float32 rounding of the
    model's own float32 forward (each product's order of summation differs, nothing else)."""
    _kernels(monkeypatch, "onednn")
    model = dict(models(tok))[name]
    got, want, dec = _decode_and_forward(tok, model, copy.deepcopy(model).double())
    assert dec.kernel == "onednn"
    _, own, _ = _decode_and_forward(tok, model, model)  # the model's own float32 forward at the same positions
    err = (got.double() - want).abs().max().item()
    own_err = (own.double() - want).abs().max().item()
    assert err < 1e-5 and err < 20 * own_err + 1e-7, (err, own_err)


def test_kernel_choice(tok):
    """oneDNN from ONEDNN_MIN_HIDDEN on (float32, CPU), else w @ x^T from WEIGHT_LEFT_MIN_HIDDEN on, else x @ w^T."""
    small = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    wide = build_tiny_model(tok, hidden=256, layers=1, heads=2, kv_heads=1, ffn=64)
    assert static_decode.ONEDNN_MIN_HIDDEN == static_decode.WEIGHT_LEFT_MIN_HIDDEN == 256
    assert StaticDecoder(small, 256, 4).kernel == "rows"
    assert StaticDecoder(wide, 1, 4).kernel == ("onednn" if ONEDNN else "weight_left")
    assert StaticDecoder(wide.double(), 1, 4).kernel == "weight_left"  # oneDNN: float32 only


@pytest.mark.parametrize("hd", [2, 8, 64])
def test_rotate_half_as_a_roll_with_signed_sin_is_exact(hd):
    """RoPE's rotate_half(x) * sin, computed as roll(x, hd/2) * (signs * sin), gives transformers' values to the
    bit (a sign flip and a permutation round nothing)."""
    from transformers.models.qwen2.modeling_qwen2 import rotate_half

    g = torch.Generator().manual_seed(hd)
    x, sin = torch.randn(5, 3, hd, generator=g), torch.randn(5, 3, hd, generator=g)
    signs = static_decode._half_signs(hd, torch.float32, torch.device("cpu"))
    assert signs.tolist() == [-1.0] * (hd // 2) + [1.0] * (hd // 2)
    assert torch.equal(x.roll(hd // 2, -1) * (signs * sin), rotate_half(x) * sin)


@pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN")
def test_onednn_sampling_is_deterministic(tok, monkeypatch):
    """A resumed run replays its sampling bit for bit: on oneDNN's products too (reordered weights, two threads),
    the same seed gives the same tokens and the same log-probs to the last bit."""
    _kernels(monkeypatch, "onednn")
    model = dict(models(tok))["qwen3-norms"]
    runs = [sample(model, tok, PROMPTS, n=4, max_new_tokens=12, generator=torch.Generator().manual_seed(9))
            for _ in range(2)]  # fmt: skip
    assert torch.equal(runs[0].input_ids, runs[1].input_ids)
    assert torch.equal(runs[0].sampler_logp, runs[1].sampler_logp)


@pytest.mark.parametrize("fault", ["raises", "wrong"])
def test_onednn_is_not_taken_when_its_ops_fail(tok, monkeypatch, fault):
    """oneDNN's ops are torch internals: a build where they are missing, raise or compute wrong gets the BLAS."""

    class Broken:
        def __call__(self, x, w, *args):
            if fault == "raises":
                raise RuntimeError("not in this build")
            return torch.zeros(x.shape[0], w.shape[0])

        binary = __call__

    wide = build_tiny_model(tok, hidden=256, layers=1, heads=2, kv_heads=1, ffn=64)
    static_decode._onednn_works.cache_clear()
    try:
        with monkeypatch.context() as m:
            m.setattr(torch.ops.mkldnn, "_linear_pointwise", Broken())
            assert StaticDecoder(wide, 1, 4).kernel == "weight_left"
    finally:
        static_decode._onednn_works.cache_clear()
    assert StaticDecoder(wide, 1, 4).kernel == ("onednn" if ONEDNN else "weight_left")


def test_prefill_repeats_each_prompt_for_its_group(tok, layout):
    """With repeats=3 every row of a group holds its prompt's cache: the next step's logits equal those of the
    one-row-per-prompt decoder, row by row."""
    model = dict(models(tok, torch.float64))["qwen2"]
    ids, mask = _padded(PROMPTS)
    P, nxt = ids.shape[1], torch.tensor([4, 5, 6])
    with torch.no_grad():
        one, three = StaticDecoder(model, 3, P + 1), StaticDecoder(model, 9, P + 1)
        torch.testing.assert_close(
            three.prefill(ids, mask, position_ids(mask), 3), one.prefill(ids, mask, position_ids(mask), 1)
        )
        pos = position_ids(mask)[:, -1] + 1
        want = one.step(nxt, pos)
        got = three.step(nxt.repeat_interleave(3), pos.repeat_interleave(3))
    torch.testing.assert_close(got, want.repeat_interleave(3, 0), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "llama", "qwen3-norms"])
@pytest.mark.parametrize("mode", [dict(), dict(top_p=0.7, temperature=0.8), dict(greedy=True)])
def test_sampling_matches_the_transformers_path(tok, name, mode, layout):
    model = dict(models(tok))[name]
    runs = {}
    for decode in ("transformers", "static"):
        g = torch.Generator().manual_seed(5)
        runs[decode] = sample(model, tok, PROMPTS, n=4, max_new_tokens=10, generator=g, decode=decode, **mode)
    a, b = runs["transformers"], runs["static"]
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.response_mask, b.response_mask)
    torch.testing.assert_close(b.sampler_logp, a.sampler_logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(b.sampler_entropy, a.sampler_entropy, rtol=0, atol=1e-5)
    lp, _ = token_logprobs(model, b, temperature=mode.get("temperature", 1.0))
    torch.testing.assert_close(lp * b.response_mask, b.sampler_logp, rtol=0, atol=1e-5)


def test_unsupported_models_fall_back_or_refuse(tok):
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    model.config.use_sliding_window = True
    assert "sliding" in supported(model)
    g = torch.Generator().manual_seed(0)
    out = sample(model, tok, PROMPTS, n=2, max_new_tokens=4, generator=g)  # auto: the transformers path
    assert out.input_ids.shape[0] == 6
    with pytest.raises(ValueError, match="decode='static' does not support this model: sliding"):
        sample(model, tok, PROMPTS, n=2, max_new_tokens=4, decode="static")
    with pytest.raises(ValueError, match="decode='compiled' does not support this model: sliding"):
        sample(model, tok, PROMPTS, n=2, max_new_tokens=4, decode="compiled")
    with pytest.raises(ValueError, match="decode must be auto, static, compiled or transformers"):
        sample(model, tok, PROMPTS, max_new_tokens=4, decode="fast")


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(), None),
        (dict(hidden_act="gelu"), "hidden_act 'gelu'"),
        (dict(mlp_bias=True), "MLP biases"),
        (dict(rope_scaling=dict(rope_type="dynamic", factor=2.0)), "dynamic RoPE"),
        (dict(rope_scaling=dict(rope_type="linear", factor=2.0)), None),
    ],
)
def test_a_config_alone_gives_the_models_verdict(tok, change, reason):
    """`supported` on the config (checked before the weights load) says what it says on the built model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=32, **change)  # fmt: skip
    verdict = supported(LlamaForCausalLM(cfg))
    assert supported(cfg) == verdict
    assert (verdict is None) == (reason is None) and (reason is None or reason in verdict)


def test_finished_rows_are_dropped_and_the_samples_do_not_change(tok, monkeypatch):
    """Rows past EOS leave the static cache once they are a quarter of it; the sampled tokens and log-probs are
    still those of the transformers path (every row keeps drawing from the same generator stream)."""
    model = dict(models(tok))["qwen2"]
    sizes = []
    forward = StaticDecoder._forward

    def spy(self, tokens, positions):
        sizes.append(tokens.shape[0])
        return forward(self, tokens, positions)

    monkeypatch.setattr(StaticDecoder, "_forward", spy)
    runs = {}
    for decode in ("transformers", "static"):
        g = torch.Generator().manual_seed(11)
        runs[decode] = sample(model, tok, PROMPTS, n=8, max_new_tokens=60, generator=g, decode=decode)
    a, b = runs["transformers"], runs["static"]
    assert sizes[0] == 24 and min(sizes) < 18  # compacted at least once
    assert torch.equal(a.input_ids, b.input_ids)
    torch.testing.assert_close(b.sampler_logp, a.sampler_logp, rtol=0, atol=1e-5)
    assert int((b.response_mask.sum(-1) < 60).sum()) >= 6  # the rows that were dropped did finish


def test_auto_keeps_large_models_on_the_transformers_path(tok, monkeypatch):
    """The static path copies the q|k|v and gate|up weights per call: 'auto' takes it only under the size limit."""
    import rpgrl.rollout as rollout

    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    calls = []
    monkeypatch.setattr(StaticDecoder, "_forward", lambda self, t, p: calls.append(1) or torch.zeros(len(t), len(tok)))
    sample(model, tok, PROMPTS, max_new_tokens=3, eos_token_ids=10**6)
    assert calls  # small model: static
    calls.clear()
    monkeypatch.setattr(rollout, "AUTO_STATIC_BYTES", 1024)
    sample(model, tok, PROMPTS, max_new_tokens=3, eos_token_ids=10**6)
    assert not calls


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "llama", "qwen3-norms"])
def test_forward_at_reads_the_whole_cache_as_step_reads_its_prefix(tok, name, layout):
    """`forward_at` (every slot, the ones after `slot` masked; what decode="compiled" runs, here eagerly) against
    `step` (the written prefix only) on a second decoder, token after token, float64: the same logits to ~1e-12.
    Its decoder's unwritten slots hold zeros, not uninitialised memory (a masked value still enters 0 x value)."""
    model = dict(models(tok, torch.float64))[name]
    g = torch.Generator().manual_seed(2)
    ids, mask = _padded(PROMPTS)
    P, steps = ids.shape[1], 5
    extra = torch.randint(3, len(tok), (len(PROMPTS), steps), generator=g)
    with torch.no_grad():
        whole, prefix = StaticDecoder(model, 3, P + steps + 4, whole_cache=True), StaticDecoder(model, 3, P + steps)
        assert whole.kernel == {"onednn": "onednn_op"}.get(prefix.kernel, prefix.kernel)  # oneDNN: custom ops
        a, b = (d.prefill(ids, mask, position_ids(mask), 1) for d in (whole, prefix))
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
        assert all(torch.equal(c[:, :, P:], torch.zeros_like(c[:, :, P:])) for L in whole.layers
                   for c in (L.keys, L.values))  # fmt: skip
        pos = position_ids(mask)[:, -1] + 1
        for t in range(steps):
            got = whole.forward_at(extra[:, t], pos + t, torch.tensor(P + t))
            torch.testing.assert_close(got, prefix.step(extra[:, t], pos + t), rtol=0, atol=1e-12)


def _needs_a_compiler():
    if (why := compiler_missing()) is not None:
        pytest.skip(why)


def test_compiled_sampling_draws_what_the_static_path_draws(tok):
    """decode="compiled" (one torch.compile graph per step: decoder and draw) against decode="static" under the same
    generator: the same tokens, EOS included (rows finish at different steps and keep computing), log-probs and
    entropies to float rounding, and the update's forward agrees with its log-probs; twice, so that the second call
    runs the cached graph on freshly allocated caches. Each sampling mode and model is its own graph (seconds of
    compiling): every mode on Qwen2, plain draws on Qwen3 (q/k norms, random norm weights) and Llama (biases), and a
    bfloat16 Qwen2 (the compiled graph rounds its intermediates where eager does)."""
    _needs_a_compiler()
    cases = [("qwen2", mode) for mode in (dict(), dict(top_p=0.7, temperature=0.8), dict(greedy=True))]
    cases += [("qwen3-norms", dict()), ("llama", dict()), ("qwen2-bf16", dict(top_p=0.7, temperature=0.8))]
    for name, mode in cases:
        model = dict(models(tok))[name] if name != "qwen2-bf16" else dict(models(tok, torch.bfloat16))["qwen2"]
        runs = []
        for decode in ("static", "compiled", "compiled"):
            g = torch.Generator().manual_seed(7)
            runs.append(sample(model, tok, PROMPTS, n=8, max_new_tokens=40, generator=g, decode=decode, **mode))
        want = runs[0]
        assert int((want.response_mask.sum(-1) < 40).sum()) >= 4 or mode.get("greedy"), name  # rows finish early
        for got in runs[1:]:
            assert torch.equal(got.input_ids, want.input_ids), (name, mode)
            assert torch.equal(got.response_mask, want.response_mask)
            torch.testing.assert_close(got.sampler_logp, want.sampler_logp, rtol=0, atol=1e-5)
            torch.testing.assert_close(got.sampler_entropy, want.sampler_entropy, rtol=0, atol=1e-5)
        if name == "qwen2-bf16":
            continue  # bfloat16: the training forward rounds otherwise than any cached decode (train.old_logp auto)
        lp, _ = token_logprobs(model, runs[2], temperature=mode.get("temperature", 1.0))
        torch.testing.assert_close(lp * runs[2].response_mask, runs[2].sampler_logp, rtol=0, atol=1e-5)


@pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN")
@pytest.mark.parametrize("name", ["qwen2", "qwen3-norms"])  # q|k|v biases; q/k norms and folded norm weights
def test_compiled_sampling_on_onednn_draws_what_the_static_path_draws(tok, monkeypatch, name):
    """decode="compiled" with oneDNN's products (reordered weights, called through the `rpgrl::onednn_*` custom ops
    inside the graph) against decode="static" on them: the same tokens, log-probs to float rounding, and the
    update's forward agrees; twice, the second call on freshly reordered weights."""
    _needs_a_compiler()
    _kernels(monkeypatch, "onednn")
    model = dict(models(tok))[name]
    built = []
    init = static_decode.StaticDecoder.__init__
    monkeypatch.setattr(static_decode.StaticDecoder, "__init__", _recording(init, built))
    runs = []
    for decode in ("static", "compiled", "compiled"):
        runs.append(sample(model, tok, PROMPTS, n=8, max_new_tokens=40, generator=torch.Generator().manual_seed(4),
                           decode=decode))  # fmt: skip
    assert [d.kernel for d in built] == ["onednn", "onednn_op", "onednn_op"]
    for got in runs[1:]:
        assert torch.equal(got.input_ids, runs[0].input_ids)
        torch.testing.assert_close(got.sampler_logp, runs[0].sampler_logp, rtol=0, atol=1e-5)
    lp, _ = token_logprobs(model, runs[2])
    torch.testing.assert_close(lp * runs[2].response_mask, runs[2].sampler_logp, rtol=0, atol=1e-5)


def _recording(init, built: list):
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    return wrapped


def test_compiled_sampling_past_the_recompile_limit_runs_on(tok, monkeypatch):
    """More shapes than torch._dynamo compiles graphs for (its recompile limit, here 2, one graph already built):
    the next shape compiles, the ones past the limit take the static path (not the compiled step run eagerly), a
    shape compiled before stays compiled, and every draw is the static path's; nothing raises (a full graph would)."""
    import torch._dynamo

    import rpgrl.rollout as rollout

    _needs_a_compiler()
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    monkeypatch.setattr(rollout, "_GRAPHS", {("a graph built before",)})
    whole = []
    forward_at = StaticDecoder.forward_at
    monkeypatch.setattr(
        StaticDecoder, "forward_at", lambda self, *a: whole.append(a[0].shape[0]) or forward_at(self, *a)
    )
    model = dict(models(tok))["qwen2"]
    for n in (2, 3, 5, 2):
        whole.clear()
        runs = [sample(model, tok, PROMPTS, n=n, max_new_tokens=6, generator=torch.Generator().manual_seed(n),
                       decode=decode) for decode in ("static", "compiled")]  # fmt: skip
        assert torch.equal(runs[0].input_ids, runs[1].input_ids)
        torch.testing.assert_close(runs[1].sampler_logp, runs[0].sampler_logp, rtol=0, atol=1e-5)
        assert bool(whole) == (n == 2), (n, whole)  # compiled: n = 2 only (the budget's second graph)


def test_compiled_decode_without_a_compiler_refuses(tok, monkeypatch):
    import rpgrl.rollout as rollout

    monkeypatch.setattr(rollout, "compiler_missing", lambda: "torch.compile finds no C++ compiler (X: set CXX to one)")
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    with pytest.raises(ValueError, match=r"decode='compiled': torch.compile finds no C\+\+ compiler"):
        sample(model, tok, PROMPTS, max_new_tokens=2, decode="compiled")


def test_bfloat16_step_logits_follow_the_float64_forward(tok):
    """A bfloat16 model keeps its norm weights apart (folding them into the products would cost it precision):
    with random norm weights (a review's mutant applied the post-attention norm's as the input norm's, and the
    all-ones weights of the bfloat16 test above could not tell), the decode's logits follow the same weights'
    float64 forward to bfloat16's rounding."""
    model = dict(models(tok, torch.bfloat16))["qwen3-norms"]
    assert any("norm" in n and not torch.all(p == 1) for n, p in model.named_parameters())
    got, want, dec = _decode_and_forward(tok, model, copy.deepcopy(model).double())
    assert dec.layers[0].ln1 is not None  # not folded
    err = (got.double() - want).abs().max().item()
    scale = want.abs().max().item()
    assert err < 0.05 * scale, (err, scale)
