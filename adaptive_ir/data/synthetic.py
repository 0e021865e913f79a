"""Generated BEIR folders, for measuring how cost grows with the corpus; neither is a benchmark of effectiveness.

* ``write_synthetic_beir`` (``benchmarks/scale.py``): Zipf-distributed words (the stopwords the most frequent),
  log-normal document lengths, some documents with a non-ASCII dash (the slow path of a tokenizer), and
  one-relevant-document queries of three of that document's content words.
* ``grow_beir`` (``benchmarks/make_large.py``): a real collection (WikiCAR) grown to any size with distractor
  paragraphs drawn from its own statistics; its queries and judgments are carried over unchanged.

Seeded: the same settings write the same bytes.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
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


DISTRACTOR_PREFIX = "distractor-"
"""Ids of the generated paragraphs of ``grow_beir``: ``distractor-0``, ``distractor-1``, ..."""
GROWN_README = """# {name}: {source} grown to {num_docs:,} documents (a scale test)

This folder is **not a new benchmark**. It is `{source}` ({real:,} real documents, every query and judgment
unchanged) plus {added:,} generated distractor paragraphs (ids `{prefix}N`), written by
`python benchmarks/make_large.py {source_dir} <out> --num-docs {num_docs} --seed {seed}` to measure what a run
costs at this size. Each distractor draws its length from the real paragraphs' lengths and its words, one by one,
from their word frequencies: posting lists grow as a real corpus's do, but no distractor copies or shuffles a real
paragraph, so none is relevant to any query. Every method's scores drop (the real relevant paragraphs meet more
competition); compare methods with each other on this folder, never with the source collection's figures.
"""


def _corpus_file(folder: Path) -> Path:
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{folder}: no corpus.jsonl(.gz); give a BEIR folder")


def grow_beir(source: str | Path, out: str | Path, num_docs: int, seed: int = 0) -> dict:
    """Write ``out``: the BEIR folder ``source`` grown to ``num_docs`` documents (see the module docstring and
    ``GROWN_README``), and return its settings (also in ``out/settings.json``, written last: a folder with the same
    settings is left as it is). The real documents come first, byte for byte; ``queries.jsonl`` and every
    ``qrels/*.tsv`` (a held-back test split too) are copied unchanged. Two streaming passes over the source corpus
    (its word counts and lengths, then its lines); the distractors are written as they are drawn."""
    import gzip

    from adaptive_ir.data.beir import load_beir

    source, out = Path(source), Path(out)
    collection = load_beir(source, splits=())
    real = collection.num_docs
    if num_docs < real:
        raise ValueError(f"--num-docs {num_docs}: {source} already has {real:,} documents")
    settings = {"source": str(source.resolve()), "num_docs": num_docs, "real_docs": real, "seed": seed}
    marker = out / "settings.json"
    if marker.is_file() and json.loads(marker.read_text()) == settings:
        return settings
    if any(str(d).startswith(DISTRACTOR_PREFIX) for d in collection.doc_ids):
        raise ValueError(f"{source}: document ids already start with {DISTRACTOR_PREFIX!r}")
    counts: Counter[str] = Counter()
    lengths = np.empty(real, np.int64)
    at = 0
    for chunk in collection.iter_doc_texts():
        for text in chunk:
            split = text.split()
            counts.update(split)
            lengths[at] = len(split)
            at += 1
    ranked = sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))  # a fixed order: the draws are seeded
    del counts
    words = np.array([w for w, _ in ranked], dtype=object)
    cdf = np.cumsum(np.array([c for _, c in ranked], dtype=np.float64))
    cdf /= cdf[-1]
    del ranked
    lengths = lengths[lengths > 0]
    shutil.rmtree(out, ignore_errors=True)
    (out / "qrels").mkdir(parents=True)
    for name in ("queries.jsonl", "queries.jsonl.gz"):
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    for qrels in sorted((source / "qrels").iterdir()):
        shutil.copyfile(qrels, out / "qrels" / qrels.name)
    rng = np.random.default_rng(seed)
    corpus = _corpus_file(source)
    with open(out / "corpus.jsonl", "wb") as f:
        with (gzip.open(corpus, "rb") if corpus.suffix == ".gz" else open(corpus, "rb")) as src:
            shutil.copyfileobj(src, f, 1 << 24)
        for lo in range(0, num_docs - real, CHUNK_DOCS):
            n = min(CHUNK_DOCS, num_docs - real - lo)
            size = rng.choice(lengths, n)
            tokens = words[np.searchsorted(cdf, rng.random(int(size.sum())), side="right").clip(max=len(words) - 1)]
            ends = np.cumsum(size)
            lines = [json.dumps({"_id": f"{DISTRACTOR_PREFIX}{lo + i}", "title": "",
                                 "text": " ".join(tokens[end - length:end])}, ensure_ascii=False)
                     for i, (end, length) in enumerate(zip(ends.tolist(), size.tolist()))]
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
    (out / "README.md").write_text(GROWN_README.format(
        name=out.name, source=source.name, source_dir=source, real=real, added=num_docs - real, num_docs=num_docs,
        prefix=DISTRACTOR_PREFIX, seed=seed))
    marker.write_text(json.dumps(settings))
    return settings


__all__ = ["DISTRACTOR_PREFIX", "SyntheticSettings", "grow_beir", "write_synthetic_beir"]
