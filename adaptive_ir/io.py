"""Atomic, checksummed writes: a crash mid-write leaves the previous file intact, and a damaged file is detected."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path`` (atomic on POSIX)."""
    _atomic_write(path, lambda f: f.write(data))


def _atomic_write(path: str | Path, write) -> None:
    """``write(file)`` into a temporary file next to ``path``, fsync, rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"))


def atomic_save_npy(path: str | Path, array: np.ndarray) -> None:
    """``np.save`` straight into the temporary file: a large array is never copied in memory."""
    _atomic_write(path, lambda f: np.save(f, array, allow_pickle=False))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_arrays(folder: str | Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """A cache entry: ``arrays.npz`` (no pickles) + ``meta.json`` holding its sha256; both atomic.

    ``meta.json`` is written last, so an entry without it (a crash mid-write) is simply absent.
    """
    folder = Path(folder)
    buf = io.BytesIO()
    np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    data = buf.getvalue()
    atomic_write_bytes(folder / "arrays.npz", data)
    atomic_write_json(folder / "meta.json", {**meta, "sha256": sha256(data)})


def load_arrays(folder: str | Path, meta: dict) -> dict[str, np.ndarray] | None:
    """The arrays of a cache entry whose meta matches ``meta`` and whose checksum is intact, else None.

    A damaged entry (checksum mismatch, unreadable file) is reported by the caller's rebuild, never used.
    """
    folder = Path(folder)
    try:
        stored = json.loads((folder / "meta.json").read_text())
        data = (folder / "arrays.npz").read_bytes()
    except (OSError, ValueError):
        return None
    digest = stored.pop("sha256", None)
    if stored != json.loads(json.dumps(meta)) or digest != sha256(data):
        return None
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def fingerprint(*parts) -> str:
    """A short stable hash of JSON-serialisable parts (cache keys)."""
    return sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8"))[:16]
