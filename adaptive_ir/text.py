"""One analyzer and one vocabulary: the same integer term ids in the index, the miner, the env and the policy."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from bm25s.stopwords import STOPWORDS_EN

TOKEN_PATTERN = r"(?u)\b\w\w+\b"
"""bm25s' (and scikit-learn's) default token pattern: runs of two or more word characters."""


class Analyzer:
    """Lowercase, split on ``TOKEN_PATTERN``, drop stopwords.

    The defaults reproduce ``../shared/datasets/BASELINES.md`` exactly (bm25s' 33-word Lucene English list,
    no stemming), so our BM25 numbers are comparable with published bm25s/rank-bm25 runs.
    """

    def __init__(self, stopwords: frozenset[str] | None = None):
        self.stopwords = frozenset(STOPWORDS_EN) if stopwords is None else stopwords
        self._token_re = re.compile(TOKEN_PATTERN)

    def tokenize(self, text: str) -> list[str]:
        return [t for t in self._token_re.findall(text.lower()) if t not in self.stopwords]


@dataclass
class Vocabulary:
    """Term strings and their ids (ids are positions in ``terms``, assigned in order of first occurrence)."""

    terms: list[str]
    ids: dict[str, int]

    @classmethod
    def from_tokens(cls, docs: list[list[str]]) -> "Vocabulary":
        ids: dict[str, int] = {}
        for doc in docs:
            for tok in doc:
                if tok not in ids:
                    ids[tok] = len(ids)
        return cls(terms=list(ids), ids=ids)

    def __len__(self) -> int:
        return len(self.terms)

    def encode(self, tokens: list[str]) -> list[int]:
        """Term ids of the in-vocabulary tokens (out-of-vocabulary tokens score 0 in BM25 anyway)."""
        return [self.ids[t] for t in tokens if t in self.ids]


@dataclass
class CorpusTerms:
    """The tokenized corpus as plain arrays: a document × term count matrix and per-document lengths."""

    vocab: Vocabulary
    doc_tf: sp.csr_matrix
    """(num_docs, vocab) term counts, float32."""
    doc_len: np.ndarray
    """Tokens per document after stopword removal."""

    @classmethod
    def build(cls, texts: list[str], analyzer: Analyzer) -> "CorpusTerms":
        tokens = [analyzer.tokenize(t) for t in texts]
        vocab = Vocabulary.from_tokens(tokens)
        indptr = np.zeros(len(tokens) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(t) for t in tokens])
        cols = np.fromiter((vocab.ids[t] for doc in tokens for t in doc), dtype=np.int64, count=int(indptr[-1]))
        data = np.ones(len(cols), dtype=np.float32)
        # csr_matrix sums duplicate (row, col) entries into term counts once we canonicalize
        doc_tf = sp.csr_matrix((data, cols, indptr), shape=(len(tokens), len(vocab)))
        doc_tf.sum_duplicates()
        return cls(vocab=vocab, doc_tf=doc_tf, doc_len=np.diff(indptr).astype(np.float32))

    @property
    def num_docs(self) -> int:
        return self.doc_tf.shape[0]

    def doc_token_ids(self) -> list[list[int]]:
        """Each document as a list of term ids with repeats (the form bm25s indexes)."""
        tf = self.doc_tf
        out = []
        for i in range(tf.shape[0]):
            lo, hi = tf.indptr[i], tf.indptr[i + 1]
            out.append(np.repeat(tf.indices[lo:hi], tf.data[lo:hi].astype(np.int64)).tolist())
        return out

    def document_frequency(self) -> np.ndarray:
        return np.bincount(self.doc_tf.indices, minlength=len(self.vocab)).astype(np.float32)
