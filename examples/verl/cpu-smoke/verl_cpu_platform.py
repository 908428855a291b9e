"""A CPU platform for verl (device "cpu", collectives over gloo), registered as `VERL_PLATFORM=cpu`.

verl 0.9.1 ships platforms for nvidia, amd and huawei only; `verl.plugin.platform.PlatformRegistry` is its hook for
others. Import this module before verl resolves its platform: `VERL_USE_EXTERNAL_MODULES=verl_cpu_platform` (with this
folder on PYTHONPATH) makes `import verl` import it. Test and demo support only: one process, no accelerator.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry


class _CPUDevice:
    """The `torch.<device>` namespace verl calls through `get_torch_device()`: torch.cpu plus the memory queries
    torch.cpu lacks (verl logs them after every update), which report 0."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def _zero(*args: Any, **kwargs: Any) -> int:
        return 0

    max_memory_allocated = max_memory_reserved = memory_allocated = memory_reserved = _zero

    @staticmethod
    def get_device_name(*args: Any, **kwargs: Any) -> str:
        return "CPU"  # verl's FLOPs table has no CPU entry: MFU comes out 0

    @staticmethod
    def empty_cache() -> None:
        pass

    @staticmethod
    def reset_peak_memory_stats(*args: Any, **kwargs: Any) -> None:
        pass

    @staticmethod
    def mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
        return 0, 0

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(index: Any) -> None:
        pass


CPU_DEVICE = _CPUDevice()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    device_name = "cpu"
    vendor_name = "cpu"
    device_module = CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # only when asked for by name (VERL_PLATFORM=cpu), never auto-detected

    def current_device(self) -> str:  # verl moves tensors with .to(get_device_id()): "cpu", not an index
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
