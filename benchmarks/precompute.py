"""Precompute: what a training run does before its first update, phase by phase, from empty caches.

Load the collection, build the index, make the embedding model (LSA: fit on the corpus), then for train and for
the whole dev split: mine candidates (the feedback search timed apart from the rest, as thread time) and embed the
queries and candidate terms. Reports each phase's wall time (``Workspace.phases``, the figures a run logs and
writes to run.json) and the peak RSS (``ru_maxrss``). The caches go to a temporary folder, removed at the end,
unless ``--cache-dir`` names one to keep (a second run on it measures cache hits).

    python benchmarks/precompute.py --config cranfield --data-dir path/to/wikicar --threads 1 \\
        --set candidate_mining.feedback=bm25 --set candidate_mining.stem_variants=false --set embeddings.type=lsa \\
        --json benchmarks/results/precompute_wikicar.json
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time

import _common as common

from adaptive_ir.config import load_config
from adaptive_ir.rl.workspace import Workspace


def main() -> None:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--cache-dir", default=None, help="keep the caches here (default: a temporary folder)")
    p.add_argument("--max-train-queries", type=int, default=None, help="mine only the first N train queries")
    args = p.parse_args()
    device = common.setup(args)
    out = tempfile.mkdtemp(prefix="adaptive-ir-precompute-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    sets = {"training.output_dir": out, "embeddings.cache_dir": args.cache_dir or f"{out}/cache",
            **({"data.dataset_type": "beir", "data.data_dir": args.data_dir} if args.data_dir else {}),
            **dict(item.split("=", 1) for item in args.set)}
    max_train = 32 if args.quick else args.max_train_queries
    if max_train:
        sets["data.max_train_queries"] = str(max_train)
    cfg = load_config(args.config, sets)
    start = time.perf_counter()
    ws = Workspace(cfg, device, progress=False, splits=("train", "dev"))
    splits = {}
    for split in ("train", "dev"):
        if split not in ws.collection.splits:
            continue
        before = ws.miner.search_seconds
        qs, tables = ws.split(split, cfg.data.max_train_queries if split == "train" else None,
                              judged_only=split == "train")
        splits[split] = {"queries": len(qs), "candidate_terms": len(tables.term_texts),
                         "feedback_search_thread_s": round(ws.miner.search_seconds - before, 4)}
    summary = ws.phases.summary()
    payload = {
        "benchmark": "precompute", "machine": common.machine(device),
        "settings": {"config": args.config, "data_dir": args.data_dir, "set": args.set, "quick": args.quick,
                     "cache_dir": args.cache_dir, "max_train_queries": max_train,
                     "num_docs": ws.collection.num_docs, "num_workers": cfg.system.num_workers,
                     "embeddings": cfg.embeddings.type, "feedback": cfg.candidate_mining.feedback},
        "total_s": round(time.perf_counter() - start, 2), **summary, "splits": splits,
    }
    fig, ax = common.figure()
    names = list(summary["phases_s"])
    ax.barh(names, [summary["phases_s"][n] for n in names])
    ax.invert_yaxis()
    ax.set(xlabel="wall seconds", title=f"Precompute — {ws.collection.name}, {ws.collection.num_docs:,} documents "
                                        f"(peak RSS {summary['peak_rss_gib']:.2f} GiB)")
    payload["plot"] = common.save_plot(fig, args, "precompute")
    common.write_json(args.json, payload)


if __name__ == "__main__":
    main()
