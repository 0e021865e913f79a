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
normalised method scores, the mean, log-df / log-N, and the fraction of feedback docs containing the term
(with ``stem_variants``, a 0/1 variant flag), then what makes a term good *for this query* (Cao et al. 2008,
"Selecting good expansion terms for pseudo-relevance feedback"), over the feedback documents D_t holding it:

* ``cooc_mean``     mean over the query's terms w of |D_t ∩ D_w| / |D_t| (document-level co-occurrence);
* ``cooc_min``      the same for the query term it co-occurs with least (a term tied to one query word only);
* ``cooc_cover``    share of the query's terms it co-occurs with at all;
* ``fb_rank_weighted``  Σ_{D_t} 1/log2(rank + 1) over Σ of all feedback documents (near the top or deep down);
* ``fb_score_weighted`` the same with the documents' BM25 scores;
* ``fb_df_ratio``   log(feedback document fraction / corpus document fraction) / log N (feedback-specific
  or common everywhere).

With ``preview_levels`` (``candidate_mining.effect_preview``), an *effect preview* per candidate and weight, still
without the answers: adding it to the query at that weight, how many documents enter the first ranking's top
``preview_k`` (and its top 10), and how well the entering documents match the query alone (their score over the
query's best); ``kernels.effect_preview``, the env's own incremental step per candidate (its postings, not the
corpus).

The co-occurrence features are one compiled pass (``kernels.feedback_cooc``) over the feedback documents' rows of
the forward index, a binary search per (candidate, feedback document): the cost follows Q × M × K, never the corpus.

The work is one batched feedback search and a few sparse matrix products per chunk of queries, over the rows of
the chunk's feedback documents only (read from the index's forward arrays, impacts recomputed bit-identically),
then the selection as array code over the whole chunk (``select_candidates``: no Python loop over queries), run on
a thread pool (torch, scipy's sparse products and numpy release the GIL for the heavy parts), with a progress bar
and an up-front time estimate; ``benchmarks/rollout.py`` and ``benchmarks/scale.py`` time mining.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import Stemmer

from adaptive_ir.common.io import fingerprint, load_or_compute_rows, sha256
from adaptive_ir.common.progress import Progress
from adaptive_ir.retrieval import kernels
from adaptive_ir.retrieval.feedback import FeedbackRows, SemanticFeedback, feedback_documents, relevance_model
from adaptive_ir.retrieval.index import lucene_idf
from adaptive_ir.retrieval.retriever import Retriever

log = logging.getLogger(__name__)
METHODS = ("tfidf", "bm25_contrib", "rm3")
QUERY_FEATURES = ["cooc_mean", "cooc_min", "cooc_cover", "fb_rank_weighted", "fb_score_weighted", "fb_df_ratio"]
"""The query-specific features, after the miner's scores (see the module docstring)."""


def feature_names(methods: Sequence[str], stem_variants: bool,
                  preview_levels: Sequence[float] | None = None) -> list[str]:
    """The names of a miner's candidate features, in order: what a policy's spec records, known from the config
    alone (no index, no mining)."""
    preview = [f"preview_{kind}_w{w:g}" for w in preview_levels or () for kind in ("enter", "enter10", "match")]
    return [*methods, "mean_score", "log_df", "fb_doc_fraction", *(["stem_variant"] if stem_variants else []),
            *QUERY_FEATURES, *preview]


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
                 first_k: int = 0, preview_levels: tuple[float, ...] | None = None, preview_k: int = 40,
                 preview_by_score: bool = False):
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
        df = retriever.index.document_frequency()
        self.idf = lucene_idf(df, corpus.num_docs, exact=False).astype(np.float32)
        self.log_df = (np.log1p(df) / np.log1p(corpus.num_docs)).astype(np.float32)
        self.df = df
        self.feature_names = feature_names(self.methods, stem_variants, preview_levels)
        self.stems = StemGroups.build(list(corpus.vocab.terms)) if stem_variants else None
        self.preview_levels, self.preview_k, self.preview_by_score = preview_levels, preview_k, preview_by_score
        """The weights the effect preview adds each candidate at (None: no preview), the depth of the ranking it
        looks at, and whether a candidate's weight is also scaled by its mean score
        (``retrieval.expansion_weighting: score``)."""
        self._host_index: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.search_seconds = 0.0
        """Time spent in feedback searches by all ``mine`` calls (summed over the worker threads): the part of
        mining that grows with the corpus (the rest follows the feedback documents)."""

    def config_key(self) -> dict:
        return {"methods": self.methods, "top_k0": self.top_k0, "max_candidates": self.max_candidates,
                "min_candidates": self.min_candidates, "min_score": self.min_score,
                "top_k_per_method": self.top_k_per_method, "index": self.r.index.meta,
                "stem_variants": self.stems is not None,
                "feedback": None if self.feedback is None else [self.feedback.identity, self.feedback.depth],
                "first_k": self.first_k,
                "preview": None if self.preview_levels is None else [list(self.preview_levels), self.preview_k,
                                                                      self.preview_by_score], "v": 2}

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
        if self.preview_levels is not None:
            depth = max(depth, self.preview_k)

        def mine_chunk(c):
            lo, hi = c
            start = time.perf_counter()
            ranking = self.r.rankings(query_terms[lo:hi], max(depth, self.first_k))
            searched = time.perf_counter() - start
            t, f = self._mine_chunk(query_terms[lo:hi], None if query_vectors is None else query_vectors[lo:hi],
                                    ranking)
            return lo, hi, t, f, ranking[:, :self.first_k], (searched, time.perf_counter() - start)

        searched = busy = 0.0
        with ThreadPoolExecutor(self.num_workers) as pool, \
                Progress(q, "mine candidates", "query", self.progress and len(chunks) > 1) as bar:
            for lo, hi, t, f, ranking, (search_s, chunk_s) in pool.map(mine_chunk, chunks):
                terms[lo:hi], feats[lo:hi] = t, f
                first[lo:hi, :ranking.shape[1]] = ranking
                searched, busy = searched + search_s, busy + chunk_s
                bar.update(hi - lo)
        self.search_seconds += searched
        log.info("mined %d queries: feedback search %.1f s, the rest %.1f s (summed over %d threads)", q, searched,
                 busy - searched, self.num_workers)
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
        terms, feats = select_candidates(query_terms, [scores[m].tocsr() for m in self.methods], fb_frac, self.log_df,
                                         self.stems, self.top_k_per_method, self.min_score, self.min_candidates,
                                         self.max_candidates)
        parts = [feats, self._query_features(query_terms, fb_idx, has_score, fb_scores, terms,
                                             feats[:, :, self.feature_names.index("fb_doc_fraction")])]
        if self.preview_levels is not None:
            scale = feats[:, :, self.feature_names.index("mean_score")] if self.preview_by_score else None
            parts.append(self._preview(query_terms, ranking, terms, scale))
        return terms, np.concatenate(parts, axis=2)

    def _preview(self, query_terms, ranking, terms, scale) -> np.ndarray:
        """(Q, M, 3 · levels) float32: the effect preview (``kernels.effect_preview``) of each candidate at each
        level (× ``scale`` (Q, M), the candidates' own weights, when given)."""
        assert self.preview_levels is not None  # only called with a preview configured
        n, m = terms.shape
        ids, weights = (t.cpu().numpy() for t in self.r.index.pad(query_terms))
        levels = np.broadcast_to(np.asarray(self.preview_levels, np.float32), (n, m, len(self.preview_levels)))
        if scale is not None:
            levels = levels * scale[:, :, None]
        first = np.ascontiguousarray(np.asarray(ranking)[:, :self.preview_k], np.int64)
        out = np.zeros((n, m, 3 * len(self.preview_levels)), np.float32)
        indptr, indices, data, maxes = self._index_arrays()
        kernels.effect_preview(indptr, indices, data, maxes, self.r.index.num_docs, ids, weights, first, terms,
                               np.ascontiguousarray(levels, np.float32), out)
        return out

    def _index_arrays(self):
        """(indptr, indices, impacts, each term's largest impact) of the index as host arrays (copied once when
        it lives on a GPU)."""
        if self._host_index is None:
            idx = self.r.index
            indptr, data = idx.indptr.cpu().numpy(), idx.data.cpu().numpy()
            self._host_index = (indptr, idx.indices.cpu().numpy(), data, kernels.term_max(indptr, data))
        return self._host_index

    def _query_features(self, query_terms, fb_idx, has_score, fb_scores, terms, fb_frac) -> np.ndarray:
        """(Q, M, len(QUERY_FEATURES)) float32: the co-occurrence features and the feedback/corpus df ratio."""
        corpus = self.r.corpus
        n, k0 = fb_idx.shape
        width = max(1, max((len(set(t)) for t in query_terms), default=1))
        qt = np.full((n, width), -1, np.int64)
        for i, t in enumerate(query_terms):
            own = sorted(set(t))
            qt[i, :len(own)] = own
        rank_w = 1.0 / np.log2(np.arange(k0) + 2.0)
        fb_weight = np.stack([has_score * rank_w[None, :], np.where(has_score, fb_scores, 0.0)], axis=2)
        out = np.zeros((n, terms.shape[1], len(QUERY_FEATURES)), np.float32)
        kernels.feedback_cooc(corpus.indptr, corpus.terms, fb_idx.astype(np.int64), fb_weight.astype(np.float64),
                              qt, terms, out)
        num_docs = corpus.num_docs
        df = self.df[np.maximum(terms, 0)]
        ratio = np.log(np.maximum(fb_frac, 1.0 / k0) * num_docs / np.maximum(df, 1)) / np.log(max(num_docs, 2))
        out[:, :, QUERY_FEATURES.index("fb_df_ratio")] = np.where(terms >= 0, ratio, 0.0)
        return out


