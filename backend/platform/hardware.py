"""What the machine offers for training: GPUs, bf16 support and free memory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DeviceInfo:
    """The training device as the studio sees it: kind, name, count, memory and bf16 support."""

    kind: str  # "cuda" or "cpu"
    name: str
    count: int
    total_memory_gb: float | None
    free_memory_gb: float | None
    bf16: bool

    def describe(self) -> str:
        """The device in a few words for the UI: ``CPU (8 cores)`` or ``1 x NVIDIA H200, 130.2 GB free``."""
        if self.kind == "cpu":
            return f"CPU ({os.cpu_count()} cores)"
        free = f", {self.free_memory_gb:.1f} GB free" if self.free_memory_gb is not None else ""
        return f"{self.count} x {self.name}{free}"


CPU_DEVICE = DeviceInfo(kind="cpu", name="CPU", count=0, total_memory_gb=None, free_memory_gb=None, bf16=False)


def no_gpu_in_sight(dev: Path = Path("/dev")) -> bool:
    """Whether this machine shows no GPU that torch could use, read without importing torch: no NVIDIA GPU (in the
    driver's /proc, as ``gpu_count_without_torch`` counts them, or as a node in ``dev``) and no ROCm device."""
    if gpu_count_without_torch() or (dev / "kfd").exists():
        return False
    try:
        return not any(dev.glob("nvidia[0-9]*"))
    except OSError:
        return False


def detect_device() -> DeviceInfo:
    """The first CUDA device (with its free memory), else the CPU. It imports torch only where a GPU may be there: on
    a CPU machine, the app's header and the pre-flight say "CPU" without the 3-4 CPU s of that import."""
    if no_gpu_in_sight():
        return CPU_DEVICE
    import torch

    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(0)
        return DeviceInfo(
            kind="cuda",
            name=torch.cuda.get_device_name(0),
            count=torch.cuda.device_count(),
            total_memory_gb=total / 2**30,
            free_memory_gb=free / 2**30,
            bf16=torch.cuda.is_bf16_supported(),
        )
    return CPU_DEVICE


def gpu_count_without_torch() -> int:
    """GPUs visible to this process, read without importing torch (the scheduler must start fast)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        return len([d for d in os.listdir("/proc/driver/nvidia/gpus")])
    except OSError:
        return 0


def memory_room(meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes this process's container can still take: the kernel's MemAvailable, or less where a cgroup (v2) caps
    the container below it (a Space's /proc/meminfo shows the whole host); None when neither can be read."""
    room: int | None = None
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                room = int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        cap = (cgroup / "memory.max").read_text().strip()
        if cap != "max":
            left = int(cap) - int((cgroup / "memory.current").read_text().strip())
            room = left if room is None else min(room, left)
    except (OSError, ValueError):
        pass
    return max(room, 0) if room is not None else None


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: the CPUs its affinity allows, fewer where the container's CPU quota
    (cgroup v2 ``cpu.max``, or v1 ``cpu/cpu.cfs_quota_us``) grants less time than that, rounded up; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call (macOS): every core the OS reports
        cores = os.cpu_count() or 1
    quota = _cpu_quota(cgroup)
    if quota is not None:
        cores = min(cores, quota)
    return max(cores, 1)


def _cpu_quota(cgroup: Path) -> int | None:
    """Whole CPUs the cgroup's quota grants per period (rounded up), or None when there is none or it is unreadable."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (cgroup / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (cgroup / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    return -(-q // p) if q > 0 and p > 0 else None
