"""Candidate terms per query, mined once from its BM25 feedback documents and cached on disk.

For each query, the top ``top_k0`` BM25 documents are the feedback set (or, with a ``SemanticFeedback``, the
``top_k0`` of BM25's top documents closest in meaning to the query). Every word in them (minus stopwords and
the query's own words) is scored by each configured method:

* ``tfidf``         mean over feedback docs of tf(w,d)/|d|, times idf(w);
* ``bm25_contrib``  mean over feedback docs of the BM25 impact w would add to d;
* ``rm3``           the relevance model RM1(w) = Σ_d score(d)·tf(w,d)/|d| (as in the RM3 baseline).

Each method's scores are divided by the query's best score (so they lie in [0, 1]); the union of each method's
top ``top_k_per_method`` terms is ranked by the mean normalised score, terms under ``min_score`` are dropped while
more than ``min_candidates`` remain, and the best ``max_candidates`` are kept. Features per candidate: the
normalised method scores, the mean, log-df / log-N, and the fraction of feedback docs containing the term.

The work is one batched feedback search and a few sparse matrix products per chunk of queries, over the rows of
the chunk's feedback documents only (read from the index's forward arrays, impacts recomputed bit-identically),
run on a thread pool (torch, scipy's sparse products and numpy release the GIL for the heavy parts), with a
progress bar and an up-front time estimate; ``benchmarks/rollout.py`` and ``benchmarks/scale.py`` time mining.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import Stemmer

from .feedback import FeedbackRows, SemanticFeedback, feedback_documents, relevance_model
from .index import idf_lucene
from .io import fingerprint, load_arrays, save_arrays, sha256
from .progress import Progress
from .retrieval import Retriever

log = logging.getLogger(__name__)
METHODS = ("tfidf", "bm25_contrib", "rm3")


@dataclass
class CandidateSet:
    """Candidates of Q queries, padded to M columns."""

    terms: np.ndarray
    """(Q, M) int64 vocabulary ids, -1 where padded."""
    features: np.ndarray
    """(Q, M, F) float32 features, 0 where padded."""
    feature_names: list[str]
    first: np.ndarray | None = None
    """(Q, K) int64 ranking keys (``index.ranking_keys``) of each query's own BM25 top K, -1 padded, when the
    miner was asked for them (``first_k``): its feedback search ranks them anyway, and episodes start from them."""

    @property
    def valid(self) -> np.ndarray:
        return self.terms >= 0

    @property
    def max_candidates(self) -> int:
        return self.terms.shape[1]


class CandidateMiner:
    """Mines candidate sets for batches of queries; see the module docstring for the scoring."""

    def __init__(self, retriever: Retriever, methods=("tfidf", "bm25_contrib", "rm3"), top_k0: int = 50,
                 max_candidates: int = 50, min_candidates: int = 20, min_score: float = 0.1,
                 top_k_per_method: int = 30, num_workers: int = 2, chunk_size: int = 256,
                 stem_variants: bool = False, feedback: SemanticFeedback | None = None, progress: bool = False,
                 first_k: int = 0):
        unknown = set(methods) - set(METHODS)
        if unknown or not methods:
            raise ValueError(f"candidate methods must be a non-empty subset of {METHODS}, got {list(methods)}")
        self.r = retriever
        self.feedback = feedback
        self.methods = tuple(methods)
        self.top_k0, self.max_candidates, self.min_candidates = top_k0, max_candidates, min_candidates
        self.min_score, self.top_k_per_method = min_score, top_k_per_method
        self.num_workers, self.chunk_size = max(1, num_workers), chunk_size
        self.progress = progress
        self.first_k = first_k
        """Depth of each query's own BM25 ranking kept in ``CandidateSet.first`` (0: none)."""
        corpus = retriever.corpus
        df = corpus.document_frequency()
        self.idf = idf_lucene(df, corpus.num_docs)
        self.log_df = (np.log1p(df) / np.log1p(corpus.num_docs)).astype(np.float32)
        self.feature_names = [*self.methods, "mean_score", "log_df", "fb_doc_fraction"]
        self.variants = _stem_groups(corpus.vocab.terms) if stem_variants else None
        if stem_variants:
            self.feature_names.append("stem_variant")

    def config_key(self) -> dict:
        return {"methods": self.methods, "top_k0": self.top_k0, "max_candidates": self.max_candidates,
                "min_candidates": self.min_candidates, "min_score": self.min_score,
                "top_k_per_method": self.top_k_per_method, "index": self.r.index.meta,
                "stem_variants": self.variants is not None,
                "feedback": None if self.feedback is None else [self.feedback.identity, self.feedback.depth],
                "first_k": self.first_k, "v": 1}

    def mine(self, query_terms: list[list[int]], query_vectors: np.ndarray | None = None) -> CandidateSet:
        """Candidate sets for every query, ``chunk_size`` queries at a time (one batched feedback search each).

        ``query_vectors`` (Q, D): the queries' sentence embeddings, needed with semantic feedback."""
        q = len(query_terms)
        if self.feedback is not None and (query_vectors is None or len(query_vectors) != q):
            raise ValueError("semantic feedback needs one query vector per query")
        terms = np.full((q, self.max_candidates), -1, dtype=np.int64)
        feats = np.zeros((q, self.max_candidates, len(self.feature_names)), dtype=np.float32)
        first = np.full((q, self.first_k), -1, dtype=np.int64)
        chunks = [(lo, min(q, lo + self.chunk_size)) for lo in range(0, q, self.chunk_size)]

        depth = self.top_k0 if self.feedback is None else max(self.top_k0, self.feedback.depth)

        def mine_chunk(c):
            lo, hi = c
            ranking = self.r.rankings(query_terms[lo:hi], max(depth, self.first_k))
            return lo, hi, *self._mine_chunk(query_terms[lo:hi], None if query_vectors is None
                                             else query_vectors[lo:hi], ranking), ranking[:, :self.first_k]

        with ThreadPoolExecutor(self.num_workers) as pool, \
                Progress(q, "mine candidates", "query", self.progress and len(chunks) > 1) as bar:
            for lo, hi, t, f, ranking in pool.map(mine_chunk, chunks):
                terms[lo:hi], feats[lo:hi] = t, f
                first[lo:hi, :ranking.shape[1]] = ranking
                bar.update(hi - lo)
        empty = int((terms[:, 0] < 0).sum())
        if empty:
            log.warning("%d of %d queries have no candidate terms (no feedback docs); "
                        "the agent can only STOP on them", empty, q)
        return CandidateSet(terms, feats, self.feature_names, first if self.first_k else None)

    def _mine_chunk(self, query_terms, query_vectors, ranking):
        """(terms, features) of a chunk of queries; ``ranking``: their BM25 ranking keys, deep enough for the
        feedback documents."""
        corpus = self.r.corpus
        fb_scores, fb_idx = feedback_documents(self.r, query_terms, self.top_k0, self.feedback, query_vectors,
                                               ranking)
        k0 = fb_idx.shape[1]
        has_score = fb_scores > 0  # zero-score "feedback" docs match no query term: not feedback
        inv_len = np.where(has_score, 1.0 / np.maximum(corpus.doc_len[fb_idx], 1), 0.0) / k0
        rows = FeedbackRows(corpus, fb_idx)
        scores = {}
        if "tfidf" in self.methods:
            scores["tfidf"] = (rows.weights(inv_len) @ rows.tf).multiply(self.idf[None, :]).tocsr()
        if "bm25_contrib" in self.methods:
            scores["bm25_contrib"] = rows.weights(has_score / k0) @ rows.impacts(self.r.index.weights)
        if "rm3" in self.methods:
            scores["rm3"] = relevance_model(corpus, fb_idx, fb_scores, rows)
        fb_frac = (rows.weights(has_score / k0) @ rows.presence()).tocsr()
        scores = {m: s.tocsr() for m, s in scores.items()}

        n = len(query_terms)
        terms = np.full((n, self.max_candidates), -1, dtype=np.int64)
        feats = np.zeros((n, self.max_candidates, len(self.feature_names)), dtype=np.float32)
        for i, qt in enumerate(query_terms):
            cols, table, is_variant = self._select(i, set(qt), scores, self._variants(qt))
            if not len(cols):
                continue
            lo, hi = fb_frac.indptr[i], fb_frac.indptr[i + 1]
            frac = dict(zip(fb_frac.indices[lo:hi].tolist(), fb_frac.data[lo:hi].tolist()))
            m, k = len(cols), table.shape[1]
            terms[i, :m] = cols
            feats[i, :m, :k] = table
            feats[i, :m, k] = self.log_df[cols]
            feats[i, :m, k + 1] = [frac.get(c, 0.0) for c in cols.tolist()]
            if self.variants is not None:
                feats[i, :m, k + 2] = is_variant
        return terms, feats

    def _variants(self, query_terms: list[int]) -> set[int]:
        """Other words of the vocabulary with the stem of a query word (e.g. "flows" for "flow")."""
        if self.variants is None:
            return set()
        out = set()
        for t in query_terms:
            out.update(self.variants.get(t, ()))
        return out - set(query_terms)

    def _select(self, i: int, exclude: set[int], scores: dict[str, sp.csr_matrix], variants: set[int]):
        """Candidate ids of query row ``i``, their (normalised method scores…, mean) table, and which are variants.

        Stem variants of the query words are always candidates (ranked first): the index does not stem, so
        they are the most direct fix of a vocabulary mismatch, and need not occur in the feedback docs."""
        per_method: dict[str, dict[int, float]] = {}
        pool: set[int] = set()
        for m in self.methods:
            s = scores[m]
            lo, hi = s.indptr[i], s.indptr[i + 1]
            cols, vals = s.indices[lo:hi], s.data[lo:hi]
            keep = np.array([c not in exclude for c in cols.tolist()], dtype=bool) if exclude else None
            if keep is not None:
                cols, vals = cols[keep], vals[keep]
            if not len(cols) or vals.max() <= 0:
                per_method[m] = {}
                continue
            vals = vals / vals.max()
            per_method[m] = dict(zip(cols.tolist(), vals.tolist()))
            top = np.lexsort((cols, -vals))[: self.top_k_per_method]
            pool.update(cols[top].tolist())
        pool |= variants
        if not pool:
            return (np.zeros(0, dtype=np.int64), np.zeros((0, len(self.methods) + 1), dtype=np.float32),
                    np.zeros(0, dtype=bool))
        cand = np.array(sorted(pool), dtype=np.int64)
        table = np.array([[per_method[m].get(c, 0.0) for m in self.methods] for c in cand.tolist()],
                         dtype=np.float32)
        table = np.concatenate([table, table.mean(1, keepdims=True)], axis=1)
        is_variant = np.array([c in variants for c in cand.tolist()], dtype=bool)
        order = np.lexsort((cand, -table[:, -1], ~is_variant))
        cand, table, is_variant = cand[order], table[order], is_variant[order]
        # drop weak candidates, but never below min_candidates
        strong = int(((table[:, -1] >= self.min_score) | is_variant).sum())
        keep = min(self.max_candidates, max(strong, min(self.min_candidates, len(cand))))
        return cand[:keep], table[:keep], is_variant[:keep]


