"""RM3 (Abdul-Jaleel et al. 2004): each query's relevance model over its feedback documents, interpolated with the
query, as weighted term ids ready for the search. ``rm3_expansion`` (the ``rm3`` baseline) follows Anserini's recipe
but reads whole documents (tf / length, no term filter); ``rm3_anserini_expansion`` is Anserini's Rm3Reranker
itself (its filtered, pruned document vectors), equal to Pyserini's ``set_rm3()`` on the Lucene-parity index."""

from __future__ import annotations

import re

import numpy as np

from adaptive_ir.retrieval.feedback import (
    SemanticFeedback,
    feedback_documents,
    relevance_model,
    rm3_queries,
    ties_decide,
)
from adaptive_ir.retrieval.index import key_docs, key_scores
from adaptive_ir.retrieval.retriever import Retriever

RM3_FB_DOCS = 10
"""Feedback documents of the ``rm3`` baseline (Anserini's default)."""
RM3_ORIG_WEIGHT = 0.5
"""The original query's share of an RM3 query (Anserini's default)."""


RM3_CHUNK = 32768
"""Queries per step of ``rm3_expansion``: memory (RM1 rows, the feedback documents' texts and tokens) follows a
chunk, not the split (WikiCAR: 273k train queries under ``retrieval.start: rm3``). Not smaller: each chunk reads
its feedback documents' texts in one call, one decompression pass over a gzipped corpus (WikiCAR: 3 s)."""


def rm3_expansion(retriever: Retriever, terms: list[list[int]], fb_docs: int = RM3_FB_DOCS, fb_terms: int = 10,
                  orig_weight: float = RM3_ORIG_WEIGHT, feedback: SemanticFeedback | None = None,
                  query_vectors: np.ndarray | None = None, unit_query: bool = False, chunk: int = RM3_CHUNK
                  ) -> tuple[list[list[int]], list[list[float]]]:
    """The RM3 queries of ``rm3_run`` as (term ids, weights) per query (``rm3_queries``; ``unit_query``: scaled so
    that each query word weighs 1), ``chunk`` queries at a time (each query's expansion is its own: the chunks
    change no number)."""
    out_terms: list[list[int]] = []
    out_weights: list[list[float]] = []
    for lo in range(0, len(terms), chunk):
        part = terms[lo:lo + chunk]
        vectors = None if query_vectors is None else query_vectors[lo:lo + chunk]
        fb_scores, fb_idx = feedback_documents(retriever, part, fb_docs, feedback, vectors)
        rm1 = relevance_model(retriever.corpus, fb_idx, fb_scores)
        # ties in RM1 broken by first appearance in the feedback documents, as BASELINES.md's reference does: read
        # (the documents' texts analyzed again) only for the queries whose pruning a tie decides
        tied = [q for q in range(len(part)) if ties_decide(rm1, q, fb_terms)]
        order: list[list[int] | None] = [None] * len(part)
        if tied:
            for q, first in zip(tied, retriever.first_occurrences([fb_idx[q][fb_scores[q] > 0] for q in tied])):
                order[q] = first
        t, w = rm3_queries(part, rm1, fb_terms, orig_weight, order, unit_query)
        out_terms += t
        out_weights += w
    return out_terms, out_weights


ANSERINI_RERANK_CUTOFF = 50
"""Documents Anserini's first pass retrieves before RM3 (``SearchCollection.Args.rerankcutoff``); of them the
``fb_docs`` best, ties broken by document id, are the feedback documents."""

_ALNUM = re.compile(r"[a-z0-9]+")


def _prune(vector: dict[str, np.float32], k: int) -> dict[str, np.float32]:
    """FeatureVector.pruneToSize: the k largest values, ties broken by the term (Java's String order)."""
    return dict(sorted(vector.items(), key=lambda kv: (-kv[1], kv[0]))[:k])


def _unit_l1(vector: dict[str, np.float32]) -> dict[str, np.float32]:
    """FeatureVector.scaleToUnitL1Norm: the norm summed in double, each value divided and cast to float."""
    norm = sum(abs(float(v)) for v in vector.values())
    return {t: np.float32(float(v) / norm) for t, v in vector.items()}


