"""BEIR: a folder (or the `.zip` BEIR distributes) with corpus.jsonl, queries.jsonl and qrels/{train,dev,test}.tsv,
each of them plain or gzipped (`corpus.jsonl.gz`, as large corpora come)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from adaptive_ir.common.errors import DataError
from adaptive_ir.data.collection import SPLIT_ORDER, Collection, assemble, wanted_splits
from adaptive_ir.data.corpus import Corpus
from adaptive_ir.data.lines import PathLike, ZipPath, read_qrels, read_queries
from adaptive_ir.data.textfile import TextFileCorpus

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"


def load_beir(
    path: str | Path,
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    splits: Iterable[str] | None = None,
    corpus: Corpus | None = None,
) -> Collection:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv) or the `.zip` BEIR distributes.

    Any of these files may be gzipped instead (`corpus.jsonl.gz`, `qrels/train.tsv.gz`, ...); where both forms
    are present the plain one is read (it can be seeked). A gzipped corpus costs one decompression pass per
    batch of documents read by position (see `textfile.py`).

    Splits are the qrels files present; a split's queries are the qids judged in it. Without qrels/dev.tsv, a
    seeded `dev_fraction` of train becomes dev (`carve_dev`). `splits` (default: all) limits which qrels files are
    opened at all: training asks for train and dev only, so test judgments are never read while training.
    `corpus`: this folder's corpus, already loaded (reading another split later), so it is not validated again.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(
            f"{path}: BEIR folder or zip not found; get one from {BEIR_URL.format(name=path.stem or '<name>')}"
        )
    if path.suffix != ".zip":
        return _load_beir_root(path, dev_fraction, seed, name or path.name, splits, corpus)
    return _load_beir_root(_zip_root(path), dev_fraction, seed, name or path.stem, splits, corpus)


def _zip_root(path: Path) -> ZipPath:
    """The folder inside a BEIR zip that holds corpus.jsonl[.gz] (BEIR zips hold `<name>/corpus.jsonl`)."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except zipfile.BadZipFile as e:
        raise DataError(f"{path}: not a valid zip file ({e}); download it again") from e
    corpora = [n for n in names
               if PurePosixPath(n).name in ("corpus.jsonl", "corpus.jsonl.gz") and "__MACOSX" not in n]
    if not corpora:
        raise DataError(f"{path}: no corpus.jsonl inside the zip (nor corpus.jsonl.gz); expected a BEIR dataset zip")
    parent = str(PurePosixPath(min(corpora, key=len)).parent)
    return ZipPath(path, "" if parent == "." else parent + "/")


def _plain_or_gz(folder: PathLike, name: str) -> PathLike | None:
    """``folder/name``, else ``folder/name.gz``, else None."""
    return next((p for p in (folder / name, folder / f"{name}.gz") if p.exists()), None)


def _required(folder: PathLike, name: str) -> PathLike:
    path = _plain_or_gz(folder, name)
    if path is None:
        raise DataError(f"{folder / name}: file not found (nor {name}.gz); a BEIR folder holds corpus.jsonl, "
                        "queries.jsonl and qrels/<split>.tsv, each plain or gzipped")
    return path


def _load_beir_root(root: PathLike, dev_fraction: float, seed: int, name: str, splits, corpus) -> Collection:
    corpus = corpus or TextFileCorpus(_required(root, "corpus.jsonl"))
    queries = read_queries(_required(root, "queries.jsonl"))
    found = {s: _plain_or_gz(root / "qrels", f"{s}.tsv") for s in SPLIT_ORDER}
    qrels_files = {s: p for s, p in found.items() if p is not None}
    if not qrels_files:
        raise DataError(f"{root / 'qrels'}: no train.tsv, dev.tsv or test.tsv (plain or .gz); a BEIR folder needs "
                        "at least one")
    if splits is not None:
        wanted = wanted_splits(splits)
        if not wanted:  # the corpus alone (ad-hoc queries: reformulate)
            return Collection(name, corpus, queries={}, qrels={})
        present = ", ".join(p.name for p in qrels_files.values())
        qrels_files = {s: p for s, p in qrels_files.items() if s in wanted}
        if not qrels_files:
            raise DataError(f"{root / 'qrels'}: needs {' or '.join(f'{s}.tsv' for s in wanted)} here "
                            f"(found: {present})")
    qrels = {s: read_qrels(p, queries, corpus) for s, p in qrels_files.items()}
    return assemble(name, corpus, queries, qrels, dev_fraction, seed)
