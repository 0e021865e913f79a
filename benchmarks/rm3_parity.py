"""RM3 at Anserini parity (issue 45): ``rm3_anserini_expansion`` on the Lucene-parity index against Pyserini's RM3.

For each BEIR folder (``<name>`` must have a ``configs/<name>-anserini.yaml``): index the corpus with Pyserini as
``lucene_interop.py`` does (kept under ``--work-dir``), run Pyserini's ``set_rm3()`` (10 feedback documents,
10 terms, original query weight 0.5) on the test split, and on our Lucene-parity index (Lucene's English analyzer,
Porter stems, Lucene's BM25 k1 = 0.9, b = 0.4) run

* ``rm3_anserini``: ``rm3_anserini_expansion``, Anserini's Rm3Reranker recomputed, searched by our engine,
* ``rm3``: our ``rm3`` baseline (``rm3_run``) on the same index, for reference,

and report R@40 and nDCG@10 (1,000 hits each), the largest difference from Pyserini, and for how many queries our
expanded query is Pyserini's (``get_feedback_terms``: the same terms, weights within 1e-6 relative), in
``benchmarks/results/rm3_parity.json`` and a Markdown table on stdout. Parity: within 0.005 of Pyserini on both
measures (``--tolerance``); the exit status is 1 when a collection misses it, 2 when Pyserini or a JDK is
missing (see ``lucene_interop.py`` for the install).

Run (from the repository root; under a minute per collection once Pyserini's index is built)::

    python benchmarks/rm3_parity.py --data-dirs ../shared/datasets/{scifact,nfcorpus}
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MEASURES = ("R@40", "nDCG@10")

_spec = importlib.util.spec_from_file_location("lucene_interop", Path(__file__).resolve().parent / "lucene_interop.py")
assert _spec is not None and _spec.loader is not None
interop = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(interop)


def same_query(ours: dict[str, float], theirs: dict[str, float], rel: float = 1e-6) -> bool:
    """Our expanded query (term → weight) is Pyserini's feedback query, less the terms our index lacks (they
    match no document) and those of weight 0."""
    if set(ours) != set(theirs):
        return False
    return all(abs(ours[t] - theirs[t]) <= rel * max(1.0, abs(theirs[t])) for t in ours)


def measure(data_dir: Path, work: Path, hits: int, threads: int) -> dict:
    from pyserini.search.lucene import LuceneSearcher

    from adaptive_ir.config import load_config
    from adaptive_ir.data import load_collection
    from adaptive_ir.evaluation.metrics import evaluate_run, rm3_run, to_run
    from adaptive_ir.retrieval.analyzer import Analyzer
    from adaptive_ir.retrieval.retriever import Retriever
    from adaptive_ir.retrieval.rm3 import rm3_anserini_expansion

    name = data_dir.name
    cfg = load_config(f"{name}-anserini", {"data.data_dir": str(data_dir),
                                           "training.output_dir": str(work / name / "ours" / "run")})
    rc = cfg.retrieval
    coll = load_collection(cfg.data, cfg.split_seed, ("test",))
    qids, texts, qrels = coll.split("test")
    folder = work / name
    if not (folder / "docs" / "docs.jsonl").is_file():
        interop.write_json_collection(coll.corpus, folder / "docs")
    interop.build_index(folder / "docs", folder / "index", threads)
    searcher = LuceneSearcher(str(folder / "index"))
    searcher.set_rm3()
    pyserini_run = interop.hits_run(searcher.batch_search(texts, qids, k=hits, threads=threads))

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
        out[method] = {m: round(e[m], 4) for m in MEASURES}
    out["max_abs_diff"] = max(abs(out["rm3_anserini"][m] - out["pyserini_rm3"][m]) for m in MEASURES)
    same = 0
    for q, text in enumerate(texts):
        theirs = {t: float(w) for t, w in (searcher.get_feedback_terms(text) or {}).items()
                  if t in retriever.vocab.ids and w > 0}
        same += same_query({retriever.vocab.terms[t]: w for t, w in zip(terms[q], weights[q])}, theirs)
    out["same_expanded_query"] = same
    return out


def table(rows: list[dict]) -> str:
    lines = ["| collection | Pyserini RM3 R@40 / nDCG@10 | rm3_anserini | our rm3 | same expanded query |",
             "|---|---|---|---|---|"]
    for r in rows:
        cells = [" / ".join(f"{r[k][m]:.4f}" for m in MEASURES) for k in ("pyserini_rm3", "rm3_anserini", "rm3")]
        lines.append(f"| {r['collection']} | " + " | ".join(cells) + f" | {r['same_expanded_query']} of "
                     f"{r['test_queries']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dirs", nargs="+", required=True, help="BEIR folders with a test split")
    ap.add_argument("--work-dir", default="runs/lucene", help="Pyserini collections and indexes (kept)")
    ap.add_argument("--hits", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.005)
    ap.add_argument("--json", default=str(RESULTS / "rm3_parity.json"))
    args = ap.parse_args(argv)
    why = interop.setup_pyserini()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    rows = []
    for d in args.data_dirs:
        rows.append(measure(Path(d), Path(args.work_dir), args.hits, args.threads))
        print(json.dumps(rows[-1]), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"hits": args.hits, "tolerance": args.tolerance, "rows": rows}, indent=1))
    print(table(rows))
    return 0 if all(r["max_abs_diff"] <= args.tolerance for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
