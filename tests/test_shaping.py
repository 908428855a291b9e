"""DAPO overlong penalty and group filter (spec 5.3; section-9 items 23-24)."""

from __future__ import annotations

import re
import statistics
from fractions import Fraction

import pytest
import torch

from rpgrl.shaping import group_filter_keep, overlong_penalty


def test_item23_overlong_penalty_paper_values():
    # L_max 2048, buffer 512, factor 1
    out = overlong_penalty(torch.tensor([1000, 1536, 1792, 2048]), 2048, 512)
    assert out.tolist() == [0.0, 0.0, -0.5, -1.0]


@pytest.mark.parametrize("max_len,buffer,factor", [(2048, 512, 1.0), (100, 30, 0.5), (16, 16, 2.0)])
def test_overlong_penalty_matches_scalar_formula(max_len, buffer, factor):
    lengths = torch.arange(0, max_len + 1)
    out = overlong_penalty(lengths, max_len, buffer, factor, dtype=torch.float64)
    want = [min(-(L - (max_len - buffer)) / buffer * factor, 0.0) for L in range(max_len + 1)]
    assert torch.allclose(out, torch.tensor(want, dtype=torch.float64), atol=1e-15)
    assert out[-1].item() == pytest.approx(-factor)  # reaches -factor at the hard limit
    assert out.dtype == torch.float64 and overlong_penalty(lengths, max_len, buffer).dtype == torch.float32


@pytest.mark.parametrize(
    "args,match",
    [
        ((torch.tensor([2049]), 2048, 512), r"lengths\[0\] = 2049 exceeds max_len 2048"),
        ((torch.tensor([3, -1]), 2048, 512), "lengths must be finite and >= 0"),
        ((torch.tensor([[3]]), 2048, 512), r"lengths must be \(B,\)"),
        ((torch.tensor([3]), 2048, 0), "need 0 < buffer <= max_len"),
        ((torch.tensor([3]), 512, 2048), "need 0 < buffer <= max_len"),
        ((torch.tensor([3]), 2048.0, 512), "must be ints"),
        ((torch.tensor([3]), 2048, 512, -1.0), "factor must be finite and >= 0"),
    ],
)
def test_overlong_penalty_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        overlong_penalty(*args)


def test_group_filter_hand_cases():
    acc = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    group = torch.tensor([7, 7, 7, 3, 3, 3, 5, 5, 11])
    # group 7 all correct -> dropped; group 3 mixed -> kept; group 5 all wrong -> dropped; group 11 size 1 -> kept
    keep = group_filter_keep(acc, group)
    assert keep.tolist() == [False, False, False, True, True, True, False, False, True]
    assert group[keep].unique().tolist() == [3, 11]
    assert group_filter_keep(acc.bool(), group).tolist() == keep.tolist()


@pytest.mark.parametrize("seed", range(5))
def test_group_filter_matches_population_std_loop(seed):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 6, (12,), generator=g).tolist()
    group = torch.cat([torch.full((s,), i * 3 + 1) for i, s in enumerate(sizes)])
    group = group[torch.randperm(group.numel(), generator=g)]
    acc = (torch.rand(group.numel(), generator=g) < 0.7).float()
    by_group: dict[int, list[float]] = {}
    for a, gid in zip(acc.tolist(), group.tolist(), strict=True):
        by_group.setdefault(gid, []).append(a)
    kept = {gid for gid, v in by_group.items() if len(v) == 1 or statistics.pstdev(v) > 0}
    assert group_filter_keep(acc, group).tolist() == [gid in kept for gid in group.tolist()]


def test_group_filter_bad_input():
    with pytest.raises(ValueError, match=r"acc\[1\] is not finite"):
        group_filter_keep(torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="must both be"):
        group_filter_keep(torch.tensor([1.0, 0.0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="integer prompt ids"):
        group_filter_keep(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]))
    assert group_filter_keep(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)


def test_overlong_penalty_is_computed_before_it_is_rounded_to_dtype():
    """bfloat16 rounded the lengths first (1537 of max 2048, buffer 512, became 1536: penalty 0 instead of -1/512);
    float16 lengths above 65504 were inf (-inf penalty). An integer dtype, bools for max_len / buffer and None for
    the lengths are refused in one line."""
    assert overlong_penalty(torch.tensor([1537]), 2048, 512, dtype=torch.bfloat16).item() == pytest.approx(
        -1 / 512, rel=1e-2
    )
    assert overlong_penalty(torch.tensor([70000]), 100000, 50000, dtype=torch.float16).item() == pytest.approx(
        -0.4, rel=1e-3
    )
    with pytest.raises(ValueError, match="dtype must be a floating torch dtype"):
        overlong_penalty(torch.tensor([3]), 10, 5, dtype=torch.int64)
    with pytest.raises(ValueError, match="max_len and buffer must be ints"):
        overlong_penalty(torch.tensor([3]), True, True)
    with pytest.raises(ValueError, match="lengths must be"):
        overlong_penalty(None, 10, 5)


