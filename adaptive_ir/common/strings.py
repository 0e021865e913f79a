"""Texts kept as arrays: one UTF-8 buffer and the end offset of each text, about 8 bytes per text beside the
texts' own bytes (a list of str takes ~50 more). The corpus's document ids and an index's vocabulary are kept so."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal, overload

import numpy as np

from adaptive_ir.common.io import atomic_save_npy


class Strings(Sequence[str]):
    """Texts as one UTF-8 byte buffer (a uint8 array, maybe memory-mapped, or a bytearray) and each text's end offset
    (int64)."""

    def __init__(self, buf: np.ndarray | bytearray, ends: np.ndarray):
        # a memory map read as a plain array over the same pages: np.memmap's Python-level indexing and slicing
        # cost 6x numpy's own, paid on every text read (about 10 % of a reformulate_file run on SciFact)
        self.buf = buf if isinstance(buf, bytearray) else np.asarray(buf)
        self.ends = np.asarray(ends)

    @classmethod
    def of(cls, texts: Sequence[str]) -> Strings:
        encoded = [t.encode("utf-8") for t in texts]
        ends = np.cumsum([len(b) for b in encoded], dtype=np.int64) if encoded else np.zeros(0, np.int64)
        return cls(np.frombuffer(b"".join(encoded), np.uint8), ends)

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"position {i} out of range 0..{n - 1}")
        return self.bytes_at(i).decode("utf-8")

    def bytes_at(self, i: int) -> bytes:
        start = int(self.ends[i - 1]) if i else 0
        return bytes(self.buf[start:int(self.ends[i])])

    def take(self, positions: np.ndarray) -> list[str]:
        """The texts at ``positions`` (in range), in order, their byte ranges read in one array operation (what
        turning a run's top k into document ids needs: millions per table)."""
        pos = np.asarray(positions, dtype=np.int64)
        ends = self.ends[pos]
        starts = np.where(pos > 0, self.ends[pos - 1], 0)
        buf = self.buf
        return [bytes(buf[a:b]).decode("utf-8") for a, b in zip(starts.tolist(), ends.tolist())]

    def find(self, sorted_hashes: np.ndarray, order: np.ndarray, h: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        """The position (int64) of each of ``texts`` here, -1 for one not here, given their hashes ``h`` and this
        table's hashes sorted (``sorted_hashes``) with the positions in that order (``order``): one search for all,
        the text compared on every hash match, so a collision cannot give a wrong position."""
        out = np.full(len(texts), -1, np.int64)
        n = len(sorted_hashes)
        if not len(texts) or not n:
            return out
        at = np.searchsorted(sorted_hashes, h)
        for k in np.flatnonzero(sorted_hashes[np.minimum(at, n - 1)] == h).tolist():
            j = int(at[k])
            while j < n and sorted_hashes[j] == h[k]:
                pos = int(order[j])
                if self.bytes_at(pos).decode("utf-8") == texts[k]:
                    out[k] = pos
                    break
                j += 1
        return out

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other) -> bool:
        if isinstance(other, Strings):
            return np.array_equal(self.ends, other.ends) and np.array_equal(self.buf, other.buf)
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable arrays underneath, like a list

    def save(self, folder: Path, name: str) -> None:
        atomic_save_npy(folder / f"{name}_bytes.npy", np.frombuffer(self.buf, np.uint8))
        atomic_save_npy(folder / f"{name}_ends.npy", self.ends)

    @classmethod
    def load(cls, folder: Path, name: str, mmap: bool = True) -> Strings:
        mode: Literal["r"] | None = "r" if mmap else None
        return cls(np.load(folder / f"{name}_bytes.npy", mmap_mode=mode),
                   np.load(folder / f"{name}_ends.npy", mmap_mode=mode))


__all__ = ["Strings"]
