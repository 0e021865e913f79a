"""Scale: index build, search (ours vs bm25s) and training (rollout, PPO update) against corpus size.

Corpus: per size, a seeded synthetic BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv): a Zipfian
vocabulary (``--vocab`` words, exponent ``--zipf``; the 33 stopwords are the most frequent words, as in English),
log-normal document lengths (mean ``--doc-len`` tokens), ``--non-ascii`` of the documents carrying one en dash
(so they take the analyzer's regex path, as a real corpus's accented names and typography do), and queries of three
mid-frequency words drawn from one document each, judged relevant to that document. Real BEIR folders are points of
the same run (``--real DIR[,DIR...]``), or the only one (``--data-dir``). For each collection, three subprocesses,
so each peak RSS (Linux: ``VmHWM``, the process's own high-water mark) is its own:

* ``ours``:    load the collection, ``Retriever.build`` (stream → forward index → BM25 CSC), batched top-100
  search of the search queries; the index is then saved for the rollout process;
* ``bm25s``:   load the same collection, ``bm25s.tokenize`` + ``BM25.index`` (the same analyzer: lowercase, the
  same pattern and stopwords) on the list of document texts, ``retrieve`` top-100 single-thread;
* ``rollout``: training's two phases on a ``Workspace`` (the saved index memory-mapped), with candidates mined for
  the train queries: an untrained agent's batched rollout (``benchmarks/rollout.py``'s ``run_episodes``, B =
  ``--batch``: episodes/s, steps/s and seconds per step), then ``ppo_update`` over a buffer that ``rollout.collect``
  fills with ``training.episodes_per_update`` episodes, B at a time, as training does (samples/s, the config's
  minibatch size and epochs, best of ``--ppo-repeats``, as ``benchmarks/ppo_update.py`` fp32). The work of a step
  is the chosen term's postings (merged into the episode's top k), whatever the corpus size: from that buffer,
  the postings added per step (STOP steps add none) and the query's own postings per episode (its first scores,
  written into its lane at reset). Its embeddings are seeded random vectors per text (their values do not change
  the cost of a step; fitting LSA on millions of documents is not what is measured here).

Search queries: the test split's, else dev's, else train's (WikiCAR holds back its test split), at most
``--max-search-queries`` of them (a seeded sample). Train queries for mining and training: at most
``--max-train-queries`` (a seeded sample: WikiCAR has 273k).

Build time excludes loading the collection (both sides load it the same way); peak RSS includes it, and
``rss_loaded`` is the RSS right after loading. Search also reports whether ours and bm25s rank the same
documents (up to ties).

    python benchmarks/scale.py --threads 1 --real ../shared/datasets/scifact,/work/data/wikicar-plain --json benchmarks/results/scale.json
    python benchmarks/scale.py --sizes 5000000 --no-bm25s --json benchmarks/results/scale_5m.json
    python benchmarks/scale.py --data-dir ../shared/datasets/scifact        # that collection only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as common  # first: adaptive_ir keeps JAX, which bm25s calls on import, off the GPU
import numpy as np

from adaptive_ir.data.collection import sample_split
from adaptive_ir.data.synthetic import SyntheticSettings, write_synthetic_beir

DEFAULT_SIZES = "10000,100000,1000000"
TOP_K = 100
SEARCH_SPLITS = ("test", "dev", "train")
"""The split whose queries are searched: the first one present (WikiCAR holds back its test split)."""


# ---------------------------------------------------------------------------------------------- workers
def _rss() -> int | None:
    """Current resident set size in bytes (Linux), else None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def _peak_rss() -> int:
    """This process's peak resident set size in bytes: Linux's VmHWM, the high-water mark of its own memory (its
    ``ru_maxrss`` would also count the parent's RSS at the fork: a worker started by a parent that had generated a
    1M-document corpus reported the parent's peak); ``ru_maxrss`` elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def search_queries(collection, n: int | None, seed: int) -> tuple[str, list[str]]:
    """(split, texts) of the queries both engines search: see ``SEARCH_SPLITS``, at most ``n`` of them."""
    split = next(s for s in SEARCH_SPLITS if s in collection.queries)
    _, texts, _ = sample_split(collection, split, n, seed).split(split)
    return split, texts


def worker_ours(args) -> dict:
    from adaptive_ir.retrieval.retriever import Retriever, index_folder

    collection = common.load_collection(args.data_dir)
    out = {"rss_loaded": _rss(), "num_docs": collection.num_docs}
    t0 = time.perf_counter()
    retriever = Retriever.build(collection, progress=False)
    out["build_s"] = time.perf_counter() - t0
    out["peak_rss_build"] = _peak_rss()
    out["search_split"], texts = search_queries(collection, args.max_search_queries, args.seed)
    queries = [q for q in retriever.encode(texts) if q]
    retriever.search(queries[:1], k=TOP_K)  # warm-up: first-call set-up is not search
    t0 = time.perf_counter()
    scores, docs = retriever.search(queries, k=TOP_K)
    out["search_s"] = time.perf_counter() - t0
    out["queries_per_s"] = len(queries) / out["search_s"]
    out["search_queries"] = len(queries)
    out["peak_rss_build_search"] = _peak_rss()
    out.update(vocab_size=len(retriever.vocab), postings=retriever.corpus.num_postings,
               index_bytes=sum(a.nbytes for a in (retriever.corpus.terms, retriever.corpus.tf, retriever.corpus.indptr,
                                                  retriever.corpus.doc_len))
               + sum(t.numel() * t.element_size() for t in (retriever.index.data, retriever.index.indices,
                                                            retriever.index.indptr)))
    np.savez(Path(args.out_dir) / "ours_topk.npz", scores=scores, docs=docs)
    t0 = time.perf_counter()
    retriever.save(index_folder(args.cache_dir, retriever.corpus_sha256))
    out["save_s"] = time.perf_counter() - t0
    return out


def worker_bm25s(args) -> dict:
    import bm25s

    collection = common.load_collection(args.data_dir)
    out = {"rss_loaded": _rss(), "num_docs": collection.num_docs}
    t0 = time.perf_counter()
    # bm25s.tokenize iterates its input: it gets the documents streamed, as our build does
    tokens = bm25s.tokenize((t for chunk in collection.iter_doc_texts() for t in chunk), stopwords="en",
                            show_progress=False)
    out["tokenize_s"] = time.perf_counter() - t0
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(tokens, show_progress=False)
    out["build_s"] = time.perf_counter() - t0
    out["peak_rss_build"] = _peak_rss()
    del tokens
    from adaptive_ir.retrieval.analyzer import Analyzer

    analyzer = Analyzer()
    vocab = retriever.vocab_dict
    out["search_split"], texts = search_queries(collection, args.max_search_queries, args.seed)
    queries = [[w for w in analyzer.tokenize(t) if w in vocab] for t in texts]
    queries = [q for q in queries if q]
    k = min(TOP_K, collection.num_docs)
    retriever.retrieve(queries[:1], k=k, n_threads=1, show_progress=False)  # warm-up, as for ours
    t0 = time.perf_counter()
    docs, scores = retriever.retrieve(queries, k=k, n_threads=1, show_progress=False)
    out["search_s"] = time.perf_counter() - t0
    out["queries_per_s"] = len(queries) / out["search_s"]
    out["search_queries"] = len(queries)
    out["peak_rss_build_search"] = _peak_rss()
    np.savez(Path(args.out_dir) / "bm25s_topk.npz", scores=scores, docs=docs)
    return out


class _RandomEmbedder:
    """A seeded random unit vector per text: what the rollout costs does not depend on the values."""

    def __init__(self, dim: int):
        self.dim, self.identity = dim, {"provider": "random", "dim": dim}
        self.cache_key = self.identity

    def encode(self, texts: list[str]) -> np.ndarray:
        import zlib

        out = np.stack([np.random.default_rng(zlib.crc32(t.encode())).standard_normal(self.dim) for t in texts]) \
            if texts else np.zeros((0, self.dim))
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def worker_rollout(args) -> dict:
    import torch
    from rollout import run_episodes

    import adaptive_ir.rl.workspace as workspace_module
    from adaptive_ir.common.amp import AmpContext
    from adaptive_ir.rl.factory import build_agent, make_env

    device = common.setup(args)
    workspace_module.make_embedder = lambda kind, path, corpus, analyzer, dim, *a, **k: _RandomEmbedder(dim)
    collection = sample_split(common.load_collection(args.data_dir), "train", args.max_train_queries, args.seed)
    out = {"rss_loaded": _rss()}
    t0 = time.perf_counter()
    # candidates cached (in the cache folder, removed after the row): the split below reads what is mined here
    ws = common.workspace(args, device, collection=collection, **{"embeddings.cache_dir": args.cache_dir,
                                                                   "candidate_mining.cache_enabled": "true"})
    out["workspace_s"] = time.perf_counter() - t0  # hash the corpus, memory-map the saved index
    _, texts, _ = ws.collection.split("train")
    terms = ws.retriever.encode(texts)
    t0 = time.perf_counter()
    ws.candidates("train", texts, terms)
    out["mining_s"] = time.perf_counter() - t0
    out["mining_queries_per_s"] = len(texts) / out["mining_s"]
    qs, tables = ws.split("train")
    torch.manual_seed(args.seed)
    agent = build_agent(ws.cfg, ws, device)
    agent.use_tables(tables)
    amp = AmpContext(device, ws.cfg.training.use_amp, ws.cfg.training.amp_dtype)
    order = torch.randperm(len(qs), generator=torch.Generator().manual_seed(args.seed))
    env = make_env(ws.cfg, ws, qs)
    run = run_episodes(agent, amp, qs, env, order, args.batch, args.episodes, args.seed)
    out.update(episodes_per_s=run["episodes_per_s"], steps_per_s=run["steps_per_s"],
               seconds_per_step=run["seconds"] / run["steps"], mean_length=run["mean_length"], B=args.batch,
               episodes=run["episodes"], train_queries=len(qs), k=env.k, peak_rss_rollout=_peak_rss())
    out["ppo"] = ppo_throughput(agent, amp, qs, env, ws.cfg.training, order, args)
    out.update(out["ppo"].pop("work"), ppo_samples_per_s=out["ppo"]["samples_per_s"],
               lanes_bytes=env.lanes.numel() * env.lanes.element_size(), peak_rss=_peak_rss())
    return out


def ppo_throughput(agent, amp, qs, env, tc, order, args) -> dict:
    """PPO update samples/s over a buffer that ``collect`` fills with ``tc.episodes_per_update`` episodes (B at a
    time, into its columns, as training does); ``work``: what the steps of that buffer added, from its actions."""
    import torch

    from adaptive_ir.rl.buffer import RolloutBuffer, compute_gae
    from adaptive_ir.rl.ppo import PPOSettings, make_optimizer, ppo_update
    from adaptive_ir.rl.rollout import collect

    device = qs.terms.device
    b = min(args.batch, tc.episodes_per_update)
    rounds = math.ceil(tc.episodes_per_update / b)
    buf = RolloutBuffer(env.max_steps, rounds * b, qs.max_candidates, device)
    gen = torch.Generator(device).manual_seed(args.seed)
    qidx = order[torch.arange(rounds * b) % len(order)]
    lengths = [collect(agent, amp, qs, env, buf, qidx[r * b:(r + 1) * b], r * b, gen)["length"].sum()
               for r in range(rounds)]
    transitions = int(torch.stack(lengths).sum())
    adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, tc.gamma, tc.gae_lambda)
    settings = PPOSettings(tc.clip_epsilon, tc.value_loss_coef, tc.entropy_coef, tc.max_grad_norm, tc.ppo_epochs,
                           tc.batch_size, None)  # no KL early stop: every update does the same work
    optimizer = make_optimizer(agent.parameters(), tc.learning_rate)

    def update() -> dict:
        return ppo_update(agent, optimizer, amp, buf, qs, adv, ret, settings, gen, transitions)

    update()  # warm-up (kernels, Adam state)
    best = float("inf")
    for _ in range(args.ppo_repeats):
        t0 = time.perf_counter()
        stats = update()
        best = min(best, time.perf_counter() - t0)
    samples = stats["samples"] * tc.ppo_epochs

    # the work of the buffer's steps: each expanding step adds its term's postings, STOP adds none
    index = env.index
    df = index.indptr[1:] - index.indptr[:-1]  # the padding id (vocab size) has none
    expand = buf.alive & (buf.actions < env.stop)
    chosen = qs.cand_terms[buf.qidx[expand], torch.div(buf.actions[expand], env.L, rounding_mode="floor")]
    query_postings = float(df[qs.terms[buf.qidx[0]]].sum())  # written into the lanes at reset, cleared after
    work = {"postings_per_step": float(df[chosen].sum()) / transitions,
            "query_postings_per_step": query_postings / transitions,
            "query_postings_per_episode": query_postings / (rounds * b),
            "expanding_fraction": float(expand.sum()) / transitions}
    return {"samples_per_s": samples / best, "seconds": best, "samples": samples, "episodes": rounds * b,
            "transitions": transitions, "minibatch_size": tc.batch_size, "ppo_epochs": tc.ppo_epochs,
            "repeats": args.ppo_repeats, "work": work}


WORKERS = {"ours": worker_ours, "bm25s": worker_bm25s, "rollout": worker_rollout}


def run_worker(kind: str, data_dir: Path, cache_dir: Path, out_dir: Path, args) -> dict:
    """One measurement in a fresh interpreter; its JSON result."""
    result = out_dir / f"{kind}.json"
    cmd = [sys.executable, __file__, "--worker", kind, "--data-dir", str(data_dir), "--cache-dir", str(cache_dir),
           "--out-dir", str(out_dir), "--json", str(result), "--config", args.config, "--device", args.device,
           "--seed", str(args.seed), "--batch", str(args.batch), "--episodes", str(args.episodes),
           "--ppo-repeats", str(args.ppo_repeats), "--max-train-queries", str(args.max_train_queries),
           "--max-search-queries", str(args.max_search_queries)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and kind == "bm25s":  # e.g. killed for memory on a big corpus: a result too
        print(f"bm25s failed on {data_dir} (exit {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        return {"error": f"exit {proc.returncode}", "process_wall_s": time.perf_counter() - t0}
    if proc.returncode != 0:
        raise SystemExit(f"{kind} worker failed on {data_dir}:\n{proc.stderr[-4000:]}")
    out = json.loads(result.read_text())
    out["process_wall_s"] = time.perf_counter() - t0
    return out


def measure(data_dir: Path, args, work: Path) -> dict:
    cache, out = work / "cache", work / "out"
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    row = {kind: run_worker(kind, data_dir, cache, out, args) for kind in ("ours", "bm25s", "rollout")
           if kind != "bm25s" or not args.no_bm25s}
    row.setdefault("bm25s", {"error": "not run (--no-bm25s)"})
    row["num_docs"] = row["ours"]["num_docs"]
    shutil.rmtree(cache, ignore_errors=True)
    o, b = row["ours"], row["bm25s"]
    if "error" in b:
        return row
    ours, ref = (dict(np.load(out / f"{k}_topk.npz")) for k in ("ours", "bm25s"))
    row["topk_identical"] = common.same_topk(ours["docs"], ours["scores"], ref["docs"], ref["scores"])[0]
    row["ratio"] = {"build_time": o["build_s"] / b["build_s"],
                    "peak_rss_build_search": o["peak_rss_build_search"] / b["peak_rss_build"],
                    "search_queries_per_s": o["queries_per_s"] / b["queries_per_s"]}
    row["goals"] = {"peak_rss_le_bm25s": o["peak_rss_build_search"] <= b["peak_rss_build"],
                    "build_time_le_bm25s": o["build_s"] <= b["build_s"]}
    return row


def touched(row: dict) -> float:
    """Postings a rollout step touches: the chosen term's, and the query's own (written into the lane at reset,
    cleared at the next), per step."""
    return row["rollout"]["postings_per_step"] + row["rollout"]["query_postings_per_step"]


def step_cost_fit(rows: list[dict]) -> dict | None:
    """Least-squares µs per rollout step = fixed + per posting × postings touched, over every row (None with fewer
    than two distinct posting counts)."""
    x = np.array([touched(r) for r in rows])
    if len(set(x.tolist())) < 2:
        return None
    slope, intercept = np.polyfit(x, [r["rollout"]["seconds_per_step"] * 1e6 for r in rows], 1)
    return {"us_fixed": float(intercept), "ns_per_posting": float(slope * 1e3)}


def plot(rows: list[dict], args, name: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    synthetic = [r for r in rows if r["kind"] == "synthetic"]
    real = [r for r in rows if r["kind"] == "real"]

    def series(ax, get, style: str, label: str, color: str, side: str | None = None) -> None:
        """The synthetic sizes as a line, each real collection as a labelled point of the same colour."""
        syn, pts = ([r for r in rs if side is None or "error" not in r[side]] for rs in (synthetic, real))
        ax.plot([r["num_docs"] for r in syn], [get(r) for r in syn], style, color=color, label=label)
        for r in pts:
            ax.plot(r["num_docs"], get(r), style[0], color=color, mfc="none", ms=9, mew=1.6)
            ax.annotate(r["corpus"], (r["num_docs"], get(r)), textcoords="offset points", xytext=(5, 4),
                        fontsize=7, color=color)

    fig, axes = plt.subplots(2, 3, figsize=(15, 8.6))
    (build, rss, search), (train, work, cost) = axes
    for side, style, color, label in (("ours", "o-", "tab:blue", "ours"),
                                      ("bm25s", "s--", "tab:orange", "bm25s (tokenize + index; retrieve 1 thread)")):
        series(build, lambda r, side=side: r[side]["build_s"], style, label, color, side)
        series(rss, lambda r, side=side: r[side]["peak_rss_build_search" if side == "ours" else "peak_rss_build"]
               / 2 ** 30, style, label, color, side)
        series(search, lambda r, side=side: r[side]["queries_per_s"], style, label, color, side)
    build.set(ylabel="build (s)", title="index build time")
    rss.set(ylabel="peak RSS (GiB)", title="peak RSS: ours build + search,\nbm25s tokenize + index")
    search.set(ylabel="queries / s", title="search, top-100 (ours batched, bm25s 1 thread)")
    series(train, lambda r: r["rollout"]["steps_per_s"], "^-", "rollout steps/s", "tab:green")
    series(train, lambda r: r["rollout"]["episodes_per_s"], "v:", "rollout episodes/s", "tab:olive")
    series(train, lambda r: r["rollout"]["ppo_samples_per_s"], "D-", "PPO update samples/s", "tab:purple")
    train.set(ylabel="per second", title=f"training (untrained policy, B={args.batch})")
    series(work, lambda r: r["rollout"]["postings_per_step"], "^-", "added by the step (the chosen term)",
           "tab:green")
    series(work, lambda r: r["rollout"]["query_postings_per_step"], "o:", "the query's own, at reset (per step)",
           "tab:gray")
    work.set(ylabel="postings per step", title="postings a rollout step touches")
    for ax in (build, rss, search, train, work):
        ax.set(xscale="log", yscale="log", xlabel="documents")
        ax.legend(fontsize=7)
    for r in rows:
        x, y = touched(r), r["rollout"]["seconds_per_step"] * 1e6
        cost.plot(x, y, "^" if r["kind"] == "synthetic" else "o", color="tab:green", ms=8,
                  mfc=None if r["kind"] == "synthetic" else "none")
        # synthetic labels below right, real ones above left: a real point may sit on a synthetic one
        cost.annotate(f"{r['corpus']}\n{r['num_docs']:,} docs", (x, y), textcoords="offset points", fontsize=7,
                      **({"xytext": (5, -14)} if r["kind"] == "synthetic" else {"xytext": (-5, 5), "ha": "right"}))
    fit = step_cost_fit(rows)
    if fit:
        xs = np.geomspace(min(map(touched, rows)), max(map(touched, rows)), 50)
        cost.plot(xs, fit["us_fixed"] + fit["ns_per_posting"] * 1e-3 * xs, "k:", lw=1,
                  label=f"fit: {fit['us_fixed']:.0f} µs + {fit['ns_per_posting']:.0f} ns × postings")
        cost.legend(fontsize=7)
    cost.margins(0.15)
    cost.set(xscale="log", yscale="log", xlabel="postings touched per step (added + the query's own)",
             ylabel="µs per rollout step", title=f"rollout step cost against its postings (B={args.batch})")
    fig.suptitle("Cost against corpus size (synthetic: line; real collections: labelled points)")
    return common.save_plot(fig, args, name)


def main() -> None:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated document counts of synthetic corpora")
    p.add_argument("--real", default="", metavar="DIR[,DIR...]",
                   help="BEIR folders measured as real points beside the synthetic sizes (e.g. "
                   "../shared/datasets/scifact)")
    p.add_argument("--vocab", type=int, default=1_000_000, help="synthetic vocabulary size")
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of word frequencies")
    p.add_argument("--doc-len", type=float, default=100.0, help="mean document length in tokens")
    p.add_argument("--non-ascii", type=float, default=0.25, help="fraction of documents with a non-ASCII character")
    p.add_argument("--train-queries", type=int, default=1000, help="train queries of a synthetic corpus")
    p.add_argument("--test-queries", type=int, default=500, help="test queries of a synthetic corpus")
    p.add_argument("--max-train-queries", type=int, default=3000,
                   help="train queries mined and rolled out, at most (a seeded sample)")
    p.add_argument("--max-search-queries", type=int, default=1000,
                   help="queries searched, at most (a seeded sample of the test split, else dev, else train)")
    p.add_argument("--batch", type=int, default=128, help="episodes in lockstep for the rollout measurement")
    p.add_argument("--episodes", type=int, default=2048)
    p.add_argument("--ppo-repeats", type=int, default=3, help="timed PPO updates (the best counts)")
    p.add_argument("--no-bm25s", action="store_true", help="measure ours only (bm25s needs ~4 GiB per million "
                   "documents: a 5M corpus does not fit a 24 GiB machine)")
    p.add_argument("--work-dir", default=None, help="where corpora and indexes go (default: a temporary folder, "
                   "removed at the end); corpora found there with the same settings are reused")
    p.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", help=argparse.SUPPRESS)
    p.add_argument("--out-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        common.write_json(args.json, WORKERS[args.worker](args))
        return
    if args.quick:
        args.sizes, args.vocab, args.train_queries, args.test_queries = "3000", 20_000, 64, 32
        args.batch, args.episodes, args.ppo_repeats = 16, 32, 1
    real = [d for d in args.real.split(",") if d]
    for folder in real:
        if not Path(folder).is_dir():
            p.error(f"--real {folder}: not a folder; give BEIR folders (corpus.jsonl, queries.jsonl, qrels/*.tsv), "
                    "comma-separated")
    sizes = [] if args.data_dir else [int(s) for s in args.sizes.split(",") if s]
    real = ([args.data_dir] if args.data_dir else []) + real
    device = common.setup(args)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="adaptive-ir-scale-"))
    rows = []
    try:
        for size in sizes:
            t0 = time.perf_counter()
            folder = write_synthetic_beir(work / f"synthetic-{size}", SyntheticSettings(
                size, args.vocab, args.zipf, args.doc_len, args.non_ascii, args.train_queries, args.test_queries,
                args.seed))
            rows.append({"corpus": f"synthetic-{size}", "kind": "synthetic", "generate_s": time.perf_counter() - t0,
                         **measure(folder, args, work)})
            report(rows[-1])
        for folder in real:
            rows.append({"corpus": Path(folder).resolve().name, "kind": "real", "path": str(folder),
                         **measure(Path(folder), args, work)})
            report(rows[-1])
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    payload = {"benchmark": "scale", "machine": common.machine(device),
               "settings": {"sizes": sizes, "real": real, "vocab": args.vocab, "zipf": args.zipf,
                            "doc_len": args.doc_len, "non_ascii": args.non_ascii,
                            "train_queries": args.train_queries, "test_queries": args.test_queries,
                            "max_train_queries": args.max_train_queries,
                            "max_search_queries": args.max_search_queries, "config": args.config, "B": args.batch,
                            "episodes": args.episodes, "ppo_repeats": args.ppo_repeats, "k": TOP_K,
                            "quick": args.quick},
               "rows": rows, "step_cost_fit": step_cost_fit(rows)}
    payload["plot"] = plot(rows, args, "scale")
    common.write_json(args.json, payload)


def report(row: dict) -> None:
    """One line per collection as it finishes (the run is long)."""
    o, b, r = row["ours"], row["bm25s"], row["rollout"]
    print(f"{row['corpus']:>20} {row['num_docs']:>9,} docs  build {o['build_s']:7.1f} s vs bm25s "
          f"{b.get('build_s', float('nan')):7.1f} s   peak RSS {o['peak_rss_build_search'] / 2**30:5.2f} vs "
          f"{b.get('peak_rss_build', float('nan')) / 2**30:5.2f} GiB   search {o['queries_per_s']:8.0f} vs "
          f"{b.get('queries_per_s', float('nan')):6.0f} q/s   rollout {r['episodes_per_s']:6.0f} episodes/s "
          f"{r['steps_per_s']:6.0f} steps/s ({touched(row):8.0f} postings/step)   PPO "
          f"{r['ppo_samples_per_s']:6.0f} samples/s   rollout peak RSS {r['peak_rss'] / 2**30:5.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
