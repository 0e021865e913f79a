"""Shared helpers of the engine tests: the real collections (skipped when absent), a tiny hand-written corpus,
and small, fast configs on the embedded default collection."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from adaptive_ir.config import load_config
from adaptive_ir.data import Collection, load_beir, make_default

# The models and batches here are tiny: with several intra-op threads on a shared 2-core machine torch spends its
# time synchronising threads (one small Linear measured ~40x slower than with a single thread).
torch.set_num_threads(1)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"

TINY_DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "A fox and a dog are friends; the fox is quick.",
    "Retrieval with BM25 ranks documents by term impacts.",
    "Query expansion adds terms from feedback documents to the query.",
    "Dogs dogs dogs: a document about many dogs and one cat.",
    "Reinforcement learning rewrites queries to improve recall.",
    "",  # an empty document must not break either library
    "Recall at forty counts relevant documents in the top forty results.",
]
TINY_QUERIES = ["quick fox", "dog", "query expansion feedback", "recall recall documents", "cat fox dogs bm25"]


def beir(name: str, seed: int = 42, dev_fraction: float = 0.2) -> Collection:
    """A real collection from ``../shared/datasets`` or a skipped test (``dev_fraction=0``: no dev carved)."""
    path = SHARED / name
    if not (path / "corpus.jsonl").is_file():
        pytest.skip(f"{path} is not available")
    return _beir(name, seed, dev_fraction)


@functools.cache
def _beir(name: str, seed: int, dev_fraction: float) -> Collection:
    return load_beir(SHARED / name, dev_fraction=dev_fraction, seed=seed)


@functools.cache
def default_collection(seed: int = 42) -> Collection:
    """The embedded default collection (deterministic; shared read-only by the tests of one session)."""
    return make_default(seed)


TINY_ARGS = ["--config", "quickstart", "--set", "data.max_train_queries=32", "--set",
             "training.episodes_per_update=16", "--collect-batch-size", "16", "--batch-size", "32",
             "--set", "training.ppo_epochs=2", "--set", "training.eval_every=2", "--set", "training.save_freq=1",
             "--set", "training.early_stopping_patience=0", "--no-progress"]
"""``train`` flags for a run of 2 updates per epoch (32 train queries, 16 episodes per update) that writes
``last.pt`` after every update: the command-line tests' run."""


def tiny_config(output_dir: Path, **overrides):
    """The quickstart config shrunk so a trainer update takes a fraction of a second on 2 CPU cores."""
    base = {
        "system.device": "cpu",
        "training.output_dir": str(output_dir),
        "training.num_epochs": "1",
        "training.episodes_per_update": "64",
        "training.collect_batch_size": "32",
        "training.batch_size": "128",
        "training.ppo_epochs": "2",
        "training.eval_every": "1000",
        "training.save_freq": "1000",
        "data.max_train_queries": "64",
        "rl_agent.hidden_dim": "32",
        "rl_agent.num_heads": "2",
    }
    base.update({k: str(v) for k, v in overrides.items()})
    return load_config("quickstart", base)


def query_world(num_queries: int = 24, emb_dim: int = 16, seed: int = 0, max_candidates: int = 30,
                device: str = "cpu", start: str = "query"):
    """Train queries of the default collection as a QuerySet (real retriever, candidates and qrels) with seeded
    random embedding tables: everything the env, rollout and PPO need, without an embedding model. Mined on the
    CPU; the index, QuerySet and tables then live on ``device``. ``start`` = rm3: episodes start from each query's
    RM3 expansion over its 5 best BM25 documents (``retrieval.start``); choose: each query's Anserini-recipe RM3 is
    the other start its first step may switch to, with the query features (``retrieval.start: choose``)."""
    import numpy as np

    from adaptive_ir.mining.candidates import CandidateMiner
    from adaptive_ir.retrieval.retriever import Retriever
    from adaptive_ir.rl.env import QuerySet

    coll = default_collection()
    qids, texts, qrels = coll.split("train")
    qids, texts = qids[:num_queries], texts[:num_queries]
    retriever = Retriever.build(coll)
    miner = CandidateMiner(retriever, top_k0=20, max_candidates=max_candidates, min_candidates=5, min_score=0.3,
                           top_k_per_method=20, num_workers=1)
    terms = retriever.encode(texts)
    cands = miner.mine(terms)
    rows = np.where(cands.valid, np.arange(cands.terms.size).reshape(cands.terms.shape), cands.terms.size)
    start_terms, start_weights = terms, None
    if start == "rm3":
        from adaptive_ir.retrieval.rm3 import rm3_expansion

        start_terms, start_weights = rm3_expansion(retriever, terms, fb_docs=5, unit_query=True)
    alt = feats = None
    if start == "choose":
        from adaptive_ir.rl.workspace import rm3_choice_cached

        alt, feats = rm3_choice_cached(retriever, texts, terms, None)
    qs = QuerySet.build(qids, start_terms, cands, rows, np.arange(len(qids)), qrels,
                        coll.doc_positions, retriever.index.pad_id, device, query_weights=start_weights,
                        alt_query=alt, query_feats=feats)
    retriever.index.to(device)
    gen = torch.Generator().manual_seed(seed)
    tables = SimpleNamespace(query=torch.randn(len(qids), emb_dim, generator=gen).to(device),
                             term=torch.cat([torch.randn(cands.terms.size, emb_dim, generator=gen),
                                             torch.zeros(1, emb_dim)]).to(device))
    return SimpleNamespace(coll=coll, qids=qids, texts=texts, qrels=qrels, retriever=retriever, miner=miner,
                           cands=cands, qs=qs, tables=tables, emb_dim=emb_dim)


