"""The per-query better of two or more runs: what a perfect chooser between them would reach.

Selective expansion asks, per query, which rewrite to run; its ceiling is each query's best run, known only with
the judgments. This prints, for the runs given (TREC files of one split, e.g. ``evaluate --run-dir``'s
``test.agent.trec`` and ``test.rm3-anserini.trec``), each run's mean R@40 and nDCG@10, the mean of the per-query
best, and how many queries each run is strictly the best on.

    python scripts/per_query_best.py --qrels <beir folder>/qrels/test.tsv runs/test.agent.trec runs/test.rm3-anserini.trec
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from ir_measures import parse_measure

from adaptive_ir.evaluation.metrics import per_query, read_trec_run

METRICS = ("R@40", "nDCG@10")


def per_query_best(qrels: dict[str, dict[str, int]], runs: dict[str, dict]) -> dict[str, dict[str, float]]:
    """{metric: {run: mean, ..., "per-query best": mean, "<run> best on": queries}} over every judged query."""
    qids = sorted(q for q, judged in qrels.items() if any(g >= 1 for g in judged.values()))
    out: dict[str, dict[str, float]] = {}
    for m in METRICS:
        values = np.stack([per_query(qrels, run, [parse_measure(m)], qids)[m] for run in runs.values()])
        best = values.max(0)
        row = {name: float(v.mean()) for name, v in zip(runs, values)}
        row["per-query best"] = float(best.mean())
        for name, v in zip(runs, values):
            others = np.delete(values, list(runs).index(name), axis=0).max(0)
            row[f"{name} best on"] = int((v > others + 1e-9).sum())
        out[m] = row
    return out


def read_qrels(path: str) -> dict[str, dict[str, int]]:
    """A BEIR qrels TSV (a header, then query-id, corpus-id, score)."""
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        next(f)
        for line in f:
            q, d, g = line.rstrip("\n").split("\t")[:3]
            qrels.setdefault(q, {})[d] = int(g)
    return qrels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qrels", required=True, help="a BEIR qrels file (query-id, corpus-id, score)")
    ap.add_argument("runs", nargs="+", help="TREC run files of the same split")
    args = ap.parse_args()
    runs = {Path(p).name.removesuffix(".trec"): read_trec_run(p) for p in args.runs}
    print(json.dumps(per_query_best(read_qrels(args.qrels), runs), indent=1))


if __name__ == "__main__":
    main()
