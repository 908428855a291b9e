"""Sampler and token log-probs, checked against slow references: full-sequence forwards without a cache or padding,
float64 full-logits log-softmax, exact first-token distributions, and per-row loops."""

from __future__ import annotations

import math
import re

import pytest
import torch

from rpgrl.errors import Diverged, UsageError
from rpgrl.models import build_char_tokenizer, build_tiny_model
from rpgrl.rollout import (
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    Rollout,
    cat_rollouts,
    categorical,
    kv_cache_bytes,
    make_rollout,
    position_ids,
    prompt_runs,
    response_mask_from_ids,
    sample,
    token_logprobs,
    top_p_filter,
)

CHARS = "0123456789+-=:\nAQnswer "


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(CHARS)


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=3)


def encode(tok, texts):
    return [tok(t)["input_ids"] for t in texts]


PROMPTS = ["Q:1+2\n", "Q:123+456\n", "Q:7\n", "Q:99-12=\n"]  # different lengths -> left padding


def ref_row_logprobs(model, prompt: list[int], response: list[int], temperature=1.0):
    """Slow reference: one unpadded full forward per row, full-logits log-softmax, float64."""
    x = torch.tensor([prompt + response])
    logits = model(x).logits[0].double() / temperature  # (L, V)
    logp_all = torch.log_softmax(logits, -1)
    P = len(prompt)
    idx = torch.arange(len(response))
    lp = logp_all[P - 1 + idx, torch.tensor(response)]
    ent = -(logp_all.exp() * logp_all).sum(-1)[P - 1 + idx]
    return lp, ent


def rows(r: Rollout):
    """(prompt tokens, response tokens incl. EOS) per row, padding removed."""
    out = []
    for i in range(len(r)):
        p = r.prompt_ids[i][r.attention_mask[i, : r.prompt_len].bool()].tolist()
        out.append((p, r.response_ids[i, : int(r.lengths[i])].tolist()))
    return out


# --- small pure helpers ----------------------------------------------------------------------------------------


def test_position_ids_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert position_ids(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]


def test_response_mask_up_to_and_including_first_eos():
    ids = torch.tensor([[5, 1, 7, 1], [5, 6, 7, 8], [1, 0, 0, 0]])
    assert response_mask_from_ids(ids, [1]).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    valid = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]).bool()
    assert response_mask_from_ids(ids, [1], valid).tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]]


def test_top_p_filter_matches_loop():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(50, 7, dtype=torch.float64), -1)
    for top_p in (0.05, 0.3, 0.7, 0.95, 1.0):
        got = top_p_filter(probs, top_p)
        for row, g in zip(probs, got, strict=True):
            order = row.argsort(descending=True)
            keep, mass = [], 0.0
            for j in order.tolist():  # add tokens by decreasing probability until the mass reaches top_p
                keep.append(j)
                mass += row[j].item()
                if mass >= top_p:
                    break
            want = torch.zeros_like(row)
            want[keep] = row[keep] / row[keep].sum()
            torch.testing.assert_close(g, want)


def test_top_p_at_an_exact_tie_stops_at_the_mass():
    """Mass exactly top_p (binary fractions: no rounding): the tokens after it are dropped, as the loop above does
    (a review's mutant kept one more)."""
    probs = torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64)
    torch.testing.assert_close(top_p_filter(probs, 0.5), torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64))
    probs = torch.tensor([[0.125, 0.5, 0.25, 0.125]], dtype=torch.float64)
    torch.testing.assert_close(top_p_filter(probs, 0.75), torch.tensor([[0.0, 2 / 3, 1 / 3, 0.0]], dtype=torch.float64))


def test_draw_entropy_ignores_tokens_of_probability_zero():
    """A -inf logit (a banned token) has p log p = 0 * -inf: the entropy is that of the others, not NaN."""
    import math

    from rpgrl.rollout import _draw

    logits = torch.tensor([[0.0, math.log(3.0), -math.inf]], dtype=torch.float64)
    _, logp, entropy = _draw(logits, 1.0, 1.0, None)
    p = torch.tensor([0.25, 0.75], dtype=torch.float64)
    assert entropy.item() == pytest.approx(-(p * p.log()).sum().item(), rel=1e-12)
    assert logp.item() == pytest.approx(math.log(0.75), rel=1e-12)