def reference_topk(index, terms: torch.Tensor, weights: torch.Tensor, k: int,
                   exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Top-k ranking keys of whole queries searched from scratch: every document scored (``BM25Index.score``), a
    row's excluded document (-1: none) dropped, each row sorted by score with ties in corpus order (a stable
    sort), documents with a score > 0 kept; -1 padded. What the env's incremental rankings must equal."""
    from adaptive_ir.retrieval.index import ranking_keys

    scores = index.score(terms, weights)
    out = torch.full((terms.shape[0], min(k, index.num_docs)), -1, dtype=torch.long)
    for b in range(terms.shape[0]):
        row = scores[b].clone()
        if exclude is not None and exclude[b] >= 0:
            row[exclude[b]] = 0.0
        order = torch.argsort(-row, stable=True)[: out.shape[1]]
        order = order[row[order] > 0]
        out[b, : len(order)] = ranking_keys(row[order], order)
    return out


def reference_metric(keys: torch.Tensor, relevant: list[set[int]], weights: dict[str, float]) -> torch.Tensor:
    """Σ weight · metric of rankings given as keys (``reference_topk``), read as lists: recall = relevant documents
    in the list / all relevant; reciprocal rank of the first relevant one."""
    from adaptive_ir.retrieval.index import key_docs

    out = []
    for row, rel in zip(key_docs(keys).tolist(), relevant):
        top = row[: int((keys[len(out)] >= 0).sum())]
        hits = [d in rel for d in top]
        recall = sum(hits) / max(len(rel), 1)
        rr = 1.0 / (hits.index(True) + 1) if any(hits) else 0.0
        out.append(weights.get("recall", 0.0) * recall + weights.get("mrr", 0.0) * rr)
    return torch.tensor(out)


def relevant_sets(qs, qidx: torch.Tensor | None = None) -> list[set[int]]:
    """The corpus positions of each query's relevant documents, as sets (from a QuerySet's ragged qrels)."""
    ptr, docs = qs.rel_indptr.tolist(), qs.rel_docs.tolist()
    rows = range(len(qs)) if qidx is None else qidx.tolist()
    return [set(docs[ptr[i]:ptr[i + 1]]) for i in rows]


def collection_as_beir(collection: Collection, root: Path, max_queries: int | None = None) -> Path:
    """``collection`` as a BEIR folder (corpus, queries, one qrels file per split; ``max_queries`` per split)."""
    import json

    (root / "qrels").mkdir(parents=True, exist_ok=True)
    texts = collection.doc_texts_at(range(collection.num_docs))
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as f:
        for doc_id, text in zip(collection.doc_ids, texts):
            f.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as f:
        for split in collection.splits:
            qids, qtexts, qrels = collection.split(split)
            qids, qtexts = qids[:max_queries], qtexts[:max_queries]
            for qid, text in zip(qids, qtexts):
                f.write(json.dumps({"_id": qid, "text": text}) + "\n")
            lines = [f"{q}\t{d}\t{g}\n" for q in qids for d, g in qrels.get(q, {}).items()]
            (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines))
    return root


def require_pyserini() -> None:
    """Pyserini and a JDK 21+ (``scripts/setup.sh test`` installs Pyserini; the image has the JDK): a test that needs
    them fails, naming what is missing, unless ``ADAPTIVE_IR_SKIP_LUCENE=1`` says to skip (a machine without Java).
    A skip would let CI pass while the README's Lucene claims go unchecked."""
    import pytest

    from adaptive_ir.interop import pyserini_ready

    why = pyserini_ready()
    if why and os.environ.get("ADAPTIVE_IR_SKIP_LUCENE") == "1":
        pytest.skip(why)
    if why:
        pytest.fail(f"{why}; run scripts/setup.sh test, or set ADAPTIVE_IR_SKIP_LUCENE=1 to skip the Lucene tests")



def random_postings(rng, ties: bool = False):
    """(num_docs, vocab, indptr, indices, data) of a random index: 50-3,000 documents, 2-39 terms, each term's
    posting list a random sorted subset, plus a last term with no postings (the padding term); impacts random, or
    1-3 when ``ties`` (equal impacts, so equal scores)."""
    import numpy as np

    num_docs, vocab = int(rng.integers(50, 3000)), int(rng.integers(2, 40))
    lists = [np.sort(rng.choice(num_docs, int(rng.integers(0, num_docs)), replace=False)) for _ in range(vocab)]
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in lists]), [sum(map(len, lists))]]).astype(np.int64)
    indices = np.concatenate(lists).astype(np.int32)
    data = (rng.integers(1, 4, len(indices)) if ties else rng.random(len(indices)) + 0.01).astype(np.float32)
    return num_docs, vocab, indptr, indices, data
