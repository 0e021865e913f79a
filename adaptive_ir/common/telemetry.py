"""GPU telemetry: a background thread that samples utilisation, memory and temperature of every visible GPU.

nvitop is imported only when torch sees a CUDA device, and every failure (no nvitop, no NVML, a driver that
does not report a field) degrades to "no samples": telemetry must never stop or clutter a training run, so on
a machine without a GPU it does nothing and prints nothing.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from typing import Protocol

import torch


class GPUDevice(Protocol):
    """The part of ``nvitop.Device`` sampled here (numbers, or nvitop's NA string when unsupported)."""

    def gpu_utilization(self) -> object: ...
    def memory_used(self) -> object: ...
    def memory_total(self) -> object: ...
    def temperature(self) -> object: ...


def discover_devices() -> list[GPUDevice]:
    """The CUDA-visible GPUs as nvitop devices, in CUDA order (so ``gpu/<i>`` is ``cuda:<i>``); [] when there
    is no GPU, no nvitop or no NVML."""
    if not torch.cuda.is_available():
        return []  # checked first: no need to load NVML on a CPU machine
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from nvitop import Device
            from nvitop.api import libnvml
    except Exception:  # noqa: BLE001 - nvitop missing or broken: no telemetry
        return []
    # nvitop logs a CRITICAL "NVML not found" banner when the driver library is absent: that case is "no
    # telemetry", not an error, so its logger is muted while the devices are listed
    was_disabled, libnvml.LOGGER.disabled = libnvml.LOGGER.disabled, True
    try:
        return list(Device.from_cuda_visible_devices())
    except Exception:  # noqa: BLE001 - NVMLError, driver/library mismatch: no telemetry
        return []
    finally:
        libnvml.LOGGER.disabled = was_disabled


def _number(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def sample(devices: Sequence[GPUDevice]) -> dict[str, float]:
    """One reading of every device as ``gpu/<i>/{util, mem_used_mib, mem_total_mib, temperature}`` (percent, MiB,
    MiB, °C), e.g. ``{"gpu/0/util": 87.0, "gpu/0/mem_used_mib": 5120.0, ...}``; fields a device does not report
    (or fails to read) are left out."""
    out: dict[str, float] = {}
    mib = 1024 * 1024
    for i, dev in enumerate(devices):
        readers = {"util": (dev.gpu_utilization, 1), "mem_used_mib": (dev.memory_used, mib),
                   "mem_total_mib": (dev.memory_total, mib), "temperature": (dev.temperature, 1)}
        for name, (read, scale) in readers.items():
            try:
                value = _number(read())
            except Exception:  # noqa: BLE001 - a GPU that falls off the bus must not stop training
                value = None
            if value is not None:
                out[f"gpu/{i}/{name}"] = value / scale
    return out


class GPUTelemetry:
    """Samples ``devices`` every ``interval`` seconds on a daemon thread; ``latest()`` is the newest reading.

    With no devices (the CPU case) ``start()`` starts no thread and ``latest()`` is always ``{}``::

        with GPUTelemetry(interval=5) as gpu:
            ...
            monitor.log(step, row | gpu.latest())
    """

    def __init__(self, interval: float = 5.0, devices: Sequence[GPUDevice] | None = None):
        self.interval = interval
        self.devices = list(devices) if devices is not None else discover_devices()
        self._latest: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.devices)

    def poll(self) -> dict[str, float]:
        """Take a sample now and make it the latest."""
        reading = sample(self.devices)
        with self._lock:
            self._latest = reading
        return reading

    def latest(self) -> dict[str, float]:
        with self._lock:
            return dict(self._latest)

    def start(self) -> GPUTelemetry:
        if self.enabled and self._thread is None:
            self.poll()  # the first logged row already has a reading
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def __enter__(self) -> GPUTelemetry:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