def test_top_p_below_the_dtypes_resolution_keeps_the_top_token():
    """top_p = 1e-300 is 0 in float32: the most probable token is still kept (was: nothing kept, 0/0 = NaN)."""
    probs = torch.softmax(torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]]), -1)
    got = top_p_filter(probs, 1e-300)
    torch.testing.assert_close(got, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_categorical_draws_what_multinomial_draws(dtype):
    """Same generator state, same draws as torch.multinomial(probs, 1), also with zeros (a nucleus), one-hot rows
    and a row left with a single token; and the generator ends in the same state."""
    torch.manual_seed(1)
    probs = torch.softmax(3 * torch.randn(64, 11, dtype=dtype), -1)
    probs = torch.cat([probs, top_p_filter(probs, 0.5), torch.eye(11, dtype=dtype)[:5]])
    for seed in range(5):
        a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        want = torch.multinomial(probs, 1, generator=a).squeeze(-1)
        got = categorical(probs, b)
        assert torch.equal(got, want)
        assert torch.equal(a.get_state(), b.get_state())
    assert not torch.equal(categorical(probs, torch.Generator().manual_seed(9)), want)  # it does draw


def test_categorical_frequencies():
    """Empirical frequencies of 40,000 draws within 5 standard errors of the probabilities (zeros never drawn)."""
    probs = torch.tensor([0.5, 0.25, 0.0, 0.125, 0.125])
    draws = categorical(probs.expand(40_000, -1), torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).double() / 40_000
    assert freq[2] == 0
    assert ((freq - probs).abs() <= 5 * (probs * (1 - probs) / 40_000).sqrt() + 1e-12).all()


def test_make_rollout_layout(tok):
    eos, pad = tok.eos_token_id, tok.pad_token_id
    r = make_rollout(tok, [[2, 5], [2, 5, 6, 7]], [[8, eos, 9], [8, 9, 10]])  # row 0: token after EOS dropped
    assert r.prompt_len == 4
    assert r.input_ids.tolist() == [[pad, pad, 2, 5, 8, eos, pad], [2, 5, 6, 7, 8, 9, 10]]
    assert r.attention_mask.tolist() == [[0, 0, 1, 1, 1, 1, 0], [1] * 7]
    assert r.response_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert r.lengths.tolist() == [2, 3] and r.group.tolist() == [0, 1]
    assert r.texts == [tok.decode([8]), tok.decode([8, 9, 10])]


# --- sampling ------------------------------------------------------------------------------------------------------


def test_sample_layout_groups_and_masks(model, tok):
    prompts = encode(tok, PROMPTS)
    g = torch.Generator().manual_seed(0)
    r = sample(model, tok, prompts, n=3, max_new_tokens=12, generator=g)
    B, P = len(prompts) * 3, max(map(len, prompts))
    assert r.input_ids.shape == (B, P + r.response_mask.shape[1]) and r.prompt_len == P
    assert r.group.tolist() == [i for i in range(len(prompts)) for _ in range(3)]
    eos, pad = tok.eos_token_id, tok.pad_token_id
    for i, (p, resp) in enumerate(rows(r)):
        assert p == prompts[i // 3]
        L = int(r.lengths[i])
        assert eos not in resp[:-1]  # mask stops at the first EOS ...
        assert resp[-1] == eos or L == 12  # ... which it includes, or the row hit max_new_tokens
        assert (r.response_ids[i, L:] == pad).all() and (r.response_mask[i, L:] == 0).all()
        assert r.texts[i] == tok.decode(resp, skip_special_tokens=True)
    assert r.response_mask.shape[1] == int(r.lengths.max())  # no all-padding columns: stopped when all rows done
    assert r.sampler_entropy.shape == r.response_mask.shape and (r.sampler_entropy[r.response_mask == 0] == 0).all()
    assert (r.lengths < 12).any()  # some rows ended at EOS, so the padding checks above are not vacuous


def test_sample_stops_early_when_all_rows_done(model, tok):
    # With every token but "0" declared a stop token, rows end almost at once: far fewer than 50 steps.
    stop = [i for i in range(len(tok)) if i != tok.convert_tokens_to_ids("0")]
    r = sample(model, tok, encode(tok, PROMPTS), n=4, max_new_tokens=50, eos_token_ids=stop)
    assert r.response_mask.shape[1] == int(r.lengths.max()) < 50


def test_sampler_logp_matches_token_logprobs(model, tok):
    prompts = encode(tok, PROMPTS)
    for temperature in (1.0, 0.7):
        g = torch.Generator().manual_seed(1)
        r = sample(model, tok, prompts, n=4, max_new_tokens=16, temperature=temperature, generator=g)
        lp, _ = token_logprobs(model, r, temperature=temperature)
        torch.testing.assert_close(lp, r.sampler_logp, atol=1e-5, rtol=0)
        for i, (p, resp) in enumerate(rows(r)):  # and both match an unpadded float64 forward per row
            want, _ = ref_row_logprobs(model, p, resp, temperature)
            torch.testing.assert_close(lp[i, : len(resp)].double(), want, atol=1e-5, rtol=0)


def test_grouped_prefill_equals_repeated_prompts(model, tok):
    prompts = encode(tok, PROMPTS)
    grouped = sample(model, tok, prompts, n=3, max_new_tokens=10, generator=torch.Generator().manual_seed(5))
    repeated = [p for p in prompts for _ in range(3)]
    flat = sample(model, tok, repeated, n=1, max_new_tokens=10, generator=torch.Generator().manual_seed(5))
    assert torch.equal(grouped.input_ids, flat.input_ids)
    torch.testing.assert_close(grouped.sampler_logp, flat.sampler_logp, atol=1e-5, rtol=0)


def test_sample_reproducible_with_generator(model, tok):
    prompts = encode(tok, PROMPTS)
    a = sample(model, tok, prompts, n=2, max_new_tokens=10, generator=torch.Generator().manual_seed(7))
    b = sample(model, tok, prompts, n=2, max_new_tokens=10, generator=torch.Generator().manual_seed(7))
    c = sample(model, tok, prompts, n=2, max_new_tokens=10, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.input_ids, b.input_ids) and a.texts == b.texts
    assert not torch.equal(a.input_ids, c.input_ids)


def test_greedy_matches_uncached_argmax_loop(model, tok):
    prompts = encode(tok, PROMPTS)
    r = sample(model, tok, prompts, greedy=True, max_new_tokens=8)
    for i, p in enumerate(prompts):  # slow reference: full forward of the whole sequence at every step
        seq = list(p)
        with torch.no_grad():
            for _ in range(8):
                nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
                seq.append(nxt)
                if nxt == tok.eos_token_id:
                    break
        assert r.response_ids[i, : int(r.lengths[i])].tolist() == seq[len(p) :]


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.5, 1.0), (1.0, 0.6)])
def test_first_token_distribution_is_exact(model, tok, temperature, top_p):
    """Empirical first-token frequencies over 6000 samples vs softmax(logits / T) (nucleus-filtered)."""
    prompt = tok("Q:12+3\n")["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1].double()
    probs = torch.softmax(logits / temperature, -1)
    probs = top_p_filter(probs[None], top_p)[0]
    N = 6000
    r = sample(model, tok, [prompt], n=N, max_new_tokens=1, temperature=temperature, top_p=top_p,
               generator=torch.Generator().manual_seed(0))  # fmt: skip
    freq = torch.bincount(r.response_ids[:, 0], minlength=len(tok)).double() / N
    assert (freq[probs == 0] == 0).all()  # nothing outside the nucleus
    # every token within 5 standard errors; also the total variation distance small
    se = (probs * (1 - probs) / N).sqrt()
    assert ((freq - probs).abs() <= 5 * se + 1e-12).all()
    assert 0.5 * (freq - probs).abs().sum() < 0.04
    if top_p == 1.0:
        assert (freq > 0).sum() >= 15  # a flat-ish random model: no hidden top-k would show many tokens


def test_batch_size_chunks_keep_prompt_order(model, tok):
    prompts = encode(tok, PROMPTS)
    r = sample(model, tok, prompts, n=2, max_new_tokens=9, batch_size=3, generator=torch.Generator().manual_seed(2))
    assert r.group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [p for p, _ in rows(r)] == [p for p in prompts for _ in range(2)]
    lp, _ = token_logprobs(model, r)
    torch.testing.assert_close(lp, r.sampler_logp, atol=1e-5, rtol=0)


def test_sample_bad_input(model, tok):
    p = encode(tok, PROMPTS)
    with pytest.raises(ValueError, match="temperature"):
        sample(model, tok, p, max_new_tokens=4, temperature=0.0)
    # 1e-40: logits / temperature overflowed float32, and sampling failed as if the weights had diverged
    with pytest.raises(ValueError, match=r"sample: temperature must be >= 1e-8 .*got 1e-40"):
        sample(model, tok, p, max_new_tokens=4, temperature=1e-40)
    r = sample(model, tok, p, max_new_tokens=4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"token_logprobs: temperature must be >= 1e-8 .*got 1e-40"):
        token_logprobs(model, r, temperature=1e-40)  # the log-probs came back NaN
    # 1e30: every log-prob was -log V and the gradient 0 (the config's bound is the same: rollout.temperature)
    for bad in (1e30, math.inf, math.nan):
        with pytest.raises(ValueError, match=f"sample: temperature must be .*got {re.escape(str(bad))}"):
            sample(model, tok, p, max_new_tokens=4, temperature=bad)
        with pytest.raises(ValueError, match=f"token_logprobs: temperature must be .*got {re.escape(str(bad))}"):
            token_logprobs(model, r, temperature=bad)
    assert (MIN_TEMPERATURE, MAX_TEMPERATURE) == (1e-8, 1e4)  # as config.py's check states them
    # worded as the CLI's check (`rollout.temperature must be <= 1e4 (above, ...`; read 10000 and 1e-08), and the
    # greedy=True hint only where there is one (token_logprobs had it since the bound moved to check_temperature)
    for call, bad, words in (
        (lambda t: sample(model, tok, p, max_new_tokens=4, temperature=t), 1e30,
         "sample: temperature must be <= 1e4 (above, float32 log-probs of logits / temperature lose the logits' "
         "differences, and the gradient with them), got 1e+30"),
        (lambda t: token_logprobs(model, r, temperature=t), 1e30,
         "token_logprobs: temperature must be <= 1e4 (above, float32 log-probs of logits / temperature lose the "
         "logits' differences, and the gradient with them), got 1e+30"),
        (lambda t: sample(model, tok, p, max_new_tokens=4, temperature=t), 0.0,
         "sample: temperature must be >= 1e-8 (logits / temperature stay finite in float32; use greedy=True for "
         "argmax), got 0.0"),
        (lambda t: token_logprobs(model, r, temperature=t), 0.0,
         "token_logprobs: temperature must be >= 1e-8 (logits / temperature stay finite in float32), got 0.0"),
    ):  # fmt: skip
        with pytest.raises(ValueError) as info:
            call(bad)
        assert str(info.value) == words
    token_logprobs(model, r, temperature=MAX_TEMPERATURE)
    with pytest.raises(ValueError, match="top_p"):
        sample(model, tok, p, max_new_tokens=4, top_p=0.0)
    with pytest.raises(ValueError, match="empty prompt"):
        sample(model, tok, [[]], max_new_tokens=4)
    with pytest.raises(ValueError, match="empty prompt list"):
        sample(model, tok, [], max_new_tokens=4)
    with pytest.raises(ValueError, match="got a string"):
        sample(model, tok, ["2+2"], max_new_tokens=4)
    with pytest.raises(ValueError, match=rf"prompt 1 holds token id {len(tok)}, outside the model's vocabulary"):
        sample(model, tok, [p[0], p[1] + [len(tok)]], max_new_tokens=4)


@pytest.mark.parametrize("decode", ["static", "transformers"])
@pytest.mark.parametrize("greedy", [False, True])
def test_sample_refuses_non_finite_logits(tok, decode, greedy):
    """A model whose weights hold a NaN: one clear error (was a multinomial traceback, or NaN log-probs if greedy)."""
    broken = build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=3)
    with torch.no_grad():
        broken.model.layers[1].mlp.down_proj.weight[0, 0] = float("nan")
    with pytest.raises(Diverged, match="logits are not finite") as caught:
        sample(broken, tok, encode(tok, PROMPTS), n=2, max_new_tokens=4, greedy=greedy, decode=decode,
               generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, FloatingPointError)  # was a ValueError


