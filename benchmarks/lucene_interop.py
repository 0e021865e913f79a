"""The rewrites in a real engine: Lucene through Pyserini, against Lucene BM25 and Pyserini's RM3 on the same index.

For each BEIR folder: index the corpus with Pyserini (JsonCollection, ``contents`` = title and text, positions,
doc vectors and raw text: RM3 needs the doc vectors), then on the test split run

* Lucene BM25 (``LuceneSearcher`` defaults: k1 = 0.9, b = 0.4, Lucene's English analyzer with Porter stems),
* Pyserini RM3 (``set_rm3()`` defaults: 10 feedback documents, 10 terms, original query weight 0.5),
* our rewrites (``Reformulator.from_pretrained(<policy>, folder).reformulate_file``) as Lucene BooleanQuerys of
  boosted TermQuerys: each (term, weight) of the record's Elasticsearch body analyzed by Lucene's analyzer, one
  ``should`` clause per token with the term's weight as boost (Pyserini's ``search(str)`` would drop ``^`` boosts),
* our engine's own figures for the same rewrites (the records' top documents, our index and BM25),

and report R@40 and nDCG@10 (ir_measures), 1,000 hits each, in ``benchmarks/results/lucene_interop.json`` and a
Markdown table on stdout.

Install (Pyserini 1.x needs a JDK 21 or newer, found under /usr/lib/jvm or $JAVA_HOME; it must come without its
declared dependencies, which would pull a CUDA torch)::

    pip install ".[lucene]"                  # pyjnius, pandas, scipy, scikit-learn, transformers, pillow, tiktoken,
                                             # openai, onnxruntime, ir-measures
    pip install --no-deps pyserini==1.6.0

Run (from the repository root; about 2 min per collection once our caches are built, plus their first build)::

    python benchmarks/lucene_interop.py --data-dirs ../shared/datasets/{scifact,nfcorpus,cranfield,cisi}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from adaptive_ir.interop import body_pairs, boolean_query, build_index, hits_run, pyserini_ready, write_json_collection

RESULTS = Path(__file__).resolve().parent / "results"


def metrics(run: dict, qrels: dict) -> dict:
    import ir_measures
    from ir_measures import R, nDCG

    agg = ir_measures.calc_aggregate([R @ 40, nDCG @ 10], qrels, run)
    return {"R@40": round(float(agg[R @ 40]), 4), "nDCG@10": round(float(agg[nDCG @ 10]), 4)}


def measure(data_dir: Path, policy: str, work: Path, hits: int, threads: int) -> dict:
    from pyserini.analysis import Analyzer, get_lucene_analyzer
    from pyserini.search.lucene import LuceneSearcher

    from adaptive_ir.data import load_beir
    from adaptive_ir.inference.reformulate import Reformulator

    name = data_dir.name
    coll = load_beir(data_dir, splits=("test",))
    qids, texts, qrels = coll.split("test")
    folder = work / name
    t0 = time.perf_counter()
    if not (folder / "docs" / "docs.jsonl").is_file():
        write_json_collection(coll.corpus, folder / "docs")
    build_index(folder / "docs", folder / "index", threads)
    index_s = time.perf_counter() - t0
    searcher = LuceneSearcher(str(folder / "index"))  # BM25 k1 0.9, b 0.4
    out = {"collection": name, "test_queries": len(qids), "index_s": round(index_s, 1)}
    out["lucene_bm25"] = metrics(hits_run(searcher.batch_search(texts, qids, k=hits, threads=threads)), qrels)
    searcher.set_rm3()
    out["pyserini_rm3"] = metrics(hits_run(searcher.batch_search(texts, qids, k=hits, threads=threads)), qrels)
    searcher.unset_rm3()

    t0 = time.perf_counter()
    ref = Reformulator.from_pretrained(policy, str(data_dir), device="cpu")
    out["policy_load_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    records = list(ref.reformulate_file(list(zip(qids, texts)), top_docs=ref.cfg.retrieval.top_k))
    out["reformulate_s"] = round(time.perf_counter() - t0, 2)
    out["ours_engine"] = metrics({r["id"]: {d["id"]: d["score"] for d in r["top_docs"]} for r in records}, qrels)
    analyzer = Analyzer(get_lucene_analyzer())
    run = {}
    for r in records:
        run[r["id"]] = {h.docid: float(h.score)
                        for h in searcher.search(boolean_query(body_pairs(r), analyzer), k=hits)}
    out["lucene_rewrites"] = metrics(run, qrels)
    out["added_terms_per_query"] = round(sum(len(r["added_terms"]) for r in records) / max(1, len(records)), 2)
    return out


def table(rows: list[dict]) -> str:
    head = ("| collection | Lucene BM25 R@40 | Pyserini RM3 R@40 | Lucene, our rewrites R@40 | our engine R@40 | "
            "nDCG@10: BM25 / RM3 / rewrites in Lucene / our engine |\n|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        b, m, w, e = r["lucene_bm25"], r["pyserini_rm3"], r["lucene_rewrites"], r["ours_engine"]
        lines.append(f"| {r['collection']} | {b['R@40']:.4f} | {m['R@40']:.4f} | {w['R@40']:.4f} | {e['R@40']:.4f} "
                     f"| {b['nDCG@10']:.4f} / {m['nDCG@10']:.4f} / {w['nDCG@10']:.4f} / {e['nDCG@10']:.4f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dirs", nargs="+", required=True, help="BEIR folders with a test split")
    ap.add_argument("--policy", default="general-joint")
    ap.add_argument("--work-dir", default="runs/lucene", help="Pyserini collections and indexes (kept)")
    ap.add_argument("--hits", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=str(RESULTS / "lucene_interop.json"))
    args = ap.parse_args(argv)
    why = pyserini_ready()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 1
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    for d in args.data_dirs:
        rows.append(measure(Path(d), args.policy, Path(args.work_dir), args.hits, args.threads))
        print(json.dumps(rows[-1]), flush=True)
    report = {"policy": args.policy, "hits": args.hits, "rows": rows,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "java_home": os.environ["JAVA_HOME"],
                          "pyserini": __import__("pyserini").__version__ if hasattr(__import__("pyserini"),
                                                                                     "__version__") else "1.x"}}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
