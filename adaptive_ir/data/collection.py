"""The `Collection` every loader returns: a corpus, and queries + qrels per split; carving a dev split; the
documents a query must not retrieve (its own title)."""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from adaptive_ir.common.errors import DataError, MissingSplitError
from adaptive_ir.data.corpus import CHUNK, Corpus

logger = logging.getLogger(__name__)

SPLIT_ORDER = ("train", "dev", "test")


@dataclass
class Collection:
    """A test collection: corpus, and queries + qrels per split ('train', 'dev', 'test').

    The corpus interface (`num_docs`, `doc_ids`, `iter_doc_texts`, `doc_texts_at`, `doc_positions`) is the
    corpus' own, see `adaptive_ir.data.corpus`."""

    name: str
    corpus: Corpus
    queries: dict[str, dict[str, str]]
    """split -> {qid: query text}: the queries evaluated in that split."""
    qrels: dict[str, dict[str, dict[str, int]]]
    """split -> {qid: {doc_id: grade}}, grade >= 1 is relevant; every query of the split has an entry, which is
    empty ({}) for a Nogueira & Cho query none of whose cited documents is in the corpus (it scores 0)."""
    excluded: dict[str, dict[str, str]] = field(default_factory=dict)
    """split -> {qid: doc_id}: the one document that does not count as retrieved for that query (the document
    whose title is the query, under data.exclude_query_title); it is dropped from every ranked list."""

    @property
    def num_docs(self) -> int:
        return self.corpus.num_docs

    @property
    def doc_ids(self):
        """Indexable sequence of ids: ``doc_ids[i]`` is the id of corpus position i."""
        return self.corpus.doc_ids

    def iter_doc_texts(self, chunk_size: int = CHUNK) -> Iterator[list[str]]:
        """``title + " " + text`` of every document in corpus order, ``chunk_size`` documents at a time: what
        index builds and corpus encoders read, so a corpus never has to be held as one list of strings."""
        return self.corpus.iter_doc_texts(chunk_size)

    def doc_texts_at(self, indices: Iterable[int]) -> list[str]:
        """``title + " " + text`` of the documents at these corpus positions (random access)."""
        return self.corpus.doc_texts_at(indices)

    def doc_positions(self, ids: Iterable[str]) -> np.ndarray:
        """Corpus positions (int64) of document ids; -1 for an id not in the corpus."""
        return self.corpus.doc_positions(ids)

    def doc_texts(self) -> list[str]:
        """Every document's text in one list: for small collections (tests, benchmarks), not for real corpora."""
        return [t for chunk in self.iter_doc_texts() for t in chunk]

    def keep_queries(self, split: str, qids: Iterable[str]) -> None:
        """Forget the queries of ``split`` that are not in ``qids`` (their texts, qrels and excluded documents)."""
        keep = set(qids)
        if split in self.queries:
            self.queries[split] = {q: v for q, v in self.queries[split].items() if q in keep}
        if split in self.qrels:
            self.qrels[split] = {q: v for q, v in self.qrels[split].items() if q in keep}
        if split in self.excluded:
            self.excluded[split] = {q: v for q, v in self.excluded[split].items() if q in keep}

    @property
    def splits(self) -> list[str]:
        """Split names: train, dev, test first (those present), then any others alphabetically."""
        known = [s for s in SPLIT_ORDER if s in self.queries]
        return known + sorted(s for s in self.queries if s not in SPLIT_ORDER)

    def split(self, name: str) -> tuple[list[str], list[str], dict[str, dict[str, int]]]:
        """(qids in natural order, their texts, their qrels) of one split."""
        if name not in self.queries:
            raise MissingSplitError(
                f"collection '{self.name}' has no '{name}' split (available: {', '.join(self.splits) or 'none'})", name
            )
        qids = sorted(self.queries[name], key=natural_key)
        return qids, [self.queries[name][q] for q in qids], self.qrels[name]

    def excluded_docs(self, split: str) -> dict[str, str]:
        """{qid: doc_id} of the documents dropped from the ranked lists of that split's queries (may be empty)."""
        return self.excluded.get(split, {})