# --- token_logprobs ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model64(tok):
    return build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=4).double()


@pytest.mark.parametrize("forward", ["packed", "transformers"])
@pytest.mark.parametrize("share", [True, False])
def test_token_logprobs_float64_reference_values_and_entropy(model64, tok, share, forward):
    r = sample(model64, tok, encode(tok, PROMPTS), n=2, max_new_tokens=14, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        lp, ent = token_logprobs(model64, r, temperature=0.8, chunk_size=5, with_entropy=True, share_prompts=share,
                                 forward=forward)  # fmt: skip
    assert lp.dtype == torch.float64
    for i, (p, resp) in enumerate(rows(r)):
        want_lp, want_ent = ref_row_logprobs(model64, p, resp, temperature=0.8)
        L = len(resp)
        torch.testing.assert_close(lp[i, :L], want_lp, atol=1e-12, rtol=0)
        torch.testing.assert_close(ent[i, :L], want_ent, atol=1e-12, rtol=0)
        assert (lp[i, L:] == 0).all() and (ent[i, L:] == 0).all()
    lp2, ent2 = token_logprobs(model64, r, temperature=0.8, share_prompts=share, forward=forward)  # with grad: same
    assert ent2 is None
    torch.testing.assert_close(lp2.detach(), lp, atol=1e-14, rtol=0)


@pytest.mark.parametrize("forward", ["packed", "transformers"])
@pytest.mark.parametrize("share", [True, False])
def test_token_logprobs_gradients_match_reference(model64, tok, share, forward):
    r = sample(model64, tok, encode(tok, PROMPTS), n=2, max_new_tokens=14, generator=torch.Generator().manual_seed(4))
    w = torch.randn(r.response_mask.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    model64.zero_grad()
    lp, ent = token_logprobs(model64, r, chunk_size=7, with_entropy=True, share_prompts=share, forward=forward)
    ((lp * w).sum() + 0.3 * (ent * w).sum()).backward()
    got = {k: p.grad.clone() for k, p in model64.named_parameters()}

    model64.zero_grad()
    ref = 0.0
    for i, (p, resp) in enumerate(rows(r)):
        want_lp, want_ent = ref_row_logprobs(model64, p, resp)
        ref = ref + (want_lp * w[i, : len(resp)]).sum() + 0.3 * (want_ent * w[i, : len(resp)]).sum()
    ref.backward()
    want = {k: p.grad for k, p in model64.named_parameters()}
    if share or forward == "packed":  # the packed rows round apart from one forward per row in the float32 norms
        assert_close_to_float32_rounding(got, want)
    else:
        for k in want:
            torch.testing.assert_close(got[k], want[k], atol=1e-10, rtol=1e-8, msg=k)


def assert_close_to_float32_rounding(got: dict, want: dict) -> None:
    """Gradients of the shared-prompt path against another computation of the same math. The group's upstream
    gradients are summed before the prompt's backward, and transformers' RMSNorm computes in float32 even in a
    float64 model, so they agree to float32 rounding (measured 5e-8 of each tensor's largest entry; a lost
    gradient path would be off by order 1)."""
    for k, g in want.items():
        err = (got[k] - g).abs().max() / g.abs().max()
        assert err < 1e-6, (k, float(err))


def test_shared_prompts_are_forwarded_once_per_group(model, tok):
    r = sample(model, tok, encode(tok, PROMPTS), n=3, max_new_tokens=6, generator=torch.Generator().manual_seed(5))
    seen = []
    hook = model.get_decoder().register_forward_hook(lambda m, args, kw, out: seen.append(kw["input_ids"].shape),
                                                     with_kwargs=True)  # fmt: skip
    try:
        with torch.no_grad():
            shared, _ = token_logprobs(model, r, forward="transformers")
            calls_shared, seen[:] = list(seen), []
            plain, _ = token_logprobs(model, r, share_prompts=False, forward="transformers")
            calls_plain = list(seen)
    finally:
        hook.remove()
    P, T = r.prompt_len, r.response_mask.shape[1]
    assert calls_shared == [(4, P), (12, T)] and calls_plain == [(12, P + T)]
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)


@pytest.mark.parametrize("forward", ["packed", "transformers"])
@pytest.mark.parametrize("rows", [[1, 2, 3], [2, 3, 4, 5], [0, 1, 2, 4, 5], [5, 4, 3, 2], [0, 2, 4, 6]])
def test_shared_prompts_match_the_plain_forward_on_any_selection(model64, tok, rows, forward):
    """Micro-batches that split a group, single-row groups among shared ones, rows out of group order."""
    r = sample(model64, tok, encode(tok, PROMPTS), n=2, max_new_tokens=10, generator=torch.Generator().manual_seed(6))
    mb = r.select(rows)
    out = {}
    for share in (True, False):
        model64.zero_grad()
        lp, ent = token_logprobs(model64, mb, with_entropy=True, share_prompts=share, forward=forward)
        (lp.sum() + 0.3 * ent.sum()).backward()
        out[share] = lp.detach(), {k: p.grad.clone() for k, p in model64.named_parameters()}
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-12, rtol=0)
    assert_close_to_float32_rounding(out[True][1], out[False][1])


