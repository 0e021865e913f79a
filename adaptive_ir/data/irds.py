"""Collections from `ir_datasets` (https://ir-datasets.com), which downloads on first use. (Not named
`ir_datasets`: the module would shadow the package.)"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from adaptive_ir.common.errors import DataError, where
from adaptive_ir.data.collection import SPLIT_ORDER, Collection, assemble, wanted_splits
from adaptive_ir.data.corpus import Corpus, DocIdsBuilder

_SPLIT_ALIASES = {"train": "train", "dev": "dev", "valid": "dev", "validation": "dev", "test": "test"}


def _fields(doc) -> tuple[str, str]:
    """(title, text) of an ir_datasets document (the fields differ between datasets)."""
    return getattr(doc, "title", "") or "", getattr(doc, "text", None) or getattr(doc, "body", None) or ""


class IrDatasetsCorpus(Corpus):
    """The documents of an ir_datasets dataset, kept in its own store: ids are read once (compactly), texts are
    streamed from `docs_iter()` and fetched by id from `docs_store()` (or one pass of `docs_iter()` when the
    dataset has no store)."""

    def __init__(self, dataset, dataset_id: str):
        self._dataset, self._id = dataset, dataset_id
        ids = DocIdsBuilder()
        for doc in dataset.docs_iter():
            ids.add(doc.doc_id)
        self.doc_ids = ids.build()
        repeat = self.doc_ids.first_repeat()
        if repeat is not None:
            raise DataError(f"{dataset_id}: duplicate document id '{self.doc_ids[repeat[1]]}' (documents "
                            f"{repeat[0] + 1} and {repeat[1] + 1}); ids must be unique")

    def _iter_docs(self) -> Iterator[tuple[str, str]]:
        return (_fields(doc) for doc in self._dataset.docs_iter())

    def _read_sorted(self, positions: np.ndarray) -> Iterator[tuple[str, str]]:
        if not hasattr(self._dataset, "docs_store"):
            return super()._read_sorted(positions)
        ids = [self.doc_ids[p] for p in positions.tolist()]
        docs = self._dataset.docs_store().get_many(ids)
        return (_fields(docs[d]) for d in ids)

    def __repr__(self) -> str:
        return f"IrDatasetsCorpus({self._id}, {self.num_docs} documents)"


def load_ir_datasets(
    dataset_id: str | Mapping[str, str],
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    splits: Iterable[str] | None = None,
) -> Collection:
    """A collection from `ir_datasets`.

    `dataset_id` is one id whose last part names the split ('beir/scifact/test' -> test) or a mapping
    split -> id ({'train': 'beir/scifact/train', 'test': 'beir/scifact/test'}). The corpus is taken from the
    first id; all ids must share it. `splits` (default: all) limits which of the ids are opened.
    """
    try:
        import ir_datasets
    except ImportError as e:
        raise DataError("dataset_type 'ir_datasets' needs the ir_datasets package: pip install ir_datasets") from e
    ids = _split_ids(dataset_id)
    if splits is not None:
        wanted = wanted_splits(splits)
        ids = {s: i for s, i in ids.items() if s in wanted}
        if not ids:
            raise DataError(f"ir_datasets id {dataset_id!r} has no {' or '.join(wanted)} split")
    datasets = {}
    for split, ds_id in ids.items():
        try:
            datasets[split] = ir_datasets.load(ds_id)
        except KeyError as e:
            raise DataError(f"ir_datasets has no dataset '{ds_id}'; see https://ir-datasets.com for ids") from e

    first_id = next(iter(ids.values()))
    corpus = IrDatasetsCorpus(next(iter(datasets.values())), first_id)
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, dict[str, int]]] = {}
    for split, ds in datasets.items():
        for q in ds.queries_iter():
            queries[q.query_id] = getattr(q, "text", None) or getattr(q, "title", None) or ""  # TrecQuery: title
        judged = list(ds.qrels_iter())
        for r in judged:
            if not queries.get(r.query_id, "").strip():
                raise DataError(f"{where(ids[split], key=f'{r.query_id}/{r.doc_id}')}: judged query has no text")
        unknown = (corpus.doc_positions([r.doc_id for r in judged]) < 0).nonzero()[0]
        if unknown.size:
            r = judged[unknown[0]]
            raise DataError(f"{where(ids[split], key=f'{r.query_id}/{r.doc_id}')}: judged document is not in the "
                            f"corpus of '{first_id}'")
        qrels[split] = {}
        for r in judged:
            qrels[split].setdefault(r.query_id, {})[r.doc_id] = int(r.relevance)
    label = name or first_id.rsplit("/", 1)[0].replace("/", "-")  # 'beir/scifact/test' -> 'beir-scifact'
    return assemble(label, corpus, queries, qrels, dev_fraction, seed)


def _split_ids(dataset_id: str | Mapping[str, str]) -> dict[str, str]:
    if isinstance(dataset_id, Mapping):
        bad = [s for s in dataset_id if s not in SPLIT_ORDER]
        if bad or not dataset_id:
            raise DataError(f"ir_datasets split names must be train/dev/test, got {list(dataset_id)}")
        return dict(dataset_id)
    split = _SPLIT_ALIASES.get(dataset_id.rsplit("/", 1)[-1])
    if split is None:
        raise DataError(
            f"ir_datasets id '{dataset_id}' does not end in a split (train/dev/test); use e.g. "
            f"'{dataset_id}/test' or a mapping split -> id"
        )
    return {split: dataset_id}