def select_candidates(query_terms: list[list[int]], scores: list[sp.csr_matrix], fb_frac: sp.csr_matrix,
                      log_df: np.ndarray, stems: StemGroups | None, top_k_per_method: int, min_score: float,
                      min_candidates: int, max_candidates: int) -> tuple[np.ndarray, np.ndarray]:
    """(terms (Q, M) int64, -1 padded; features (Q, M, F) float32) of Q queries, from each method's (Q, vocab) term
    scores and the (Q, vocab) fraction of feedback documents holding each term. Array code over all Q queries
    at once (no per-query Python), so the miner's threads do not queue on the GIL.

    Per query: each method's scores, the query's own words left out, are divided by the query's best (a method
    whose best is ≤ 0 scores nothing); each method's ``top_k_per_method`` terms (ties: lower term id) and the
    stem variants of the query words (``stems``; never the query words themselves) are the pool. Variants come
    first, then the mean normalised score (descending), then the term id; terms under ``min_score`` are dropped
    (variants never) while more than ``min_candidates`` remain, and the best ``max_candidates`` are kept.
    Features: the normalised method scores, their mean, ``log_df``, the feedback-document fraction, and with
    ``stems`` a 0/1 variant flag."""
    n, vocab = fb_frac.shape
    width = len(scores) + 3 + (stems is not None)
    terms = np.full((n, max_candidates), -1, dtype=np.int64)
    feats = np.zeros((n, max_candidates, width), dtype=np.float32)
    # every (query, term) pair is one int64 key, query-major: a sorted array of keys is a set to search
    lengths = np.fromiter(map(len, query_terms), np.int64, n)
    q_rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    q_terms = np.fromiter(itertools.chain.from_iterable(query_terms), np.int64, int(lengths.sum()))
    own = np.unique(q_rows * vocab + q_terms)
    variants = np.zeros(0, np.int64) if stems is None else np.setdiff1d(stems.pairs(q_rows, q_terms, vocab), own)

    keys, norms, pool = [], [], [variants]
    for s in scores:
        row = np.repeat(np.arange(n, dtype=np.int64), np.diff(s.indptr))
        key, val = row * vocab + s.indices, s.data
        keep = ~_member(key, own)
        row, key, val = row[keep], key[keep], val[keep]
        best = _row_max(row, val, n)
        keep = best[row] > 0
        row, key, val = row[keep], key[keep], val[keep]
        norm = val / best[row]
        pool.append(key[_top_per_row(row, key, norm, n, top_k_per_method)])
        keys.append(key)
        norms.append(norm)
    cand = np.unique(np.concatenate(pool))  # sorted: by query, then term
    if not cand.size:
        return terms, feats
    table = np.zeros((len(cand), len(scores)), np.float32)
    for j, (key, norm) in enumerate(zip(keys, norms)):
        found, at = _lookup(cand, key)
        table[at, j] = norm[found]
    table = np.concatenate([table, table.mean(1, keepdims=True)], axis=1)
    is_variant = _member(cand, variants)
    row, col = cand // vocab, cand % vocab
    order = np.lexsort((col, -table[:, -1], ~is_variant, row))
    row = row[order]
    # drop weak candidates, but never below min_candidates
    pooled = np.bincount(row, minlength=n)
    strong = np.bincount(row, weights=(table[order, -1] >= min_score) | is_variant[order], minlength=n)
    kept = np.minimum(max_candidates, np.maximum(strong.astype(np.int64), np.minimum(min_candidates, pooled)))
    rank = np.arange(len(row)) - np.searchsorted(row, row)
    sel = rank < kept[row]
    chosen = order[sel]  # indices into cand
    out_row, out_rank = row[sel], rank[sel]
    k = table.shape[1]
    terms[out_row, out_rank] = col[chosen]
    feats[out_row, out_rank, :k] = table[chosen]
    feats[out_row, out_rank, k] = log_df[col[chosen]]
    slot = np.full(len(cand), -1, np.int64)  # where each candidate went in the output (-1: not kept)
    slot[chosen] = out_row * max_candidates + out_rank
    fb_keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(fb_frac.indptr)) * vocab + fb_frac.indices
    found, at = _lookup(cand, fb_keys)
    kept_fb = slot[at] >= 0
    feats.reshape(n * max_candidates, width)[slot[at[kept_fb]], k + 1] = fb_frac.data[found[kept_fb]]
    if stems is not None:
        feats[out_row, out_rank, k + 2] = is_variant[chosen]
    return terms, feats