def test_shared_prompts_are_not_used_in_train_mode(tok):
    # transformers' gradient checkpointing drops the cache in train mode (the prompt would be lost), and dropout
    # would draw one mask for a whole group: train mode takes the plain forward.
    m = build_tiny_model(tok, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=5).double()
    r = sample(m, tok, encode(tok, PROMPTS), n=2, max_new_tokens=8, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want, _ = token_logprobs(m, r)  # eval mode, shared
    m.gradient_checkpointing_enable()
    m.train()
    got, _ = token_logprobs(m, r)
    torch.testing.assert_close(got.detach(), want, atol=1e-12, rtol=0)


def test_prompt_runs():
    tok = build_char_tokenizer(CHARS)
    a, b = tok("Q:1\n")["input_ids"], tok("Q:2\n")["input_ids"]
    r = make_rollout(tok, [a, a, b, b, a], [[5, 1]] * 5, group=[0, 0, 1, 1, 2])
    first, inverse = prompt_runs(r)
    assert first.tolist() == [0, 2, 4] and inverse.tolist() == [0, 0, 1, 1, 2]
    assert prompt_runs(make_rollout(tok, [a, b], [[5, 1]] * 2, group=[0, 0])) is None  # one group, two prompts
    assert prompt_runs(make_rollout(tok, [a, a], [[5, 1]] * 2)) is None  # one row per group: nothing to share


def test_padding_and_reordering_change_nothing(model, tok):
    r = sample(model, tok, encode(tok, PROMPTS), n=2, max_new_tokens=12, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        lp, _ = token_logprobs(model, r)
        even, odd = r.select(list(range(0, len(r), 2))), r.select(torch.arange(1, len(r), 2))
        lp_even, _ = token_logprobs(model, even.compact())  # narrower padding
        both = cat_rollouts([odd.compact(), even.compact()], pad_id=tok.pad_token_id, renumber_groups=False)
        lp_both, _ = token_logprobs(model, both)
    T = lp_even.shape[1]
    torch.testing.assert_close(lp_even, lp[0::2, :T], atol=1e-5, rtol=0)
    assert (lp[0::2, T:] == 0).all()
    n_odd = len(odd)
    torch.testing.assert_close(lp_both[n_odd:, :T], lp[0::2, :T], atol=1e-5, rtol=0)
    torch.testing.assert_close(lp_both[:n_odd], lp[1::2, : lp_both.shape[1]], atol=1e-5, rtol=0)
    assert both.group.tolist() == odd.group.tolist() + even.group.tolist()
    assert both.texts == odd.texts + even.texts


def test_cat_rollouts_renumbers_groups(tok):
    a = make_rollout(tok, [[2, 5], [2, 5]], [[6, 1], [7, 1]], group=[0, 0])
    b = make_rollout(tok, [[2, 5, 6]], [[8, 9, 1]], group=[0])
    c = cat_rollouts([a, b], pad_id=tok.pad_token_id)
    assert c.group.tolist() == [0, 0, 1]
    assert c.prompt_len == 3 and c.response_mask.shape == (3, 3)
    assert c.input_ids[0].tolist() == [0, 2, 5, 6, 1, 0]
    assert c.attention_mask[0].tolist() == [0, 1, 1, 1, 1, 0]


def test_kv_cache_bytes_is_what_the_models_cache_holds(model, tok):
    from transformers import DynamicCache

    prompts = encode(tok, PROMPTS[:3])
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert kv_cache_bytes(model, rows=3, length=width) == held


def test_sample_refuses_a_generation_larger_than_memory(model, tok):
    with pytest.raises(UsageError, match=r"generating 1000000000 rows of \d+ positions needs a .* GiB KV cache"):
        sample(model, tok, encode(tok, PROMPTS[:1]), n=10**9, max_new_tokens=4)
