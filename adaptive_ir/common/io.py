"""Atomic, checksummed writes: a crash mid-write leaves the previous file intact, and a damaged file is detected.
File locks (``flock``): held by an open file, so the OS releases them when the process ends, however it ends.
Where there is no ``flock`` (Windows) nothing is locked, and a warning says so once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

import numpy as np

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

log = logging.getLogger(__name__)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path`` (atomic on POSIX)."""
    atomic_write(path, lambda f: f.write(data))


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """``write(file)`` (a binary file) into a temporary file next to ``path``, fsync, rename over ``path``: a
    write that fails or is interrupted leaves no file that looks complete, and an older ``path`` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):  # mkstemp makes 0600; give what open() would: others may read shared runs/caches
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; set back at once, before any thread writes files
    os.umask(mask)
    return mask


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"))


def atomic_save_npy(path: str | Path, array: np.ndarray) -> None:
    """``np.save`` straight into the temporary file: a large array is never copied in memory."""
    atomic_write(path, lambda f: np.save(f, array, allow_pickle=False))


def atomic_write_folder(folder: str | Path, write: Callable[[Path], object], replace: bool = True) -> None:
    """``write(tmp)`` into a temporary folder beside ``folder``, then renamed to it, so an interrupted write leaves
    nothing a reader would load (and no temporary folder behind). An existing ``folder`` is replaced, or with
    ``replace`` False kept: another process's copy of the same cache entry, as good as this one."""
    folder = Path(folder)
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        write(tmp)
        if replace and folder.exists():
            shutil.rmtree(folder)
        try:
            tmp.rename(folder)
        except OSError:
            if replace:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


CHECKSUMS = "sha256.json"
"""The file of a cache folder that holds the sha256 of each of its other files."""


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, streamed (a large array is never read into memory whole)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: str | Path) -> None:
    """Record the sha256 of every file of ``folder`` in its ``sha256.json`` (written atomically, last)."""
    folder = Path(folder)
    sums = {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != CHECKSUMS}
    atomic_write_json(folder / CHECKSUMS, sums)


def checksum_problem(folder: str | Path) -> str | None:
    """What is wrong with a folder's files against its ``sha256.json`` (missing, changed), or None when they match."""
    folder = Path(folder)
    try:
        sums = json.loads((folder / CHECKSUMS).read_text())
    except (OSError, ValueError):
        return f"no readable {CHECKSUMS}: written before checksums were kept, or cut short"
    for name, digest in sums.items():
        try:
            if file_sha256(folder / name) != digest:
                return f"{name}: checksum mismatch"
        except OSError as e:
            return f"{name}: {e.strerror}"
    return None


@contextlib.contextmanager
def file_lock(path: str | Path, shared: bool = False):
    """Hold a blocking ``flock`` on ``path`` (created if absent): exclusive for writers, shared for readers.

    The lock file itself is never deleted: a process that opened it just before a deletion would lock an orphan.
    Readers of a folder they cannot write (a read-only cache) go on unlocked: nobody can be writing there.
    """
    path = Path(path)
    try:
        if not shared:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        if not shared:
            raise
        yield
        return
    if not _can_lock():
        os.close(fd)
        yield
        return
    assert fcntl is not None  # _can_lock
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def try_lock(path: str | Path) -> BinaryIO | None:
    """An exclusive ``flock`` on ``path`` taken without waiting: the open file that holds it (closing it, or
    dropping it, releases the lock), or None when another open file holds it. The file is opened without
    truncation, so whatever the holder wrote into it stays readable by those it turns away."""
    f = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+b")
    if not _can_lock():
        return f
    assert fcntl is not None  # _can_lock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


@functools.cache
def _can_lock() -> bool:
    if fcntl is None:
        log.warning("this platform has no flock: run folders and caches are not locked, so never start two runs "
                    "on one output folder")
    return fcntl is not None