@pytest.mark.parametrize(
    "max_len, buffer, factor, match",
    [
        (2048, 512, 10**400, r"^factor must be a float or an int below 2\*\*63, got an int of 401 digits$"),
        (2048, 512, -(10**400), r"^factor must be a float or an int below 2\*\*63, got an int of 401 digits$"),
        (
            2048,
            512,
            Fraction(10**400, 3),
            r"^factor must be a float or an int below 2\*\*63, got a Fraction past float's",
        ),
        (10**400, 512, 1.0, r"^max_len must be an int below 2\*\*63, got an int of 401 digits$"),
        (2048, 2**64, 1.0, r"^buffer must be an int below 2\*\*63, got an int of 20 digits$"),
        (2**63 + 5, 3, 1.0, r"^max_len must be an int below 2\*\*63, got an int of 19 digits$"),
    ],
    ids=["factor_10e400", "factor_-10e400", "factor_fraction", "max_len_10e400", "buffer_2e64", "max_len_2e63+5"],
)
def test_overlong_penalty_refuses_numbers_past_float_and_int64_in_one_line(max_len, buffer, factor, match):
    """Python ints past float's range (factor=10**400) or int64's (max_len 2**63 + 5) raised OverflowError ("int too
    large to convert to float") or compared wrapped: max_len = 2**63 + 5 reported "lengths[1] = 10 exceeds max_len
    9223372036854775813". Now one ValueError naming the option, as `RPGOptions.check` words an int past 2**63."""
    with pytest.raises(ValueError, match=match):
        overlong_penalty(torch.tensor([3, 10]), max_len, buffer, factor)


@pytest.mark.parametrize("factor, dtype", [(1e5, torch.float16), (1e39, torch.float32), (1e300, torch.bfloat16)])
def test_overlong_penalty_refuses_a_factor_past_its_dtype(factor, dtype):
    """A factor above the output dtype's largest number gave -inf penalties (float16 at 1e5: -inf at max_len, a
    finite score turned -inf): refused in one line naming the factor and the dtype; its largest number passes and
    gives -factor at max_len, rounded once (the formula in float64 here)."""
    with pytest.raises(ValueError, match=rf"^{re.escape(f'factor {factor:g} is past {dtype}')}'s largest number \("):
        overlong_penalty(torch.tensor([3, 10]), 10, 4, factor, dtype=dtype)
    top = torch.finfo(dtype).max
    out = overlong_penalty(torch.tensor([7, 10]), 10, 4, top, dtype=dtype)
    assert out.tolist() == [torch.tensor(-top / 4, dtype=torch.float64).to(dtype).item(), -top]


def test_shaping_names_a_list_a_meta_tensor_and_complex_accuracies_in_one_line():
    """group_filter_keep([1.0, 0.0], ...) raised AttributeError ('list' object has no attribute 'dim'), a meta tensor
    torch's NotImplementedError, complex accuracies lost their imaginary part with a warning; overlong_penalty of meta
    lengths raised "Tensor.item() cannot be called on meta tensors". One-line ValueErrors now; the hand case stays
    (group 0 mixed: kept; group 1 all right: dropped)."""
    group = torch.tensor([0, 0, 1, 1])
    calls = {
        "acc and group must be tensors, got list and Tensor": lambda: group_filter_keep([1.0, 0.0, 1.0, 1.0], group),
        "acc and group must be tensors, got Tensor and list": lambda: group_filter_keep(torch.ones(4), [0, 0, 1, 1]),
        "acc is a meta tensor": lambda: group_filter_keep(torch.ones(4, device="meta"), group.to("meta")),
        "acc must hold real accuracies": lambda: group_filter_keep(torch.ones(4, dtype=torch.complex64), group),
        "lengths is a meta tensor": lambda: overlong_penalty(torch.tensor([3], device="meta"), 10, 5),
    }
    for match, call in calls.items():
        with pytest.raises(ValueError, match=f"^{re.escape(match)}") as info:
            call()
        assert "\n" not in str(info.value)
    assert group_filter_keep(torch.tensor([1.0, 0.0, 1.0, 1.0]), group).tolist() == [True, True, False, False]


def test_overlong_penalty_is_exact_for_lengths_past_two_to_the_53():
    """max_len and buffer are taken up to 2**63, but the lengths were made float64 before max_len - buffer was
    subtracted: with max_len 2**62 and buffer 1, L = max_len gave a penalty of 0, not -factor (2**62 - 1 rounds to
    2**62). Integer lengths are now subtracted in int64, exactly."""
    top = 2**62
    out = overlong_penalty(torch.tensor([top, top - 1, 5]), top, 1, dtype=torch.float64)
    assert out.tolist() == [-1.0, 0.0, 0.0]
    out = overlong_penalty(torch.tensor([top, top - 2]), top, 4, 2.0, dtype=torch.float64)
    assert out.tolist() == [-2.0, -1.0]


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_overlong_penalty_takes_unsigned_lengths(dtype):
    """uint32 / uint64 lengths (numpy's unsigned arrays through `torch.as_tensor`) raised torch's
    NotImplementedError ('"min_all" not implemented for 'UInt32''): they give the penalties of int64 lengths, and a
    uint64 length past 2**63 is one that exceeds max_len."""
    want = overlong_penalty(torch.tensor([1000, 1792, 2048]), 2048, 512).tolist()
    assert overlong_penalty(torch.tensor([1000, 1792, 2048], dtype=dtype), 2048, 512).tolist() == want
    with pytest.raises(ValueError, match=r"^lengths\[1\] = 2049 exceeds max_len 2048$"):
        overlong_penalty(torch.tensor([3, 2049], dtype=dtype), 2048, 512)
    if dtype == torch.uint64:
        with pytest.raises(ValueError, match=rf"^lengths\[0\] = {2**63 + 1} exceeds max_len 2048$"):
            overlong_penalty(torch.tensor([2**63 + 1, 3], dtype=dtype), 2048, 512)
