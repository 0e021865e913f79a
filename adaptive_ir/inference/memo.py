"""Embeddings reused across the batches of a query set (``Reformulator.reformulate_file``).

A batch of ad-hoc queries asks the embedding model for (1) its query texts, for the semantic feedback's re-ranking,
(2) the same query texts again, for the policy (one model serves both in the shipped policies), and (3) every
distinct candidate term of the batch (about 17 per query on SciFact). ``MemoEmbedder`` answers (2) with (1)'s
vectors (the same texts in the same call: bit for bit the vectors a second encode gives) and keeps the vectors of
single words, so a term met in an earlier batch is not encoded again. Candidate terms are index terms, so the
words kept are bounded by the vocabulary; ``capacity`` bounds them anyway (least recently used dropped first).

A word's vector from an earlier batch can differ from the one its own batch would give in the last float bits
(the model pads each batch to its longest text); see benchmarks/reformulate_throughput.py for how often a rewrite
changes because of it.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

WORD_CAPACITY = 100_000
"""Single-word vectors kept at most (384-d float32: about 150 MiB when full)."""


class MemoEmbedder:
    """Wraps an embedder (``encode(texts) -> (n, dim)``); every other attribute is the wrapped one's."""

    def __init__(self, inner, capacity: int = WORD_CAPACITY, words: bool = True):
        self.inner, self.capacity, self.keep_words = inner, capacity, words
        self.words: OrderedDict[str, np.ndarray] = OrderedDict()
        self.recent: list[tuple[tuple[str, ...], np.ndarray]] = []
        self.encoded = self.reused = 0
        """Texts sent to the model / texts answered from memory."""

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
            while len(self.words) > self.capacity:
                self.words.popitem(last=False)
        self.recent = [(key, out.copy()), *self.recent[:1]]
        return out


__all__ = ["WORD_CAPACITY", "MemoEmbedder"]