def natural_key(s: str) -> tuple:
    """Sort key that orders '2' before '10' and 'q2' before 'q10'; ties (e.g. '01' vs '1') break on the string."""
    # re.split with a capturing group alternates text, digits, text, ... so each position has one type.
    parts = re.split(r"(\d+)", s)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)) + (s,)


def carve_dev(collection: Collection, fraction: float, seed: int) -> Collection:
    """Move a seeded `fraction` of the train queries to a new 'dev' split; 'test' is never touched.

    Train qids are put in natural order, shuffled with `random.Random(seed)`, and the first
    round(fraction * n) (at least 1, at most n - 1) become dev. Returns a new Collection.
    """
    if not 0.0 < fraction < 1.0:
        raise DataError(f"dev_fraction must be in (0, 1) to carve a dev split from train, got {fraction}")
    if "train" not in collection.queries:
        raise DataError(f"collection '{collection.name}' has no 'train' split to carve a dev split from")
    if "dev" in collection.queries:
        raise DataError(f"collection '{collection.name}' already has a 'dev' split; not carving another")
    train_q, train_r = collection.queries["train"], collection.qrels["train"]
    qids = sorted(train_q, key=natural_key)
    if len(qids) < 2:
        raise DataError(f"collection '{collection.name}' has {len(qids)} train query; need 2 to carve a dev split")
    random.Random(seed).shuffle(qids)
    n_dev = min(max(1, round(fraction * len(qids))), len(qids) - 1)
    parts = {"dev": qids[:n_dev], "train": qids[n_dev:]}
    train_x = collection.excluded_docs("train")
    return replace(
        collection,
        queries={**collection.queries, **{s: {q: train_q[q] for q in ids} for s, ids in parts.items()}},
        qrels={**collection.qrels, **{s: {q: train_r[q] for q in ids} for s, ids in parts.items()}},
        excluded={**collection.excluded,
                  **{s: {q: train_x[q] for q in ids if q in train_x} for s, ids in parts.items()}},
    )


def sample_split(collection: Collection, split: str, n: int | None, seed: int) -> Collection:
    """`collection` with at most `n` queries of `split`: a seeded sample (`random.Random(seed)`) kept in the split's
    order, with their qrels and excluded documents; the collection itself when it has no more (or `n` is None)."""
    qids, _, _ = collection.split(split)
    if n is None or len(qids) <= n:
        return collection
    keep = sorted(random.Random(seed).sample(range(len(qids)), n))

    def pick(d: dict) -> dict:
        return {**d, split: {qids[i]: d[split][qids[i]] for i in keep if qids[i] in d[split]}}

    return replace(collection, queries=pick(collection.queries), qrels=pick(collection.qrels),
                   excluded=pick(collection.excluded) if split in collection.excluded else collection.excluded)


def wanted_splits(splits: Iterable[str]) -> tuple[str, ...]:
    """The requested split names; asking for dev also needs train (a missing dev split is carved from it)."""
    wanted = tuple(dict.fromkeys(splits))
    return (*wanted, "train") if "dev" in wanted and "train" not in wanted else wanted


def only_splits(collection: Collection, splits: Iterable[str] | None) -> Collection:
    """`collection` keeping only `splits` (for sources whose splits share one file or live in memory)."""
    if splits is None:
        return collection
    wanted = set(splits)
    keep = lambda d: {s: v for s, v in d.items() if s in wanted}  # noqa: E731
    return replace(collection, queries=keep(collection.queries), qrels=keep(collection.qrels),
                   excluded=keep(collection.excluded))