def rm3_anserini_expansion(retriever: Retriever, texts: list[str], fb_docs: int = RM3_FB_DOCS, fb_terms: int = 10,
                           orig_weight: float = RM3_ORIG_WEIGHT, max_df_ratio: float = 0.1, filter_terms: bool = True,
                           num_docs: int | None = None, chunk: int = RM3_CHUNK
                           ) -> tuple[list[list[int]], list[list[float]]]:
    """RM3 as Anserini's ``Rm3Reranker`` (Pyserini's ``set_rm3()`` defaults) computes it, as (term ids, weights)
    per query text, for ``Retriever.search``. Meant for the Lucene-parity index (``configs/*-anserini.yaml``),
    where the first pass and the final BM25 are Lucene's; ``rm3_expansion`` (the ``rm3`` baseline) is unchanged.

    Where it differs from ``rm3_expansion``:

    * feedback documents: the first pass's ``fb_docs`` best, ties broken by document id (Lucene's
      ``BREAK_SCORE_TIES_BY_DOCID``), weighted by their raw BM25 scores;
    * each document's vector: its term counts, only terms of 2 to 20 characters, of ``[a-z0-9]`` only
      (``filter_terms``) and in at most ``max_df_ratio`` of the documents (Anserini's 10 % stopword rule),
      pruned to its ``fb_terms`` most frequent terms (ties by term) and divided by the sum of those counts (not by
      the document's length);
    * RM1(w) = Σ_d score(d) · v_d(w), pruned to ``fb_terms`` (ties by term), L1-normalised;
    * the query vector: the analyzer's tokens (words outside the index too) counted and L1-normalised;
      interpolated ``orig_weight`` · query + (1 − ``orig_weight``) · RM1, in Java's float arithmetic.

    ``num_docs``: the index's document count of the 10 % rule (Lucene's ``numDocs``: Anserini does not index a
    blank document); default the documents with at least one token, which differs only where a document has
    words but only stopwords. Checked against Pyserini 1.6.0 (benchmarks/rm3_parity.py): the same expanded query,
    terms and weights, for every test query of SciFact and NFCorpus. Pure Python per query (about 3 ms each): for
    the test splits, not for WikiCAR's train split. ``chunk``: queries per first-pass batch (no number changes).
    """
    vocab, corpus = retriever.vocab, retriever.corpus
    if num_docs is None:
        num_docs = int(np.count_nonzero(corpus.doc_len))
    df = retriever.index.document_frequency()
    terms_of = list(vocab.terms)  # every term is read below, twice: decoded once
    # which terms a document vector may hold, and each one's place in Java's String order (the ties of a pruning):
    # once per call, so that a document's vector is a few array operations, however long the document
    eligible = (df.astype(np.float32) / np.float32(max(num_docs, 1))) <= np.float32(max_df_ratio)
    eligible &= np.fromiter((2 <= len(t) <= 20 and (not filter_terms or _ALNUM.fullmatch(t) is not None)
                             for t in terms_of), dtype=bool, count=len(terms_of))
    string_rank = np.zeros(len(terms_of), np.int64)
    kept = np.flatnonzero(eligible)
    string_rank[kept[np.argsort(np.array([terms_of[t] for t in kept.tolist()], dtype=object), kind="stable")]] = \
        np.arange(len(kept))
    tokens = [retriever.analyzer.tokenize(t) for t in texts]
    query_ids = vocab.encode_many(tokens)
    depth = max(fb_docs, ANSERINI_RERANK_CUTOFF)
    doc_ids = retriever.doc_ids
    out_terms: list[list[int]] = []
    out_weights: list[list[float]] = []
    for q in range(len(texts)):
        if q % chunk == 0:
            ranking = retriever.rankings(query_ids[q:q + chunk], depth)
            all_scores, all_docs = key_scores(ranking).numpy(), key_docs(ranking).numpy()
            valid = ranking.numpy() >= 0
        r = q % chunk
        hits = [(float(s), str(doc_ids[d]), int(d)) for s, d, ok in zip(all_scores[r], all_docs[r], valid[r]) if ok]
        hits.sort(key=lambda h: (-h[0], h[1]))
        vectors: list[tuple[np.ndarray, np.ndarray]] = []  # per document: its pruned terms, their counts (float32)
        scores: list[np.float32] = []
        for hit_score, _, d in hits[:fb_docs]:
            lo, hi = corpus.indptr[d], corpus.indptr[d + 1]
            ids = np.asarray(corpus.terms[lo:hi], dtype=np.int64)
            tf = np.asarray(corpus.tf[lo:hi], dtype=np.int64)
            keep = eligible[ids]
            ids, tf = ids[keep], tf[keep]
            top = np.lexsort((string_rank[ids], -tf))[:fb_terms]  # the most frequent, ties by the term
            vectors.append((ids[top], tf[top].astype(np.float32)))
            scores.append(np.float32(hit_score))
        # counts are whole numbers: their sum is exact in any order
        norms = [np.float32(float(tf.sum(dtype=np.float64))) for _, tf in vectors]
        fb_ids = np.unique(np.concatenate([ids for ids, _ in vectors])) if vectors else np.zeros(0, np.int64)
        weight = np.zeros(len(fb_ids), np.float32)
        for (ids, tf), norm, doc_score in zip(vectors, norms, scores):
            if norm > np.float32(0.001):  # each step rounded to float as Java's does, document by document
                v = np.zeros(len(fb_ids), np.float32)
                v[np.searchsorted(fb_ids, ids)] = tf
                weight = weight + (v / norm) * doc_score
        rm: dict[str, np.float32] = {terms_of[t]: w for t, w in zip(fb_ids.tolist(), weight)}
        rm = _prune(rm, fb_terms)
        if rm and sum(float(v) for v in rm.values()) > 0:
            rm = _unit_l1(rm)
        qfv: dict[str, np.float32] = {}
        for t in tokens[q]:
            qfv[t] = np.float32(qfv.get(t, np.float32(0.0)) + np.float32(1.0))
        if qfv:
            qfv = _unit_l1(qfv)
        weights: dict[int, float] = {}
        for term in {**qfv, **rm}:
            w = np.float32(orig_weight * float(qfv.get(term, 0.0)) + (1.0 - orig_weight) * float(rm.get(term, 0.0)))
            tid = vocab.ids.get(term)
            if tid is not None and w > 0:
                weights[tid] = float(w)
        out_terms.append(list(weights))
        out_weights.append(list(weights.values()))
    return out_terms, out_weights


__all__ = ["ANSERINI_RERANK_CUTOFF", "RM3_CHUNK", "RM3_FB_DOCS", "RM3_ORIG_WEIGHT", "rm3_anserini_expansion",
           "rm3_expansion"]
