"""How busy this process' devices are: its GPUs through NVIDIA's NVML, else its CPU time.

Design: docs/deployment.md#metrics
"""

import logging
import os
import time

__all__ = ["CpuUtilization", "GpuUtilization", "make_reader"]

logger = logging.getLogger("mgpu_tf")


class CpuUtilization:
    """The process' CPU time over the wall time and the cores it may run on, between reads.

    Example:

    ```python
    reader = CpuUtilization()
    sum(range(10**6))
    reader.read()  # from 0 to 1
    ```
    """

    devices = None  # no per-device figures

    def __init__(self):
        affinity = getattr(os, "sched_getaffinity", None)
        self.cores = len(affinity(0)) if affinity else (os.cpu_count() or 1)
        self._last = (time.perf_counter(), time.process_time())

    def read(self):
        """The share of the cores the process used since the last read (or creation)."""
        wall, cpu = time.perf_counter(), time.process_time()
        spent, used = wall - self._last[0], cpu - self._last[1]
        self._last = (wall, cpu)
        return min(1.0, used / (spent * self.cores)) if spent > 0 else float("nan")


class GpuUtilization:
    """Utilisation, memory and power of this process' `count` GPUs, via `nvidia-ml-py`.

    NVML sees every GPU of the machine (or of the container): where it sees more than
    `count`, the GPUs are those that run this process, else the first `count`.

    Args:
        count: how many GPUs the process uses.

    Attributes:
        devices: after a read, one dict per GPU: `utilization` (0 to 1), `memory_bytes`
            (used) and `power_watts`.
    """

    def __init__(self, count):
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
        if len(handles) > count:
            pid = os.getpid()
            mine = [h for h in handles if any(
                p.pid == pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))]
            handles = mine if len(mine) == count else handles[:count]
        self._handles = handles
        self.devices = []

    def read(self):
        """The GPUs' mean utilisation over NVML's last sample period, from 0 to 1."""
        nvml, devices = self._nvml, []
        for handle in self._handles:
            try:
                power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            except nvml.NVMLError:  # not every board reports its power
                power = float("nan")
            devices.append({"utilization": nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0,
                            "memory_bytes": float(nvml.nvmlDeviceGetMemoryInfo(handle).used),
                            "power_watts": power})
        self.devices = devices
        shares = [d["utilization"] for d in devices]
        return sum(shares) / len(shares) if shares else float("nan")


def make_reader(gpus):
    """A `GpuUtilization` for the process' `gpus` (a count), else a `CpuUtilization`.

    Without `nvidia-ml-py` or a driver NVML can reach, one warning, then the CPU's figure.
    """
    if gpus:
        try:
            return GpuUtilization(gpus)
        except Exception as error:  # ImportError, or any NVMLError: NVML is only a reader
            logger.warning("mgpu_tf: cannot read the GPUs' utilisation through NVML (%s); "
                           "`pip install nvidia-ml-py` and check the driver. The monitor "
                           "shows the CPU's instead.", error)
    return CpuUtilization()

