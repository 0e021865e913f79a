"""Lucene itself, through Pyserini: finding a JDK, indexing a collection as Anserini does, running our weighted
rewrites as Lucene queries, and RM3 parity with Pyserini's ``set_rm3()``; what ``benchmarks/lucene_interop.py``,
``benchmarks/rm3_parity.py`` and the parity tests use.

Needs the ``lucene`` extra and Pyserini without its declared dependencies (which would pull a CUDA torch), and a
JDK 21 or newer (under ``$JAVA_HOME`` or ``/usr/lib/jvm``)::

    pip install ".[lucene]" && pip install --no-deps pyserini==1.6.0

``scripts/setup.sh test`` installs both, so CI runs the parity tests.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from adaptive_ir.common.measures import HEADLINE
from adaptive_ir.config import load_config
from adaptive_ir.data import load_collection
from adaptive_ir.evaluation.metrics import evaluate_run, rm3_run, to_run
from adaptive_ir.retrieval.analyzer import Analyzer
from adaptive_ir.retrieval.retriever import Retriever
from adaptive_ir.retrieval.rm3 import rm3_anserini_expansion

MIN_JAVA = 21
"""Pyserini 1.x's Anserini needs Java 21."""


def java_version(home: Path) -> int:
    """The feature version of the JDK at ``home`` (its ``release`` file), 0 when unknown."""
    try:
        text = (home / "release").read_text()
    except OSError:
        return 0
    m = re.search(r'JAVA_VERSION="(1\.)?(\d+)', text)
    return int(m.group(2)) if m else 0


def find_jdk(minimum: int = MIN_JAVA) -> Path | None:
    """$JAVA_HOME when it is new enough, else the newest JDK ≥ ``minimum`` under /usr/lib/jvm (or /opt)."""
    homes = [os.environ["JAVA_HOME"]] if os.environ.get("JAVA_HOME") else []
    homes += sorted(glob.glob("/usr/lib/jvm/*") + glob.glob("/opt/*jdk*"), key=lambda h: -java_version(Path(h)))
    for home in map(Path, homes):
        if java_version(home) >= minimum and (home / "lib" / "server" / "libjvm.so").is_file():
            return home
    return None


def pyserini_ready() -> str | None:
    """Point pyjnius at a JDK ≥ 21 and give the OpenAI client Pyserini's import builds a placeholder key (no call
    is made). None when ready, else why not (no JDK, no Pyserini)."""
    home = find_jdk()
    if home is None:
        return f"no JDK {MIN_JAVA}+ under $JAVA_HOME or /usr/lib/jvm"
    os.environ["JAVA_HOME"] = str(home)
    os.environ["JVM_PATH"] = str(home / "lib" / "server" / "libjvm.so")
    os.environ.setdefault("OPENAI_API_KEY", "placeholder")
    try:
        import pyserini  # noqa: F401
    except ImportError as e:
        return (f"pyserini is not installed ({e}): pip install \".[lucene]\" && pip install --no-deps "
                "pyserini==1.6.0 (or scripts/setup.sh test)")
    return None


def write_json_collection(corpus, folder: Path) -> None:
    """The corpus as Pyserini's JsonCollection: ``{"id", "contents"}`` per line, contents = title + text."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as f:
        lo = 0
        for chunk in corpus.iter_doc_texts():
            for doc_id, text in zip(corpus.doc_ids[lo:lo + len(chunk)], chunk):
                f.write(json.dumps({"id": doc_id, "contents": text}) + "\n")
            lo += len(chunk)


def build_index(docs: Path, index: Path, threads: int = 2) -> None:
    if (index / "segments.gen").exists() or list(index.glob("segments_*")):
        return
    subprocess.run([sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection",
                    "--input", str(docs), "--index", str(index), "--generator", "DefaultLuceneDocumentGenerator",
                    "--threads", str(threads), "--storePositions", "--storeDocvectors", "--storeRaw"],
                   check=True, stdout=subprocess.DEVNULL)


def boolean_query(pairs, analyzer, field: str = "contents"):
    """(term, weight)s as a Lucene BooleanQuery of boosted TermQuerys (``should``), each term analyzed first."""
    from pyserini.search.lucene import querybuilder

    builder = querybuilder.get_boolean_query_builder()
    should = querybuilder.JBooleanClauseOccur["should"].value
    for term, weight in pairs:
        for token in analyzer.analyze(term):
            q = querybuilder.get_boost_query(querybuilder.JTermQuery(querybuilder.JTerm(field, token)), weight)
            builder.add(q, should)
    return builder.build()


def body_pairs(record: dict) -> list[tuple[str, float]]:
    """The (term, weight)s of a record's Elasticsearch body."""
    clauses = record["elasticsearch"]["query"]["bool"]["should"]
    return [(c["match"]["contents"]["query"], c["match"]["contents"]["boost"]) for c in clauses]


