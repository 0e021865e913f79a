"""RM3 (Abdul-Jaleel et al. 2004): each query's relevance model over its feedback documents, interpolated with the
query, as weighted term ids ready for the search. ``rm3_expansion`` (the ``rm3`` baseline) follows Anserini's recipe
but reads whole documents (tf / length, no term filter); ``rm3_anserini_expansion`` is Anserini's Rm3Reranker
itself (its filtered, pruned document vectors), equal to Pyserini's ``set_rm3()`` on the Lucene-parity index."""

from __future__ import annotations

import numpy as np

from adaptive_ir.common.strings import Strings
from adaptive_ir.retrieval import kernels
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

def _anserini_term_table(terms: Strings, df: np.ndarray, num_docs: int, max_df_ratio: float, filter_terms: bool
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(which terms a document vector may hold, each one's rank in string order), read off the vocabulary's UTF-8
    buffer with array operations (no term decoded: WikiCAR has 742,815): 2 to 20 characters (bytes that do not
    continue a UTF-8 sequence), of ``[a-z0-9]`` only (``filter_terms``), in at most ``max_df_ratio`` of the
    documents (Anserini's 10 % stopword rule). The ranks order the eligible terms by their bytes, which is Python's
    string order (and Java's for these terms); they break the ties of a pruning."""
    buf = np.frombuffer(terms.buf, np.uint8)
    ends = np.asarray(terms.ends, np.int64)
    starts = np.zeros_like(ends)
    starts[1:] = ends[:-1]

    def per_term(flags: np.ndarray) -> np.ndarray:  # how many bytes of each term have the flag
        cum = np.concatenate(([0], np.cumsum(flags, dtype=np.int64)))
        return cum[ends] - cum[starts]

    chars = per_term((buf & 0xC0) != 0x80)
    eligible = (df.astype(np.float32) / np.float32(max(num_docs, 1))) <= np.float32(max_df_ratio)
    eligible &= (chars >= 2) & (chars <= 20)
    if filter_terms:
        alnum = ((buf >= ord("a")) & (buf <= ord("z"))) | ((buf >= ord("0")) & (buf <= ord("9")))
        eligible &= per_term(~alnum) == 0
    kept = np.flatnonzero(eligible)
    rank = np.zeros(len(ends), np.int64)
    if len(kept):
        lens = (ends - starts)[kept]
        width = int(lens.max())
        table = np.zeros((len(kept), width), np.uint8)  # NUL-padded, as numpy's bytes strings compare
        row = np.repeat(np.arange(len(kept)), lens)
        col = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        table[row, col] = buf[starts[kept][row] + col]
        rank[kept[np.argsort(table.view(f"S{width}").ravel(), kind="stable")]] = np.arange(len(kept))
    return eligible, rank


def _feedback_documents(retriever: Retriever, query_ids: list[list[int]], fb_docs: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Each query's feedback documents as Anserini picks them, (Q, fb_docs) corpus positions (-1 padded) and their
    float32 scores: the ``fb_docs`` best of the first pass's ``ANSERINI_RERANK_CUTOFF``, ties broken by document id
    (``BREAK_SCORE_TIES_BY_DOCID``). A ranking orders ties by position; only the queries where a tie decides which
    documents come first, or in what order (the float sums follow it), are sorted again by id."""
    depth = max(fb_docs, ANSERINI_RERANK_CUTOFF)
    docs = np.full((len(query_ids), fb_docs), -1, np.int64)
    scores = np.zeros((len(query_ids), fb_docs), np.float32)
    for lo in range(0, len(query_ids), RM3_CHUNK):
        ranking = retriever.rankings(query_ids[lo:lo + RM3_CHUNK], depth)
        s, d, valid = key_scores(ranking).numpy(), key_docs(ranking).numpy(), ranking.numpy() >= 0
        head, width = min(fb_docs + 1, s.shape[1]), min(fb_docs, s.shape[1])  # a corpus may be smaller
        tied = ((s[:, 1:head] == s[:, :head - 1]) & valid[:, 1:head]).any(axis=1)
        docs[lo:lo + len(s), :width] = np.where(valid[:, :width], d[:, :width], -1)
        scores[lo:lo + len(s), :width] = np.where(valid[:, :width], s[:, :width], 0)
        for r in np.flatnonzero(tied).tolist():
            n = int(valid[r].sum())
            ids = [retriever.doc_ids[i] for i in d[r, :n].tolist()]
            best = sorted(range(n), key=lambda i: (-float(s[r, i]), ids[i]))[:fb_docs]
            docs[lo + r, :len(best)] = d[r, best]
            scores[lo + r, :len(best)] = s[r, best]
    return docs, scores


def rm3_anserini_expansion(retriever: Retriever, texts: list[str], fb_docs: int = RM3_FB_DOCS, fb_terms: int = 10,
                           orig_weight: float = RM3_ORIG_WEIGHT, max_df_ratio: float = 0.1, filter_terms: bool = True,
                           num_docs: int | None = None) -> tuple[list[list[int]], list[list[float]]]:
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
    terms and weights, for every test query of SciFact and NFCorpus. RM1 is one compiled pass over the feedback
    documents' term arrays (``kernels.rm3_relevance_models``); what is left per query in Python is its own words.
    """
    vocab, corpus = retriever.vocab, retriever.corpus
    if num_docs is None:
        num_docs = int(np.count_nonzero(corpus.doc_len))
    eligible, rank = _anserini_term_table(vocab.terms, retriever.index.document_frequency(), num_docs,
                                          max_df_ratio, filter_terms)
    tokens = [retriever.analyzer.tokenize(t) for t in texts]
    words = list(dict.fromkeys(t for q in tokens for t in q))
    id_of = dict(zip(words, vocab.ids.positions(words).tolist()))  # one lookup of each distinct word, -1: none
    query_ids = [[id_of[t] for t in q if id_of[t] >= 0] for q in tokens]  # what ``vocab.encode_many`` gives
    fb_idx, fb_scores = _feedback_documents(retriever, query_ids, fb_docs)
    rm_terms = np.full((len(texts), fb_terms), -1, np.int64)
    rm_weights = np.zeros((len(texts), fb_terms), np.float32)
    kernels.rm3_relevance_models(corpus.indptr, corpus.terms, corpus.tf, eligible, rank, fb_idx, fb_scores,
                                 fb_terms, rm_terms, rm_weights)
    out_terms: list[list[int]] = []
    out_weights: list[list[float]] = []
    for q in range(len(texts)):
        counts: dict[str, int] = {}
        for t in tokens[q]:
            counts[t] = counts.get(t, 0) + 1
        n = len(tokens[q])  # the query vector's L1 norm: its counts are whole numbers
        rm = {t: w for t, w in zip(rm_terms[q].tolist(), rm_weights[q].tolist()) if t >= 0}
        weights: dict[int, float] = {}
        # the query's words first, in order of appearance, then RM1's other terms in pruned order (Java's map)
        query = [(id_of[t], float(np.float32(c / n))) for t, c in counts.items()]
        in_query = {tid for tid, _ in query}
        for tid, qv in query + [(t, 0.0) for t in rm if t not in in_query]:
            w = np.float32(orig_weight * qv + (1.0 - orig_weight) * rm.get(tid, 0.0))
            if tid >= 0 and w > 0:
                weights[tid] = float(w)
        out_terms.append(list(weights))
        out_weights.append(list(weights.values()))
    return out_terms, out_weights


__all__ = ["ANSERINI_RERANK_CUTOFF", "RM3_CHUNK", "RM3_FB_DOCS", "RM3_ORIG_WEIGHT", "rm3_anserini_expansion",
           "rm3_expansion"]
