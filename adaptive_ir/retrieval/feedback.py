"""Pseudo-relevance feedback statistics shared by the RM3 baseline and the candidate miner."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch

from adaptive_ir.retrieval import kernels
from adaptive_ir.retrieval.analyzer import CorpusTerms
from adaptive_ir.retrieval.index import BM25Weights, LuceneWeights, key_docs, key_scores

if TYPE_CHECKING:
    from adaptive_ir.retrieval.retriever import Retriever


def feedback_matrix(doc_idx: np.ndarray, doc_weight: np.ndarray, num_docs: int) -> sp.csr_matrix:
    """(Q, num_docs) sparse matrix with ``doc_weight[q, j]`` at column ``doc_idx[q, j]`` (zeros dropped)."""
    q, k = doc_idx.shape
    rows = np.repeat(np.arange(q), k)
    m = sp.csr_matrix((doc_weight.ravel().astype(np.float64), (rows, doc_idx.ravel())), shape=(q, num_docs))
    m.eliminate_zeros()
    return m


class FeedbackRows:
    """The distinct feedback documents of a batch of queries and their rows of the document × term matrices,
    read from the forward index: the work and memory follow the feedback documents, never the corpus.

    Products ``weights(w) @ tf`` equal ``feedback_matrix(doc_idx, w, num_docs) @ (whole count matrix)`` exactly:
    the documents keep their order (columns are positions in the sorted distinct documents), so every sum adds
    the same numbers in the same order.
    """

    def __init__(self, corpus: CorpusTerms, doc_idx: np.ndarray):
        self.docs, inverse = np.unique(doc_idx, return_inverse=True)
        self.cols = inverse.reshape(doc_idx.shape)
        self.corpus = corpus
        self.tf = corpus.rows(self.docs)
        """(docs, vocab) float32 term counts."""

    def weights(self, doc_weight: np.ndarray) -> sp.csr_matrix:
        """(Q, docs) matrix of per-query document weights (``doc_weight`` is shaped like ``doc_idx``)."""
        return feedback_matrix(self.cols, doc_weight, len(self.docs))

    def presence(self) -> sp.csr_matrix:
        """(docs, vocab) 1 where the document contains the term."""
        m = self.tf.copy()
        m.data[:] = 1.0
        return m

    def impacts(self, weights: BM25Weights | LuceneWeights) -> sp.csr_matrix:
        """(docs, vocab) BM25 impacts, the very numbers of the index's postings."""
        m = self.tf.copy()
        m.data = weights.impacts(m.indices, m.data, np.repeat(self.corpus.doc_len[self.docs], np.diff(m.indptr)))
        return m


def relevance_model(corpus: CorpusTerms, doc_idx: np.ndarray, doc_scores: np.ndarray,
                    rows: FeedbackRows | None = None) -> sp.csr_matrix:
    """RM1 weights for a batch of queries, after Anserini's Rm3Reranker but over whole documents (every term,
    tf / length; Anserini filters and prunes each document's vector: ``rm3.rm3_anserini_expansion``).

    RM1(w) = Σ_d score(d) · tf(w, d) / |d| over each query's feedback docs (first-pass BM25 scores;
    docs with score ≤ 0 or length 0 are skipped). Returns a (Q, vocab) sparse matrix. ``rows``: the feedback
    documents' rows when the caller has them already.
    """
    length = corpus.doc_len[doc_idx]
    weight = np.where((doc_scores > 0) & (length > 0), doc_scores / np.maximum(length, 1), 0.0)
    rows = FeedbackRows(corpus, doc_idx) if rows is None else rows
    return (rows.weights(weight) @ rows.tf).tocsr()


