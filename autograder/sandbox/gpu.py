"""The device seam: what a sandbox needs to give the learner's worker a GPU, and what the driver says, from outside the
sandbox, of the GPU memory its processes hold. Each kind of GPU is a `Vendor` in `VENDORS` (NVIDIA's today), serving
the devices the `device` setting names by torch's name ("cuda"): its device nodes, the driver's files the sandbox sees
read-only, the environment that says which GPUs are visible, and the driver's per-process reading (NVIDIA's NVML).
Another vendor is one more `Vendor`.
"""
from __future__ import annotations

import glob
import os
from typing import Protocol

from autograder import config


class Driver(Protocol):
    """The driver's management library, as one process initialised it."""

    def used(self, pids: set[int]) -> int:
        """Bytes of GPU memory the processes `pids` hold, by the driver's count."""
        ...


class Vendor:
    """One kind of GPU."""

    name = ""                             # as an instructor is told ("NVIDIA")
    devices: tuple[str, ...] = ()         # the device types it serves, as torch names them
    node_pattern = ""                     # its device nodes (its driver's control nodes included), a glob
    driver_files: tuple[str, ...] = ()    # what else of the host the sandbox sees, read-only (default gpu_paths)
    visibility: tuple[str, ...] = ()      # environment variables passed into the sandbox as they are set

    def nodes(self) -> list[str]:
        return sorted(glob.glob(self.node_pattern))

    def driver(self) -> Driver:
        """The driver's library, initialised in this process (an exception where it cannot be)."""
        raise NotImplementedError


class Nvml:
    """NVML, the NVIDIA driver's management library, with the handles of this machine's GPUs."""

    def __init__(self):
        import pynvml

        pynvml.nvmlInit()
        self.pynvml = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def used(self, pids: set[int]) -> int:
        total = 0
        for h in self.handles:
            for p in self.pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid in pids and p.usedGpuMemory:
                    total += p.usedGpuMemory
        return total


class Nvidia(Vendor):
    name = "NVIDIA"
    devices = ("cuda",)
    node_pattern = "/dev/nvidia*"
    driver_files = ("/proc/driver/nvidia", "/sys/devices", "/sys/bus/pci", "/sys/module/nvidia")
    # Unset, every GPU of the machine is visible; an empty value would hide them all.
    visibility = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")

    def driver(self) -> Driver:
        return Nvml()


VENDORS: list[Vendor] = [Nvidia()]


def on_gpu(settings: config.Settings | None = None) -> bool:
    """Whether the timed and memory-measured calls run on a GPU (the `device` setting, read when asked)."""
    return (settings or config.current()).device != "cpu"


def vendor(device: str) -> Vendor | None:
    """The vendor of the GPU `device` names: of those that serve its type, the one whose GPU this machine has (else
    the first); None for "cpu", or a device no vendor serves."""
    serving = [v for v in VENDORS if device.split(":")[0] in v.devices]
    return next((v for v in serving if v.nodes()), serving[0] if serving else None)


def visibility_env(device: str) -> dict[str, str]:
    """What the sandbox's environment takes from this process's to see `device`'s GPUs."""
    v = vendor(device)
    return {k: os.environ[k] for k in (v.visibility if v else ()) if k in os.environ}


_DRIVERS: dict = {}           # pid -> the driver's library as that process initialised it, None where it could not


def driver(device: str) -> Driver | None:
    """The driver of `device`'s GPUs, initialised in this process; None without one, and in a process forked after
    its parent initialised it (NVML is not safe there)."""
    pid = os.getpid()
    if any(other != pid and d for other, d in _DRIVERS.items()):
        return None
    v = vendor(device)
    if v is None:
        return None
    if pid not in _DRIVERS:
        try:
            _DRIVERS[pid] = v.driver()
        except Exception:  # noqa: BLE001 - no driver library, no GPU
            _DRIVERS[pid] = None
    return _DRIVERS[pid]


def memory_of(pids, device: str) -> int | None:
    """Bytes of GPU memory these processes hold now, by the driver's count (None without a reading)."""
    d = driver(device)
    try:
        return None if d is None else d.used(set(pids))
    except Exception:  # noqa: BLE001 - the driver did not answer: no reading
        return None
