"""The effect preview's cost (``candidate_mining.effect_preview``): the candidate miner on a split's queries, with
``kernels.effect_preview`` reading every posting of each candidate against its bounded lookups (a common term,
whose bound is below the query's k-th score, looked up in the query's best documents only), the numbers checked
equal; the rest of mining (the feedback search, the features) is the same in both.

    python benchmarks/effect_preview.py --config wikicar-anserini --data-dir <folder> --queries 1000 \\
        --set embeddings.cache_dir=<a run's cache: its index is mapped, not built> --json <out>.json

Both timings come from one process, bounded first; ``--threads`` sets torch's threads, the miner's come from
``system.num_workers``.
"""

from __future__ import annotations

import time

import _common as common
import numpy as np


def main() -> None:
    p = common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=1000, help="queries of the split mined (the first ones)")
    p.add_argument("--split", default="train")
    args = p.parse_args()
    device = common.setup(args)
    ws = common.workspace(args, device)
    if ws.miner.preview_levels is None:
        raise SystemExit(f"{args.config}: candidate_mining.effect_preview is off; --set it to true")
    _, texts, _ = ws.collection.split(args.split)
    n = 64 if args.quick else args.queries
    terms = [t for t in ws.retriever.encode(texts[:n]) if t]
    indptr, indices, data, maxes = ws.miner._index_arrays()
    ws.miner.mine(terms[:8])  # compiled kernels load outside the timing
    t0 = time.perf_counter()
    bounded = ws.miner.mine(terms)
    t1 = time.perf_counter()
    ws.miner._host_index = (indptr, indices, data, np.full_like(maxes, np.inf))  # no bound holds: every posting
    full = ws.miner.mine(terms)
    t2 = time.perf_counter()
    if not np.array_equal(bounded.features, full.features) or not np.array_equal(bounded.terms, full.terms):
        raise SystemExit("the bounded preview differs from reading every posting")
    common.write_json(args.json, {
        "machine": common.machine(device), "settings": {"config": args.config, "data_dir": args.data_dir,
                                                        "split": args.split, "queries": len(terms)},
        "num_docs": ws.retriever.index.num_docs, "mine_bounded_s": round(t1 - t0, 2),
        "mine_every_posting_s": round(t2 - t1, 2), "speedup": round((t2 - t1) / (t1 - t0), 2), "equal": True})


if __name__ == "__main__":
    main()
