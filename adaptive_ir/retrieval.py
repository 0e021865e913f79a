"""The retrieval system the agent acts on: analyzer + tokenized corpus + BM25 index + document ids."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from .data import Collection
from .index import BM25Index
from .text import Analyzer, CorpusTerms


class Retriever:
    """Everything needed to turn query text into term ids and term ids into ranked documents."""

    def __init__(self, doc_ids: list[str], analyzer: Analyzer, corpus: CorpusTerms, index: BM25Index,
                 doc_texts: Callable[[Iterable[int]], list[str]] | None = None):
        self.doc_ids = doc_ids
        self.analyzer = analyzer
        self.corpus = corpus
        self.index = index
        self.doc_texts = doc_texts
        """Texts of documents by corpus position (``Collection.doc_texts_at``), when the corpus is at hand."""

    @classmethod
    def build(cls, collection: "Collection", k1: float = 1.5, b: float = 0.75, idf: str = "lucene",
              device: str | torch.device = "cpu") -> "Retriever":
        """Index every document of the collection (never only the judged ones)."""
        analyzer = Analyzer()
        corpus = CorpusTerms.build([t for chunk in collection.iter_doc_texts() for t in chunk], analyzer)
        index = BM25Index.build(corpus, k1=k1, b=b, idf=idf).to(device)
        return cls(collection.doc_ids, analyzer, corpus, index, collection.doc_texts_at)

    @property
    def vocab(self):
        return self.corpus.vocab

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Query texts → term ids (with repeats, as BM25 counts them); unknown words dropped."""
        return [self.vocab.encode(self.analyzer.tokenize(t)) for t in texts]

    def first_occurrences(self, doc_idx: Iterable[int]) -> list[int]:
        """The distinct term ids of these documents (read in the given order), in order of first appearance."""
        if self.doc_texts is None:
            raise ValueError("this Retriever was built without access to the document texts")
        seen: dict[int, None] = {}
        for text in self.doc_texts(doc_idx):
            seen.update(dict.fromkeys(self.encode([text])[0]))
        return list(seen)

    def search(self, queries: list[list[int]], weights: list[list[float]] | None = None,
               k: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, doc indices) as numpy arrays for lists of term ids, in one batched call."""
        ids, w = self.index.pad(queries, weights)
        scores, idx = self.index.search(ids, w if weights is not None else None, k=k)
        return scores.cpu().numpy(), idx.cpu().numpy()