def _stem_groups(terms: list[str]) -> dict[int, list[int]]:
    """term id → ids of every term with the same Snowball (Porter 2) English stem, for stems shared by two or more."""
    groups: dict[str, list[int]] = {}
    for i, stem in enumerate(Stemmer.Stemmer("english").stemWords(terms)):
        groups.setdefault(stem, []).append(i)
    return {i: g for g in groups.values() if len(g) > 1 for i in g}


def mine_cached(miner: CandidateMiner, query_terms: list[list[int]], cache_dir: str | Path | None,
                name: str, query_vectors: np.ndarray | None = None) -> CandidateSet:
    """Mine once; later runs (and epochs) load ``<cache_dir>/candidates-<name>-<key>/`` instead.

    The key covers the miner settings, the index parameters and the query terms, so any change re-mines.
    A damaged cache entry fails its checksum and is rebuilt.
    """
    if cache_dir is None:
        return miner.mine(query_terms, query_vectors)
    vectors = None if query_vectors is None else sha256(np.ascontiguousarray(query_vectors).tobytes())
    meta = {"key": fingerprint(miner.config_key(), query_terms, vectors), "name": name}
    folder = Path(cache_dir) / f"candidates-{name}-{meta['key']}"
    arrays = load_arrays(folder, meta)
    if arrays is not None:
        log.info("candidates for %s: loaded from cache %s", name, folder)
        return CandidateSet(arrays["terms"], arrays["features"], miner.feature_names, arrays.get("first"))
    if folder.exists():
        log.warning("candidate cache %s is incomplete or damaged; mining again", folder)
    cands = miner.mine(query_terms, query_vectors)
    extra = {} if cands.first is None else {"first": cands.first}
    save_arrays(folder, {"terms": cands.terms, "features": cands.features, **extra}, meta)
    return cands
