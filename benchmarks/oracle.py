"""The greedy oracle's cost (``evaluation.oracle``: every candidate tried at every step, the best kept): the CPU's
trials in one kernel call (``ReformulationEnv.trial_all``: a candidate whose bound is below an episode's k-th
score looked up in its best documents only) against one trial per action reading every posting (the env's
``trial``, as before), on a split's queries; the oracle's rewrites checked equal.

    python benchmarks/oracle.py --config wikicar-anserini --data-dir <folder> --split dev --queries 500 \\
        --set embeddings.cache_dir=<a run's cache: its index is mapped, not built> --json <out>.json

Both timings come from one process, the kernel first.
"""

from __future__ import annotations

import time

import _common as common
import torch

from adaptive_ir.evaluation.oracle import oracle_rewrite
from adaptive_ir.rl.env import ReformulationEnv


def every_posting(env: ReformulationEnv) -> torch.Tensor:
    """``trial_all`` as one ``trial`` per action: each reads all of its candidate's postings."""
    return torch.stack([env.trial(torch.full_like(env.qidx, j)) for j in range(env.switch)], 1)


def main() -> None:
    p = common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=500, help="queries of the split (the first ones)")
    p.add_argument("--split", default="dev")
    args = p.parse_args()
    device = common.setup(args)
    ws = common.workspace(args, device)
    qids, texts, qrels = ws.collection.split(args.split)
    n = 16 if args.quick else args.queries
    qs, _ = ws.query_set(args.split, qids[:n], texts[:n], qrels)
    rc, cfg = ws.cfg.retrieval, ws.cfg
    steps = cfg.rl_agent.max_steps_per_episode

    def run() -> tuple[float, tuple[torch.Tensor, torch.Tensor]]:
        t0 = time.perf_counter()
        out = oracle_rewrite(qs, ws.retriever.index, steps, rc.reward_k, cfg.reward_terms, rc.levels)
        return time.perf_counter() - t0, out

    warm, _ = ws.query_set(args.split, qids[:2], texts[:2], qrels)
    oracle_rewrite(warm, ws.retriever.index, 1, rc.reward_k, cfg.reward_terms, rc.levels)  # kernels load untimed
    kernel_s, (terms, weights) = run()
    trial_all = ReformulationEnv.trial_all
    ReformulationEnv.trial_all = every_posting  # type: ignore[method-assign]
    try:
        full_s, (full_terms, full_weights) = run()
    finally:
        ReformulationEnv.trial_all = trial_all  # type: ignore[method-assign]
    if not (torch.equal(terms, full_terms) and torch.equal(weights, full_weights)):
        raise SystemExit("the oracle's rewrites differ between the two readings")
    common.write_json(args.json, {
        "machine": common.machine(device), "settings": {"config": args.config, "data_dir": args.data_dir,
                                                        "split": args.split, "queries": len(qs),
                                                        "max_steps": steps},
        "num_docs": ws.retriever.index.num_docs, "oracle_kernel_s": round(kernel_s, 2),
        "oracle_every_posting_s": round(full_s, 2), "speedup": round(full_s / kernel_s, 2), "equal": True})


if __name__ == "__main__":
    main()
