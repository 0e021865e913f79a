"""Test collections: a corpus plus queries and relevance judgments (qrels) per split.

Every loader returns the same `Collection` (`collection.py`); its corpus stays on disk and is read in chunks
(`corpus.py`: the interface every consumer uses). One module per format:

* `beir.py`          `load_beir`: a BEIR folder (or the `.zip` BEIR distributes)
* `trec.py`          `load_trec`, `load_trec_dir`: TREC topics + TREC qrels + a jsonl/tsv corpus
* `msmarco.py`       `load_msmarco`: the MS MARCO passage tsv files
* `nogueira_cho.py`  `load_hdf5`: the Nogueira & Cho (2017) HDF5 files (MSA, TREC-CAR, Jeopardy)
* `irds.py`          `load_ir_datasets`: any `ir_datasets` id (needs the package and usually a network)
* `default.py`       `make_default`: the embedded synthetic collection: no files, no network

plus `lines.py` (line readers, queries and qrels files) and `textfile.py` (jsonl/tsv corpora). A new format is
one new module and one line in `load_collection`, which picks a loader from a config.

Bad input raises `DataError` with the file, line (or dataset/key) and what to do; problems in published data that
a user cannot fix (dangling citations in the HDF5 files) are counted in one warning instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import cast

from adaptive_ir.common.errors import DataError
from adaptive_ir.data.beir import BEIR_URL, load_beir
from adaptive_ir.data.collection import (
    SPLIT_ORDER,
    Collection,
    carve_dev,
    exclude_query_titles,
    natural_key,
    only_splits,
)
from adaptive_ir.data.corpus import Corpus, MemoryCorpus
from adaptive_ir.data.default import make_default, make_default_with_oracle
from adaptive_ir.data.irds import load_ir_datasets
from adaptive_ir.data.msmarco import load_msmarco
from adaptive_ir.data.nogueira_cho import NOGUEIRA_CHO_URL, HDF5Corpus, load_hdf5
from adaptive_ir.data.trec import load_trec, load_trec_dir

QUICKSTART_HINT = "configs/quickstart.yaml runs with no data (it uses the embedded default collection)."

HDF5_FILES = {
    "msa": ("msa",),
    "trec_car": ("trec_car", "trec-car"),  # the dl4ir-query-reformulator README names the files trec-car_*
    "jeopardy": ("jeopardy",),
}
DATASET_TYPES = ("default", "beir", "trec", "msmarco", *HDF5_FILES, "ir_datasets")


def load_collection(data_cfg, seed: int, splits: Iterable[str] | None = None, corpus: Corpus | None = None
                    ) -> Collection:
    """The collection a config asks for.

    `data_cfg` is any object with `dataset_type`, `data_dir`, `dev_fraction` and `ir_datasets_id`, and optionally
    `exclude_query_title` (None or absent: on for the Nogueira & Cho types). `seed` only decides which train
    queries are carved into dev; the default collection is always generated with its own fixed seed, so it is
    the same benchmark whatever the training seed. The HDF5 collections ship their own valid split, so
    `dev_fraction` does not apply to them.

    `splits` (default: all) names the splits wanted; for file-based collections only their qrels files are
    read (training passes ('train', 'dev') so test judgments stay unopened until evaluation asks for them).
    `corpus`: the corpus of this same data, already loaded (when a later split is read), reused as it is.
    """
    kind = data_cfg.dataset_type
    if kind not in DATASET_TYPES:
        raise DataError(f"unknown dataset_type '{kind}'; choose one of {', '.join(DATASET_TYPES)}")
    collection = _load(data_cfg, seed, splits, corpus)
    exclude = getattr(data_cfg, "exclude_query_title", None)
    if exclude if exclude is not None else kind in HDF5_FILES:
        collection = exclude_query_titles(collection)
    return collection


def _load(data_cfg, seed: int, splits: Iterable[str] | None, corpus: Corpus | None) -> Collection:
    kind = data_cfg.dataset_type
    if kind == "default":
        return only_splits(make_default(), splits)
    if kind == "ir_datasets":
        if not data_cfg.ir_datasets_id:
            raise DataError("dataset_type 'ir_datasets' needs data.ir_datasets_id, e.g. 'beir/scifact/test'")
        return only_splits(load_ir_datasets(data_cfg.ir_datasets_id, data_cfg.dev_fraction, seed, splits=splits),
                           splits)
    root = _data_dir(data_cfg)
    if kind == "beir":
        return load_beir(root, data_cfg.dev_fraction, seed, splits=splits, corpus=corpus)
    if kind == "trec":
        return load_trec_dir(root, data_cfg.dev_fraction, seed, splits=splits, corpus=corpus)
    if kind == "msmarco":
        return load_msmarco(root, data_cfg.dev_fraction, seed, splits=splits, corpus=corpus)
    dataset, corpus_file = _hdf5_pair(root, kind)
    # `corpus` is the corpus of this same data, loaded by an earlier call: for these types an HDF5Corpus
    return load_hdf5(dataset, corpus_file, name=kind, splits=splits, corpus=cast("HDF5Corpus | None", corpus))


def _data_dir(data_cfg) -> Path:
    """data_dir as a Path that exists, or an error that says where to get the data."""
    kind = data_cfg.dataset_type
    where_from = {
        "beir": "download a BEIR dataset, e.g. "
        + BEIR_URL.format(name=Path(data_cfg.data_dir).stem if data_cfg.data_dir else "scifact")
        + ", and point data_dir at the unzipped folder (or the zip)",
        "trec": "put topics.*, qrels.{train,dev,test}.* and corpus.jsonl|tsv in one folder",
        "msmarco": "download the MS MARCO passage files (collection.tsv, queries.*.tsv, qrels.*.tsv) from "
        "https://microsoft.github.io/msmarco/",
    }.get(kind, f"download the {kind} HDF5 files of Nogueira & Cho (2017) from {NOGUEIRA_CHO_URL}")
    if not data_cfg.data_dir:
        raise DataError(f"dataset_type '{kind}' needs data_dir: {where_from}. {QUICKSTART_HINT}")
    path = Path(data_cfg.data_dir).expanduser()
    if not path.exists():
        raise DataError(
            f"data_dir {path} (resolved: {path.resolve()}) does not exist: {where_from}. {QUICKSTART_HINT}"
        )
    return path


def _hdf5_pair(root: Path, kind: str) -> tuple[Path, Path]:
    for prefix in HDF5_FILES[kind]:
        dataset, corpus = root / f"{prefix}_dataset.hdf5", root / f"{prefix}_corpus.hdf5"
        if dataset.is_file() and corpus.is_file():
            return dataset, corpus
    expected = f"{HDF5_FILES[kind][0]}_dataset.hdf5 and {HDF5_FILES[kind][0]}_corpus.hdf5"
    raise DataError(
        f"{root}: expected {expected} (from {NOGUEIRA_CHO_URL}); found: "
        f"{', '.join(sorted(p.name for p in root.iterdir())) or 'nothing'}. {QUICKSTART_HINT}"
    )


__all__ = [
    "BEIR_URL", "DATASET_TYPES", "NOGUEIRA_CHO_URL", "SPLIT_ORDER", "Collection", "Corpus", "HDF5Corpus",
    "MemoryCorpus", "carve_dev", "load_beir", "load_collection", "load_hdf5", "load_ir_datasets", "load_msmarco",
    "load_trec", "load_trec_dir", "make_default", "make_default_with_oracle", "natural_key",
]