def hits_run(hits: dict) -> dict:
    return {q: {h.docid: float(h.score) for h in hs} for q, hs in hits.items()}


def same_query(ours: dict[str, float], theirs: dict[str, float], rel: float = 1e-6) -> bool:
    """Our expanded query (term → weight) is Pyserini's feedback query, less the terms our index lacks (they
    match no document) and those of weight 0."""
    if set(ours) != set(theirs):
        return False
    return all(abs(ours[t] - theirs[t]) <= rel * max(1.0, abs(theirs[t])) for t in ours)


def rm3_parity(data_dir: Path, work: Path, hits: int = 1000, threads: int = 2) -> dict:
    """Our ``rm3_anserini_expansion`` against Pyserini's ``set_rm3()`` on a BEIR folder's test split, over the
    Lucene-parity index (``configs/<name>-anserini.yaml``) and Pyserini's own (built under ``work``): each run's
    R@40 and nDCG@10, the largest difference, and how many queries get the same expanded query."""
    from pyserini.search.lucene import LuceneSearcher

    name = data_dir.name
    cfg = load_config(f"{name}-anserini", {"data.data_dir": str(data_dir),
                                           "training.output_dir": str(work / name / "ours" / "run")})
    rc = cfg.retrieval
    coll = load_collection(cfg.data, cfg.split_seed, ("test",))
    qids, texts, qrels = coll.split("test")
    folder = work / name
    if not (folder / "docs" / "docs.jsonl").is_file():
        write_json_collection(coll.corpus, folder / "docs")
    build_index(folder / "docs", folder / "index", threads)
    searcher = LuceneSearcher(str(folder / "index"))
    searcher.set_rm3()
    pyserini_run = hits_run(searcher.batch_search(texts, qids, k=hits, threads=threads))

    retriever = Retriever.cached(coll, folder / "ours" / "cache", rc.bm25_k1, rc.bm25_b, rc.idf,
                                 analyzer=Analyzer(kind=rc.analyzer, stemmer=rc.stemmer), scoring=rc.bm25_scoring)
    t0 = time.perf_counter()
    terms, weights = rm3_anserini_expansion(retriever, texts)
    expand_s = time.perf_counter() - t0
    scores, idx = retriever.search(terms, weights, k=hits)
    runs = {"pyserini_rm3": pyserini_run, "rm3_anserini": to_run(qids, retriever.doc_ids, scores, idx),
            "rm3": rm3_run(retriever, qids, texts, k=hits)}
    out: dict = {"collection": name, "test_queries": len(qids), "expand_s": round(expand_s, 2)}
    for method, run in runs.items():
        e = evaluate_run(qrels, run, qids=qids)
        out[method] = {m: round(e[m], 4) for m in HEADLINE}
    out["max_abs_diff"] = max(abs(out["rm3_anserini"][m] - out["pyserini_rm3"][m]) for m in HEADLINE)
    same = 0
    for q, text in enumerate(texts):
        theirs = {t: float(w) for t, w in (searcher.get_feedback_terms(text) or {}).items()
                  if t in retriever.vocab.ids and w > 0}
        same += same_query({retriever.vocab.terms[t]: w for t, w in zip(terms[q], weights[q])}, theirs)
    out["same_expanded_query"] = same
    return out


__all__ = ["MIN_JAVA", "body_pairs", "boolean_query", "build_index", "find_jdk", "hits_run", "java_version",
           "pyserini_ready", "rm3_parity", "same_query", "write_json_collection"]