def save_arrays(folder: str | Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """A cache entry: one ``<name>.npy`` per array (no pickles) + ``meta.json`` holding their sha256s; each atomic.

    ``meta.json`` is written last, so an entry without it (a crash mid-write) is simply absent. Caches are shared
    by concurrent runs: writers of one entry take turns (an exclusive lock), and readers wait for a writer's last
    file (a shared lock), so the files a reader takes always pair up.
    """
    folder = Path(folder)
    with file_lock(folder / ".lock"):
        (folder / "meta.json").unlink(missing_ok=True)  # the entry is absent until its new files all pair up
        digests = {}
        for name, array in arrays.items():
            atomic_write(folder / f"{name}.npy", functools.partial(np.save, arr=array, allow_pickle=False))
            digests[name] = file_sha256(folder / f"{name}.npy")
        for stale in set(folder.glob("*.np[yz]")) - {folder / f"{name}.npy" for name in arrays}:
            stale.unlink()  # an earlier entry's arrays (or the older one-file format's arrays.npz)
        atomic_write_json(folder / "meta.json", {**meta, "sha256": digests})


def load_arrays(folder: str | Path, meta: dict) -> dict[str, np.ndarray] | None:
    """The arrays of a cache entry whose meta matches ``meta`` and whose checksums are intact, else None.

    Each array is a read-only map of its file: the processes that read one entry (the DDP ranks of a machine)
    share its pages rather than each holding a copy, and the kernel can drop them under memory pressure. A
    damaged entry (checksum mismatch, unreadable file) is reported by the caller's rebuild, never used.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    try:
        with file_lock(folder / ".lock", shared=True):  # not between a writer's files
            stored = json.loads((folder / "meta.json").read_text())
            digests = stored.pop("sha256", None)
            if stored != json.loads(json.dumps(meta)) or not isinstance(digests, dict):
                return None  # another key, or the older one-file format
            if any(file_sha256(folder / f"{name}.npy") != digest for name, digest in digests.items()):
                return None
            # a map holds the file it opened: a later writer's rename leaves these checked bytes in place
            return _mapped(folder, digests)
    except (OSError, ValueError):
        return None


def _mapped(folder: Path, names) -> dict[str, np.ndarray]:
    """Read-only maps of an entry's ``<name>.npy`` files."""
    return {name: np.asarray(np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)) for name in names}


def load_or_compute(folder: str | Path | None, meta: dict, compute: Callable[[], dict[str, np.ndarray]],
                    what: str, valid: Callable[[dict[str, np.ndarray]], bool] | None = None
                    ) -> tuple[dict[str, np.ndarray], bool]:
    """(arrays, whether they came from the cache): the entry ``folder`` when it matches ``meta`` (``load_arrays``)
    and passes ``valid``, else ``compute()``'s arrays, saved there. A damaged entry is reported and computed again;
    ``folder`` None: computed, not stored (one-off inputs)."""
    arrays = None if folder is None else load_arrays(folder, meta)
    if arrays is not None and valid is not None and not valid(arrays):
        arrays = None
    if arrays is not None:
        log.info("%s: loaded from cache %s", what, folder)
        return arrays, True
    if folder is not None and (Path(folder) / "meta.json").exists():
        log.warning("%s: cache %s is damaged, incomplete or of an older format; computing it again", what, folder)
    arrays = compute()
    if folder is not None:
        save_arrays(folder, arrays, meta)
        # the saved files' maps in place of the computed arrays: what every later reader shares (their checksums
        # were taken as they were written)
        with file_lock(Path(folder) / ".lock", shared=True):
            arrays = _mapped(Path(folder), arrays)
    return arrays, False


def load_or_compute_rows(folder: str | Path, meta: dict, rows: int, part_rows: int,
                         compute: Callable[[int, int], dict[str, np.ndarray]], what: str
                         ) -> tuple[dict[str, np.ndarray], bool]:
    """``load_or_compute`` for arrays computed ``part_rows`` rows at a time (``compute(lo, hi)``: rows lo..hi-1 of
    every array, which are concatenated along their first axis): each finished part is an entry of its own
    (``<folder>/parts/<lo>-<hi>/``), so an interrupted computation (minutes at 100k+ queries) resumes at the first
    part not stored. The whole entry is saved at the end and the parts removed."""
    folder = Path(folder)

    def in_parts() -> dict[str, np.ndarray]:
        parts, resumed = [], 0
        for lo in range(0, rows, part_rows):
            hi = min(rows, lo + part_rows)
            try:
                part, hit = load_or_compute(folder / "parts" / f"{lo}-{hi}", {**meta, "part": [lo, hi]},
                                            functools.partial(compute, lo, hi), f"{what}, rows {lo}-{hi}")
            except FileNotFoundError:
                # a concurrent run of the same entry finished it and removed the parts under this one: its entry
                # is the answer (two evaluations of one query set, side by side, met this)
                done = load_arrays(folder, meta)
                if done is None:
                    raise
                return done
            resumed += (hi - lo) * hit
            parts.append(part)
        if resumed:
            log.info("%s: %d of %d rows read from an interrupted run's parts in %s", what, resumed, rows, folder)
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else compute(0, 0)

    arrays, hit = load_or_compute(folder, meta, in_parts, what)
    shutil.rmtree(folder / "parts", ignore_errors=True)
    return arrays, hit


def fingerprint(*parts) -> str:
    """A short stable hash of JSON-serialisable parts (cache keys)."""
    return sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8"))[:16]
