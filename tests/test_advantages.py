"""Advantage estimators (spec 5.1; section-9 items 20-22) against slow Python loops and exact enumeration."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
import torch

from rpgrl.advantages import ADVANTAGES, get_advantage, whiten

F64 = torch.float64


def random_batch(seed: int):
    """Shuffled groups of sizes 1..6 with non-contiguous ids, ragged response lengths, some tied rewards."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 7, (8,), generator=g).tolist()
    ids = torch.randperm(1000, generator=g)[: len(sizes)] * 7 - 300  # arbitrary (also negative) ids
    group = torch.cat([torch.full((s,), int(i)) for s, i in zip(sizes, ids, strict=True)])
    perm = torch.randperm(group.numel(), generator=g)
    group = group[perm]
    rewards = torch.randn(group.numel(), generator=g, dtype=F64)
    rewards[::4] = 1.0  # ties, including possibly whole groups of equal rewards
    T = 9
    lengths = torch.randint(1, T + 1, (group.numel(),), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F64)
    return rewards, group, mask


# ---------- slow references: plain Python over lists ----------


def groups_of(group):
    out: dict[int, list[int]] = {}
    for i, gid in enumerate(group.tolist()):
        out.setdefault(gid, []).append(i)
    return out


def ref_rpg(rewards, group, mask):
    r, out = rewards.tolist(), [0.0] * len(rewards)
    for idx in groups_of(group).values():
        mean = sum(r[i] for i in idx) / len(idx) if len(idx) > 1 else 0.0
        for i in idx:
            out[i] = r[i] - mean
    return torch.tensor(out, dtype=F64)


def ref_grpo(rewards, group, mask):
    r, out = rewards.tolist(), [0.0] * len(rewards)
    for idx in groups_of(group).values():
        vals = [r[i] for i in idx]
        mean, std = (statistics.fmean(vals), statistics.stdev(vals)) if len(idx) > 1 else (0.0, 1.0)
        for i in idx:
            out[i] = (r[i] - mean) / (std + 1e-6)
    return torch.tensor(out, dtype=F64)


def ref_rloo(rewards, group, mask):
    r, out = rewards.tolist(), [0.0] * len(rewards)
    for idx in groups_of(group).values():
        for i in idx:
            others = [r[j] for j in idx if j != i]
            out[i] = r[i] - (sum(others) / len(others) if others else 0.0)
    return torch.tensor(out, dtype=F64)


def ref_whiten(values_per_seq, mask):
    """Token-level loop: every valid token of sequence i carries values_per_seq[i]."""
    m = mask.tolist()
    toks = [values_per_seq[i] for i, row in enumerate(m) for x in row if x]
    n = len(toks)
    mu = sum(toks) / n
    var = sum((t - mu) ** 2 for t in toks) / (n - 1)
    return torch.tensor(
        [[(values_per_seq[i] - mu) / math.sqrt(var + 1e-8) if x else 0.0 for x in row] for i, row in enumerate(m)],
        dtype=F64,
    )


def ref_rfpp(rewards, group, mask):
    return ref_whiten(rewards.tolist(), mask)


def ref_rfpp_baseline(rewards, group, mask):
    return ref_whiten(ref_rpg(rewards, group, mask).tolist(), mask)


REFERENCES = {
    "rpg": ref_rpg,
    "drgrpo": ref_rpg,
    "grpo": ref_grpo,
    "rloo": ref_rloo,
    "reinforce_pp": ref_rfpp,
    "reinforce_pp_baseline": ref_rfpp_baseline,
}


def test_registry_holds_exactly_the_documented_estimators():
    assert ADVANTAGES.names() == sorted(REFERENCES)


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("seed", range(5))
def test_vectorised_matches_slow_loop(name, seed):
    rewards, group, mask = random_batch(seed)
    got = get_advantage(name)(rewards, group, mask)
    want = REFERENCES[name](rewards, group, mask)
    assert got.shape == want.shape and got.dtype == F64
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)


