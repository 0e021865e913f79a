"""Corpora: the documents of a collection in corpus order, kept on disk and read in chunks when needed.

Every consumer (index build, semantic-feedback encoding, QuerySet relevance, run files) asks a corpus only:

* ``num_docs`` and ``doc_ids`` (``doc_ids[i]`` is the id string of position i, ``len(doc_ids)``);
* ``iter_doc_texts(chunk_size)``: the indexed text ``title + " " + text`` of every document, in corpus order,
  ``chunk_size`` documents at a time;
* ``doc_texts_at(indices)``: the same for some positions (random access);
* ``doc_positions(ids)``: int64 corpus positions of document ids, -1 for an id not in the corpus;
* ``iter_titles(chunk_size)``: the titles alone (to find the document a query is the title of).

A format's corpus class lives in that format's module. Nothing per document is kept as a Python object:
`DocIds` holds millions of ids as one UTF-8 buffer plus offsets, looked up through a sorted array of hashes,
and `RowIds` stands for ids that are the row numbers themselves. `MemoryCorpus` holds small corpora (the
embedded default collection, test fixtures) as plain lists behind the same interface.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np

from adaptive_ir.common.strings import Strings

CHUNK = 65_536
"""Default documents per chunk of `Corpus.iter_doc_texts`."""


def chunked(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of `size` items (the last one shorter)."""
    if size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {size}")
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def doc_text(title: str, text: str) -> str:
    """The text that gets indexed: title + " " + text (as the shared BASELINES.md does)."""
    return title + " " + text


class Corpus:
    """The documents of a collection (see the module docstring). Two corpora are equal when they hold the same
    ids and texts in the same order, whatever their storage (comparing reads both: O(corpus))."""

    doc_ids: Sequence[str]
    content_sha256: str | None = None
    """The sha256 of its texts once an index cache has read them all (``Retriever.cached``): a corpus does not
    change, so its next index (the other first stage's) finds its key without reading it again."""

    @property
    def num_docs(self) -> int:
        return len(self.doc_ids)

    def iter_doc_texts(self, chunk_size: int = CHUNK) -> Iterator[list[str]]:
        """``title + " " + text`` of every document in corpus order, ``chunk_size`` documents at a time."""
        return (
            [doc_text(title, text) for title, text in chunk] for chunk in chunked(self._iter_docs(), chunk_size)
        )

    def iter_titles(self, chunk_size: int = CHUNK) -> Iterator[list[str]]:
        """The title of every document in corpus order, ``chunk_size`` documents at a time."""
        return ([title for title, _ in chunk] for chunk in chunked(self._iter_docs(), chunk_size))

    def doc_texts_at(self, indices: Iterable[int]) -> list[str]:
        """``title + " " + text`` of the documents at these positions, in the order given (repeats allowed)."""
        idx = self._positions_in_range(indices)
        wanted = np.unique(idx)
        found = dict(zip(wanted.tolist(), (doc_text(t, x) for t, x in self._read_sorted(wanted))))
        return [found[i] for i in idx.tolist()]

    def doc_positions(self, ids: Iterable[str]) -> np.ndarray:
        """Corpus positions (int64) of document ids; -1 for an id not in the corpus."""
        doc_ids = self.doc_ids
        assert isinstance(doc_ids, _IdLookup)  # a corpus whose ids are a plain list overrides this method
        return doc_ids.positions(ids)

    def _iter_docs(self) -> Iterator[tuple[str, str]]:
        """(title, text) of every document in corpus order."""
        raise NotImplementedError

    def _read_sorted(self, positions: np.ndarray) -> Iterator[tuple[str, str]]:
        """(title, text) of the documents at `positions` (sorted, unique, in range), in that order. By default
        one sequential pass that stops after the last wanted document (for sources that cannot seek)."""
        wanted = iter(positions.tolist())
        target = next(wanted, None)
        for pos, fields in enumerate(self._iter_docs()):
            if target is None:
                return
            if pos == target:
                yield fields
                target = next(wanted, None)

    def _positions_in_range(self, indices: Iterable[int]) -> np.ndarray:
        idx = np.fromiter((int(i) for i in indices), dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_docs):
            raise IndexError(f"document position out of range 0..{self.num_docs - 1}: "
                             f"{int(idx[(idx < 0) | (idx >= self.num_docs)][0])}")
        return idx

    def __eq__(self, other) -> bool:
        if not isinstance(other, Corpus):
            return NotImplemented
        return (self.num_docs == other.num_docs and list(self.doc_ids) == list(other.doc_ids)
                and all(a == b for a, b in zip(self.iter_doc_texts(), other.iter_doc_texts())))

    # unhashable: a class that defines __eq__ and no __hash__ gets __hash__ = None


