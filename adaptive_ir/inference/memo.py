"""Embeddings reused across the batches of a query set (``Reformulator.reformulate_file``).

A batch of ad-hoc queries asks the embedding model for (1) its query texts, for the semantic feedback's re-ranking,
(2) the same query texts again, for the policy (one model serves both in the shipped policies), and (3) every
distinct candidate term of the batch (about 17 per query on SciFact). ``MemoEmbedder`` answers (2) with (1)'s
vectors (the same texts in the same call: bit for bit the vectors a second encode gives) and keeps the vectors of
single words, so a term met in an earlier batch is not encoded again. Candidate terms are index terms, so the
words kept are bounded by the vocabulary; ``capacity`` bounds them anyway (least recently used dropped first).

With a ``store`` folder (``reformulate_file`` gives the embedding cache's ``words/``), the words are kept across
runs too: read when the memo is made, written back (merged with what another run wrote meanwhile, atomic,
checksummed: ``io.save_arrays``) when ``save`` is called, so a practitioner's next query set with the same model
(in the same cache) encodes only words no earlier run met. The store is keyed by the model's cache key (its files
and precision), as every cached vector is.

A word's vector from an earlier batch can differ from the one its own batch would give in the last float bits
(the model pads each batch to its longest text); see benchmarks/reformulate_throughput.py for how often a rewrite
changes because of it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path

import numpy as np

from adaptive_ir.common.io import load_arrays, save_arrays

log = logging.getLogger(__name__)

WORD_CAPACITY = 100_000
"""Single-word vectors kept at most (384-d float32: about 150 MiB when full)."""


class MemoEmbedder:
    """Wraps an embedder (``encode(texts) -> (n, dim)``); every other attribute is the wrapped one's."""

    def __init__(self, inner, capacity: int = WORD_CAPACITY, words: bool = True, store: str | Path | None = None):
        """``store``: a folder keeping the words across runs (read now, written by ``save``); None: this run only."""
        self.inner, self.capacity, self.keep_words = inner, capacity, words
        self.store = Path(store) if store is not None and words else None
        self.words: OrderedDict[str, np.ndarray] = OrderedDict()
        self.recent: list[tuple[tuple[str, ...], np.ndarray]] = []
        self.encoded = self.reused = 0
        """Texts sent to the model / texts answered from memory."""
        self.stored = self._read_store()
        """Words read from the store."""
        self.fresh_words = 0
        """Words encoded since the store was read or written."""

    def _read_store(self) -> int:
        self.words.update(self._stored())
        while len(self.words) > self.capacity:
            self.words.popitem(last=False)
        return len(self.words)

    def _stored(self) -> list[tuple[str, np.ndarray]]:
        """(word, vector) pairs in the store, least recently used first; none when there is no store or it does not
        hold a word list beside one vector of this model's dimension per word."""
        arrays = None if self.store is None else load_arrays(self.store, self._store_meta())
        if arrays is None:
            return []
        words, vectors = arrays["words"], arrays["vectors"]
        if words.ndim != 1 or vectors.shape != (len(words), self.inner.dim):
            return []  # not this model's (a store is keyed by its cache key, so only a damaged one)
        return list(zip(words.tolist(), np.array(vectors, np.float32)))

    def _store_meta(self) -> dict:
        return {"what": "word vectors", "dim": int(self.inner.dim)}

    def save(self) -> None:
        """Write the words to the store, least recently used first (the order a later run's memo drops them in),
        merged with words another run stored meanwhile; nothing when no word was encoded since the last read."""
        if self.store is None or not self.fresh_words:
            return
        merged = OrderedDict((w, v) for w, v in self._stored() if w not in self.words)
        merged.update(self.words)
        words = list(merged)[-self.capacity:]
        vectors = np.stack([merged[w] for w in words]).astype(np.float32, copy=False) if words else \
            np.zeros((0, self.inner.dim), np.float32)
        try:
            save_arrays(self.store, {"words": np.array(words, dtype=str), "vectors": vectors}, self._store_meta())
        except OSError as e:  # a read-only cache: the rewrites are done, only the next run's head start is lost
            log.warning("word vectors: cannot write %s (%s); the next run encodes them again", self.store, e)
            return
        self.fresh_words = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, texts: list[str], *args, **kwargs) -> np.ndarray:
        if args or kwargs:  # another use (a token limit): not memoized
            return self.inner.encode(texts, *args, **kwargs)
        key = tuple(texts)
        for seen, v in self.recent:
            if seen == key:
                self.reused += len(texts)
                return v.copy()
        if self.keep_words:
            known = [t in self.words for t in texts]
            missing = [t for t, k in zip(texts, known) if not k]
        else:
            known, missing = [False] * len(texts), list(texts)
        fresh = self.inner.encode(missing) if missing else np.zeros((0, self.inner.dim), np.float32)
        self.encoded += len(missing)
        self.reused += len(texts) - len(missing)
        if len(missing) == len(texts):
            out = fresh
        else:
            out = np.empty((len(texts), fresh.shape[1] if missing else self.inner.dim), np.float32)
            it = iter(range(len(missing)))
            for i, (t, k) in enumerate(zip(texts, known)):
                if k:
                    out[i] = self.words[t]
                    self.words.move_to_end(t)
                else:
                    out[i] = fresh[next(it)]
        if self.keep_words:
            for t, v in zip(missing, fresh):
                if t and not any(c.isspace() for c in t):
                    self.words[t] = v
                    self.fresh_words += 1
            while len(self.words) > self.capacity:
                self.words.popitem(last=False)
        self.recent = [(key, out.copy()), *self.recent[:1]]
        return out


__all__ = ["WORD_CAPACITY", "MemoEmbedder"]
