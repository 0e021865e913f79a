"""Train a static query encoder for semantic feedback: a model2vec model whose vectors live in the re-ranker's
space, so that `candidate_mining.reranker_query_path` encodes the queries without a transformer (documents stay
encoded by the re-ranker, once, into the cache).

    python scripts/distill_query_encoder.py --data-dir /data/wikicar --data-dir ../shared/datasets/nfcorpus \
        --out models/query-encoder

Texts: each collection's train queries (sampled to --queries in all) and word windows of its documents (6–60 words,
--windows per collection, from evenly spaced documents, at most one a document); no judgments are read. Targets:
the re-ranker's vectors of those texts (the packaged all-MiniLM-L6-v2 unless --reranker-path). The student starts
from a static model (--start; default: all-MiniLM-L6-v2 distilled, as `embeddings.type: static` makes it) whose
token table is mapped into the re-ranker's space by least squares; then every token's vector is trained (Adam, loss
1 − cosine, mean pooling as model2vec encodes). Prints the held-out cosine (5 % of the texts) after the map and after
each epoch; writes the folder (float16) to a temporary name and renames it, so an interrupted run leaves nothing a
run would load.

Where the encoder is applied, `candidate_mining.reranker_query_adapt` trains it further on the collection's own
documents at first use.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

import torch

from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.config.schema import DataConfig
from adaptive_ir.data import load_collection
from adaptive_ir.mining.embeddings import StaticEmbedder, distilled_static_model, make_reranker
from adaptive_ir.mining.query_encoder import document_windows, fit_table, save_encoder


def training_texts(data_dirs: list[str], queries: int, windows: int, seed: int) -> list[str]:
    """Train queries of every collection (sampled to ``queries`` in all) and ``windows`` word windows of each one's
    documents, distinct, in a seeded order."""
    rng = random.Random(seed)
    texts: list[str] = []
    pool: list[str] = []
    for d in data_dirs:
        col = load_collection(DataConfig(dataset_type="beir", data_dir=d), seed, splits=("train",))
        pool += col.split("train")[1]
        texts += document_windows(col, min(windows, col.num_docs), rng)  # at most one window a document
    rng.shuffle(pool)
    texts = list(dict.fromkeys(pool[:queries] + texts))
    rng.shuffle(texts)
    return texts


def main(argv: list[str] | None = None) -> list[float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", action="append", required=True, help="a BEIR folder whose train queries and "
                   "documents give the texts (repeatable)")
    p.add_argument("--out", required=True, help="the model2vec folder to write")
    p.add_argument("--reranker-type", choices=["sentence-transformers", "static"], default="sentence-transformers",
                   help="the re-ranker whose space the encoder learns (candidate_mining.reranker_type)")
    p.add_argument("--reranker-path", default=None, help="its folder (candidate_mining.reranker_path); none: the "
                   "packaged all-MiniLM-L6-v2")
    p.add_argument("--start", default=None, help="a model2vec folder to start from; none: all-MiniLM-L6-v2 distilled "
                   "into --cache-dir")
    p.add_argument("--cache-dir", default="runs/cache")
    p.add_argument("--queries", type=int, default=80_000)
    p.add_argument("--windows", type=int, default=40_000)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        start = StaticEmbedder(args.start or distilled_static_model(args.cache_dir), None, key="--start")
        teacher = make_reranker(args.reranker_type, args.reranker_path, args.cache_dir, key="--reranker-path")
        texts = training_texts(args.data_dir, args.queries, args.windows, args.seed)
        print(f"{len(texts)} texts; encoding them with the re-ranker", file=sys.stderr, flush=True)
        table, cosines = fit_table(start.model, texts, teacher.encode(texts), args.epochs, args.lr, args.seed)
    except AdaptiveIRError as e:
        p.exit(2, f"error: {e}\n")
    save_encoder(table, start.model.tokenizer, args.out)
    print(json.dumps({"out": args.out, "texts": len(texts), "held_out_cosine": [round(c, 4) for c in cosines]}))
    return cosines


if __name__ == "__main__":
    main()
