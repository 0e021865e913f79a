"""Paired per-query tests of one TREC run against others on a split of a collection: what `adaptive-ir compare`
reports for its own runs, for runs made elsewhere (e.g. `adaptive-ir evaluate --policy ... --run-dir <dir>`).

    python scripts/paired_runs.py --data-dir ../shared/datasets/scifact --split test \
        <dir>/test.agent.trec <dir>/test.bm25.trec <dir>/test.rm3.trec

Prints one JSON line per other run: the first run against it on R@40 and nDCG@10 (mean difference, two-sided
randomization and t-test p-values, wins/ties/losses over every query of the split; a query a run leaves out
scores 0).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import ir_measures

from adaptive_ir.data import load_beir
from adaptive_ir.evaluate import per_query, read_trec_run
from adaptive_ir.stats import paired

MEASURES = [ir_measures.parse_measure(m) for m in ("R@40", "nDCG@10")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, help="the BEIR folder whose qrels judge the runs")
    p.add_argument("--split", default="test")
    p.add_argument("runs", nargs="+", help="TREC run files: the first is tested against each of the others")
    args = p.parse_args()
    if len(args.runs) < 2:
        p.error("give the run to test and at least one to test it against")
    qids, _, qrels = load_beir(args.data_dir, splits=(args.split,)).split(args.split)
    first = per_query(qrels, read_trec_run(args.runs[0]), MEASURES, qids)
    for other_path in args.runs[1:]:
        other = per_query(qrels, read_trec_run(other_path), MEASURES, qids)
        print(json.dumps({"a": Path(args.runs[0]).name, "b": Path(other_path).name, "split": args.split,
                          **{m: paired(m, first[m], other[m]).to_dict() for m in first}}), flush=True)


if __name__ == "__main__":
    main()
