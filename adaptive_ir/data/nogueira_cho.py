"""The HDF5 files of Nogueira & Cho, "Task-Oriented Query Reformulation with Reinforcement Learning" (EMNLP
2017): MS Academic, TREC-CAR and Jeopardy, read as their code (github.com/nyu-dl/dl4ir-query-reformulator:
`dataset_hdf5.py`, `corpus_hdf5.py`, `lucene_search.py`, `op_search.py`) reads them.

* `*_corpus.hdf5` has `title` and `text` arrays. Every row is a document, indexed under its **row number**: the
  id their Lucene index stores and returns, so ids are unique and free of spaces (TREC run files) even where a
  title repeats. Titles are not ids: `lucene_search.get_title_id_map` maps a title to the *last* row bearing it,
  so the qrels name that row, and retrieving an earlier row of the same title is not a hit (as in their recall).
* `*_dataset.hdf5` has `queries_{train,valid,test}` (query strings) and `doc_ids_{train,valid,test}` (each row a
  Python-list literal of the relevant documents' titles). 'valid' is our 'dev'; query ids are f"{split}-{row}";
  grade 1. Only the splits asked for are read (training never touches the test arrays).
* A cited title missing from the corpus (MS Academic has dangling citations) is dropped from the qrels. A query
  left with no relevant document, and a query with empty text, are kept, as their code keeps them (recall 0; an
  empty query is searched as "dummy"): they score 0 in evaluation, so means are over every query of the split;
  training skips queries without a relevant document. Each case is counted in one warning.
* Rows that are not valid UTF-8 are decoded with U+FFFD replacement characters and counted in one warning, not
  an error: the published files are what they are.
* The corpus stays on disk and is read in chunks of rows through h5py.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Container, Iterable, Iterator
from pathlib import Path

import h5py
import numpy as np

from adaptive_ir.common.errors import DataError, where
from adaptive_ir.data.collection import SPLIT_ORDER, Collection
from adaptive_ir.data.corpus import CHUNK, Corpus, RowIds

logger = logging.getLogger(__name__)

NOGUEIRA_CHO_URL = "https://github.com/nyu-dl/dl4ir-query-reformulator"
_THEIR_SPLIT = {"train": "train", "dev": "valid", "test": "test"}


class HDF5Corpus(Corpus):
    """`title` and `text` rows of a `*_corpus.hdf5` file, read from disk in chunks; ids are the row numbers."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open_hdf5(self.path) as f:
            n_titles, n_texts = _string_rows(f, "title", self.path), _string_rows(f, "text", self.path)
        if n_titles != n_texts:
            raise DataError(f"{self.path}: 'title' has {n_titles} rows but 'text' has {n_texts}")
        self.doc_ids = RowIds(n_titles)
        self._warned = False

    def iter_titles(self, chunk_size: int = CHUNK) -> Iterator[list[str]]:
        """Titles alone: the text array is not read."""
        with open_hdf5(self.path) as f:
            titles = f["title"]
            for lo in range(0, self.num_docs, chunk_size):
                yield [_decode(v)[0] for v in titles[lo:lo + chunk_size]]

    def _iter_docs(self) -> Iterator[tuple[str, str]]:
        bad, first_bad = 0, None
        with open_hdf5(self.path) as f:
            titles, texts = f["title"], f["text"]
            for lo in range(0, self.num_docs, CHUNK):
                for row, (t, x) in enumerate(zip(titles[lo:lo + CHUNK], texts[lo:lo + CHUNK]), lo):
                    (title, ok_t), (text, ok_x) = _decode(t), _decode(x)
                    if not (ok_t and ok_x):
                        bad += 1
                        first_bad = row if first_bad is None else first_bad
                    yield title, text
        if bad and not self._warned:
            self._warned = True
            logger.warning("%s: %d rows are not valid UTF-8 (decoded with U+FFFD replacement characters), first "
                           "at row %d", self.path, bad, first_bad)

    def _read_sorted(self, positions: np.ndarray) -> Iterator[tuple[str, str]]:
        with open_hdf5(self.path) as f:
            titles, texts = f["title"], f["text"]
            for pos in positions.tolist():
                yield _decode(titles[pos])[0], _decode(texts[pos])[0]

    def __repr__(self) -> str:
        return f"HDF5Corpus({self.path}, {self.num_docs} documents)"