def assemble(
    name: str,
    corpus: Corpus,
    queries: Mapping[str, str],
    qrels_by_split: Mapping[str, dict[str, dict[str, int]]],
    dev_fraction: float,
    seed: int,
) -> Collection:
    """A Collection of judged files (BEIR, TREC, MS MARCO, ir_datasets): per split, the judged queries that have
    at least one relevant document; a dev split carved from train when there is none."""
    split_queries, split_qrels, unjudged = {}, {}, []
    for split, qrels in qrels_by_split.items():
        kept = {q: j for q, j in qrels.items() if any(g >= 1 for g in j.values())}
        unjudged += [f"{split}/{q}" for q in qrels if q not in kept]
        if kept:
            split_queries[split] = {q: queries[q] for q in kept}
            split_qrels[split] = kept
    if unjudged:
        # trec_eval skips such queries too; keeping them would only add zero-reward episodes.
        logger.warning(
            "%s: dropped %d queries with no relevant document (grade >= 1), e.g. %s",
            name, len(unjudged), ", ".join(unjudged[:5]),
        )
    if not split_queries:
        raise DataError(f"collection '{name}': no query has a relevant document (grade >= 1) in any qrels file")
    collection = Collection(name, corpus, queries=split_queries, qrels=split_qrels)
    if "train" in split_queries and "dev" not in split_queries and dev_fraction > 0:
        collection = carve_dev(collection, dev_fraction, seed)
    return collection


# --------------------------------------------------------------------------------------------------------------
# A query's own document (Nogueira & Cho: MS Academic queries are paper titles)
# --------------------------------------------------------------------------------------------------------------

# Nogueira & Cho's utils.clean: strip link anchors, then replace these markups and characters with spaces (the
# markups first: "&amp;" must go before its ";"; none of the single characters occurs in a later markup).
_NC_ANCHOR = re.compile(r"\|.*?\]\]")
_NC_MARKUPS = ("&amp;", "&lt;", "&gt;", "&quot;", "<93>", "<98>", "<99>", "<9f>", "<80>", "<82>", "<83>", "<84>",
               "<85>", "<89>", "[[", "]]")
_NC_BLANKED = str.maketrans({c: " " for c in "'().\",;:=*\n!-"})
_WORDPUNCT = re.compile(r"\w+|[^\w\s]+")  # nltk's wordpunct_tokenize


def title_key(text: str) -> str:
    """A query or title as Nogueira & Cho's search compares it: lower-cased, `utils.clean`-ed, wordpunct
    tokens joined by single spaces ('Deep Learning: a review.' -> 'deep learning a review')."""
    text = text.lower()
    if "|" in text:
        text = _NC_ANCHOR.sub("", text)
    if "&" in text or "<" in text or "[" in text or "]" in text:
        for markup in _NC_MARKUPS:
            text = text.replace(markup, " ")
    return " ".join(_WORDPUNCT.findall(text.translate(_NC_BLANKED)))


def exclude_query_titles(collection: Collection) -> Collection:
    """`collection` with, for every query whose `title_key` equals a document's, that document in `excluded`.

    Nogueira & Cho's search drops the document whose title is the query before scoring recall (`op_search.py`:
    an MS Academic query is the title of the paper whose citations are the relevant documents). Their title map
    keeps the last row of a repeated title, and so does this. They compare the normalised query with the raw
    stored title; here both sides are normalised, which also catches titles stored with punctuation or capitals.
    One pass over the corpus titles.
    """
    wanted: dict[str, list[tuple[str, str]]] = {}
    for split, queries in collection.queries.items():
        for qid, text in queries.items():
            key = title_key(text)
            if key:
                wanted.setdefault(key, []).append((split, qid))
    rows: dict[str, int] = {}
    pos = 0
    for chunk in collection.corpus.iter_titles():
        for title in chunk:
            key = title_key(title)
            if key in wanted:
                rows[key] = pos
            pos += 1
    excluded: dict[str, dict[str, str]] = {split: {} for split in collection.queries}
    for key, row in rows.items():
        for split, qid in wanted[key]:
            excluded[split][qid] = collection.doc_ids[row]
    n = sum(len(e) for e in excluded.values())
    logger.info("%s: %d of %d queries are the title of a document; it is dropped from their ranked lists "
                "(data.exclude_query_title)", collection.name, n, sum(len(q) for q in collection.queries.values()))
    return replace(collection, excluded=excluded)
