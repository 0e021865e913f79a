"""Paired per-query tests of one TREC run against others on a split of a collection: what `adaptive-ir compare`
reports for its own runs, for runs made elsewhere (e.g. `adaptive-ir evaluate --policy ... --run-dir <dir>`).

    python scripts/paired_runs.py --data-dir ../shared/datasets/scifact --split test \
        <dir>/test.agent.trec <dir>/test.bm25.trec <dir>/test.rm3.trec

Prints one JSON line per other run: the first run against it on R@40 and nDCG@10 (mean difference, two-sided
randomization and t-test p-values, wins/ties/losses over every query of the split; a query a run leaves out
scores 0). A comma-separated list of files counts as one run whose per-query value is their mean (the seeds of one
agent, as `compare` tests them): `seed-1/dev.agent.trec,seed-2/dev.agent.trec,seed-3/dev.agent.trec`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import ir_measures

from adaptive_ir.common.measures import HEADLINE
from adaptive_ir.data import load_beir
from adaptive_ir.evaluation.metrics import mean_per_query
from adaptive_ir.evaluation.stats import paired

MEASURES = [ir_measures.parse_measure(m) for m in HEADLINE]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, help="the BEIR folder whose qrels judge the runs")
    p.add_argument("--split", default="test")
    p.add_argument("runs", nargs="+", help="TREC run files (or comma-separated lists of them: their per-query "
                   "mean): the first is tested against each of the others")
    args = p.parse_args()
    if len(args.runs) < 2:
        p.error("give the run to test and at least one to test it against")
    qids, _, qrels = load_beir(args.data_dir, splits=(args.split,)).split(args.split)

    def values(arg: str):
        return mean_per_query(qrels, arg.split(","), MEASURES, qids)

    def name(arg: str) -> str:
        return ",".join(Path(path).name for path in arg.split(","))

    first = values(args.runs[0])
    for other_arg in args.runs[1:]:
        other = values(other_arg)
        print(json.dumps({"a": name(args.runs[0]), "b": name(other_arg), "split": args.split,
                          **{m: paired(m, first[m], other[m]).to_dict() for m in first}}), flush=True)


if __name__ == "__main__":
    main()
