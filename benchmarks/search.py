"""Search alone: queries/s of our batched BM25 index vs rank-bm25 and bm25s, and whether their top-k agree.

* ours       — ``BM25Index.search`` over all queries in one call (CPU; and CUDA when present);
* rank_bm25  — ``BM25Okapi.get_scores`` per query + ``argpartition`` top-k (the per-query Python loop the
  earlier project ran at every step);
* bm25s      — ``BM25.retrieve`` with ``n_threads=1`` (single) and all CPUs (all_threads).

Every engine gets the same term ids (our analyzer's), so the comparison is of the search, not of tokenizers.
Our index is built with ``idf='okapi'`` to be compared with rank-bm25 and with ``idf='lucene'`` (the engine's
default) to be compared with bm25s; ``topk_identical`` is true when every query's top-k agrees with both, up to
the order of documents with equal scores.

    python benchmarks/search.py --data-dir ../shared/datasets/scifact --json benchmarks/results/search.json
"""

from __future__ import annotations

import os
import time

import _common as common
import bm25s  # after adaptive_ir, which keeps JAX (bm25s calls it on import) off the GPU
import numpy as np
import torch
from rank_bm25 import BM25Okapi

from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms
from adaptive_ir.retrieval.index import BM25Index


def timed(fn, repeats: int) -> tuple[float, object]:
    """Best-of-``repeats`` seconds of ``fn()`` (the least disturbed by other work on the machine) and its result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--split", default="test")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rank-bm25-queries", type=int, default=300, help="rank-bm25 is timed on at most this many")
    args = p.parse_args()
    device = common.setup(args)
    collection = common.load_collection(args.data_dir)
    _, texts, _ = collection.split(args.split)
    if args.quick:
        texts, args.repeats, args.rank_bm25_queries = texts[:8], 1, 8
    analyzer = Analyzer()
    corpus = CorpusTerms.build(collection.iter_doc_texts(), analyzer, collection.num_docs)
    queries = [corpus.vocab.encode(analyzer.tokenize(t)) for t in texts]
    queries = [q for q in queries if q]  # an empty query ranks nothing; rank-bm25 and bm25s disagree on it
    k = min(args.k, corpus.num_docs)

    lucene = BM25Index.build(corpus, idf="lucene")
    okapi = BM25Index.build(corpus, idf="okapi")
    results, figures = {}, {}

    # ours, one batched call per device
    for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() and device.type == "cuda" else []):
        idx_l, idx_o = lucene.to(dev), okapi.to(dev)
        ids, _ = idx_l.pad(queries)

        def ours(index=idx_l, ids=ids, dev=dev):
            out = index.search(ids, None, k=k)
            common.sync(torch.device(dev))
            return out

        ours(), ours(idx_o)  # warm-up
        sec, (s, d) = timed(ours, args.repeats)
        figures[f"ours_{dev}"] = len(queries) / sec
        results[f"ours_lucene_{dev}"] = (d.cpu().numpy(), s.cpu().numpy())
        s, d = ours(idx_o)
        results[f"ours_okapi_{dev}"] = (d.cpu().numpy(), s.cpu().numpy())
    lucene.to("cpu"), okapi.to("cpu")

    # rank-bm25: tokens are our term ids (as strings), so the documents and queries are exactly ours
    tokens = [[str(t) for t in doc] for doc in corpus.doc_token_ids()]
    t0 = time.perf_counter()
    rb = BM25Okapi(tokens)
    rank_build = time.perf_counter() - t0
    rb_queries = [[str(t) for t in q] for q in queries[: args.rank_bm25_queries]]

    def rank_bm25():
        docs, scores = [], []
        for q in rb_queries:
            sc = rb.get_scores(q)
            top = np.argpartition(-sc, k - 1)[:k]
            top = top[np.argsort(-sc[top], kind="stable")]
            docs.append(top)
            scores.append(sc[top].astype(np.float32))
        return np.array(docs), np.array(scores)

    sec, (rd, rs) = timed(rank_bm25, args.repeats)
    figures["rank_bm25"] = len(rb_queries) / sec

    # bm25s on the same token ids
    bm = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    bm.index((corpus.doc_token_ids(), {str(i): i for i in range(len(corpus.vocab))}), show_progress=False)
    str_queries = [[str(t) for t in q] for q in queries]
    threads = {"single": 1, "all_threads": os.cpu_count() or 1}
    for name, n in threads.items():
        def run_bm25s(n=n):
            return bm.retrieve(str_queries, k=k, n_threads=n, show_progress=False)

        run_bm25s()
        sec, (bd, bs) = timed(run_bm25s, args.repeats)
        figures[f"bm25s_{name}"] = len(queries) / sec

    ok_rank, exact_rank = common.same_topk(results["ours_okapi_cpu"][0][: len(rb_queries)],
                                    results["ours_okapi_cpu"][1][: len(rb_queries)], rd, rs)
    ok_bm25s, exact_bm25s = common.same_topk(*results["ours_lucene_cpu"], bd, bs)
    agree = {"rank_bm25": ok_rank, "bm25s": ok_bm25s}
    if "ours_lucene_cuda" in results:
        agree["cuda_vs_cpu"], _ = common.same_topk(*results["ours_lucene_cuda"], *results["ours_lucene_cpu"])

    ours_cpu = figures["ours_cpu"]
    payload = {
        "benchmark": "search", "machine": common.machine(device),
        "settings": {"collection": collection.name, "num_docs": corpus.num_docs, "vocab_size": len(corpus.vocab),
                     "split": args.split, "queries": len(queries), "rank_bm25_queries": len(rb_queries),
                     "mean_query_terms": float(np.mean([len(q) for q in queries])), "k": k,
                     "repeats": args.repeats, "bm25s": bm25s.__version__, "bm25s_all_threads": threads["all_threads"],
                     "rank_bm25_build_s": rank_build, "quick": args.quick},
        "queries_per_s": {"ours": ours_cpu, "rank_bm25": figures["rank_bm25"], "bm25s": figures["bm25s_single"],
                          "bm25s_threads": {"single": figures["bm25s_single"],
                                            "all_threads": figures["bm25s_all_threads"]},
                          **({"ours_cuda": figures["ours_cuda"]} if "ours_cuda" in figures else {})},
        "speedup": {"vs_rank_bm25": ours_cpu / figures["rank_bm25"], "vs_bm25s_single": ours_cpu / figures["bm25s_single"],
                    "vs_bm25s_all_threads": ours_cpu / figures["bm25s_all_threads"]},
        "topk_identical": all(agree.values()),
        "topk_agreement": agree,
        "topk_exact_fraction": {"rank_bm25": exact_rank, "bm25s": exact_bm25s},
    }
    payload["goals"] = {"ge_150x_rank_bm25": payload["speedup"]["vs_rank_bm25"] >= 150,
                        "ge_5x_bm25s_single": payload["speedup"]["vs_bm25s_single"] >= 5}

    fig, ax = common.figure()
    names = list(figures)
    ax.barh(names, [figures[n] for n in names], color=["tab:blue" if n.startswith("ours") else "tab:gray"
                                                       for n in names])
    ax.set(xscale="log", xlabel="queries / s (log)", title=f"BM25 top-{k} search — {collection.name}, "
           f"{len(queries)} queries")
    payload["plot"] = common.save_plot(fig, args, "search")
    common.write_json(args.json, payload)


if __name__ == "__main__":
    main()
