"""Fixed rules in the agent's own action space: every query gets the first j of its candidate terms, in the
miner's order, each at weight w. Same candidates, same weights, no learning: with RM3 over the same feedback
documents, the bar a trained policy has to clear.

    python scripts/fixed_rules.py --config wikicar --data-dir <wikicar> --split dev --top-j 1,2,3,5

The weights default to the config's own (``retrieval.expansion_weights``: every weight an action may choose).
Prints one JSON line per (w, j) with the split's metrics (those of `adaptive-ir evaluate --json`); j = 0 is where
the rewrites start: BM25 itself, or with ``retrieval.start: rm3`` the RM3 rule (whose expansion the j terms join).
Each rule runs over the config's own first stage and over the other named one (``config.stages``: the engine's
default BM25, Anserini's), its candidates mined there; each line names its ``first_stage``.
With `--against` the agent's TREC run files (one per seed, e.g. `<compare dir>/seed-*/runs/dev.agent.trec`), each
line adds the paired tests of the agent (its per-query value: the mean over the files) against that rule on R@40
and nDCG@10, as `adaptive-ir compare` tests it against BM25. Reads the caches of the config's runs (index,
candidates) like any command. `evaluate --baselines` and `compare` report the best of these rules (j within the
step budget, either first stage) as the method ``rule-w<w>-j<j>[-<stage>]``; this script shows every one.
"""

from __future__ import annotations

import argparse
import contextlib
import json

import ir_measures
import torch

from adaptive_ir.cli import config_overrides
from adaptive_ir.common.measures import HEADLINE
from adaptive_ir.config import FIRST_STAGES, first_stage, load_config
from adaptive_ir.evaluation.methods import rule_runs
from adaptive_ir.evaluation.metrics import drop_excluded, evaluate_run, mean_per_query, per_query
from adaptive_ir.evaluation.stats import paired
from adaptive_ir.rl.workspace import Workspace


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--split", default="dev", help="default dev: a rule is chosen there, like any setting")
    p.add_argument("--weights", help="expansion weights w, comma-separated (default: the config's own, "
                   "retrieval.expansion_weights or expansion_weight: the agent's action space)")
    p.add_argument("--top-j", default="0,1,2,3,5", help="numbers of candidates added, comma-separated")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--output-dir", help="the runs' folder whose caches to read (default: training.output_dir)")
    p.add_argument("--against", nargs="+", default=[], metavar="TREC_RUN",
                   help="the agent's TREC run files on this split (one per seed): paired tests against each rule")
    p.add_argument("--first-stages", default="own," + ",".join(FIRST_STAGES),
                   help="comma-separated: own (the config's index), " + ", ".join(FIRST_STAGES)
                   + " (default: every one, the config's own once)")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config, config_overrides(args))
    own = first_stage(cfg) or "own"
    stages = dict.fromkeys(own if s == "own" else s for s in args.first_stages.split(","))
    unknown = [s for s in stages if s != "own" and s not in FIRST_STAGES]
    if unknown:
        p.error(f"--first-stages: unknown {', '.join(unknown)} (expected own, {', '.join(FIRST_STAGES)})")
    ws = Workspace(cfg, torch.device("cpu"), progress=False, splits=(args.split,))
    qids, texts, qrels = ws.collection.split(args.split)
    excluded = ws.collection.excluded_docs(args.split)
    tested = [ir_measures.parse_measure(m) for m in HEADLINE]
    agent = None
    if args.against:  # per query, the mean over the seeds' runs
        agent = mean_per_query(qrels, args.against, tested, qids)
    rows = []
    levels = cfg.retrieval.levels if args.weights is None else tuple(float(x) for x in args.weights.split(","))
    depths = tuple(int(x) for x in args.top_j.split(","))
    for stage in stages:
        with contextlib.nullcontext(ws) if stage == own else ws.on_stage(stage) as sws:
            stage_runs = rule_runs(sws.cfg, sws, args.split, qids, texts, levels, depths)
        for (w, j), run in stage_runs.items():
            run = drop_excluded(run, excluded)
            metrics = evaluate_run(qrels, run, qids=qids)
            rows.append({"split": args.split, "first_stage": stage, "w": w, "top_j": j,
                         **{k: round(v, 4) for k, v in metrics.items()}})
            if agent is not None:
                rule = per_query(qrels, run, tested, qids)
                rows[-1]["agent_vs_rule"] = {m: paired(m, agent[m], rule[m]).to_dict() for m in agent}
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
