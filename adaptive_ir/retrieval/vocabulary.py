"""The vocabulary of an index, kept as arrays: no Python string or dict entry per term.

Term texts are one UTF-8 buffer and the end offset of each term (``Strings``); a term's id is found through the
CRC-32 of its bytes, sorted once with the ids in that order (``TermIds``), the text compared on every match so a
collision cannot give a wrong id. Saved as ``.npy`` files beside the index and memory-mapped when it is loaded: the
ranks of a torchrun node and the processes sharing a cache read one copy, where a list and a dict of 742,815
WikiCAR terms took about 130 MiB of Python heap in each. The surface forms (a stem's most frequent word) are a
second ``Strings``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from adaptive_ir.common.io import atomic_save_npy
from adaptive_ir.common.strings import Strings


def _crc(texts: Sequence[bytes]) -> np.ndarray:
    return np.fromiter((zlib.crc32(b) for b in texts), np.uint32, count=len(texts))


class TermIds(Mapping[str, int]):
    """term → id over ``Strings``: the terms' CRC-32s, sorted (uint32), and the ids in that order (int32)."""

    def __init__(self, terms: Strings, hashes: np.ndarray, order: np.ndarray):
        # maps read as plain arrays over the same pages (np.memmap's own indexing is slow; see Strings)
        self.terms, self.hashes, self.order = terms, np.asarray(hashes), np.asarray(order)

    @classmethod
    def of(cls, terms: Strings) -> TermIds:
        crc = _crc([terms.bytes_at(i) for i in range(len(terms))])
        order = np.argsort(crc, kind="stable").astype(np.int32)
        return cls(terms, crc[order], order)

    def positions(self, tokens: Sequence[str]) -> np.ndarray:
        """The id (int64) of each token, -1 for one not in the vocabulary: one search for all of them."""
        return self.terms.find(self.hashes, self.order, _crc([t.encode("utf-8") for t in tokens]), tokens)

    def __getitem__(self, term: str) -> int:
        if not isinstance(term, str):
            raise KeyError(term)
        t = int(self.positions([term])[0])
        if t < 0:
            raise KeyError(term)
        return t

    def __contains__(self, term) -> bool:
        return isinstance(term, str) and self.positions([term])[0] >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    def save(self, folder: Path, name: str) -> None:
        atomic_save_npy(folder / f"{name}_crc.npy", self.hashes)
        atomic_save_npy(folder / f"{name}_crc_order.npy", self.order)

    @classmethod
    def load(cls, terms: Strings, folder: Path, name: str, mmap: bool = True) -> TermIds:
        mode: Literal["r"] | None = "r" if mmap else None
        return cls(terms, np.load(folder / f"{name}_crc.npy", mmap_mode=mode),
                   np.load(folder / f"{name}_crc_order.npy", mmap_mode=mode))


@dataclass
class Vocabulary:
    """Term strings and their ids (ids are positions in ``terms``, assigned in order of first occurrence)."""

    terms: Strings
    ids: TermIds
    surface_forms: Strings | None = None
    """With a stemmer: per term (a stem), the unstemmed word it was most often made from in the corpus."""

    @classmethod
    def from_terms(cls, terms: Sequence[str], surface: Sequence[str] | None = None) -> Vocabulary:
        table = Strings.of(terms)
        return cls(table, TermIds.of(table), None if surface is None else Strings.of(surface))

    @property
    def surface(self) -> Strings:
        """Readable term texts (what embeddings and displays use): the surface forms, or the terms themselves."""
        return self.terms if self.surface_forms is None else self.surface_forms

    def __len__(self) -> int:
        return len(self.terms)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Term ids of the in-vocabulary tokens (out-of-vocabulary tokens score 0 in BM25 anyway)."""
        return [t for t in self.ids.positions(tokens).tolist() if t >= 0]

    def encode_many(self, token_lists: Sequence[Sequence[str]]) -> list[list[int]]:
        """``encode`` of each list, every token looked up in one search."""
        flat = [t for tokens in token_lists for t in tokens]
        ids = self.ids.positions(flat).tolist()
        out, at = [], 0
        for tokens in token_lists:
            out.append([t for t in ids[at:at + len(tokens)] if t >= 0])
            at += len(tokens)
        return out

    def save(self, folder: Path) -> None:
        """``vocab_*.npy`` (and ``surface_*.npy``), one atomic write each."""
        self.terms.save(folder, "vocab")
        self.ids.save(folder, "vocab")
        if self.surface_forms is not None:
            self.surface_forms.save(folder, "surface")

    @classmethod
    def load(cls, folder: Path, mmap: bool = True) -> Vocabulary:
        terms = Strings.load(folder, "vocab", mmap)
        surface = Strings.load(folder, "surface", mmap) if (folder / "surface_ends.npy").is_file() else None
        return cls(terms, TermIds.load(terms, folder, "vocab", mmap), surface)


__all__ = ["TermIds", "Vocabulary"]
