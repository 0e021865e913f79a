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
import json
import sys
from pathlib import Path

from adaptive_ir.common.measures import HEADLINE
from adaptive_ir.interop import pyserini_ready, rm3_parity

RESULTS = Path(__file__).resolve().parent / "results"


def table(rows: list[dict]) -> str:
    lines = ["| collection | Pyserini RM3 R@40 / nDCG@10 | rm3_anserini | our rm3 | same expanded query |",
             "|---|---|---|---|---|"]
    for r in rows:
        cells = [" / ".join(f"{r[k][m]:.4f}" for m in HEADLINE) for k in ("pyserini_rm3", "rm3_anserini", "rm3")]
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
    why = pyserini_ready()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    rows = []
    for d in args.data_dirs:
        rows.append(rm3_parity(Path(d), Path(args.work_dir), args.hits, args.threads))
        print(json.dumps(rows[-1]), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"hits": args.hits, "tolerance": args.tolerance, "rows": rows}, indent=1))
    print(table(rows))
    return 0 if all(r["max_abs_diff"] <= args.tolerance for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
