"""A generated BEIR folder of any size, for measuring how cost grows with the corpus (``benchmarks/scale.py``):
Zipf-distributed words (the stopwords the most frequent), log-normal document lengths, some documents with a
non-ASCII dash (the slow path of a tokenizer), and one-relevant-document queries of three of that document's
content words. Seeded: the same settings write the same bytes. Not a benchmark of effectiveness.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

CHUNK_DOCS = 50_000
"""Documents generated and written at a time (the working memory of a 10M-document folder stays small)."""


@dataclass(frozen=True)
class SyntheticSettings:
    """What a generated folder is made of."""

    num_docs: int
    vocab: int = 200_000
    """Distinct words; the first are bm25s' English stopwords, the most frequent."""
    zipf: float = 1.0
    """Exponent of the words' Zipf distribution."""
    doc_len: float = 60.0
    """Mean document length in words (log-normal, sigma 0.5)."""
    non_ascii: float = 0.2
    """Fraction of documents with an en dash in the middle."""
    train_queries: int = 1000
    test_queries: int = 1000
    seed: int = 0


def _word(rank: int) -> str:
    """A distinct lowercase word per rank (base 26, at least two letters)."""
    rank += 26
    out = []
    while rank:
        rank, r = divmod(rank, 26)
        out.append(chr(97 + r))
    return "".join(reversed(out))


def _words(vocab: int) -> np.ndarray:
    from bm25s.stopwords import STOPWORDS_EN

    words, rank = sorted(STOPWORDS_EN), 0
    while len(words) < vocab:
        w = _word(rank)
        rank += 1
        if w not in STOPWORDS_EN:
            words.append(w)
    return np.array(words, dtype=object)


def write_synthetic_beir(folder: str | Path, settings: SyntheticSettings) -> Path:
    """Write the folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/{train,test}.tsv``, ``settings.json``);
    a folder already written with the same settings is left as it is."""
    folder = Path(folder)
    marker = folder / "settings.json"
    if marker.is_file() and json.loads(marker.read_text()) == asdict(settings):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "qrels").mkdir(parents=True)
    s, rng = settings, np.random.default_rng(settings.seed)
    words = _words(s.vocab)
    cdf = np.cumsum(1.0 / np.arange(1, s.vocab + 1) ** s.zipf)
    cdf /= cdf[-1]
    sigma = 0.5  # mean of a log-normal: exp(mu + sigma^2 / 2)
    lengths = np.maximum(1, rng.lognormal(np.log(s.doc_len) - sigma ** 2 / 2, sigma, s.num_docs)).astype(np.int64)
    n_queries = s.train_queries + s.test_queries
    query_docs = np.sort(rng.choice(s.num_docs, size=min(n_queries, s.num_docs), replace=False))
    queries: dict[str, tuple[str, str]] = {}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for lo in range(0, s.num_docs, CHUNK_DOCS):
            hi = min(s.num_docs, lo + CHUNK_DOCS)
            offsets = np.concatenate([[0], np.cumsum(lengths[lo:hi])])
            ids = np.searchsorted(cdf, rng.random(offsets[-1]))
            tokens = words[ids]
            dash = rng.random(hi - lo) < s.non_ascii
            lines = []
            for i in range(hi - lo):
                doc = tokens[offsets[i]:offsets[i + 1]].tolist()
                if dash[i] and len(doc) > 1:
                    doc.insert(len(doc) // 2, "–")
                lines.append(json.dumps({"_id": f"d{lo + i}", "title": "", "text": " ".join(doc) + "."},
                                        ensure_ascii=False))
            f.write("\n".join(lines) + "\n")
            for d in query_docs[(query_docs >= lo) & (query_docs < hi)].tolist():
                doc_ids = ids[offsets[d - lo]:offsets[d - lo + 1]]
                content = np.unique(doc_ids[(doc_ids >= 100) & (doc_ids < 100_000)])  # neither stopword nor hapax
                if len(content):
                    picked = rng.choice(content, min(3, len(content)), replace=False)
                    queries[f"q{len(queries)}"] = (" ".join(words[picked]), f"d{d}")
    qids = list(queries)
    rng.shuffle(qids)
    split = {"train": qids[:s.train_queries], "test": qids[s.train_queries:]}
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": queries[q][0]}) + "\n" for q in sorted(queries))
    for name, members in split.items():
        with open(folder / "qrels" / f"{name}.tsv", "w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{queries[q][1]}\t1\n" for q in members))
    marker.write_text(json.dumps(asdict(settings)))
    return folder


__all__ = ["SyntheticSettings", "write_synthetic_beir"]