def _top_per_row(row: np.ndarray, key: np.ndarray, value: np.ndarray, n: int, k: int) -> np.ndarray:
    """Mask of each row's ``k`` largest values, ties broken by the smaller key (rows ascending in ``row``).

    Entries above the row's k-th largest value are in; of those equal to it, the ones with the smallest keys fill
    the row up to k. One partition of a (rows, longest row) block, no sort of all entries."""
    counts = np.bincount(row, minlength=n)
    if not len(row) or counts.max() <= k:
        return np.ones(len(row), bool)
    width = int(counts.max())
    block = np.full((n, width), -np.inf)
    block[row, np.arange(len(row)) - (np.cumsum(counts) - counts)[row]] = value
    kth = np.partition(block, width - k, axis=1)[:, width - k][row]  # -inf for a row of fewer than k
    take = value > kth
    ties = np.flatnonzero(value == kth)
    ties = ties[np.lexsort((key[ties], row[ties]))]
    tie_row = row[ties]
    need = k - np.bincount(row[take], minlength=n)
    take[ties[np.arange(len(ties)) - np.searchsorted(tie_row, tie_row) < need[tie_row]]] = True
    return take


def _member(keys: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which ``keys`` are in ``sorted_set`` (sorted, unique)."""
    if not sorted_set.size:
        return np.zeros(len(keys), bool)
    at = np.minimum(np.searchsorted(sorted_set, keys), len(sorted_set) - 1)
    return sorted_set[at] == keys


def _lookup(sorted_set: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``keys`` of those in ``sorted_set`` (sorted, unique), their positions in ``sorted_set``)."""
    if not sorted_set.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    at = np.minimum(np.searchsorted(sorted_set, keys), len(sorted_set) - 1)
    found = np.flatnonzero(sorted_set[at] == keys)
    return found, at[found]


def _row_max(row: np.ndarray, val: np.ndarray, n: int) -> np.ndarray:
    """The largest value of each of n rows (rows ascending in ``row``); -inf for a row with none."""
    best = np.full(n, -np.inf, dtype=val.dtype if val.size else np.float64)
    counts = np.bincount(row, minlength=n)
    filled = counts > 0
    if filled.any():
        best[filled] = np.maximum.reduceat(val, (np.cumsum(counts) - counts)[filled])
    return best


class StemGroups:
    """The vocabulary's terms that share a Snowball (Porter 2) English stem with another term, as arrays:
    ``group[t]`` is term t's group (-1: its stem is its own), whose members are
    ``members[indptr[g]:indptr[g + 1]]``."""

    def __init__(self, group: np.ndarray, indptr: np.ndarray, members: np.ndarray):
        self.group, self.indptr, self.members = group, indptr, members

    @classmethod
    def build(cls, terms: list[str]) -> StemGroups:
        by_stem: dict[str, list[int]] = {}
        for i, stem in enumerate(Stemmer.Stemmer("english").stemWords(terms)):
            by_stem.setdefault(stem, []).append(i)
        shared = [g for g in by_stem.values() if len(g) > 1]
        sizes = np.fromiter(map(len, shared), np.int64, len(shared))
        members = np.fromiter(itertools.chain.from_iterable(shared), np.int64, int(sizes.sum()))
        indptr = np.zeros(len(shared) + 1, np.int64)
        np.cumsum(sizes, out=indptr[1:])
        group = np.full(len(terms), -1, np.int64)
        group[members] = np.repeat(np.arange(len(shared)), sizes)
        return cls(group, indptr, members)

    def pairs(self, rows: np.ndarray, terms: np.ndarray, vocab: int) -> np.ndarray:
        """Sorted unique keys ``row * vocab + v`` of every term v sharing a stem with ``terms[i]`` (itself
        included), ``rows[i]`` being its query."""
        g = self.group[terms]
        rows, g = rows[g >= 0], g[g >= 0]
        lo, size = self.indptr[g], self.indptr[g + 1] - self.indptr[g]
        at = np.repeat(lo - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))
        return np.unique(np.repeat(rows, size) * vocab + self.members[at])


