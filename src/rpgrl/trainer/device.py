"""`train.device`: where the model, and so every tensor of a run, lives; and the optimizer-side helpers whose fast
form depends on it (fused AdamW, gradient clipping).

The trainer creates its tensors on the model's device (`next(model.parameters()).device`) and never names a device
itself; this is the one place that turns `auto|cpu|cuda` into a `torch.device`. The CUDA path is written for one
GPU (`cuda` = the current CUDA device) and has not been run by us.
"""

from __future__ import annotations

import torch

from rpgrl.errors import UsageError


def resolve_device(name: str) -> torch.device:
    """'auto' -> CUDA when `torch.cuda.is_available()`, else CPU; 'cuda' without CUDA is a UsageError, worded as
    `usable_device`'s (the library's) with the key train.device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda"):
        raise UsageError(f"train.device: expected one of auto, cpu, cuda; got {name!r}")  # as the config check
    return usable_device(name, "train.device")


def available_devices() -> list[str]:
    """The devices torch can use on this machine: cpu, each CUDA device, mps."""
    cuda = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["cpu", *cuda, *(["mps"] if torch.backends.mps.is_available() else [])]


def usable_device(device: torch.device | str, key: str = "device") -> torch.device:
    """`device` as a torch.device this machine has. UsageError (a ValueError; one line naming it and the devices
    available) for a malformed name (`gpu`, `cuda:x`), a device torch cannot use here (cuda without CUDA, mps
    without MPS, cuda:3 on one GPU: torch's own errors were an AssertionError or a list of 20 device types) or meta,
    which holds no data."""
    here = f"available here: {', '.join(available_devices())}"
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise UsageError(f"{key}: {device!r} is not a device name (cpu, cuda, cuda:0, mps); {here}") from None
    if d.type == "meta":
        raise UsageError(f"{key}: meta holds shapes, no data; {here}")
    cuda = torch.cuda.is_available() and (d.index or 0) < torch.cuda.device_count()
    ok = {"cuda": cuda, "mps": torch.backends.mps.is_available()}.get(d.type, True)
    try:
        if ok:
            torch.empty(0, device=d)  # also another backend (xpu, hpu, ...): torch says whether it is there
    except (RuntimeError, AssertionError):  # (torch built without CUDA asserts)
        ok = False
    if not ok:
        raise UsageError(f"{key}: {str(d)!r} is not a device torch can use on this machine; {here}")
    return d


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's parameters (where every tensor the trainer makes must go)."""
    return next(model.parameters()).device


def fusable(params: list[torch.nn.Parameter]) -> bool | None:
    """True when torch's fused AdamW supports every parameter (CPU/CUDA floating point), else None (its default).
    Fused: one kernel per tensor and no full-size temporaries, ~4x faster than foreach on CPU."""
    ok = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in params)
    return True if ok and params else None


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_(params, max_norm)`, same total norm and same gradients bit for bit, without
    its pass over every gradient when nothing is clipped (torch multiplies by a coefficient clamped to 1.0 so as not
    to synchronise a GPU; on the CPU that multiply by 1 is a full read and write of the gradients, ~1% of a 31M
    model's update). Returns the total 2-norm (a 0-dim tensor; non-finite when some gradient is)."""
    params = [p for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in params])
    coef = max_norm / (total + 1e-6)  # torch's coefficient, before its clamp to 1
    if not bool(coef >= 1.0):  # clipped (or a non-finite norm, which torch also multiplies in)
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total
