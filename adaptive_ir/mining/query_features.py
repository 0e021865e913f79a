"""What a policy reads about a whole query to choose its start (``retrieval.start: choose``): keep the query, or take
its RM3 expansion.

Selective expansion's classic signals (query clarity, the first ranking's score profile, how far feedback would move
the ranking), each made a ratio or normalised by the collection's size so that it reads the same on a collection
the policy never saw. Computed from the index, the query's first ranking and its RM3 expansion: no judgments.
"""

from __future__ import annotations

import numpy as np

from adaptive_ir.retrieval.index import BM25Index

QUERY_FEATURES = ("query_length", "query_idf", "score_ratio_10", "score_ratio_40", "rm3_query_mass", "rm3_new_idf",
                  "rm3_clarity", "rm3_overlap")
"""query_length: log(1 + the query's distinct indexed terms); query_idf: their mean idf / log(N + 1);
score_ratio_10, _40: the first ranking's 10th and 40th scores over its first (0 when shorter): a flat head means
many near-equal documents; rm3_query_mass: the share of RM3's weight left on the query's own words;
rm3_new_idf: RM3's added terms' weighted mean idf / log(N + 1); rm3_clarity: KL divergence of RM3's added-term
distribution from the collection's document frequencies (Cronen-Townsend et al.'s clarity) / log(N + 1);
rm3_overlap: the share of the first ranking's top 40 that RM3's ranking keeps in its top 40 (low: RM3 drifts)."""

OVERLAP_DEPTH = 40
"""How deep the rankings the features read are (the reward's R@40)."""


def query_features(index: BM25Index, terms: list[list[int]], rm3_terms: list[list[int]],
                   rm3_weights: list[list[float]], first_docs: np.ndarray, first_scores: np.ndarray,
                   rm3_docs: np.ndarray) -> np.ndarray:
    """(Q, len(QUERY_FEATURES)) float32 features of Q queries: their term ids, their RM3 expansions (term ids and
    weights, the query's words included), the corpus positions and scores of their first rankings (Q, ≥ 40; score
    0 past the end) and the corpus positions of their RM3 rankings (Q, ≥ 40; -1 past the end)."""
    df = np.diff(index.indptr.cpu().numpy())
    n = float(index.num_docs)
    norm = np.log(n + 1.0)
    idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5)) / norm
    p_coll = np.maximum(df, 1) / max(float(df.sum()), 1.0)
    out = np.zeros((len(terms), len(QUERY_FEATURES)), np.float32)
    for i, (q, et, ew) in enumerate(zip(terms, rm3_terms, rm3_weights)):
        own = {t for t in q if t < len(df)}
        out[i, 0] = np.log1p(len(own))
        out[i, 1] = idf[list(own)].mean() if own else 0.0
        top = first_scores[i, 0]
        if top > 0:
            out[i, 2] = first_scores[i, 9] / top if first_scores.shape[1] > 9 else 0.0
            out[i, 3] = first_scores[i, OVERLAP_DEPTH - 1] / top if first_scores.shape[1] >= OVERLAP_DEPTH else 0.0
        w = np.asarray(ew, np.float64)
        t = np.asarray(et, np.int64)
        total = w.sum()
        new = np.array([x not in own and x < len(df) for x in t.tolist()], bool)
        if total > 0:
            out[i, 4] = w[~new].sum() / total
        if new.any():
            p = w[new] / w[new].sum()
            out[i, 5] = float((p * idf[t[new]]).sum())
            out[i, 6] = float((p * np.log(p / p_coll[t[new]])).sum()) / norm
        a = first_docs[i, :OVERLAP_DEPTH][first_scores[i, :OVERLAP_DEPTH] > 0]
        b = rm3_docs[i, :OVERLAP_DEPTH][rm3_docs[i, :OVERLAP_DEPTH] >= 0]
        if len(a):
            out[i, 7] = len(np.intersect1d(a, b)) / len(a)
    return out


__all__ = ["OVERLAP_DEPTH", "QUERY_FEATURES", "query_features"]