MINE_PART_QUERIES = 16384
"""Queries mined between two saves of ``mine_cached``: an interrupted mining (the wikicar config's 20,000 train
queries: 4 min 43 s on 2 cores; a user's 100k+ many times that) resumes at the first part not saved."""


def mine_cached(miner: CandidateMiner, query_terms: list[list[int]], cache_dir: str | Path | None,
                name: str, query_vectors: np.ndarray | None = None) -> CandidateSet:
    """Mine once; later runs (and epochs) load ``<cache_dir>/candidates-<name>-<key>/`` instead.

    The key covers the miner settings, the index parameters and the query terms, so any change re-mines.
    A damaged cache entry fails its checksum and is rebuilt. Mined ``MINE_PART_QUERIES`` at a time, each part saved
    (``io.load_or_compute_rows``): an interrupted run resumes where it stopped; every query's candidates are its
    own, so the parts change no number.
    """
    if cache_dir is None:
        return miner.mine(query_terms, query_vectors)
    vectors = None if query_vectors is None else sha256(np.ascontiguousarray(query_vectors).tobytes())
    meta = {"key": fingerprint(miner.config_key(), query_terms, vectors), "name": name}

    def mine(lo: int, hi: int) -> dict[str, np.ndarray]:
        cands = miner.mine(query_terms[lo:hi], None if query_vectors is None else query_vectors[lo:hi])
        first = {} if cands.first is None else {"first": cands.first}
        return {"terms": cands.terms, "features": cands.features, **first}

    arrays, _ = load_or_compute_rows(Path(cache_dir) / f"candidates-{name}-{meta['key']}", meta, len(query_terms),
                                     MINE_PART_QUERIES, mine, f"candidates for {name}")
    return CandidateSet(arrays["terms"], arrays["features"], miner.feature_names, arrays.get("first"))