def test_rpg_is_rloo_scaled_by_g_minus_1_over_g():
    g = torch.Generator().manual_seed(3)
    G = 5
    rewards = torch.randn(4 * G, generator=g, dtype=F64)
    group = torch.arange(4).repeat_interleave(G)
    mask = torch.ones(4 * G, 2, dtype=F64)
    rpg = get_advantage("rpg")(rewards, group, mask)
    assert torch.allclose(rpg, (G - 1) / G * get_advantage("rloo")(rewards, group, mask), atol=1e-14)
    assert torch.equal(rpg, get_advantage("drgrpo")(rewards, group, mask))


# ---------- spec item 20: expected gradients by enumerating all G-tuples ----------


def enumerated_expected_gradient(name: str, G=3, n=4, seed=0):
    """E over all n^G tuples of (1/G) sum_k A_k grad log pi(x_k), with A from the estimator under test."""
    g = torch.Generator().manual_seed(seed)
    th = torch.randn(n, generator=g, dtype=F64)
    R = torch.randn(n, generator=g, dtype=F64)
    tuples = torch.tensor(list(itertools.product(range(n), repeat=G)))  # (n^G, G)
    rewards = R[tuples].flatten()  # one group per tuple
    group = torch.arange(tuples.shape[0]).repeat_interleave(G)
    A = get_advantage(name)(rewards, group, torch.ones(rewards.numel(), 1, dtype=F64)).reshape(-1, G)

    t = th.clone().requires_grad_(True)
    logp = torch.log_softmax(t, 0)
    prob = torch.exp(logp.detach())[tuples].prod(dim=1)  # (n^G,) probability of each tuple
    surrogate = (prob[:, None] * A * logp[tuples]).sum() / G
    (g_est,) = torch.autograd.grad(surrogate, t)
    t2 = th.clone().requires_grad_(True)
    (g_true,) = torch.autograd.grad((torch.softmax(t2, 0) * R).sum(), t2)
    return g_est, g_true


def test_item20_rpg_expected_gradient_is_scaled_true_gradient():
    G = 3
    g_est, g_true = enumerated_expected_gradient("rpg", G=G)
    assert torch.allclose(g_est, (G - 1) / G * g_true, atol=1e-12, rtol=1e-10)
    g_rloo, _ = enumerated_expected_gradient("rloo", G=G)
    assert torch.allclose(g_rloo, g_true, atol=1e-12, rtol=1e-10)  # leave-one-out is exactly unbiased


def test_item20_grpo_expected_gradient_is_not_parallel():
    g_est, g_true = enumerated_expected_gradient("grpo")
    cos = torch.dot(g_est, g_true) / (g_est.norm() * g_true.norm())
    assert cos < 1 - 1e-4  # spec check uses 1e-6; this instance is clearly off


# ---------- items 21, 22 ----------


