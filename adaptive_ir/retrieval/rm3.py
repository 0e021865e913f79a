"""RM3 (Abdul-Jaleel et al. 2004, as Anserini's Rm3Reranker computes it): each query's relevance model over its
feedback documents, interpolated with the query, as weighted term ids ready for the search."""

from __future__ import annotations

import numpy as np

from adaptive_ir.retrieval.feedback import SemanticFeedback, feedback_documents, relevance_model, rm3_queries
from adaptive_ir.retrieval.retriever import Retriever

RM3_FB_DOCS = 10
"""Feedback documents of the ``rm3`` baseline (Anserini's default)."""


RM3_CHUNK = 32768
"""Queries per step of ``rm3_expansion``: memory (RM1 rows, the feedback documents' texts and tokens) follows a
chunk, not the split (WikiCAR: 273k train queries under ``retrieval.start: rm3``). Not smaller: each chunk reads
its feedback documents' texts in one call, one decompression pass over a gzipped corpus (WikiCAR: 3 s)."""


def rm3_expansion(retriever: Retriever, terms: list[list[int]], fb_docs: int = RM3_FB_DOCS, fb_terms: int = 10,
                  orig_weight: float = 0.5, feedback: SemanticFeedback | None = None,
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
        # ties in RM1 broken by first appearance in the feedback documents, as BASELINES.md's reference does
        order = retriever.first_occurrences([i[w > 0] for i, w in zip(fb_idx, fb_scores)])
        t, w = rm3_queries(part, rm1, fb_terms, orig_weight, order, unit_query)
        out_terms += t
        out_weights += w
    return out_terms, out_weights


__all__ = ["RM3_CHUNK", "RM3_FB_DOCS", "rm3_expansion"]
