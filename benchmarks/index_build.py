"""Index build: documents/s of both first stages' analyzers and the time and peak RSS of each whole index build.

For the engine's default analyzer (bm25s' tokens) and the Lucene-parity one (StandardTokenizer, possessive and stop
filters, Porter), each in a process of its own (so each peak RSS, Linux's ``VmHWM``, is its own): the corpus read,
analyzed and reduced to the doc-major forward index (``CorpusTerms.build``: documents/s), the BM25 impact matrix built
from it (``BM25Index.build``), and the two together with the corpus read, as ``Retriever.build`` runs them.

    python benchmarks/index_build.py --data-dir /work/data/wikicar --json benchmarks/results/index_build.json
    python benchmarks/index_build.py ... --workers 1   # the analysis in one process (default: 2, as system.num_workers)

Run it with another checkout on ``PYTHONPATH`` for a before/after on the same machine (the script uses only
``Analyzer``, ``CorpusTerms.build``, ``BM25Index.build`` and the collection loader).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import _common as common

from adaptive_ir.config.stages import ANSERINI_STAGE, DEFAULT_STAGE, FIRST_STAGES
from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms
from adaptive_ir.retrieval.index import BM25Index
from adaptive_ir.retrieval.retriever import CHUNK_DOCS


def vm_hwm() -> int:
    """This process's peak resident set size in bytes (Linux ``VmHWM``; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0


def one_stage(data_dir: str | None, stage: str, workers: int) -> dict:
    """Build one first stage's index from the corpus on disk, timing each part."""
    keys = FIRST_STAGES[stage]
    start = time.perf_counter()
    collection = common.load_collection(data_dir)
    loaded = time.perf_counter()
    analyzer = Analyzer(kind=str(keys["analyzer"]), stemmer=str(keys["stemmer"]))
    analyzer.tokenize("warm up")  # compiled parts load once per process, outside the timing
    t0 = time.perf_counter()
    corpus = CorpusTerms.build(collection.iter_doc_texts(CHUNK_DOCS), analyzer, collection.num_docs, workers=workers)
    t1 = time.perf_counter()
    BM25Index.build(corpus, k1=float(keys["bm25_k1"]), b=float(keys["bm25_b"]),  # type: ignore[arg-type]
                    idf=str(keys["idf"]), scoring=str(keys["bm25_scoring"]))
    t2 = time.perf_counter()
    return {"stage": stage, "analyzer": analyzer.settings, "workers": workers, "num_docs": collection.num_docs,
            "vocabulary": len(corpus.vocab), "postings": corpus.num_postings,
            "load_collection_s": round(loaded - start, 2), "analyze_s": round(t1 - t0, 2),
            "docs_per_s": round(collection.num_docs / (t1 - t0)), "impacts_s": round(t2 - t1, 2),
            "build_s": round(t2 - t0, 2), "peak_rss_gib": round(vm_hwm() / 2**30, 3)}


def main() -> None:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--stage", choices=list(FIRST_STAGES), help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=2, help="processes that tokenize (CorpusTerms.build)")
    args = p.parse_args()
    if args.stage:  # the child process: one stage, its figures as one JSON line
        print(json.dumps(one_stage(args.data_dir, args.stage, args.workers)))
        return
    common.setup(args)
    rows = []
    for stage in (DEFAULT_STAGE, ANSERINI_STAGE):
        cmd = [sys.executable, __file__, "--stage", stage, "--workers", str(args.workers)] + (
            ["--data-dir", args.data_dir] if args.data_dir else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    by = {r["stage"]: r for r in rows}
    common.write_json(args.json, {
        "machine": common.machine(common.setup(args)), "settings": {"data_dir": args.data_dir, "workers": args.workers},
        "stages": rows,
        "lucene_vs_default_docs_per_s": round(by[ANSERINI_STAGE]["docs_per_s"] / by[DEFAULT_STAGE]["docs_per_s"], 3)})


if __name__ == "__main__":
    main()