def test_item21_grpo_equal_rewards_and_singletons():
    adv = get_advantage("grpo")
    mask = torch.ones(17, 3, dtype=F64)
    rewards = torch.cat([torch.ones(16, dtype=F64), torch.tensor([0.7], dtype=F64)])
    group = torch.cat([torch.zeros(16, dtype=torch.long), torch.ones(1, dtype=torch.long)])
    out = adv(rewards, group, mask)
    assert torch.equal(out[:16], torch.zeros(16, dtype=F64))
    assert out[16].item() == 0.7 / (1 + 1e-6)
    assert get_advantage("rpg")(rewards, group, mask)[16].item() == 0.7  # rpg: size-1 group has mean 0
    assert get_advantage("rloo")(rewards, group, mask)[16].item() == 0.7


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_a_group_of_equal_rewards_has_advantage_exactly_0(name, dtype):
    """Whatever the value and the group size: in float64 the sum of 7 copies of 6.6e10, divided by 7, is not
    6.6e10, and GRPO divided that rounding error by a std of the same size (A = 0.87 before the means were shifted
    by the group's least reward). Beside the equal groups, a group with a spread keeps the whitening defined."""
    adv = get_advantage(name)
    for value in (0.1, -3.3, 1e8 + 0.3, 65853997387.997955, -9.87654321e11, 1e15 / 3):
        for size in (2, 3, 5, 7):
            rewards = torch.tensor([value] * size + [0.0, 1.0], dtype=dtype)
            group = torch.tensor([5] * size + [2, 2])
            out = adv(rewards, group, torch.ones(size + 2, 4, dtype=dtype))
            if name == "reinforce_pp":  # no group baseline: whitened over the batch (checked below)
                continue
            assert torch.equal(out[:size], torch.zeros_like(out[:size])), (value, size, out[:size])
    for value in (0.1, 65853997387.997955, -9.87654321e11):  # the whole batch equal: whitening gives exactly 0
        out = whiten(torch.full((7, 3), value, dtype=dtype), torch.ones(7, 3, dtype=dtype))
        assert torch.equal(out, torch.zeros_like(out)), (value, out)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_gradients_through_the_advantages_are_finite_and_match_central_differences(name):
    """A group of equal rewards beside one with a spread: GRPO's std of the equal group is sqrt(0), whose backward
    is inf, so the equal rows' gradient was NaN. The gradient (of A . v, v random) against central differences in
    float64: a symmetric step moves that std by the same amount either way, so it contributes 0; GRPO's equal rows take
    a step of 1e-12 (far below its eps of 1e-6: A is linear there only), every other step is 1e-6."""
    g = torch.Generator().manual_seed(0)
    rewards = torch.tensor([0.0, 0.0, 0.0, 5.0, 7.0, 2.0], dtype=F64)
    group, mask = torch.tensor([0, 0, 0, 1, 1, 1]), torch.ones(6, 3, dtype=F64)
    v = torch.randn(6, 3, generator=g, dtype=F64)
    adv = get_advantage(name)

    def a(r: torch.Tensor) -> torch.Tensor:
        out = adv(r, group, mask)
        return out[:, None] if out.dim() == 1 else out

    r = rewards.clone().requires_grad_()
    (grad,) = torch.autograd.grad((a(r) * v).sum(), r)
    assert torch.isfinite(grad).all(), grad
    for i in range(6):
        e = torch.zeros(6, dtype=F64)
        e[i] = h = 1e-12 if i < 3 and name == "grpo" else 1e-6
        fd = (((a(rewards + e) - a(rewards - e)) / (2 * h)) * v).sum().item()  # differences first: A is ~h there
        assert grad[i].item() == pytest.approx(fd, rel=1e-4, abs=1e-4 * max(1.0, abs(fd))), (i, grad)


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
@pytest.mark.parametrize("seed", range(3))
def test_item22_whitening_gives_mean_0_and_bessel_variance_1(name, seed):
    rewards, group, mask = random_batch(seed)
    adv = get_advantage(name)(rewards, group, mask)
    m = mask.bool()
    vals = adv[m]
    assert abs(vals.mean().item()) < 1e-12
    assert abs(vals.var(correction=1).item() - 1) < 1e-6  # 1 up to the 1e-8 in the denominator
    assert adv[~m].eq(0).all()


def test_whitening_ignores_padding_width_and_content():
    rewards, group, mask = random_batch(1)
    base = get_advantage("reinforce_pp")(rewards, group, mask)
    wide = torch.cat([mask, torch.zeros(mask.shape[0], 4, dtype=F64)], dim=1)
    assert torch.allclose(get_advantage("reinforce_pp")(rewards, group, wide)[:, : mask.shape[1]], base, atol=1e-14)
    values = torch.where(mask.bool(), rewards[:, None], torch.tensor(float("nan"), dtype=F64))
    assert torch.equal(whiten(values, mask), base)


# ---------- bad input ----------

GOOD = (torch.tensor([1.0, 0.0, 1.0], dtype=F64), torch.tensor([4, 4, 9]), torch.ones(3, 2))