class MemoryCorpus(Corpus):
    """A corpus held as three lists (the embedded default collection, small fixtures)."""

    def __init__(self, doc_ids: list[str], titles: list[str], texts: list[str]):
        if not len(doc_ids) == len(titles) == len(texts):
            raise ValueError(f"{len(doc_ids)} ids, {len(titles)} titles and {len(texts)} texts")
        self.doc_ids, self.titles, self.texts = list(doc_ids), list(titles), list(texts)
        self._index: dict[str, int] | None = None

    def doc_positions(self, ids: Iterable[str]) -> np.ndarray:
        if self._index is None:
            self._index = {d: i for i, d in enumerate(self.doc_ids)}
        return np.array([self._index.get(d, -1) for d in ids], dtype=np.int64)

    def _iter_docs(self) -> Iterator[tuple[str, str]]:
        return zip(self.titles, self.texts)

    def _read_sorted(self, positions: np.ndarray) -> Iterator[tuple[str, str]]:
        return ((self.titles[i], self.texts[i]) for i in positions.tolist())

    def __repr__(self) -> str:
        return f"MemoryCorpus({self.num_docs} documents)"


# --------------------------------------------------------------------------------------------------------------
# Document ids
# --------------------------------------------------------------------------------------------------------------


class _IdLookup(Sequence[str]):
    """`index` and `in` through the subclass's vectorised `positions` (Sequence's defaults would scan)."""

    def positions(self, ids: Iterable[str]) -> np.ndarray:
        raise NotImplementedError

    def index(self, doc_id: str, *args) -> int:
        pos = int(self.positions([doc_id])[0])
        if pos < 0:
            raise ValueError(f"{doc_id!r} is not a document id of this corpus")
        return pos

    def __contains__(self, doc_id) -> bool:
        return isinstance(doc_id, str) and self.positions([doc_id])[0] >= 0


class DocIds(_IdLookup):
    """Document ids as one UTF-8 byte buffer and int64 end offsets (about 12 bytes per document plus the ids'
    own bytes, where a list and dict of str would take ~150). `positions` finds ids through their 64-bit
    hashes, sorted once, checking the id text on every hash match (so collisions cannot give a wrong answer).
    Build one with `DocIdsBuilder`."""

    def __init__(self, buffer: bytearray, ends: np.ndarray, hashes: np.ndarray):
        self.texts = Strings(buffer, ends)
        order = np.argsort(hashes, kind="stable")
        self._sorted_hashes = hashes[order]
        self._order = order.astype(np.int32) if len(order) < 2**31 else order

    def __len__(self) -> int:
        return len(self.texts)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i):
        return self.texts[i]

    def take(self, positions: np.ndarray) -> list[str]:
        """The ids at ``positions`` (in range), in order (``Strings.take``)."""
        return self.texts.take(positions)

    def positions(self, ids: Iterable[str]) -> np.ndarray:
        """Positions (int64) of `ids`; -1 for an id not here."""
        ids = ids if isinstance(ids, list) else list(ids)
        h = np.fromiter((hash(d) for d in ids), dtype=np.int64, count=len(ids))
        return self.texts.find(self._sorted_hashes, self._order, h, ids)

    def first_repeat(self) -> tuple[int, int] | None:
        """(position of the first occurrence, position of the repeat) of the earliest repeated id, or None."""
        same = np.flatnonzero(self._sorted_hashes[1:] == self._sorted_hashes[:-1])
        if not same.size:
            return None
        # only ids whose hash occurs more than once can repeat: few, so a dict over them is cheap
        suspects = np.unique(self._order[np.concatenate([same, same + 1])])
        seen: dict[str, int] = {}
        for pos in suspects.tolist():  # ascending: the first repeat found is the earliest in the corpus
            first = seen.setdefault(self[pos], pos)
            if first != pos:
                return first, pos
        return None

    def __repr__(self) -> str:
        return f"DocIds({len(self)} ids)"


class DocIdsBuilder:
    """Collects ids one at a time into compact arrays (no per-id Python object is kept)."""

    def __init__(self):
        self._buf = bytearray()
        self._ends = array("q")
        self._hashes = array("q")

    def add(self, doc_id: str) -> None:
        self._buf += doc_id.encode("utf-8")
        self._ends.append(len(self._buf))
        self._hashes.append(hash(doc_id))

    def __len__(self) -> int:
        return len(self._ends)

    def build(self) -> DocIds:
        ends = np.frombuffer(self._ends, dtype=np.int64) if self._ends else np.zeros(0, np.int64)
        hashes = np.frombuffer(self._hashes, dtype=np.int64) if self._hashes else np.zeros(0, np.int64)
        return DocIds(self._buf, ends, hashes)


class RowIds(_IdLookup):
    """The ids of a corpus whose documents are known by their row: '0', '1', ..., str(n - 1). Stores only n."""

    def __init__(self, n: int):
        self._n = int(n)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [str(j) for j in range(*i.indices(self._n))]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"document position {i} out of range 0..{self._n - 1}")
        return str(i)

    def positions(self, ids: Iterable[str]) -> np.ndarray:
        """Positions (int64) of `ids`; -1 for anything that is not the decimal form of a row here."""
        return np.array([int(d) if d.isdecimal() and d.isascii() and str(int(d)) == d and int(d) < self._n else -1
                         for d in ids], dtype=np.int64)

    def __repr__(self) -> str:
        return f"RowIds({self._n})"
