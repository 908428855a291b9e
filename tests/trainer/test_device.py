"""`train.device`: auto/cpu/cuda resolution, the one-line error without CUDA, and no device named in the trainer."""

import ast
from pathlib import Path

import pytest
import torch

import rpgrl
from rpgrl.errors import UsageError
from rpgrl.trainer.device import resolve_device

SRC = Path(rpgrl.__file__).parent


def test_auto_follows_cuda_availability(monkeypatch):
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")  # this machine: no CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(UsageError, match="'cuda' is not a device torch can use"):
        resolve_device("cuda")


def test_cuda_without_cuda_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from rpgrl.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--max-steps", "1", "--sft.max_steps", "0", "--train.device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rpgrl train: error: train.device: 'cuda' is not a device torch can use on this machine")
    assert err.count("\n") == 1
    assert not out.exists()
    assert main(["train", "--out", str(out), "--train.device", "gpu"]) == 2
    assert "expected one of auto, cpu, cuda" in capsys.readouterr().err


# Files whose tensors must follow the model: the trainer, the sampler, the advantage and shaping math it calls.
AUDITED = sorted((SRC / "trainer").glob("*.py")) + [SRC / "rollout.py", SRC / "advantages.py", SRC / "shaping.py"]
# Host-side generators on purpose: data order (PromptStream, the warm start's order), never used to sample tokens.
HOST_GENERATORS = {("setup.py", "_permutation"), ("sft.py", "warm_start")}


def _device_literals(path: Path) -> list[str]:
    """Places in `path` that name a device: `device="..."`, `.to("cuda"/"cpu")`, `.cuda()`, `torch.device("...")`,
    and `torch.Generator()` without `device=` (outside HOST_GENERATORS)."""
    tree = ast.parse(path.read_text())
    owner = {}  # call node -> name of the innermost function holding it
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                owner[node] = fn.name  # inner functions are walked later and overwrite
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        attr = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        const_args = [a for a in node.args if isinstance(a, ast.Constant) and a.value in ("cpu", "cuda")]
        if any(k.arg == "device" and isinstance(k.value, ast.Constant) for k in node.keywords):
            found.append(f"{path.name}:{node.lineno} device= literal")
        if attr in ("to", "device") and const_args:
            found.append(f"{path.name}:{node.lineno} {attr}({const_args[0].value!r})")
        if attr == "cuda":
            found.append(f"{path.name}:{node.lineno} .cuda()")
        if attr == "Generator" and not any(k.arg == "device" for k in node.keywords):
            name = owner.get(node, "<module>")
            if (path.name, name) not in HOST_GENERATORS:
                found.append(f"{path.name}:{node.lineno} torch.Generator() without device= in {name}")
    return sorted(set(found))


def test_the_trainer_names_no_device():
    assert len(AUDITED) >= 8
    bad = [hit for p in AUDITED if p.name != "device.py" for hit in _device_literals(p)]
    assert bad == []


def test_the_audit_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import torch\n"
        "def f(x):\n"
        "    g = torch.Generator()\n"
        "    y = torch.zeros(3, device='cpu')\n"
        "    return x.to('cuda'), x.cuda(), torch.device('cpu'), torch.Generator(device=x.device)\n"
    )
    assert _device_literals(bad) == [
        "bad.py:3 torch.Generator() without device= in f",
        "bad.py:4 device= literal",
        "bad.py:5 .cuda()",
        "bad.py:5 device('cpu')",
        "bad.py:5 to('cuda')",
    ]


@pytest.mark.parametrize("scale", [1e-3, 0.9, 1.0, 50.0, float("nan")])
def test_clip_grad_norm_equals_torch_bit_for_bit(scale):
    """Below the max norm the gradients are left untouched (torch multiplies them by exactly 1.0), above it they are
    scaled as torch scales them, a NaN gradient is propagated as torch propagates it; the total norm is torch's."""
    from rpgrl.trainer.device import clip_grad_norm

    gen = torch.Generator().manual_seed(0)
    shapes = [(7, 5), (5,), (3, 4, 2)]
    grads = [torch.randn(s, generator=gen) for s in shapes]
    norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads])).item()
    grads = [g * (scale / norm) for g in grads]  # total norm ~ scale, around the max norm of 1.0 below

    def params():
        ps = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        for p, g in zip(ps, grads, strict=True):
            p.grad = g.clone()
        return ps

    ours, theirs = params(), params()
    total = clip_grad_norm([*ours, torch.nn.Parameter(torch.zeros(2))], 1.0)  # one without a gradient: skipped
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert torch.equal(total, expected) or (total.isnan() and expected.isnan())
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a.grad.nan_to_num(7.0), b.grad.nan_to_num(7.0))
    if scale == 50.0:  # it did clip: the new norm is the max norm
        assert abs(torch.nn.utils.get_total_norm([p.grad for p in ours]).item() - 1.0) < 1e-5
    if scale == 0.9:
        assert all(torch.equal(p.grad, g) for p, g in zip(ours, grads, strict=True))


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "mps", "gpu", "cuda:x", "meta", "", 3.5])
def test_a_device_this_machine_lacks_is_one_line_naming_it_and_what_is_here(name, monkeypatch):
    """`make_rollout(device="cuda")` without CUDA raised torch's AssertionError ("Torch not compiled with CUDA
    enabled"), `gpu` a list of 20 device types, `meta` a NotImplementedError; now a UsageError before any tensor."""
    from rpgrl.models import build_char_tokenizer
    from rpgrl.rollout import make_rollout
    from rpgrl.trainer.device import usable_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if name in ("cuda", "cuda:0") and torch.cuda.is_initialized():
        pytest.skip("CUDA is in use by this process")
    with pytest.raises(UsageError, match=r"make_rollout: device: .*available here: cpu$") as info:
        make_rollout(build_char_tokenizer("ab"), [[1]], [[2]], device=name)
    assert "\n" not in str(info.value) and (name == "meta" or repr(name) in str(info.value))
    assert usable_device("cpu") == torch.device("cpu") and usable_device(torch.device("cpu:0")).index == 0


def test_train_device_and_the_library_word_an_unavailable_device_alike(monkeypatch):
    """`train.device cuda` without CUDA read "train.device cuda: no CUDA device is available to torch here; use
    --train.device cpu" where `make_rollout(device="cuda")` read "make_rollout: device: 'cuda' is not a device torch
    can use on this machine; available here: cpu": one wording now, `usable_device`'s, with the key as the prefix."""
    from rpgrl.trainer.device import usable_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if torch.cuda.is_initialized():
        pytest.skip("CUDA is in use by this process")
    want = "train.device: 'cuda' is not a device torch can use on this machine; available here: cpu"
    for call in (lambda: resolve_device("cuda"), lambda: usable_device("cuda", "train.device")):
        with pytest.raises(UsageError) as info:
            call()
        assert str(info.value) == want
    with pytest.raises(UsageError, match="^train.device: expected one of auto, cpu, cuda; got 'gpu'$"):
        resolve_device("gpu")  # as the config check words it