BAD = [
    ((torch.tensor([1.0, float("nan"), 1.0], dtype=F64), GOOD[1], GOOD[2]), r"rewards\[1\] is not finite \(nan\)"),
    ((torch.tensor([1.0, 0.0, -float("inf")], dtype=F64), GOOD[1], GOOD[2]), r"rewards\[2\] is not finite \(-inf\)"),
    ((GOOD[0][:2], GOOD[1], GOOD[2]), r"group \(3,\) must have the shape of rewards \(2,\)"),
    ((GOOD[0], GOOD[1].double(), GOOD[2]), "group must hold integer prompt ids"),
    ((GOOD[0], GOOD[1].bool(), GOOD[2]), "group must hold integer prompt ids"),
    ((GOOD[0].long(), GOOD[1], GOOD[2]), "rewards has dtype torch.int64; an advantage estimator needs float32 or "),
    ((GOOD[0][None], GOOD[1][None], GOOD[2]), r"rewards must be a non-empty \(B,\) tensor"),
    ((torch.zeros(0, dtype=F64), torch.zeros(0, dtype=torch.long), torch.ones(0, 2)), "non-empty"),
    ((GOOD[0], GOOD[1], torch.ones(2, 2)), r"mask must be \(B, T\) with B = 3"),
    ((GOOD[0], GOOD[1], torch.ones(3)), r"mask must be \(B, T\)"),
    ((GOOD[0], GOOD[1], torch.full((3, 2), 0.5)), "mask must be bool or contain only 0 and 1"),
]


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("args,match", BAD)
def test_bad_input_is_a_one_line_value_error(name, args, match):
    with pytest.raises(ValueError, match=match) as info:
        get_advantage(name)(*args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
def test_whitening_needs_two_tokens(name):
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="at least 2 valid tokens"):
        get_advantage(name)(torch.tensor([1.0, 2.0], dtype=F64), torch.tensor([0, 0]), mask)


@pytest.mark.parametrize("name", ["grpo", "reinforce_pp", "reinforce_pp_baseline"])
@pytest.mark.parametrize("eps", [0.0, -1e-06, True])
def test_eps_must_be_positive(name, eps):
    """eps guards a zero spread: with equal rewards, 0 would give 0/0 = NaN and a negative eps flips signs; True
    was taken as 1 (a typo'd flag, and A = +-0.29 instead of +-0.71 for rewards 0 and 1)."""
    with pytest.raises(ValueError, match=f"eps must be a finite number > 0, got {eps}"):
        get_advantage(name)(*GOOD, eps=eps)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_inputs_that_are_not_tensors_are_named(name):
    """A list of rewards raised AttributeError from inside the estimator."""
    rewards, group, mask = GOOD
    for args, bad in (([1.0, 0.0], group, mask), "rewards"), ((rewards, [0, 0], mask), "group"):
        with pytest.raises(ValueError, match=f"{bad} must be a torch.Tensor, got list"):
            get_advantage(name)(*args)
    with pytest.raises(ValueError, match="whiten: values and mask must be tensors, got list"):
        whiten([[1.0, 2.0]], torch.ones(1, 2))


def test_unknown_estimator_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown advantage estimator 'gae'; valid: drgrpo, grpo, reinforce_pp"):
        get_advantage("gae")


@pytest.mark.parametrize("name", ["grpo", "reinforce_pp", "reinforce_pp_baseline"])
def test_a_spread_whose_squares_pass_float64_keeps_its_advantages(name):
    """float64 rewards spread past ~1e154: the sum of squared deviations overflowed, so GRPO's group std and the
    whitening's std were inf and every advantage 0 (no error). The std is taken from squares scaled by the largest
    deviation there. Reference: the estimator's formula in mpmath at 50 digits (Bessel std, eps 1e-6 / 1e-8)."""
    mpmath = pytest.importorskip("mpmath")
    rewards = torch.tensor([1e200, -1e200, 3e199, 2e180, 1e180], dtype=F64)
    group, mask = torch.tensor([0, 0, 0, 1, 1]), torch.ones(5, 2)
    got = get_advantage(name)(rewards, group, mask)
    with mpmath.workdps(50):
        r = [mpmath.mpf(x) for x in rewards.tolist()]
        groups = [[0, 1, 2], [3, 4]]
        mean = {i: sum(r[j] for j in g) / len(g) for g in groups for i in g}
        if name == "grpo":
            std = {i: mpmath.sqrt(sum((r[j] - mean[i]) ** 2 for j in g) / (len(g) - 1)) for g in groups for i in g}
            want = [float((r[i] - mean[i]) / (std[i] + mpmath.mpf("1e-6"))) for i in range(5)]
        else:
            v = [r[i] - (mean[i] if name.endswith("baseline") else 0) for i in range(5) for _ in range(2)]
            mu = sum(v) / len(v)
            sd = mpmath.sqrt(sum((x - mu) ** 2 for x in v) / (len(v) - 1) + mpmath.mpf("1e-8"))
            want = [float((x - mu) / sd) for x in v]
    assert got.flatten().tolist() == pytest.approx(want, rel=1e-12, abs=0.0)
