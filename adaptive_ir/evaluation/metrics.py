"""Standard IR evaluation (ir-measures, trec_eval semantics), TREC run files, and the BM25 / RM3 baseline runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import ir_measures
import numpy as np
from ir_measures import R

from adaptive_ir.common.io import atomic_write_bytes
from adaptive_ir.common.measures import METRIC_NAMES
from adaptive_ir.retrieval.feedback import SemanticFeedback
from adaptive_ir.retrieval.retriever import Retriever
from adaptive_ir.retrieval.rm3 import RM3_FB_DOCS, rm3_anserini_expansion, rm3_expansion

MEASURES = [ir_measures.parse_measure(name) for name in METRIC_NAMES]
"""Reported measures (``common.measures``)."""


def report_measures(top_k: int) -> list:
    """MEASURES, and R@top_k when the runs go deeper than 100 (``retrieval.top_k: 1000`` gives Anserini's R@1000)."""
    return MEASURES + ([R @ top_k] if top_k > 100 else [])

Run = Mapping[str, dict[str, float]]
"""A ranked list per query, ``{qid: {doc_id: score}}``: a dict, or a ``CompactRun``."""
EVAL_QUERIES = 1000
"""Queries evaluated per ir-measures call (``per_query``): bounds the rankings held as dicts at once."""


def doc_ids_at(doc_ids: Sequence[str], positions: np.ndarray) -> list[str]:
    """The ids at ``positions`` of a corpus's id sequence: in one pass where it can (``DocIds.take``)."""
    take = getattr(doc_ids, "take", None)
    return take(positions) if take is not None else [doc_ids[d] for d in positions.tolist()]


class CompactRun(Mapping[str, dict[str, float]]):
    """A run kept as its top-k arrays, each query's ranking made when it is read: 13 bytes a ranked document where
    the dict form takes about 100, so the dozens of fixed rules an evaluation scores (over two first stages, on the
    split and on dev) cost megabytes, not gigabytes, on a collection of thousands of queries. What it yields is
    ``to_run``'s (see there)."""

    def __init__(self, qids: list[str], doc_ids: Sequence[str], scores: np.ndarray, idx: np.ndarray):
        self.qids, self.doc_ids = list(qids), doc_ids
        self._pos = {q: i for i, q in enumerate(self.qids)}
        self._keep = scores > 0
        strict = np.array(scores, dtype=np.float32)
        for j in range(1, strict.shape[1]):
            strict[:, j] = np.minimum(strict[:, j], np.nextafter(strict[:, j - 1], np.float32(-np.inf)))
        self._scores = strict
        self._idx = np.asarray(idx, dtype=np.int32 if len(doc_ids) < 2**31 else np.int64)

    def __getitem__(self, qid: str) -> dict[str, float]:
        i = self._pos[qid]
        keep = self._keep[i]
        return dict(zip(doc_ids_at(self.doc_ids, self._idx[i][keep]), self._scores[i][keep].tolist()))

    def __iter__(self) -> Iterator[str]:
        return iter(self.qids)

    def __len__(self) -> int:
        return len(self.qids)


def to_run(qids: list[str], doc_ids: Sequence[str], scores: np.ndarray, idx: np.ndarray) -> dict[str, dict[str, float]]:
    """Top-k arrays → ``{qid: {doc_id: score}}``, keeping only documents that share a term with the query.

    A document scoring 0 was not retrieved: ``topk`` fills short lists with zero-score documents in arbitrary
    order, and listing them would credit chance (the reward masks them the same way). A query none of whose words
    is known gets an empty ranking; it still counts, at 0, in every mean (``evaluate_run``).

    Scores are made strictly decreasing along the given order (a tie becomes the next float32 below; ir-measures
    compares scores as float32): trec_eval and ir-measures order tied documents by their ids, the search and the
    env's reward by corpus position, and a tie across a cut-off would otherwise make the reported R@40 differ from
    the reward's."""
    return dict(CompactRun(qids, doc_ids, scores, idx).items())


def drop_excluded(run: Run, excluded: dict[str, str]) -> Run:
    """``run`` without each query's excluded document (``Collection.excluded_docs``: under
    data.exclude_query_title, the document whose title is the query), as Nogueira & Cho drop it before scoring.
    Documents ranked below it move up one rank; the list is one shorter."""
    if not excluded:
        return run
    return {q: {d: s for d, s in docs.items() if d != excluded.get(q)} for q, docs in run.items()}



def per_query(qrels: dict[str, dict[str, int]], run: Run, measures=MEASURES,
              qids: list[str] | None = None) -> dict[str, np.ndarray]:
    """``{measure name: values}``, one value per query of ``qids`` (default: the queries of ``qrels``), in order.

    A query with no ranking, an empty ranking, or no judged document (an empty qrels entry, e.g. a Nogueira & Cho
    query whose relevant titles are all missing from the corpus) scores 0. ir-measures (pytrec_eval) would leave
    such a query out altogether, which raises the mean."""
    qids = list(qrels) if qids is None else list(qids)
    pos = {q: i for i, q in enumerate(qids)}
    if len(pos) != len(qids):
        raise ValueError("per_query: qids holds a query id twice")
    judged = [q for q in qids if qrels.get(q)]
    out = {str(m): np.zeros(len(qids)) for m in measures}
    names: dict = {}  # a measure's name, made once (ir-measures makes it anew for every value otherwise)
    # a query's values depend on its own ranking alone: rankings made (from a CompactRun's arrays) a slice of
    # queries at a time, so a large split's runs never exist as dicts all at once
    for lo in range(0, len(judged), EVAL_QUERIES):
        part = judged[lo:lo + EVAL_QUERIES]
        ranked = {q: run[q] for q in part if run.get(q)}
        if ranked:
            for m in ir_measures.iter_calc(measures, {q: qrels[q] for q in part}, ranked):
                name = names.get(m.measure)
                if name is None:
                    name = names[m.measure] = str(m.measure)
                out[name][pos[m.query_id]] = m.value
    return out


def evaluate_run(qrels: dict[str, dict[str, int]], run: Run, measures=MEASURES,
                 qids: list[str] | None = None) -> dict[str, float]:
    """Mean of each measure over every query of ``qids`` (default: the queries of ``qrels``); see ``per_query``
    for the queries that count as 0."""
    values = per_query(qrels, run, measures, qids)
    return {name: float(v.mean()) if v.size else 0.0 for name, v in values.items()}


def mean_recall(qrels: dict[str, dict[str, int]], run: Run, k: int, qids: list[str],
                excluded: dict[str, str] | None = None, judged: Judged | None = None) -> float:
    """``evaluate_run``'s mean R@k of ``run`` less each query's excluded document (``drop_excluded``), to the
    last bit: a query's value is the same double, relevant documents (judgment ≥ 1) among the first k over
    relevant documents, 0 where trec_eval gives 0, and the mean is numpy's over the same values. What choosing
    among dozens of fixed rules needs, read straight off a ``CompactRun``'s arrays as corpus positions (ir-measures
    would build every ranking as a dict of ids and sort it again); any other run goes through ``evaluate_run``.
    ``judged``: ``Judged.of`` these qrels, qids and exclusions over the run's corpus, made once for many runs."""
    excluded = excluded or {}
    if not isinstance(run, CompactRun):
        return evaluate_run(qrels, drop_excluded(run, excluded), [ir_measures.parse_measure(f"R@{k}")],
                            qids)[f"R@{k}"]
    judged = judged or Judged.of(qrels, qids, run.doc_ids, excluded)
    values = np.zeros(len(qids))
    for i, q in enumerate(qids):
        row = run._pos.get(q)
        if not judged.num_relevant[i] or row is None:
            continue
        ranked = run._idx[row][run._keep[row]][:k + 1]
        ranked = ranked[ranked != judged.excluded[i]][:k]
        values[i] = np.isin(ranked, judged.relevant[i]).sum() / judged.num_relevant[i]
    return float(values.mean()) if values.size else 0.0


@dataclass
class Judged:
    """The judgments of a query set as corpus positions (``mean_recall`` of many runs): per query, its relevant
    documents found in the corpus, how many it has (a relevant id missing from the corpus still counts), and its
    excluded document (-1: none)."""

    relevant: list[np.ndarray]
    num_relevant: list[int]
    excluded: list[int]

    @classmethod
    def of(cls, qrels: dict[str, dict[str, int]], qids: list[str], doc_ids: Sequence[str],
           excluded: dict[str, str] | None = None) -> Judged:
        excluded = excluded or {}
        rel = [[d for d, grade in qrels.get(q, {}).items() if grade >= 1] for q in qids]
        flat = [d for ids in rel for d in ids] + [excluded.get(q, "") for q in qids]
        find = getattr(doc_ids, "positions", None)
        if find is None:  # a plain list of ids (small collections)
            at = {d: i for i, d in enumerate(doc_ids)}
            pos = np.array([at.get(d, -1) for d in flat], np.int64)
        else:
            pos = np.asarray(find(flat), np.int64)
        ends = np.cumsum([len(ids) for ids in rel])
        parts = np.split(pos[:len(flat) - len(qids)], ends[:-1]) if rel else []
        return cls([part[part >= 0] for part in parts], [len(ids) for ids in rel],
                   [int(x) if excluded.get(q) else -1 for q, x in zip(qids, pos[len(flat) - len(qids):])])


def read_trec_run(path: str | Path) -> Run:
    """A TREC run file as ``{qid: {docid: score}}``."""
    run: dict[str, dict[str, float]] = {}
    for d in ir_measures.read_trec_run(str(path)):
        run.setdefault(d.query_id, {})[d.doc_id] = d.score
    return run


def mean_per_query(qrels: dict[str, dict[str, int]], paths: list[str | Path], measures=MEASURES,
                   qids: list[str] | None = None) -> dict[str, np.ndarray]:
    """``per_query`` of each TREC run file in ``paths``, averaged per query: one agent's seeds, tested as one run
    (as ``compare`` tests them)."""
    runs = [per_query(qrels, read_trec_run(path), measures, qids) for path in paths]
    return {m: np.mean([r[m] for r in runs], axis=0) for m in runs[0]}


def write_trec_run(path: str | Path, run: Run, tag: str) -> None:
    """TREC run format ``qid Q0 docid rank score tag``, written atomically. Scores are written in full (shortest
    round-trip digits), so that ``to_run``'s broken ties survive reading the file back."""
    lines = []
    for q, docs in run.items():
        ranked = sorted(docs.items(), key=lambda kv: -kv[1])
        lines += [f"{q} Q0 {d} {r} {float(s)!r} {tag}" for r, (d, s) in enumerate(ranked, 1)]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


def bm25_run(retriever: Retriever, qids: list[str], texts: list[str], k: int = 100) -> Run:
    scores, idx = retriever.search(retriever.encode(texts), k=k)
    return CompactRun(qids, retriever.doc_ids, scores, idx)  # to_run's, kept as arrays


def rm3_run(retriever: Retriever, qids: list[str], texts: list[str], k: int = 100, fb_docs: int = RM3_FB_DOCS,
            fb_terms: int = 10, orig_weight: float = 0.5, feedback: SemanticFeedback | None = None,
            query_vectors: np.ndarray | None = None) -> Run:
    """BM25 + RM3 after Anserini's Rm3Reranker (10 docs, 10 terms, original weight 0.5) over whole documents;
    ``retrieval.rm3.rm3_anserini_expansion`` is Anserini's own, equal to Pyserini's ``set_rm3()``.

    With ``feedback`` the feedback documents are the agent's semantic ones (equal weights): the fixed-rule
    baseline that shows what the learned term choice adds over better feedback documents alone."""
    exp_terms, exp_weights = rm3_expansion(retriever, retriever.encode(texts), fb_docs, fb_terms, orig_weight,
                                           feedback, query_vectors)
    scores, idx = retriever.search(exp_terms, exp_weights, k=k)
    return CompactRun(qids, retriever.doc_ids, scores, idx)  # to_run's, kept as arrays


def rm3_anserini_run(retriever: Retriever, qids: list[str], texts: list[str], k: int = 100) -> Run:
    """BM25 + RM3 as Pyserini's ``set_rm3()`` runs it (``retrieval.rm3.rm3_anserini_expansion``), over the
    Lucene-parity index ``retriever``."""
    exp_terms, exp_weights = rm3_anserini_expansion(retriever, texts)
    scores, idx = retriever.search(exp_terms, exp_weights, k=k)
    return CompactRun(qids, retriever.doc_ids, scores, idx)  # to_run's, kept as arrays


def format_table(results: dict[str, dict[str, float]], title: str = "") -> str:
    """A Markdown table: one row per method, one column per metric."""
    names = list(dict.fromkeys(m for r in results.values() for m in r))
    lines = [f"**{title}**", ""] if title else []
    lines += ["| method | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for method, r in results.items():
        lines.append(f"| {method} | " + " | ".join(f"{r[n]:.4f}" if n in r else "–" for n in names) + " |")
    return "\n".join(lines)
