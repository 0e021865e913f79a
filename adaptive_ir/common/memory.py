"""Memory a run can count on and gives back: what the machine has available (checked before a phase that would not
fit), the pages of memory-mapped arrays a phase is done with, and the heap its temporaries left free. What keeps a
run's peak resident memory to one phase's needs (``Workspace.on_stage``: one first stage's index resident at a
time)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
from collections.abc import Iterable

import torch


def available_memory(device: torch.device | None = None) -> int | None:
    """Bytes free on ``device`` (default: the CPU): ``MemAvailable`` on Linux, the free memory of a CUDA device;
    None where unknown (another OS, another accelerator)."""
    if device is not None and device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def mappings(*arrays) -> list[mmap.mmap]:
    """The distinct file mappings under memory-mapped numpy arrays (``np.load(..., mmap_mode="r")``; None and
    arrays in memory are skipped)."""
    found = {id(a.base): a.base for a in arrays if a is not None and isinstance(a.base, mmap.mmap)}
    return list(found.values())


def release_pages(maps: Iterable[mmap.mmap]) -> None:
    """Take the pages of file mappings out of this process's resident memory (``madvise(MADV_DONTNEED)``): they
    stay in the page cache and are read back, unchanged, on the next access. For read-only maps of files that do
    not change (an index, a cache entry): what a phase that will not touch them again gives back to the next one.
    A no-op where the platform lacks it."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is None:
        return
    for m in maps:
        m.madvise(advice)


@functools.cache
def _libc_trim():
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    return trim  # None outside glibc


def trim_heap() -> None:
    """Return the C heap's free memory to the system (glibc's ``malloc_trim``): numpy's and Python's freed
    temporaries otherwise stay resident in the allocator's arenas (on WikiCAR-size indexes, 0.1-0.2 GiB after a
    stage). A no-op outside glibc."""
    trim = _libc_trim()
    if trim is not None:
        trim(0)


__all__ = ["available_memory", "mappings", "release_pages", "trim_heap"]
