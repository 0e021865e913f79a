"""Static query encoders for semantic feedback (``candidate_mining.reranker_query_path``): a model2vec token table
whose mean-pooled vectors match the re-ranker's, so that no transformer runs per query.

``fit_table`` trains such a table on texts and the re-ranker's vectors of them (``scripts/distill_query_encoder.py``
makes an encoder from train queries and documents); ``adapted_query_encoder`` trains one further on word windows of
the collection it is applied to, at first use, from its documents alone (no queries, no judgments), into the cache.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import torch

from adaptive_ir.common.io import atomic_write_folder, fingerprint
from adaptive_ir.data import Collection

log = logging.getLogger(__name__)

__all__ = ["adapted_query_encoder", "document_windows", "fit_table", "save_encoder"]


def document_windows(collection: Collection, windows: int, rng: random.Random) -> list[str]:
    """``windows`` word windows (6–60 words) of the collection's documents: evenly spaced documents, or, where there
    are fewer documents than windows, each one several times (a fresh window each). Documents under 6 words give
    none."""
    n = collection.num_docs
    at = list(range(0, n, max(1, n // windows)))[:windows] if n >= windows else [i % n for i in range(windows)]
    out = []
    for text in collection.doc_texts_at(at):
        words = text.split()
        if len(words) >= 6:
            k = rng.randint(6, min(60, len(words)))
            start = rng.randint(0, len(words) - k)
            out.append(" ".join(words[start:start + k]))
    return out


def fit_table(start, texts: list[str], targets: np.ndarray, epochs: int, lr: float, seed: int,
              mapped: bool = True) -> tuple[np.ndarray, list[float]]:
    """(token table, held-out cosines) of a static model (``start``, a model2vec ``StaticModel``) trained so that a
    text's mean of its tokens' vectors matches its row of ``targets`` (Adam, loss 1 − cosine, batches of 256).

    With ``mapped`` the start's table is first mapped into the targets' space by least squares (its width may
    differ); without, it is in that space already (an encoder being adapted). The cosines are on 5 % of the texts
    held out: after the map, then after each epoch."""
    torch.manual_seed(seed)
    ids = [x[:512] for x in start.tokenize(texts)]
    keep = [i for i, x in enumerate(ids) if x]  # a text with no known token teaches nothing
    ids, y = [ids[i] for i in keep], torch.tensor(np.asarray(targets, np.float32)[keep])
    order = np.random.default_rng(seed).permutation(len(ids))
    held, train = order[: max(1, len(ids) // 20)], order[max(1, len(ids) // 20):]
    table = np.asarray(start.embedding, np.float32)
    if mapped:
        means = np.stack([table[x].mean(0) for x in ids])
        mapping, *_ = np.linalg.lstsq(means[train], y[train].numpy(), rcond=None)
        table = table @ mapping
    bag = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(table), freeze=False, mode="mean")
    tokens = [torch.tensor(x) for x in ids]

    def batch(rows):
        xs = [tokens[i] for i in rows]
        offsets = torch.tensor([0] + [len(x) for x in xs[:-1]]).cumsum(0)
        return bag(torch.cat(xs), offsets)

    def held_cosine() -> float:
        with torch.no_grad():
            return float(torch.nn.functional.cosine_similarity(batch(held), y[held]).mean())

    cosines = [held_cosine()]
    opt = torch.optim.Adam(bag.parameters(), lr=lr)
    for epoch in range(epochs):
        rows = np.random.default_rng(seed + 1 + epoch).permutation(train)
        for b in range(0, len(rows), 256):
            part = rows[b:b + 256]
            loss = (1 - torch.nn.functional.cosine_similarity(batch(part), y[part])).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        cosines.append(held_cosine())
    return bag.weight.detach().numpy(), cosines


def save_encoder(table: np.ndarray, tokenizer, out: str | Path, replace: bool = True) -> None:
    """A model2vec folder at ``out`` in float16 (half the bytes, vectors within 1e-7 of cosine 1 of float32's),
    written whole or not at all (``common.io.atomic_write_folder``: an existing ``out`` replaced, or kept)."""
    from model2vec import StaticModel

    model = StaticModel(vectors=table.astype(np.float16), tokenizer=tokenizer, normalize=True)
    atomic_write_folder(out, lambda tmp: model.save_pretrained(str(tmp)), replace)


def adapted_query_encoder(encoder, reranker, collection: Collection, corpus_sha256: str, cache_dir: str | Path,
                          windows: int, epochs: int = 4, lr: float = 1e-3, seed: int = 0) -> Path:
    """The folder of ``encoder`` (a ``StaticEmbedder`` in ``reranker``'s space) trained further on ``windows`` word
    windows of ``collection``'s documents with the re-ranker's vectors of them as targets: made once under
    ``cache_dir``, keyed by the encoder's and re-ranker's files, the corpus and these settings. First use costs the
    re-ranker's encoding of the windows and a few epochs over them (SciFact, 20,000 windows: ~2 min on 2 cores)."""
    meta = {"encoder": encoder.cache_key, "reranker": reranker.cache_key, "corpus": corpus_sha256,
            "windows": windows, "epochs": epochs, "lr": lr, "seed": seed}
    folder = Path(cache_dir) / f"query-encoder-{fingerprint(meta)}" / encoder.identity["model"]
    if (folder / "config.json").is_file():
        return folder
    rng = random.Random(seed)
    texts = list(dict.fromkeys(document_windows(collection, windows, rng)))
    rng.shuffle(texts)
    log.info("adapting the query encoder to %d windows of the collection's documents (once, into %s)", len(texts),
             folder)
    table, cosines = fit_table(encoder.model, texts, reranker.encode(texts), epochs, lr, seed, mapped=False)
    log.info("query encoder: held-out cosine to the re-ranker %.4f before, %.4f after", cosines[0], cosines[-1])
    save_encoder(table, encoder.model.tokenizer, folder, replace=False)
    return folder
