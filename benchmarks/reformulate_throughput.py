"""Rewrites per second of a whole query set, the way ``adaptive-ir reformulate --queries FILE --output OUT`` runs it:
the file read as a stream, ``Reformulator.reformulate_file`` in batches, JSON lines written under a temporary name;
after the collection's caches exist (index, document vectors of the semantic feedback: the policy is loaded, and
one batch reformulated, before the clock starts).

Queries: every query of the collection's ``queries.jsonl`` (SciFact: 1,109), repeated until ``--queries`` (default
10,000); repetition r > 0 rotates each query's words by r places, so no text is seen twice by an embedding model
and BM25 sees the same bag of words. Reported: queries/s per batch size (with and without ``--top-docs``), the
time per phase of a batch (query analysis, candidate mining, of which the feedback search, embeddings, the RM3
start where the policy has one, the rollout and search, writing), and peak RSS (``ru_maxrss``), sampled after
every batch: peak memory does not grow with the number of queries. ``--words cold`` (the default) times a first
run: the word vectors earlier runs stored in the embedding cache are removed before each timed run; ``--words
warm`` keeps them, after one untimed pass over the same file (a repeated query set: the store's best case).

    python benchmarks/reformulate_throughput.py --policy general-joint --data-dir ../shared/datasets/scifact \\
        --threads 2 --json benchmarks/results/reformulate_throughput.json
    python benchmarks/reformulate_throughput.py ... --profile 2000   # cProfile of 2,000 queries, top functions
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def query_file(data_dir: Path, n: int, folder: Path) -> Path:
    """``n`` queries as ``id<TAB>text`` lines: the collection's queries, then rotated copies."""
    from adaptive_ir.data.lines import read_queries

    base = list(read_queries(data_dir / "queries.jsonl").items())
    path = folder / "queries.tsv"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            r, (qid, text) = divmod(i, len(base))[0], base[i % len(base)]
            words = text.split()
            if r:
                k = r % max(1, len(words))
                words = words[k:] + words[:k]
            f.write(f"{qid}-{r}\t{' '.join(words)}\n")
    return path


def timed_run(ref, path: Path, out: Path, batch_size: int, top_docs: int) -> dict:
    from adaptive_ir.inference.records import write_jsonl

    phases_before = dict(ref.ws.phases.seconds)
    rss: list[float] = []
    count = [0]

    def sample(n: int) -> None:  # peak RSS after every batch
        count[0] += n
        if count[0] % batch_size == 0:
            rss.append(round(rss_mib(), 1))

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    n = write_jsonl(out, ref.reformulate_file(path, top_docs=top_docs, batch_size=batch_size), on_write=sample)
    seconds = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    rss.append(round(rss_mib(), 1))
    phases = {k: round(v - phases_before.get(k, 0.0), 2) for k, v in ref.ws.phases.seconds.items()
              if v - phases_before.get(k, 0.0) > 0.005}
    return {"batch_size": batch_size, "top_docs": top_docs, "queries": n, "seconds": round(seconds, 2),
            "queries_per_s": round(n / seconds, 1),
            "cpu_s": round(cpu_s, 1), "queries_per_cpu_s": round(n / max(cpu_s, 1e-9), 1),
            "load_avg_1min_after": round(os.getloadavg()[0], 2), "phases_s": phases, "peak_rss_mib": rss[-1],
            "peak_rss_mib_after_batches": rss[:: max(1, len(rss) // 10)]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="general-joint")
    ap.add_argument("--data-dir", default="../shared/datasets/scifact")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--batch-sizes", default="256,1024,4096")
    ap.add_argument("--top-docs", default="0,10", help="comma-separated: runs without and with top documents")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", type=int, default=0, help="cProfile this many queries (batch 1024) and print the "
                    "top functions by cumulative time")
    ap.add_argument("--check", type=int, default=256, help="rewrite this many queries from the middle of the set "
                    "again as one fresh batch, without reused word vectors, and count identical rewrites")
    ap.add_argument("--words", choices=("cold", "warm"), default="cold",
                    help="cold: the embedding cache's stored word vectors removed before each timed run (a first "
                    "run); warm: kept, filled by one untimed pass over the same file first (a repeated query set's "
                    "words, the best case of the store)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="apply the policy with this setting (repeatable), as evaluate/reformulate --set do")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if any("=" not in item for item in args.set):
        ap.error("--set takes SECTION.KEY=VALUE")

    import torch

    from adaptive_ir.inference.reformulate import Reformulator

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    ref = Reformulator.from_pretrained(args.policy, args.data_dir, device="cpu",
                                       **dict(item.split("=", 1) for item in args.set))
    load_s = time.perf_counter() - start
    folder = Path(tempfile.mkdtemp(prefix="reformulate-bench-"))
    path = query_file(Path(args.data_dir), args.queries, folder)
    list(ref.reformulate_file(list(zip(["w"] * 64, ["warm up the compiled kernels"] * 64)), top_docs=10))
    store = ref.ws.emb_cache.words_folder
    if args.words == "warm":
        list(ref.reformulate_file(path, batch_size=4096))

    def words_as_asked() -> None:
        if store is not None and args.words == "cold":
            shutil.rmtree(store, ignore_errors=True)

    report = {"policy": args.policy, "settings": args.set, "data_dir": args.data_dir, "queries": args.queries,
              "load_s": round(load_s, 1), "words": args.words,
              "rss_after_load_mib": round(rss_mib(), 1), "runs": []}
    if args.profile:
        small = query_file(Path(args.data_dir), args.profile, Path(tempfile.mkdtemp()))
        prof = cProfile.Profile()
        words_as_asked()
        prof.enable()
        timed_run(ref, small, folder / "profile.jsonl", 1024, 0)
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(40)
        print(s.getvalue())
    for top_docs in [int(x) for x in args.top_docs.split(",")]:
        for bs in [int(x) for x in args.batch_sizes.split(",")]:
            words_as_asked()
            row = timed_run(ref, path, folder / "out.jsonl", bs, top_docs)
            report["runs"].append(row)
            print(json.dumps(row), flush=True)
    if args.check:
        from adaptive_ir.inference.records import read_jsonl

        records = list(read_jsonl(folder / "out.jsonl"))
        mid = records[len(records) // 2: len(records) // 2 + args.check]
        fresh = ref.reformulate([(r["id"], r["text"]) for r in mid], top_docs=0)
        same = sum(a["lucene_query"] == b["lucene_query"] for a, b in zip(mid, fresh))
        report["check"] = {"queries": len(mid), "identical_rewrites": same,
                           "what": "records of the timed run (word vectors reused across batches) against the same "
                                   "queries rewritten as one fresh batch (reformulate)"}
        print(json.dumps(report["check"]), flush=True)
    report["peak_rss_mib"] = round(rss_mib(), 1)
    report["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads":
                         torch.get_num_threads(), "torch": torch.__version__, "load_avg": os.getloadavg()}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