def top_terms(row_matrix: sp.csr_matrix, n: int, order: Sequence[Sequence[int] | None] | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``n`` heaviest (term ids, weights), heaviest first, as (rows, n) arrays (ids -1 padded, weights
    0): one compiled pass (``kernels.top_terms``).

    Ties are broken by position in ``order[q]`` (distinct term ids; those absent from it come last; None: no
    order for that row), then by smaller term id."""
    rows = row_matrix.shape[0]
    per_row = [None] * rows if order is None else list(order)
    given = [o or [] for o in per_row]
    has_order = np.array([o is not None for o in per_row], dtype=bool)
    ptr = np.zeros(rows + 1, np.int64)
    ptr[1:] = np.cumsum([len(o) for o in given])
    flat = np.fromiter((t for o in given for t in o), np.int64, count=int(ptr[-1]))
    terms = np.full((rows, n), -1, np.int64)
    weights = np.zeros((rows, n), row_matrix.data.dtype)
    kernels.top_terms(row_matrix.indptr, row_matrix.indices, row_matrix.data, has_order, ptr, flat,
                      row_matrix.shape[1], terms, weights)
    return terms, weights


def ties_decide(row_matrix: sp.csr_matrix, q: int, n: int) -> bool:
    """Whether ``top_terms(row_matrix, q, n, order)`` can depend on ``order``: two of the row's ``n`` heaviest
    weights are equal, or the ``n``-th equals the next one (without such a tie the weights alone decide)."""
    vals = row_matrix.data[row_matrix.indptr[q]:row_matrix.indptr[q + 1]]
    if len(vals) > n + 1:
        vals = np.partition(vals, len(vals) - n - 1)[len(vals) - n - 1:]
    return bool(len(np.unique(vals)) < len(vals))


def rm3_queries(query_terms: list[list[int]], rm1: sp.csr_matrix, fb_terms: int = 10, orig_weight: float = 0.5,
                tie_order: Sequence[Sequence[int] | None] | None = None, unit_query: bool = False
                ) -> tuple[list[list[int]], list[list[float]]]:
    """RM3 expanded queries: orig_weight · (query term counts, L1-normalised) + (1 − orig_weight) · RM1
    pruned to its ``fb_terms`` heaviest terms and L1-normalised. Returns (term ids, weights) per query.

    ``tie_order[q]``: query q's feedback terms in order of first appearance in its feedback documents, which
    breaks ties in the pruning as the reference implementation behind ``BASELINES.md`` does (a ``Counter`` filled
    document by document); None for a query whose ties do not decide (``ties_decide``). Ties are common when one
    or two documents match a short query (NFCorpus).
    ``unit_query``: the same queries scaled by |q| / orig_weight, so that each query word weighs 1 (its count), as
    in the env, where an added term's weight is relative to the query's words; BM25 scores are linear in the
    weights, so the ranking is the same."""
    out_terms, out_weights = [], []
    cols, weights_of = top_terms(rm1, fb_terms, tie_order)
    for q, terms in enumerate(query_terms):
        weights: dict[int, float] = {}
        n = max(len(terms), 1)
        word, expansion = (1.0, (1.0 - orig_weight) / orig_weight * n) if unit_query else (orig_weight / n,
                                                                                          1.0 - orig_weight)
        for t in terms:
            weights[t] = weights.get(t, 0.0) + word
        keep = cols[q] >= 0
        vals = weights_of[q][keep]
        z = float(vals.sum())
        if z > 0:
            for t, v in zip(cols[q][keep].tolist(), vals.tolist()):
                weights[t] = weights.get(t, 0.0) + expansion * v / z
        out_terms.append(list(weights))
        out_weights.append(list(weights.values()))
    return out_terms, out_weights


class SemanticFeedback:
    """Feedback documents chosen by meaning: BM25's top ``depth`` documents re-ranked by the cosine between the
    query's and each document's sentence embedding (e.g. all-MiniLM-L6-v2), the best ``k`` kept.

    Still "the documents BM25 first retrieves" (only documents sharing a word with the query are eligible), but
    ordered by a model that also reads what the words mean: on the train and dev splits of SciFact, Cranfield
    and CISI, RM3 over these 5 documents beat RM3 over BM25's top 5 (docs/results/earlier-rounds.md).
    """

    def __init__(self, doc_vectors: np.ndarray, depth: int, identity: dict):
        """``doc_vectors``: (num_docs, D), e.g. the float16 memory-mapped file of ``encode_corpus`` (not copied:
        only the rows of each query's BM25 documents are read, and compared in float32)."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self.doc_vectors = torch.as_tensor(doc_vectors)
        self.depth = depth
        self.identity = identity

    def rerank(self, query_vectors: np.ndarray, bm25_scores: np.ndarray, bm25_idx: np.ndarray, k: int,
               chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """(weights, doc indices), both (Q, k): the k most similar of each query's BM25 documents, weight 1
        (0 for padding where BM25 matched fewer than k documents)."""
        k = min(k, bm25_idx.shape[1])
        out_w = np.zeros((len(bm25_idx), k), np.float32)
        out_i = np.zeros((len(bm25_idx), k), np.int64)
        for lo in range(0, len(bm25_idx), chunk):
            idx = torch.as_tensor(bm25_idx[lo:lo + chunk])
            q = torch.as_tensor(query_vectors[lo:lo + chunk], dtype=torch.float32)
            sim = self._similarities(q, idx)
            # documents that match no query word are topk's filler, not BM25 results
            sim = sim.masked_fill(torch.as_tensor(bm25_scores[lo:lo + chunk]) <= 0, -torch.inf)
            best, pos = torch.topk(sim, k, dim=1)
            out_i[lo:lo + chunk] = torch.gather(idx, 1, pos).numpy()
            out_w[lo:lo + chunk] = torch.isfinite(best).numpy()
        return out_w, out_i

    def _similarities(self, q: torch.Tensor, idx: torch.Tensor, rows_per_gather: int = 64_000) -> torch.Tensor:
        """(Q, depth) cosines of each query to its BM25 documents. Where the queries share most of their documents
        (a small collection: SciFact's 5,183 documents under 256 queries × 1,000), each distinct document's vector
        is read once and the cosines are one matrix product, gathered: gathering every (query, document) pair's
        vector was 0.76 ms a query, a quarter of ``reformulate``'s time. Otherwise the pairs, a few queries at a
        time (64,000 float32 vectors: 98 MB)."""
        docs, where = torch.unique(idx, return_inverse=True)
        if len(docs) * 4 <= idx.numel():
            return torch.gather(q @ self.doc_vectors[docs].float().T, 1, where)
        step = max(1, rows_per_gather // max(1, idx.shape[1]))
        return torch.cat([torch.einsum("qd,qkd->qk", q[i:i + step], self.doc_vectors[idx[i:i + step]].float())
                          for i in range(0, len(idx), step)])


def feedback_documents(retriever: Retriever, query_terms: list[list[int]], k: int,
                       semantic: SemanticFeedback | None = None, query_vectors: np.ndarray | None = None,
                       ranking: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(weights, doc indices), both (Q, k): each query's feedback documents for RM1 and the candidate miner.

    BM25's top k weighted by their BM25 scores, or with ``semantic`` the k of BM25's top ``semantic.depth``
    closest to the query (``query_vectors``, one per query), weighted equally. ``ranking``: the queries' BM25
    ranking keys (``Retriever.rankings``) when the caller has them, at least that deep."""
    depth = k if semantic is None else max(semantic.depth, k)
    if semantic is not None and (query_vectors is None or len(query_vectors) != len(query_terms)):
        raise ValueError("semantic feedback needs one query vector per query")
    if ranking is None:
        ranking = retriever.rankings(query_terms, depth)
    ranking = ranking[:, :depth]
    scores, idx = key_scores(ranking).numpy(), key_docs(ranking).numpy()
    if semantic is None:
        return scores, idx
    assert query_vectors is not None  # checked above
    return semantic.rerank(query_vectors, scores, idx, k)