def load_hdf5(
    dataset_path: str | Path,
    corpus_path: str | Path,
    name: str | None = None,
    splits: Iterable[str] | None = None,
    corpus: HDF5Corpus | None = None,
) -> Collection:
    """A Nogueira & Cho dataset + corpus pair (see the module docstring). `splits` (default: all) names the
    splits to read; `corpus`: the corpus file, already opened, so it is not checked again."""
    dataset_path = Path(dataset_path)
    corpus = corpus or HDF5Corpus(corpus_path)
    ours = [s for s in SPLIT_ORDER if splits is None or s in set(splits)]
    if not ours:
        raise DataError(f"{dataset_path}: has train, dev ('valid') and test splits, not {list(splits or [])}")
    read: dict[str, tuple[list[str], list[list[str]]]] = {}
    bad_rows = 0
    with open_hdf5(dataset_path) as f:
        for split in ours:
            theirs = _THEIR_SPLIT[split]
            texts, bad_q = _h5_strings(f, f"queries_{theirs}", dataset_path)
            literals, bad_d = _h5_strings(f, f"doc_ids_{theirs}", dataset_path)
            bad_rows += bad_q + bad_d
            if len(texts) != len(literals):
                raise DataError(f"{dataset_path}: 'queries_{theirs}' has {len(texts)} rows but 'doc_ids_{theirs}' "
                                f"has {len(literals)}")
            cited = [_title_list(lit, dataset_path, f"doc_ids_{theirs}", row) for row, lit in enumerate(literals)]
            read[split] = texts, cited
    if bad_rows:
        logger.warning("%s: %d rows are not valid UTF-8 (decoded with U+FFFD replacement characters)",
                       dataset_path, bad_rows)

    variants = {v for _, cited in read.values() for titles in cited for t in titles for v in _title_variants(t)}
    rows, repeated = _last_rows(corpus, variants)
    queries: dict[str, dict[str, str]] = {}
    qrels: dict[str, dict[str, dict[str, int]]] = {}
    dangling, unjudged, empty = [], [], []
    for split, (texts, cited) in read.items():
        queries[split], qrels[split] = {}, {}
        for row, (text, titles) in enumerate(zip(texts, cited)):
            qid = f"{split}-{row}"
            found = [next((rows[v] for v in _title_variants(t) if v in rows), None) for t in titles]
            dangling += [t for t, r in zip(titles, found) if r is None]
            queries[split][qid] = text
            qrels[split][qid] = {str(r): 1 for r in found if r is not None}
            if not text.strip():
                empty.append(qid)
            if not qrels[split][qid]:
                unjudged.append(qid)
    if not any(judged for q in qrels.values() for judged in q.values()):
        raise DataError(f"{dataset_path}: no query has a relevant document in {corpus.path}; do the files match?")
    _warn(dataset_path, dangling, "cited titles are not in the corpus; dropped from the qrels")
    _warn(corpus.path, repeated, "cited titles occur in more than one row; the last row is the relevant one "
          "(as Nogueira & Cho's title map); every row stays searchable")
    _warn(dataset_path, unjudged, "queries have no relevant document in the corpus; kept: they score 0 in "
          "evaluation (as in Nogueira & Cho), training skips them")
    _warn(dataset_path, empty, "queries have empty text; kept: they retrieve nothing and score 0")
    return Collection(name or dataset_path.stem.removesuffix("_dataset"), corpus, queries=queries, qrels=qrels)


def open_hdf5(path: Path) -> h5py.File:
    if not path.is_file():
        raise DataError(f"{path}: file not found; the HDF5 files are listed at {NOGUEIRA_CHO_URL}")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise DataError(f"{path}: not a readable HDF5 file ({e})") from e


def _string_rows(f: h5py.File, key: str, path: Path) -> int:
    """Rows of a 1-D string dataset (fixed-length bytes or variable-length strings; both occur in old files)."""
    if key not in f:
        raise DataError(f"{where(path, key=key)}: dataset missing (found: {', '.join(sorted(f.keys())) or 'none'})")
    ds = f[key]
    if not isinstance(ds, h5py.Dataset) or ds.ndim != 1 or not (
        ds.dtype.kind == "S" or h5py.check_string_dtype(ds.dtype) is not None
    ):
        raise DataError(f"{where(path, key=key)}: expected a 1-D array of strings")
    return ds.shape[0]


def _decode(value: bytes) -> tuple[str, bool]:
    """(text, whether it was valid UTF-8); h5py gives bytes for both string kinds."""
    try:
        return value.decode("utf-8"), True
    except UnicodeDecodeError:
        return value.decode("utf-8", "replace"), False


def _h5_strings(f: h5py.File, key: str, path: Path) -> tuple[list[str], int]:
    """A 1-D string dataset as a list of str (read in chunks) and the number of rows that were not UTF-8."""
    n = _string_rows(f, key, path)
    ds, out, bad = f[key], [], 0
    for lo in range(0, n, CHUNK):
        for value in ds[lo:lo + CHUNK]:
            text, ok = _decode(value)
            out.append(text)
            bad += not ok
    return out, bad


def _title_list(literal: str, path: Path, key: str, row: int) -> list[str]:
    """Parse one `doc_ids_*` row, a Python-list literal of titles, safely (ast.literal_eval, never eval)."""
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise DataError(f"{where(path, key=key)} row {row}: not a Python list literal ({e})") from e
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, (str, bytes)) for t in value):
        raise DataError(f"{where(path, key=key)} row {row}: expected a list of title strings")
    return [t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in value]


def _title_variants(title: str) -> list[str]:
    """The cited title, then its repair when it is mojibake.

    The files were written with Python 2, where `str(list)` of UTF-8 byte strings escapes each byte
    ('Caf\\xc3\\xa9'); read back in Python 3 that is mojibake, which latin-1 -> UTF-8 undoes (with replacement
    characters where the bytes were not UTF-8, as the corpus title is decoded too).
    """
    try:
        raw = title.encode("latin-1")
    except UnicodeEncodeError:
        return [title]
    repaired = raw.decode("utf-8", "replace")
    return [title] if repaired == title else [title, repaired]


def _last_rows(corpus: Corpus, titles: Container[str]) -> tuple[dict[str, int], list[str]]:
    """{title: last row bearing it} for the wanted titles (one pass over the corpus titles), and the wanted
    titles found in more than one row."""
    rows: dict[str, int] = {}
    repeated: dict[str, None] = {}
    pos = 0
    for chunk in corpus.iter_titles():
        for title in chunk:
            if title in titles:
                if title in rows:
                    repeated[title] = None
                rows[title] = pos
            pos += 1
    return rows, list(repeated)


def _warn(path: Path, items: list[str], what: str) -> None:
    if items:
        logger.warning("%s: %d %s, e.g. %s", path, len(items), what, ", ".join(map(repr, items[:3])))
