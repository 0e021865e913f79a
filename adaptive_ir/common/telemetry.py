"""GPU telemetry and where a phase's time went.

``GPUTelemetry``: a background thread that samples utilisation, memory and temperature of every visible GPU, keeps
the newest reading for the log rows and a timestamped history of utilisation and memory, summarised per GPU over
time windows (mean and median utilisation over the whole training phase and over the collect windows alone, peak
memory). nvitop is imported only when torch sees a CUDA device, and every failure (no nvitop, no NVML, a driver
that does not report a field) degrades to "no samples": telemetry must never stop or clutter a training run, so on
a machine without a GPU it does nothing, prints nothing and its summary is None.

``PhaseTimer``: wall seconds per part of a phase (collect, update, ...), timed with ``time.perf_counter`` at the
parts' boundaries (where a ``sync`` callable, ``torch.cuda.synchronize`` on a GPU, makes each part include its
queued device work), and the windows each part ran in, for the telemetry summary.
"""

from __future__ import annotations

import bisect
import contextlib
import statistics
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
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


MAX_HISTORY = 1_000_000
"""Samples kept for ``GPUTelemetry.summary`` (the oldest are dropped beyond it): 5.8 days at 0.5 s."""

Window = tuple[float, float]
"""(start, end) on the telemetry's clock (``time.perf_counter`` unless given another)."""


class GPUTelemetry:
    """Samples ``devices`` every ``interval`` seconds on a daemon thread; ``latest()`` is the newest reading,
    ``summary(windows)`` the utilisation and memory per GPU over time windows.

    With no devices (the CPU case) ``start()`` starts no thread, ``latest()`` is always ``{}`` and ``summary()``
    is None::

        with GPUTelemetry(interval=0.5) as gpu:
            ...
            monitor.log(step, row | gpu.latest())
        gpu.summary({"training": [(t0, t1)], "collect": collect_windows})

    ``clock``: the timestamps of the samples (the clock the windows are measured on).
    """

    def __init__(self, interval: float = 5.0, devices: Sequence[GPUDevice] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.interval = interval
        self.devices = list(devices) if devices is not None else discover_devices()
        self.clock = clock
        self._latest: dict[str, float] = {}
        self._history: deque[tuple[float, dict[str, float]]] = deque(maxlen=MAX_HISTORY)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.devices)

    def poll(self) -> dict[str, float]:
        """Take a sample now, make it the latest and add it (utilisation and memory used) to the history."""
        t = self.clock()
        reading = sample(self.devices)
        kept = {k: v for k, v in reading.items() if k.endswith(("/util", "/mem_used_mib", "/mem_total_mib"))}
        with self._lock:
            self._latest = reading
            self._history.append((t, kept))
        return reading

    def history(self) -> list[tuple[float, dict[str, float]]]:
        """Every kept sample as (time, {"gpu/<i>/util": ..., "gpu/<i>/mem_used_mib": ..., ...}), oldest first."""
        with self._lock:
            return list(self._history)

    def summary(self, windows: dict[str, Sequence[Window]]) -> dict | None:
        """Per GPU: the samples taken inside each named set of windows (both ends included), with their mean
        and median utilisation (percent; None where no sample fell inside), and the peak memory used over every
        sample; None without devices. E.g. for ``{"training": [(0, 60)], "collect": [(0, 20), (30, 50)]}``::

            {"sample_interval_s": 0.5, "samples": 121, "gpus": [
                {"gpu": 0, "mem_peak_mib": 5120.0, "mem_total_mib": 81559.0,
                 "training": {"samples": 121, "util_mean": 71.3, "util_median": 80.0},
                 "collect": {"samples": 80, "util_mean": 88.1, "util_median": 91.0}}]}
        """
        if not self.enabled:
            return None
        history = self.history()
        times = [t for t, _ in history]
        inside = {name: _inside(times, spans) for name, spans in windows.items()}
        gpus = []
        for i in range(len(self.devices)):
            util, mem, total = f"gpu/{i}/util", f"gpu/{i}/mem_used_mib", f"gpu/{i}/mem_total_mib"
            used = [r[mem] for _, r in history if mem in r]
            totals = [r[total] for _, r in history if total in r]
            row: dict = {"gpu": i, "mem_peak_mib": max(used) if used else None,
                         "mem_total_mib": totals[-1] if totals else None}
            for name, rows in inside.items():
                values = [history[j][1][util] for j in rows if util in history[j][1]]
                row[name] = {"samples": len(values),
                             "util_mean": round(statistics.fmean(values), 2) if values else None,
                             "util_median": round(statistics.median(values), 2) if values else None}
            gpus.append(row)
        return {"sample_interval_s": self.interval, "samples": len(history), "gpus": gpus}

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


