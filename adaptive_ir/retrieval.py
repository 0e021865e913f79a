"""The retrieval system the agent acts on: analyzer + tokenized corpus + BM25 index + document ids."""

from __future__ import annotations

import numpy as np
import torch

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .data import Collection
from .index import BM25Index
from .text import Analyzer, CorpusTerms


class Retriever:
    """Everything needed to turn query text into term ids and term ids into ranked documents."""

    def __init__(self, doc_ids: list[str], analyzer: Analyzer, corpus: CorpusTerms, index: BM25Index):
        self.doc_ids = doc_ids
        self.analyzer = analyzer
        self.corpus = corpus
        self.index = index

    @classmethod
    def build(cls, collection: "Collection", k1: float = 1.5, b: float = 0.75, idf: str = "lucene",
              device: str | torch.device = "cpu") -> "Retriever":
        """Index every document of the collection (never only the judged ones)."""
        analyzer = Analyzer()
        corpus = CorpusTerms.build([t for chunk in collection.iter_doc_texts() for t in chunk], analyzer)
        index = BM25Index.build(corpus, k1=k1, b=b, idf=idf).to(device)
        return cls(collection.doc_ids, analyzer, corpus, index)

    @property
    def vocab(self):
        return self.corpus.vocab

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Query texts → term ids (with repeats, as BM25 counts them); unknown words dropped."""
        return [self.vocab.encode(self.analyzer.tokenize(t)) for t in texts]

    def search(self, queries: list[list[int]], weights: list[list[float]] | None = None,
               k: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, doc indices) as numpy arrays for lists of term ids, in one batched call."""
        ids, w = self.index.pad(queries, weights)
        scores, idx = self.index.search(ids, w if weights is not None else None, k=k)
        return scores.cpu().numpy(), idx.cpu().numpy()
