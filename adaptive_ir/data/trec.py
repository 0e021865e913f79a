"""TREC: topics (SGML `<top>` blocks, TREC 2009+ XML `<topic number=...>` or `qid<TAB>text`), TREC qrels
(`qid 0 docid rel`) per split and a jsonl or tsv corpus; `load_trec_dir` finds them in a folder by name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from adaptive_ir.common.errors import DataError
from adaptive_ir.data.collection import SPLIT_ORDER, Collection, assemble, wanted_splits
from adaptive_ir.data.corpus import Corpus
from adaptive_ir.data.lines import read_qrels, read_queries
from adaptive_ir.data.textfile import TextFileCorpus


def load_trec(
    topics_path: str | Path,
    qrels_path_by_split: Mapping[str, str | Path],
    corpus_path: str | Path,
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    topic_fields: tuple[str, ...] = ("title",),
    corpus: Corpus | None = None,
) -> Collection:
    """TREC topics (SGML `<top>` blocks, TREC 2009+ XML `<topic number=...>` or `qid<TAB>text`), TREC qrels
    (`qid 0 docid rel`) per split, and a jsonl or tsv corpus (see `TextFileCorpus`). Query text = the
    `topic_fields` of each topic (default: title). `corpus`: the corpus at `corpus_path`, already loaded, so it is
    not validated again."""
    if not qrels_path_by_split:
        raise DataError("load_trec: no qrels files given; pass {'test': 'path/to/qrels', ...}")
    corpus_path = Path(corpus_path)
    corpus = corpus or TextFileCorpus(corpus_path)
    queries = read_queries(Path(topics_path), topic_fields)
    qrels = {s: read_qrels(Path(p), queries, corpus) for s, p in qrels_path_by_split.items()}
    return assemble(name or corpus_path.parent.name, corpus, queries, qrels, dev_fraction, seed)


def load_trec_dir(
    path: str | Path,
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    splits: Iterable[str] | None = None,
    corpus: Corpus | None = None,
) -> Collection:
    """A folder laid out for `load_trec`: one `topics.*` file, `qrels.{train,dev,test}.*` (any present) and
    `corpus.jsonl` or `corpus.tsv` (optionally .gz). `splits` (default: all) limits which qrels files are read."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: TREC folder not found")
    topics = sorted(path.glob("topics.*"))
    corpora = [p for p in sorted(path.glob("corpus.*")) if p.name.removesuffix(".gz") in ("corpus.jsonl", "corpus.tsv")]
    qrels = {s: sorted(path.glob(f"qrels.{s}.*")) for s in SPLIT_ORDER}
    found = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
    if len(topics) != 1 or len(corpora) != 1 or not any(qrels.values()):
        raise DataError(
            f"{path}: a TREC folder needs exactly one topics.* file, one corpus.jsonl or corpus.tsv, and "
            f"qrels.train.* / qrels.dev.* / qrels.test.* files (found: {found})"
        )
    if any(len(v) > 1 for v in qrels.values()):
        raise DataError(f"{path}: more than one qrels file for a split (found: {found})")
    if splits is not None:
        wanted = wanted_splits(splits)
        if not wanted:  # the corpus alone (ad-hoc queries: reformulate)
            return Collection(name or path.name, corpus or TextFileCorpus(corpora[0]), queries={}, qrels={})
        qrels = {s: v for s, v in qrels.items() if s in wanted}
        if not any(qrels.values()):
            raise DataError(f"{path}: needs a qrels.{{{','.join(wanted)}}}.* file here (found: {found})")
    return load_trec(topics[0], {s: v[0] for s, v in qrels.items() if v}, corpora[0], dev_fraction, seed,
                     name or path.name, corpus=corpus)
