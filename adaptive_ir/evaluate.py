"""Standard IR evaluation (ir-measures, trec_eval semantics), TREC run files, and the BM25 / RM3 baselines."""

from __future__ import annotations

from pathlib import Path

import ir_measures
import numpy as np
from ir_measures import AP, RR, R, nDCG

from .feedback import SemanticFeedback, feedback_documents, relevance_model, rm3_queries
from .io import atomic_write_bytes
from .retrieval import Retriever

MEASURES = [R @ 10, R @ 40, R @ 100, AP @ 40, nDCG @ 10, RR @ 10]
"""Reported measures; their names are ir-measures' own (``str(R@40) == 'R@40'``)."""
METRIC_NAMES = [str(m) for m in MEASURES]

Run = dict[str, dict[str, float]]


def to_run(qids: list[str], doc_ids: list[str], scores: np.ndarray, idx: np.ndarray) -> Run:
    """Top-k arrays → ``{qid: {doc_id: score}}``."""
    return {q: {doc_ids[d]: float(s) for d, s in zip(row_i, row_s)} for q, row_i, row_s in zip(qids, idx, scores)}


def drop_excluded(run: Run, excluded: dict[str, str]) -> Run:
    """``run`` without each query's excluded document (``Collection.excluded_docs``: under
    data.exclude_query_title, the document whose title is the query), as Nogueira & Cho drop it before scoring.
    Documents ranked below it move up one rank; the list is one shorter."""
    if not excluded:
        return run
    return {q: {d: s for d, s in docs.items() if d != excluded.get(q)} for q, docs in run.items()}


def evaluate_run(qrels: dict[str, dict[str, int]], run: Run, measures=MEASURES) -> dict[str, float]:
    """Mean of each measure over every query in ``qrels`` (a query missing from the run counts as 0)."""
    run = {q: run.get(q, {}) for q in qrels}
    # pytrec_eval drops queries with an empty ranking from the mean; a dummy doc keeps them in at score 0
    run = {q: (docs if docs else {"__none__": 0.0}) for q, docs in run.items()}
    agg = ir_measures.calc_aggregate(measures, qrels, run)
    return {str(m): float(agg[m]) for m in measures}


def per_query(qrels: dict[str, dict[str, int]], run: Run, measure) -> dict[str, float]:
    """One measure per query (for significance tests and error analysis)."""
    return {m.query_id: float(m.value) for m in ir_measures.iter_calc([measure], qrels, run)}


def write_trec_run(path: str | Path, run: Run, tag: str) -> None:
    """TREC run format ``qid Q0 docid rank score tag``, written atomically."""
    lines = []
    for q, docs in run.items():
        ranked = sorted(docs.items(), key=lambda kv: -kv[1])
        lines += [f"{q} Q0 {d} {r} {s:.6f} {tag}" for r, (d, s) in enumerate(ranked, 1)]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


def bm25_run(retriever: Retriever, qids: list[str], texts: list[str], k: int = 100) -> Run:
    scores, idx = retriever.search(retriever.encode(texts), k=k)
    return to_run(qids, retriever.doc_ids, scores, idx)


def rm3_run(retriever: Retriever, qids: list[str], texts: list[str], k: int = 100, fb_docs: int = 10,
            fb_terms: int = 10, orig_weight: float = 0.5, feedback: SemanticFeedback | None = None,
            query_vectors: np.ndarray | None = None) -> Run:
    """BM25 + RM3 (Anserini's Rm3Reranker recipe; defaults 10 docs, 10 terms, original weight 0.5).

    With ``feedback`` the feedback documents are the agent's semantic ones (equal weights): the fixed-rule
    baseline that shows what the learned term choice adds over better feedback documents alone."""
    terms = retriever.encode(texts)
    fb_scores, fb_idx = feedback_documents(retriever, terms, fb_docs, feedback, query_vectors)
    rm1 = relevance_model(retriever.corpus, fb_idx, fb_scores)
    exp_terms, exp_weights = rm3_queries(terms, rm1, fb_terms, orig_weight)
    scores, idx = retriever.search(exp_terms, exp_weights, k=k)
    return to_run(qids, retriever.doc_ids, scores, idx)


def format_table(results: dict[str, dict[str, float]], title: str = "") -> str:
    """A Markdown table: one row per method, one column per metric."""
    names = [m for m in METRIC_NAMES if any(m in r for r in results.values())]
    lines = [f"**{title}**", ""] if title else []
    lines += ["| method | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for method, r in results.items():
        lines.append(f"| {method} | " + " | ".join(f"{r[n]:.4f}" if n in r else "–" for n in names) + " |")
    return "\n".join(lines)
