"""MS MARCO passage ranking: collection.tsv, queries.{train,dev}.tsv, qrels.{train,dev}.tsv."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from adaptive_ir.common.errors import DataError
from adaptive_ir.data.collection import Collection, assemble, wanted_splits
from adaptive_ir.data.corpus import Corpus
from adaptive_ir.data.lines import read_qrels, read_queries
from adaptive_ir.data.textfile import TextFileCorpus


def load_msmarco(
    path: str | Path,
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    splits: Iterable[str] | None = None,
    corpus: Corpus | None = None,
) -> Collection:
    """MS MARCO passage ranking: collection.tsv, queries.{train,dev}.tsv, qrels.{train,dev}.tsv.

    MS MARCO's public dev set has no hidden labels, so it serves as our **test** split; our dev split is
    carved from train. When qrels.dev.small.tsv is present it is used instead of qrels.dev.tsv (the official
    6,980-query evaluation subset). `splits` (default: all) limits which qrels files are read. `corpus`: this
    folder's collection.tsv, already loaded, so it is not validated again.
    """
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: MS MARCO folder not found; it needs collection.tsv, queries.*.tsv, qrels.*.tsv")
    corpus = corpus or TextFileCorpus(path / "collection.tsv")
    test_qrels = path / "qrels.dev.small.tsv"
    if not test_qrels.exists():
        test_qrels = path / "qrels.dev.tsv"
    files = {"train": path / "qrels.train.tsv", "test": test_qrels}
    wanted = wanted_splits(splits) if splits is not None else ("train", "dev", "test")
    if not wanted:  # the corpus alone (ad-hoc queries: reformulate)
        return Collection(name or path.name, corpus, queries={}, qrels={})
    # dev is carved from train, so asking for dev reads the train qrels
    wanted_files = {"train"} if {"train", "dev"} & set(wanted) else set()
    wanted_files |= {"test"} & set(wanted)
    if not wanted_files:
        raise DataError(f"{path}: MS MARCO has train (with a carved dev) and test splits, not {list(wanted)}")
    # only the wanted splits' queries are read: queries.train.tsv holds 808k queries a test run never needs
    queries: dict[str, str] = {}
    for split, filename in (("train", "queries.train.tsv"), ("test", "queries.dev.tsv")):
        if split in wanted_files:
            queries |= read_queries(path / filename)
    qrels = {s: read_qrels(p, queries, corpus) for s, p in files.items() if s in wanted_files}
    return assemble(name or path.name, corpus, queries, qrels, dev_fraction, seed)
