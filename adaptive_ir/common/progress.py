"""Progress of the long precomputes (tokenizing a corpus, mining candidates, encoding documents), and where a
run's time and memory went.

A tqdm.auto bar (items/s, ETA) for people watching, and one log line after the first chunk saying how long the
whole job will take at the rate just measured, for people reading a log of a run that lasts hours. `Phases`
records each phase's wall time and the process's peak memory, for the log and the run's JSON.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import sys
import time
from typing import Literal

from tqdm.auto import tqdm

log = logging.getLogger(__name__)
LOG_AFTER_S = 5.0
"""Jobs estimated to finish sooner than this get no estimate in the log."""


def duration(seconds: float) -> str:
    """``3 h 05 min``, ``12 min 40 s`` or ``8.2 s``."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{seconds:.1f} s"


def plural(noun: str) -> str:
    """The plural of a progress unit ("query" → "queries", "doc" → "docs")."""
    return noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"


class Progress:
    """Counts ``total`` items (``initial`` already done, e.g. by an interrupted run) in chunks."""

    def __init__(self, total: int, desc: str, unit: str, enabled: bool = True, initial: int = 0):
        self.total, self.desc, self.unit, self.done = total, desc, unit, initial
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=True, leave=False,
                        disable=not enabled, dynamic_ncols=True)
        self.start = time.perf_counter()
        self.estimated = False

    def update(self, n: int) -> None:
        self.done += n
        self.bar.update(n)
        left = self.total - self.done
        if not self.estimated and n and left > 0:
            self.estimated = True
            rate = n / max(time.perf_counter() - self.start, 1e-9)
            if left / rate < LOG_AFTER_S:
                return
            units = plural(self.unit)
            log.info("%s: %d %s at %.0f %s/s (measured on the first %d): about %s for the remaining %d",
                     self.desc, self.total, units, rate, units, n, duration(left / rate), left)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> Literal[False]:
        self.close()
        return False


def peak_rss_gib() -> float:
    """The most memory this process has held resident so far (``ru_maxrss``), in GiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20  # bytes on macOS, KiB on Linux


class Phases:
    """Wall time per named phase of a run (load collection, index, mining per split, ...), summed when a phase
    runs more than once, each logged as it ends with the peak memory so far."""

    def __init__(self, progress: bool = True):
        self.seconds: dict[str, float] = {}
        self.progress = progress

    @contextlib.contextmanager
    def __call__(self, name: str, desc: str | None = None):
        """Time the block as phase ``name``; ``desc`` (default: the name) labels its one-line progress marker."""
        bar = tqdm(total=1, desc=desc or name, leave=False, disable=not self.progress)
        start = time.perf_counter()
        try:
            yield
        finally:
            bar.update(1)
            bar.close()
        seconds = self.add(name, time.perf_counter() - start)
        log.info("phase %s: %s (peak RSS %.2f GiB)", desc or name, duration(seconds), peak_rss_gib())

    def add(self, name: str, seconds: float) -> float:
        """Count ``seconds`` more for phase ``name`` (for work timed elsewhere, e.g. each training update)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        return seconds

    def merge(self, other: Phases, prefix: str) -> None:
        """Count another ``Phases``' times here, each named ``prefix + name`` (a helper workspace's phases)."""
        for name, seconds in other.seconds.items():
            self.add(prefix + name, seconds)

    def summary(self) -> dict:
        """``{"phases_s": {name: seconds}, "peak_rss_gib": ...}`` for the run's JSON."""
        return {"phases_s": {k: round(v, 2) for k, v in self.seconds.items()}, "peak_rss_gib": round(peak_rss_gib(), 3)}