def _inside(times: Sequence[float], spans: Sequence[Window]) -> list[int]:
    """The positions of the sorted ``times`` inside any of ``spans`` (ends included), each once, in order."""
    out: list[int] = []
    last = -1  # spans sorted by start: a position already taken is never taken again
    for a, b in sorted(spans):
        lo, hi = max(bisect.bisect_left(times, a), last + 1), bisect.bisect_right(times, b)
        out.extend(range(lo, hi))
        last = max(last, hi - 1)
    return out


class PhaseTimer:
    """Wall seconds of a phase (from ``start()`` to ``stop()``) and of the named parts timed inside it with
    ``part(name)``; what no part covers is ``other``. A part inside another counts for itself alone (a checkpoint
    saved during a dev evaluation is checkpointing, not evaluation). ``windows[name]``: the (start, end) of each
    run of a part, on ``clock``.

    ``sync`` runs at every boundary (start, stop, each part's start and end), never inside a part: on a GPU,
    ``torch.cuda.synchronize``, so that a part's time includes the device work it queued. ::

        timer = PhaseTimer(["collect", "update"], sync).start()
        with timer.part("collect"):
            ...
        timer.stop().summary()  # {"wall_s": ..., "parts_s": {"collect": ..., "update": ..., "other": ...}, ...}
    """

    def __init__(self, parts: Sequence[str] = (), sync: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.sync, self.clock = sync, clock
        self.seconds: dict[str, float] = dict.fromkeys(parts, 0.0)
        self.windows: dict[str, list[Window]] = {p: [] for p in parts}
        self.t0: float | None = None
        self.t1: float | None = None
        self._inner: list[float] = []  # per open part: the seconds of the parts inside it so far

    def _now(self, sync: bool = True) -> float:
        if sync and self.sync is not None:
            self.sync()
        return self.clock()

    def start(self) -> PhaseTimer:
        self.t0, self.t1 = self._now(), None
        return self

    def stop(self) -> PhaseTimer:
        if self.t0 is not None and self.t1 is None:
            self.t1 = self._now()
        return self

    @property
    def wall(self) -> float:
        if self.t0 is None:
            return 0.0
        return (self.t1 if self.t1 is not None else self.clock()) - self.t0

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        a = self._now()
        self._inner.append(0.0)
        failed = True
        try:
            yield
            failed = False
        finally:
            b = self._now(sync=not failed)  # leaving on an exception: no sync, that could raise over it
            inner = self._inner.pop()
            self.seconds[name] = self.seconds.get(name, 0.0) + (b - a) - inner
            self.windows.setdefault(name, []).append((a, b))
            if self._inner:
                self._inner[-1] += b - a

    def summary(self) -> dict:
        """``{"wall_s": W, "parts_s": {part: seconds, ..., "other": rest}, "shares": {part: seconds / W}}``; the
        parts (other included) sum to W up to rounding (milliseconds)."""
        wall = self.wall
        parts = dict(self.seconds)
        parts["other"] = max(0.0, wall - sum(parts.values()))
        return {"wall_s": round(wall, 3), "parts_s": {k: round(v, 3) for k, v in parts.items()},
                "shares": {k: round(v / wall, 4) if wall > 0 else None for k, v in parts.items()}}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def describe_time(spent: dict) -> str:
    """One log line for a training phase's ``training_time`` (``PhaseTimer.summary`` plus ``updates`` and
    ``gpu``), e.g. ``training 62.1 s (8 updates): collect 40.2 s (65%), update 15.0 s (24%), ...; GPU 0:
    utilisation mean/median 71%/80% over training, 88%/91% collecting; peak memory 5120 MiB``. Parts that took
    no time are left out."""
    parts = ", ".join(f"{name.replace('_', ' ')} {spent['parts_s'][name]:.1f} s ({_pct(100 * (share or 0))})"
                      for name, share in spent["shares"].items() if spent["parts_s"][name] > 0)
    line = f"training {spent['wall_s']:.1f} s ({spent.get('updates', 0)} updates): {parts or 'nothing timed'}"
    gpu = spent.get("gpu")
    if not gpu:
        return line
    for g in gpu.get("gpus", []):
        line += f"; GPU {g['gpu']}: utilisation mean/median"
        for window, label in (("training", "over training"), ("collect", "collecting")):
            w = g.get(window) or {}
            line += f" {_pct(w.get('util_mean'))}/{_pct(w.get('util_median'))} {label},"
        line = line.rstrip(",")
        if g.get("mem_peak_mib") is not None:
            line += f"; peak memory {g['mem_peak_mib']:.0f} MiB"
    if gpu.get("torch_peak_allocated_mib") is not None:
        line += f"; torch peak allocated {gpu['torch_peak_allocated_mib']:.0f} MiB"
    return line
