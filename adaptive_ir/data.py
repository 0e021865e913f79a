"""Test collections: a corpus plus queries and relevance judgments (qrels) per split.

Every loader returns the same `Collection`. Supported sources:

* `load_beir`        a BEIR folder (or the `.zip` BEIR distributes)
* `load_trec`        TREC topics + TREC qrels + a jsonl/tsv corpus
* `load_msmarco`     the MS MARCO passage tsv files
* `load_hdf5`        the Nogueira & Cho (2017) HDF5 files (MSA, TREC-CAR, Jeopardy)
* `load_ir_datasets` any `ir_datasets` id (needs the package and usually a network)
* `make_default`     the embedded synthetic collection: no files, no network

`load_collection(data_cfg, seed)` picks one from a config. Bad input raises `DataError` with the file, line
(or dataset/key) and what to do; problems in published data that a user cannot fix (dangling citations in the
HDF5 files) are dropped with one counted warning instead.
"""

from __future__ import annotations

import ast
import functools
import gzip
import itertools
import json
import logging
import random
import re
import zipfile
import zlib
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

import h5py
import numpy as np

from adaptive_ir.errors import DataError, where

logger = logging.getLogger(__name__)

SPLIT_ORDER = ("train", "dev", "test")
QUICKSTART_HINT = "configs/quickstart.yaml runs with no data (it uses the embedded default collection)."
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
NOGUEIRA_CHO_URL = "https://github.com/nyu-dl/dl4ir-query-reformulator"


# --------------------------------------------------------------------------------------------------------------
# The collection
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Collection:
    """A test collection: corpus, and queries + qrels per split ('train', 'dev', 'test')."""

    name: str
    doc_ids: list[str]  # corpus order; unique
    titles: list[str]
    texts: list[str]
    queries: dict[str, dict[str, str]]  # split -> {qid: query text}; only queries that have qrels in that split
    qrels: dict[str, dict[str, dict[str, int]]]  # split -> {qid: {doc_id: grade}}; grade >= 1 is relevant

    def doc_text(self, i: int) -> str:
        """The text that gets indexed: title + " " + text (as the shared BASELINES.md does)."""
        return self.titles[i] + " " + self.texts[i]

    def doc_texts(self) -> list[str]:
        """`doc_text` for every document, in corpus order."""
        return [t + " " + x for t, x in zip(self.titles, self.texts)]

    @property
    def num_docs(self) -> int:
        return len(self.doc_ids)

    def iter_doc_texts(self, chunk_size: int = 65_536) -> Iterator[list[str]]:
        """`doc_text` of every document in corpus order, ``chunk_size`` documents at a time: what index builds
        and corpus encoders read, so a corpus never has to be held as one list of strings."""
        for lo in range(0, self.num_docs, chunk_size):
            yield [self.doc_text(i) for i in range(lo, min(self.num_docs, lo + chunk_size))]

    def doc_texts_at(self, indices: Iterable[int]) -> list[str]:
        """`doc_text` of the documents at these corpus positions (random access)."""
        return [self.doc_text(int(i)) for i in indices]

    def doc_positions(self, ids: Iterable[str]) -> np.ndarray:
        """Corpus positions (int64) of document ids; -1 for an id not in the corpus."""
        if not hasattr(self, "_positions"):
            self._positions = {d: i for i, d in enumerate(self.doc_ids)}
        return np.array([self._positions.get(d, -1) for d in ids], dtype=np.int64)

    @property
    def splits(self) -> list[str]:
        """Split names: train, dev, test first (those present), then any others alphabetically."""
        known = [s for s in SPLIT_ORDER if s in self.queries]
        return known + sorted(s for s in self.queries if s not in SPLIT_ORDER)

    def split(self, name: str) -> tuple[list[str], list[str], dict[str, dict[str, int]]]:
        """(qids in natural order, their texts, their qrels) of one split."""
        if name not in self.queries:
            raise DataError(
                f"collection '{self.name}' has no '{name}' split (available: {', '.join(self.splits) or 'none'})"
            )
        qids = sorted(self.queries[name], key=natural_key)
        return qids, [self.queries[name][q] for q in qids], self.qrels[name]


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
    dev, train = qids[:n_dev], qids[n_dev:]
    queries = {**collection.queries, "train": {q: train_q[q] for q in train}, "dev": {q: train_q[q] for q in dev}}
    qrels = {**collection.qrels, "train": {q: train_r[q] for q in train}, "dev": {q: train_r[q] for q in dev}}
    return replace(collection, queries=queries, qrels=qrels)


# --------------------------------------------------------------------------------------------------------------
# Reading text files line by line, with the file and line number in every error
# --------------------------------------------------------------------------------------------------------------

# A Path, or a zipfile.Path inside a BEIR zip: both have .name, .exists(), .open("rb") and str().
PathLike = Path | zipfile.Path


def _lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """Yield (line number, line without its newline) for each non-blank line of a UTF-8 file (.gz is unzipped)."""
    if not path.exists():
        raise DataError(f"{path}: file not found")
    try:
        f = gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e})") from e
    with f:
        lineno = 0
        try:
            # Binary mode so a bad byte costs one line, not the whole file, and we can say which line.
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    raise DataError(
                        f"{where(path, lineno)}: not valid UTF-8 (byte {e.start + 1} of the line); "
                        "re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 in > out`"
                    ) from e
                if lineno == 1:
                    line = line.removeprefix("\ufeff")  # a byte-order mark written by some editors
                if line.strip():
                    yield lineno, line
        except (OSError, EOFError, zlib.error) as e:  # truncated or corrupt .gz
            raise DataError(f"{where(path, lineno + 1)}: cannot read ({e})") from e


def _json_objects(path: PathLike, rows: Iterable[tuple[int, str]]) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each line of a JSON-lines file."""
    for lineno, line in rows:
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise DataError(f"{where(path, lineno)}: not valid JSON ({e}); each line must be one JSON object") from e
        if not isinstance(obj, dict):
            raise DataError(f"{where(path, lineno)}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def _json_str(obj: dict, keys: tuple[str, ...], path: PathLike, lineno: int, required: bool) -> str:
    """The first of `keys` present in `obj`, as a string ('' for null); ids may be integers."""
    key = next((k for k in keys if k in obj), None)
    if key is None:
        if required:
            raise DataError(f"{where(path, lineno)}: no '{keys[0]}' field (also accepted: {', '.join(keys[1:])})")
        return ""
    value = obj[key]
    if value is None and not required:
        return ""
    if isinstance(value, int) and not isinstance(value, bool) and required:
        return str(value)
    if not isinstance(value, str):
        raise DataError(f"{where(path, lineno, key)}: expected a string, got {json.dumps(value)[:60]}")
    return value


def _check_new(seen: dict[str, int], key: str, what: str, path: PathLike, lineno: int) -> None:
    """Record `key` as seen at `lineno`; a repeat is an error naming both lines."""
    if key in seen:
        raise DataError(
            f"{where(path, lineno)}: duplicate {what} '{key}' (first at line {seen[key]}); ids must be unique"
        )
    seen[key] = lineno


# --------------------------------------------------------------------------------------------------------------
# Corpus, queries and qrels files
# --------------------------------------------------------------------------------------------------------------

_DOC_ID_KEYS = ("_id", "id", "docno", "docid", "doc_id")
_DOC_TEXT_KEYS = ("text", "contents", "body")
_QUERY_ID_KEYS = ("_id", "id", "qid", "query_id")
_QUERY_TEXT_KEYS = ("text", "query", "title")


def _is_jsonl(path: PathLike) -> bool:
    return path.name.removesuffix(".gz").endswith((".jsonl", ".json"))


def read_corpus(path: PathLike) -> tuple[list[str], list[str], list[str]]:
    """(doc_ids, titles, texts) from JSON lines (`_id`/`id`/`docno`, `title`, `text`/`contents`) or a tsv
    (`docid<TAB>text` or `docid<TAB>title<TAB>text`). Empty documents are kept (Cranfield has two)."""
    doc_ids, titles, texts = [], [], []
    seen: dict[str, int] = {}
    for lineno, doc_id, title, text in _json_docs(path) if _is_jsonl(path) else _tsv_docs(path):
        _check_new(seen, doc_id, "document id", path, lineno)
        doc_ids.append(doc_id)
        titles.append(title)
        texts.append(text)
    if not doc_ids:
        raise DataError(f"{path}: no documents")
    return doc_ids, titles, texts


def _json_docs(path: PathLike) -> Iterator[tuple[int, str, str, str]]:
    for lineno, obj in _json_objects(path, _lines(path)):
        doc_id = _json_str(obj, _DOC_ID_KEYS, path, lineno, required=True)
        title = _json_str(obj, ("title",), path, lineno, required=False)
        yield lineno, doc_id, title, _json_str(obj, _DOC_TEXT_KEYS, path, lineno, required=False)


def _tsv_docs(path: PathLike) -> Iterator[tuple[int, str, str, str]]:
    for lineno, line in _lines(path):
        fields = line.split("\t")
        if len(fields) == 2:
            yield lineno, fields[0].strip(), "", fields[1]
        elif len(fields) == 3:
            yield lineno, fields[0].strip(), fields[1], fields[2]
        else:
            raise DataError(
                f"{where(path, lineno)}: expected 'docid<TAB>text' or 'docid<TAB>title<TAB>text', "
                f"got {len(fields)} tab-separated fields"
            )


def read_queries(path: PathLike, topic_fields: tuple[str, ...] = ("title",)) -> dict[str, str]:
    """{qid: text} from JSON lines (`_id`, `text`), a `qid<TAB>text` tsv, or classic TREC SGML topics
    (`<top><num> Number: 301 <title> ...`; `topic_fields` picks which of title/desc/narr make the query)."""
    rows = _lines(path)
    if _is_jsonl(path):
        parsed = (
            (n, _json_str(o, _QUERY_ID_KEYS, path, n, True), _json_str(o, _QUERY_TEXT_KEYS, path, n, False))
            for n, o in _json_objects(path, rows)
        )
    else:
        first = next(rows, (0, ""))
        rows = itertools.chain([first], rows)
        sgml = first[1].lstrip().lower().startswith("<top")
        parsed = _trec_topics(path, rows, topic_fields) if sgml else _tsv_queries(path, rows)
    queries: dict[str, str] = {}
    seen: dict[str, int] = {}
    for lineno, qid, text in parsed:
        _check_new(seen, qid, "query id", path, lineno)
        if not text.strip():
            raise DataError(f"{where(path, lineno)}: query '{qid}' has empty text; give it text or remove it")
        queries[qid] = text
    if not queries:
        raise DataError(f"{path}: no queries")
    return queries


def _tsv_queries(path: PathLike, rows: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str, str]]:
    for lineno, line in rows:
        qid, tab, text = line.partition("\t")
        if not tab:
            raise DataError(f"{where(path, lineno)}: expected 'qid<TAB>query text' (no tab found)")
        yield lineno, qid.strip(), text.strip()


_TOPIC_TAG = re.compile(r"<(\w+)>([^<]*)")  # an opening tag and the text up to the next tag (closing tags optional)
_TOPIC_LABEL = re.compile(r"^(number|topic|description|narrative)\s*:\s*", re.IGNORECASE)


def _trec_topics(path: PathLike, rows: Iterable[tuple[int, str]], fields: tuple[str, ...]):
    """Yield (line of <top>, qid, text) for each <top>...</top> block of a TREC topics file."""
    block: list[str] = []
    start = 0
    for lineno, line in rows:
        lower = line.lower()
        if "<top>" in lower:
            block, start = [], lineno
        block.append(line)
        if "</top>" in lower:
            tags = {}
            for tag, value in _TOPIC_TAG.findall(" ".join(block)):
                tags.setdefault(tag.lower(), _TOPIC_LABEL.sub("", " ".join(value.split())))
            if not tags.get("num"):
                raise DataError(f"{where(path, start)}: topic without a <num> number")
            yield start, tags["num"], " ".join(tags.get(f, "") for f in fields).strip()


def read_qrels(path: PathLike, queries: Container[str], doc_ids: Container[str]) -> dict[str, dict[str, int]]:
    """{qid: {doc_id: grade}} from `qid<TAB>docid<TAB>score` (BEIR; header optional) or TREC `qid 0 docid rel`.

    Every judged query must have text in `queries` and every judged document must be in the corpus:
    anything else means the files do not belong together, so it is an error naming the line.
    """
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in _lines(path):
        fields = line.split("\t") if "\t" in line else line.split()
        fields = [f.strip() for f in fields]
        if len(fields) not in (3, 4):
            raise DataError(
                f"{where(path, lineno)}: expected 'query-id<TAB>corpus-id<TAB>score' or TREC 'qid 0 docid rel', "
                f"got {len(fields)} fields"
            )
        qid, doc_id, score = (fields[0], fields[1], fields[2]) if len(fields) == 3 else (fields[0], *fields[2:])
        try:
            grade = int(score)
        except ValueError:
            if lineno == 1 and not any(c.isdigit() for c in score):  # a header such as 'query-id corpus-id score'
                continue
            raise DataError(f"{where(path, lineno)}: relevance '{score[:30]}' is not an integer") from None
        if qid not in queries:
            raise DataError(f"{where(path, lineno)}: query '{qid}' is judged here but has no text in the queries file")
        if doc_id not in doc_ids:
            raise DataError(f"{where(path, lineno)}: document '{doc_id}' is judged here but is not in the corpus")
        judged = qrels.setdefault(qid, {})
        if judged.get(doc_id, grade) != grade:
            raise DataError(f"{where(path, lineno)}: ({qid}, {doc_id}) judged twice with different grades")
        judged[doc_id] = grade
    return qrels


def _assemble(
    name: str,
    corpus: tuple[list[str], list[str], list[str]],
    queries: Mapping[str, str],
    qrels_by_split: Mapping[str, dict[str, dict[str, int]]],
    dev_fraction: float,
    seed: int,
) -> Collection:
    """Build a Collection: per split, the judged queries that have at least one relevant document;
    carve a dev split from train when there is none."""
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
    collection = Collection(name, *corpus, queries=split_queries, qrels=split_qrels)
    if "train" in split_queries and "dev" not in split_queries and dev_fraction > 0:
        collection = carve_dev(collection, dev_fraction, seed)
    return collection


# --------------------------------------------------------------------------------------------------------------
# Loaders for files on disk
# --------------------------------------------------------------------------------------------------------------


def load_beir(
    path: str | Path,
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    splits: Iterable[str] | None = None,
) -> Collection:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv) or the `.zip` BEIR distributes.

    Splits are the qrels files present; a split's queries are the qids judged in it. Without qrels/dev.tsv, a
    seeded `dev_fraction` of train becomes dev (`carve_dev`). `splits` (default: all) limits which qrels files are
    opened at all: training asks for train and dev only, so test judgments are never read while training.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(
            f"{path}: BEIR folder or zip not found; get one from {BEIR_URL.format(name=path.stem or '<name>')}"
        )
    if path.suffix != ".zip":
        return _load_beir_root(path, dev_fraction, seed, name or path.name, splits)
    try:
        with zipfile.ZipFile(path) as zf:
            return _load_beir_root(_zip_root(zf, path), dev_fraction, seed, name or path.stem, splits)
    except zipfile.BadZipFile as e:
        raise DataError(f"{path}: not a valid zip file ({e}); download it again") from e


def _zip_root(zf: zipfile.ZipFile, path: Path) -> zipfile.Path:
    """The folder inside a BEIR zip that holds corpus.jsonl (BEIR zips hold `<name>/corpus.jsonl`)."""
    corpora = [n for n in zf.namelist() if PurePosixPath(n).name == "corpus.jsonl" and "__MACOSX" not in n]
    if not corpora:
        raise DataError(f"{path}: no corpus.jsonl inside the zip; expected a BEIR dataset zip")
    parent = str(PurePosixPath(min(corpora, key=len)).parent)
    return zipfile.Path(zf, at="" if parent == "." else parent + "/")


def _load_beir_root(root: PathLike, dev_fraction: float, seed: int, name: str, splits=None) -> Collection:
    corpus = read_corpus(root / "corpus.jsonl")
    queries = read_queries(root / "queries.jsonl")
    qrels_files = {s: root / "qrels" / f"{s}.tsv" for s in SPLIT_ORDER}
    qrels_files = {s: p for s, p in qrels_files.items() if p.exists()}
    if not qrels_files:
        raise DataError(f"{root / 'qrels'}: no train.tsv, dev.tsv or test.tsv; a BEIR folder needs at least one")
    if splits is not None:
        wanted = _wanted(splits)
        present = ", ".join(f"{s}.tsv" for s in qrels_files)
        qrels_files = {s: p for s, p in qrels_files.items() if s in wanted}
        if not qrels_files:
            raise DataError(f"{root / 'qrels'}: needs {' or '.join(f'{s}.tsv' for s in wanted)} here "
                            f"(found: {present})")
    doc_set = set(corpus[0])
    qrels = {s: read_qrels(p, queries, doc_set) for s, p in qrels_files.items()}
    return _assemble(name, corpus, queries, qrels, dev_fraction, seed)


def load_trec(
    topics_path: str | Path,
    qrels_path_by_split: Mapping[str, str | Path],
    corpus_path: str | Path,
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    topic_fields: tuple[str, ...] = ("title",),
) -> Collection:
    """TREC topics (SGML `<top>` blocks or `qid<TAB>text`), TREC qrels (`qid 0 docid rel`) per split, and a
    jsonl or tsv corpus (see `read_corpus`). Query text = the `topic_fields` of each topic (default: title)."""
    if not qrels_path_by_split:
        raise DataError("load_trec: no qrels files given; pass {'test': 'path/to/qrels', ...}")
    corpus_path = Path(corpus_path)
    corpus = read_corpus(corpus_path)
    queries = read_queries(Path(topics_path), topic_fields)
    doc_set = set(corpus[0])
    qrels = {s: read_qrels(Path(p), queries, doc_set) for s, p in qrels_path_by_split.items()}
    return _assemble(name or corpus_path.parent.name, corpus, queries, qrels, dev_fraction, seed)


def load_trec_dir(
    path: str | Path,
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    splits: Iterable[str] | None = None,
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
        wanted = _wanted(splits)
        qrels = {s: v for s, v in qrels.items() if s in wanted}
        if not any(qrels.values()):
            raise DataError(f"{path}: needs a qrels.{{{','.join(wanted)}}}.* file here (found: {found})")
    return load_trec(
        topics[0], {s: v[0] for s, v in qrels.items() if v}, corpora[0], dev_fraction, seed, name or path.name
    )


def load_msmarco(
    path: str | Path,
    dev_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    splits: Iterable[str] | None = None,
) -> Collection:
    """MS MARCO passage ranking: collection.tsv, queries.{train,dev}.tsv, qrels.{train,dev}.tsv.

    MS MARCO's public dev set has no hidden labels, so it serves as our **test** split; our dev split is
    carved from train. When qrels.dev.small.tsv is present it is used instead of qrels.dev.tsv (the official
    6,980-query evaluation subset). `splits` (default: all) limits which qrels files are read.
    """
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: MS MARCO folder not found; it needs collection.tsv, queries.*.tsv, qrels.*.tsv")
    corpus = read_corpus(path / "collection.tsv")
    doc_set = set(corpus[0])
    queries = {**read_queries(path / "queries.train.tsv"), **read_queries(path / "queries.dev.tsv")}
    test_qrels = path / "qrels.dev.small.tsv"
    if not test_qrels.exists():
        test_qrels = path / "qrels.dev.tsv"
    files = {"train": path / "qrels.train.tsv", "test": test_qrels}
    wanted = _wanted(splits) if splits is not None else ("train", "dev", "test")
    # dev is carved from train, so asking for dev reads the train qrels
    wanted_files = {"train"} if {"train", "dev"} & set(wanted) else set()
    wanted_files |= {"test"} & set(wanted)
    qrels = {s: read_qrels(p, queries, doc_set) for s, p in files.items() if s in wanted_files}
    if not qrels:
        raise DataError(f"{path}: MS MARCO has train (with a carved dev) and test splits, not {list(wanted)}")
    return _assemble(name or path.name, corpus, queries, qrels, dev_fraction, seed)


# --------------------------------------------------------------------------------------------------------------
# Nogueira & Cho (2017) HDF5 files
# --------------------------------------------------------------------------------------------------------------

_HDF5_SPLITS = {"train": "train", "valid": "dev", "test": "test"}
_HDF5_CHUNK = 65_536  # rows decoded at a time, so a 5.9M-article corpus is not held twice


def load_hdf5(dataset_path: str | Path, corpus_path: str | Path, name: str | None = None) -> Collection:
    """The MSA / TREC-CAR / Jeopardy files of Nogueira & Cho, "Task-Oriented Query Reformulation with
    Reinforcement Learning" (EMNLP 2017).

    The dataset file has `queries_{train,valid,test}` (query strings) and `doc_ids_{train,valid,test}` (each
    row a Python-list literal of relevant document *titles*); the corpus file has `title` and `text` arrays.
    Document ids are the titles; 'valid' becomes 'dev'; query ids are `f"{split}-{row}"`, grade 1.

    Defects of the published files are dropped with one counted warning each, not raised, because a user
    cannot fix them: a repeated corpus title keeps its first row; a cited title missing from the corpus (MSA has
    dangling citations) is dropped; a query that is empty or is left with no relevant document is dropped.
    """
    dataset_path, corpus_path = Path(dataset_path), Path(corpus_path)
    with _open_hdf5(corpus_path) as f:
        titles = _h5_strings(f, "title", corpus_path)
        texts = _h5_strings(f, "text", corpus_path)
    if len(titles) != len(texts):
        raise DataError(f"{corpus_path}: 'title' has {len(titles)} rows but 'text' has {len(texts)}")
    doc_ids, titles, texts = _first_of_each_title(titles, texts, corpus_path)
    known = set(doc_ids)

    queries, qrels = {}, {}
    dropped: dict[str, list[str]] = {"dangling": [], "empty": [], "unjudged": []}
    with _open_hdf5(dataset_path) as f:
        for h5_split, split in _HDF5_SPLITS.items():
            texts_q = _h5_strings(f, f"queries_{h5_split}", dataset_path)
            cited = _h5_strings(f, f"doc_ids_{h5_split}", dataset_path)
            if len(texts_q) != len(cited):
                raise DataError(
                    f"{dataset_path}: 'queries_{h5_split}' has {len(texts_q)} rows but 'doc_ids_{h5_split}' "
                    f"has {len(cited)}"
                )
            queries[split], qrels[split] = {}, {}
            for row, (text, literal) in enumerate(zip(texts_q, cited)):
                qid = f"{split}-{row}"
                titles_cited = _title_list(literal, dataset_path, f"doc_ids_{h5_split}", row)
                found = [_find_title(t, known) for t in titles_cited]
                dropped["dangling"] += [t for t, d in zip(titles_cited, found) if d is None]
                judged = {d: 1 for d in found if d is not None}
                if not text.strip():
                    dropped["empty"].append(qid)
                elif not judged:
                    dropped["unjudged"].append(qid)
                else:
                    queries[split][qid], qrels[split][qid] = text, judged
    _warn_dropped(dataset_path, dropped["dangling"], "cited titles not in the corpus")
    _warn_dropped(dataset_path, dropped["empty"], "queries with empty text")
    _warn_dropped(dataset_path, dropped["unjudged"], "queries left with no relevant document")
    splits = [s for s in queries if queries[s]]
    if not splits:
        raise DataError(f"{dataset_path}: no query has a relevant document in {corpus_path}; do the files match?")
    return Collection(
        name or dataset_path.stem.removesuffix("_dataset"),
        doc_ids, titles, texts,
        queries={s: queries[s] for s in splits},
        qrels={s: qrels[s] for s in splits},
    )


def _open_hdf5(path: Path) -> h5py.File:
    if not path.is_file():
        raise DataError(f"{path}: file not found; the HDF5 files are listed at {NOGUEIRA_CHO_URL}")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise DataError(f"{path}: not a readable HDF5 file ({e})") from e


def _h5_strings(f, key: str, path: Path) -> list[str]:
    """A 1-D string dataset as a list of str (h5py gives bytes for fixed-length and most variable-length data)."""
    if key not in f:
        raise DataError(f"{where(path, key=key)}: dataset missing (found: {', '.join(sorted(f.keys())) or 'none'})")
    ds = f[key]
    if not isinstance(ds, h5py.Dataset) or ds.ndim != 1 or ds.dtype.kind not in "OS":
        raise DataError(f"{where(path, key=key)}: expected a 1-D array of strings")
    out: list[str] = []
    for start in range(0, ds.shape[0], _HDF5_CHUNK):
        for row, value in enumerate(ds[start : start + _HDF5_CHUNK], start):
            if isinstance(value, bytes):
                try:
                    value = value.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{where(path, key=key)} row {row}: not valid UTF-8 ({e})") from e
            elif not isinstance(value, str):
                raise DataError(f"{where(path, key=key)} row {row}: expected a string, got {type(value).__name__}")
            out.append(value)
    return out


def _first_of_each_title(titles: list[str], texts: list[str], path: Path) -> tuple[list[str], list[str], list[str]]:
    """Keep the first row of each title (titles are the document ids); warn with the count of rows dropped."""
    seen: set[str] = set()
    keep, repeats = [], []
    for i, t in enumerate(titles):
        if t in seen:
            repeats.append(t)
        else:
            seen.add(t)
            keep.append(i)
    if not repeats:
        return titles, titles, texts
    _warn_dropped(path, repeats, "corpus rows whose title repeats an earlier row (first row kept)")
    ids = [titles[i] for i in keep]
    return ids, ids, [texts[i] for i in keep]


def _title_list(literal: str, path: Path, key: str, row: int) -> list[str]:
    """Parse one `doc_ids_*` row, a Python-list literal of titles, safely (ast.literal_eval, never eval)."""
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise DataError(f"{where(path, key=key)} row {row}: not a Python list literal ({e})") from e
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, (str, bytes)) for t in value):
        raise DataError(f"{where(path, key=key)} row {row}: expected a list of title strings")
    return [t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in value]


def _find_title(title: str, known: Container[str]) -> str | None:
    """The corpus id of a cited title, or None.

    The files were written with Python 2, where `str(list)` of UTF-8 byte strings escapes each byte
    ('Caf\\xc3\\xa9'); read back in Python 3 that is mojibake, which this undoes when the plain lookup fails.
    """
    if title in known:
        return title
    try:
        repaired = title.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return None
    return repaired if repaired in known else None


def _warn_dropped(path: Path, items: list[str], what: str) -> None:
    if items:
        logger.warning("%s: dropped %d %s, e.g. %s", path, len(items), what, ", ".join(map(repr, items[:3])))


# --------------------------------------------------------------------------------------------------------------
# ir_datasets
# --------------------------------------------------------------------------------------------------------------

_SPLIT_ALIASES = {"train": "train", "dev": "dev", "valid": "dev", "validation": "dev", "test": "test"}


def load_ir_datasets(
    dataset_id: str | Mapping[str, str], dev_fraction: float = 0.2, seed: int = 42, name: str | None = None
) -> Collection:
    """A collection from `ir_datasets` (https://ir-datasets.com), which downloads on first use.

    `dataset_id` is one id whose last part names the split ('beir/scifact/test' -> test) or a mapping
    split -> id ({'train': 'beir/scifact/train', 'test': 'beir/scifact/test'}). The corpus is taken from the
    first id; all ids must share it.
    """
    try:
        import ir_datasets
    except ImportError as e:
        raise DataError("dataset_type 'ir_datasets' needs the ir_datasets package: pip install ir_datasets") from e
    ids = _split_ids(dataset_id)
    datasets = {}
    for split, ds_id in ids.items():
        try:
            datasets[split] = ir_datasets.load(ds_id)
        except KeyError as e:
            raise DataError(f"ir_datasets has no dataset '{ds_id}'; see https://ir-datasets.com for ids") from e

    first_id, first = next(iter(ids.values())), next(iter(datasets.values()))
    doc_ids, titles, texts, seen = [], [], [], {}
    for n, doc in enumerate(first.docs_iter(), 1):
        _check_new(seen, doc.doc_id, "document id", first_id, n)
        doc_ids.append(doc.doc_id)
        titles.append(getattr(doc, "title", "") or "")
        texts.append(getattr(doc, "text", None) or getattr(doc, "body", None) or "")

    queries, qrels = {}, {}
    for split, ds in datasets.items():
        for q in ds.queries_iter():
            queries[q.query_id] = getattr(q, "text", None) or getattr(q, "title", None) or ""  # TrecQuery: title
        qrels[split] = {}
        for r in ds.qrels_iter():
            loc = where(ids[split], key=f"{r.query_id}/{r.doc_id}")
            if not queries.get(r.query_id, "").strip():
                raise DataError(f"{loc}: judged query has no text")
            if r.doc_id not in seen:
                raise DataError(f"{loc}: judged document is not in the corpus of '{first_id}'")
            qrels[split].setdefault(r.query_id, {})[r.doc_id] = int(r.relevance)
    label = name or first_id.rsplit("/", 1)[0].replace("/", "-")  # 'beir/scifact/test' -> 'beir-scifact'
    return _assemble(label, (doc_ids, titles, texts), queries, qrels, dev_fraction, seed)


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


# --------------------------------------------------------------------------------------------------------------
# The embedded default collection
# --------------------------------------------------------------------------------------------------------------

# Pseudo-words are consonant-vowel syllables closed by a consonant ("bakotun"). The letters are chosen so that no
# word is an English stopword and a Porter/Snowball stemmer leaves every word unchanged (no -s/-ed/-ing/-al/-er/
# -ic/-e endings are possible), so the collection behaves the same under any analyzer setting.
_ONSETS = "bdfgklmnprtvz"
_VOWELS = "aeiou"
_FINALS = "kmnptxz"


@dataclass(frozen=True)
class _DefaultSpec:
    """Shape of the default collection (the defaults are what `make_default()` generates)."""

    num_topics: int = 32
    subtopics_per_topic: int = 4
    num_docs: int = 2000
    own_words: int = 18  # words specific to a subtopic
    sibling_words: int = 5  # words borrowed from a sibling subtopic (same topic): ambiguity
    decoy_words: int = 3  # words borrowed from a subtopic of another topic: ambiguity
    topic_words: int = 10  # shared by the subtopics of a topic
    background_words: int = 400  # shared by every document, Zipf-distributed
    doc_len: tuple[int, int] = (60, 120)
    active_words: tuple[int, int] = (3, 7)  # subtopic words one document uses (a random subset: mismatch)
    subtopic_share: tuple[float, float] = (0.25, 0.4)  # of a document's tokens
    digression: float = 0.8  # at most this share of those tokens come from a sibling subtopic...
    digression_words: int = 3  # ...drawn from this many of the sibling's words
    topic_share: tuple[float, float] = (0.08, 0.15)  # of a document's tokens; the rest is background
    query_words: tuple[int, int] = (1, 3)  # subtopic words in a query, plus one common (background) word...
    query_common_words: int = 200  # ...among this many most frequent, so that every query matches far more than
    # 40 documents: the R@40 cut-off binds and a misleading expansion term can push relevant documents out
    query_topic_word: float = 0.3  # probability that a query also has a topic word
    split_sizes: tuple[tuple[str, int], ...] = (("train", 250), ("dev", 70), ("test", 80))


def make_default(seed: int = 13, **spec) -> Collection:
    """The embedded default collection, generated deterministically from `seed` (no files, no network).

    32 topics x 4 subtopics; each subtopic has its own pseudo-word vocabulary. A document belongs to one subtopic
    and uses only a random subset of its words, mixed with words of a sibling subtopic, topic words and Zipfian
    background words, so a short query misses many relevant documents, and the co-occurring subtopic words
    found in the top documents are the expansion terms that help (while the sibling's words mislead). A query is
    1-3 words of its subtopic, one common word and sometimes a topic word (2-5 words); its relevant documents are
    the subtopic's documents (8-21 each).
    Keyword arguments override `_DefaultSpec` fields.
    """
    return make_default_with_oracle(seed, **spec)[0]


def make_default_with_oracle(seed: int = 13, **spec) -> tuple[Collection, dict[str, list[str]]]:
    """`make_default`, plus for every query the words specific to its subtopic: the ideal expansion terms,
    for measuring how much reformulation could gain."""
    s = _DefaultSpec(**spec)
    rng = np.random.default_rng(seed)
    words = _PseudoWords(random.Random(seed))
    n_sub = s.num_topics * s.subtopics_per_topic
    # Word lists become numpy arrays once, because rng.choice on a Python list converts it on every call.
    background = np.array(words.take(s.background_words))
    topic_vocab = [np.array(words.take(s.topic_words)) for _ in range(s.num_topics)]
    own = [words.take(s.own_words) for _ in range(n_sub)]
    vocab = [np.array(_subtopic_vocab(k, own, s, rng)) for k in range(n_sub)]

    # Subtopic sizes vary +-40% around the mean.
    weights = rng.uniform(0.6, 1.4, n_sub)
    sizes = np.floor(weights / weights.sum() * s.num_docs).astype(int)
    sizes[: s.num_docs - sizes.sum()] += 1
    doc_sub = rng.permutation(np.repeat(np.arange(n_sub), sizes))  # corpus order says nothing about subtopics
    titles, texts = [], []
    for k in doc_sub:
        sibling, topic = _sibling(int(k), s.subtopics_per_topic, rng), topic_vocab[k // s.subtopics_per_topic]
        title, text = _default_doc(vocab[k], vocab[sibling], topic, background, s, rng)
        titles.append(title)
        texts.append(text)
    doc_ids = [f"D{i:05d}" for i in range(len(doc_sub))]
    members = [[doc_ids[i] for i in np.flatnonzero(doc_sub == k)] for k in range(n_sub)]

    queries, qrels, oracle, used = {}, {}, {}, set()
    for split, count in s.split_sizes:
        queries[split], qrels[split] = {}, {}
        while len(queries[split]) < count:
            k = int(rng.integers(n_sub))
            length = int(rng.integers(s.query_words[0], s.query_words[1] + 1))
            terms = rng.choice(vocab[k], size=length, replace=False).tolist()
            terms.append(str(rng.choice(background[: s.query_common_words])))
            if rng.random() < s.query_topic_word:
                terms.append(str(rng.choice(topic_vocab[k // s.subtopics_per_topic])))
            if (k, frozenset(terms)) in used:  # the same query in two splits would leak test into train
                continue
            used.add((k, frozenset(terms)))
            qid = f"Q{len(used):04d}"
            queries[split][qid] = " ".join(terms)
            qrels[split][qid] = {d: 1 for d in members[k]}
            oracle[qid] = list(own[k])
    return Collection("default", doc_ids, titles, texts, queries, qrels), oracle


class _PseudoWords:
    """Draws pseudo-words that were never drawn before."""

    def __init__(self, rnd: random.Random):
        self.rnd, self.taken = rnd, set()

    def take(self, n: int) -> list[str]:
        out = []
        while len(out) < n:
            syllables = self.rnd.randint(2, 3)
            word = "".join(self.rnd.choice(_ONSETS) + self.rnd.choice(_VOWELS) for _ in range(syllables))
            word += self.rnd.choice(_FINALS)
            if word not in self.taken:
                self.taken.add(word)
                out.append(word)
        return out


def _sibling(k: int, per_topic: int, rng: np.random.Generator) -> int:
    """A random other subtopic of the same topic."""
    first = k - k % per_topic
    return first + (k % per_topic + int(rng.integers(1, per_topic))) % per_topic


def _subtopic_vocab(k: int, own: list[list[str]], s: _DefaultSpec, rng: np.random.Generator) -> list[str]:
    """A subtopic's words, most frequent first: its own, a few of a sibling's and a few of an unrelated
    subtopic's (a decoy), shuffled so that a borrowed word can be as common here as where it came from."""
    topic = k // s.subtopics_per_topic
    others = [j for j in range(len(own)) if j // s.subtopics_per_topic != topic]
    sibling = own[_sibling(k, s.subtopics_per_topic, rng)]
    decoy = own[int(rng.choice(others))]
    borrowed = rng.choice(sibling, s.sibling_words, replace=False).tolist()
    borrowed += rng.choice(decoy, s.decoy_words, replace=False).tolist()
    return rng.permutation(own[k] + borrowed).tolist()


@functools.lru_cache(maxsize=None)
def _zipf(n: int, exponent: float = 1.0) -> np.ndarray:
    """Zipf probabilities for ranks 1..n (cached: the same few shapes are drawn thousands of times)."""
    p = 1.0 / np.arange(1, n + 1) ** exponent
    return p / p.sum()


def _default_doc(
    vocab: np.ndarray,
    sibling_vocab: np.ndarray,
    topic: np.ndarray,
    background: np.ndarray,
    s: _DefaultSpec,
    rng: np.random.Generator,
) -> tuple[str, str]:
    """One document of a subtopic that digresses into a sibling subtopic: (title, text)."""
    length = int(rng.integers(s.doc_len[0], s.doc_len[1] + 1))
    # Which subtopic words a document uses is Zipf-weighted: some are common in the subtopic, most are rare.
    n_active = int(rng.integers(s.active_words[0], s.active_words[1] + 1))
    active = rng.choice(vocab, size=n_active, replace=False, p=_zipf(len(vocab), 0.6))
    digress = rng.choice(sibling_vocab, size=s.digression_words, replace=False, p=_zipf(len(sibling_vocab), 0.6))
    n_sub = int(length * rng.uniform(*s.subtopic_share))
    n_digress = int(n_sub * rng.uniform(0, s.digression))
    n_topic = int(length * rng.uniform(*s.topic_share))
    tokens = np.concatenate([
        rng.choice(active, n_sub - n_digress, p=_zipf(n_active)),
        rng.choice(digress, n_digress),
        rng.choice(topic, n_topic, p=_zipf(len(topic))),
        rng.choice(background, length - n_sub - n_topic, p=_zipf(len(background))),
    ])
    rng.shuffle(tokens)
    title = " ".join([*active[:2], rng.choice(topic)])
    return title, " ".join(tokens.tolist())


# --------------------------------------------------------------------------------------------------------------
# Choosing a loader from the config
# --------------------------------------------------------------------------------------------------------------

_HDF5_FILES = {
    "msa": ("msa",),
    "trec_car": ("trec_car", "trec-car"),  # the dl4ir-query-reformulator README names the files trec-car_*
    "jeopardy": ("jeopardy",),
}
DATASET_TYPES = ("default", "beir", "trec", "msmarco", *_HDF5_FILES, "ir_datasets")


def load_collection(data_cfg, seed: int, splits: Iterable[str] | None = None) -> Collection:
    """The collection a config asks for.

    `data_cfg` is any object with `dataset_type`, `data_dir`, `dev_fraction` and `ir_datasets_id`. `seed` only
    decides which train queries are carved into dev; the default collection is always generated with its own
    fixed seed, so it is the same benchmark whatever the training seed. The HDF5 collections ship their own
    valid split, so `dev_fraction` does not apply to them.

    `splits` (default: all) names the splits wanted; for file-based collections only their qrels files are
    read (training passes ('train', 'dev') so test judgments stay unopened until evaluation asks for them).
    """
    kind = data_cfg.dataset_type
    if kind not in DATASET_TYPES:
        raise DataError(f"unknown dataset_type '{kind}'; choose one of {', '.join(DATASET_TYPES)}")
    if kind == "default":
        return _only(make_default(), splits)
    if kind == "ir_datasets":
        if not data_cfg.ir_datasets_id:
            raise DataError("dataset_type 'ir_datasets' needs data.ir_datasets_id, e.g. 'beir/scifact/test'")
        return _only(load_ir_datasets(data_cfg.ir_datasets_id, data_cfg.dev_fraction, seed), splits)
    root = _data_dir(data_cfg)
    if kind == "beir":
        return load_beir(root, data_cfg.dev_fraction, seed, splits=splits)
    if kind == "trec":
        return load_trec_dir(root, data_cfg.dev_fraction, seed, splits=splits)
    if kind == "msmarco":
        return load_msmarco(root, data_cfg.dev_fraction, seed, splits=splits)
    return _only(load_hdf5(*_hdf5_pair(root, kind), name=kind), splits)


def _wanted(splits: Iterable[str]) -> tuple[str, ...]:
    """The requested split names; asking for dev also needs train (a missing dev split is carved from it)."""
    wanted = tuple(dict.fromkeys(splits))
    return (*wanted, "train") if "dev" in wanted and "train" not in wanted else wanted


def _only(collection: Collection, splits: Iterable[str] | None) -> Collection:
    """`collection` keeping only `splits` (for sources whose splits share one file or live in memory)."""
    if splits is None:
        return collection
    wanted = set(splits)
    return replace(collection, queries={s: q for s, q in collection.queries.items() if s in wanted},
                   qrels={s: q for s, q in collection.qrels.items() if s in wanted})


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
    for prefix in _HDF5_FILES[kind]:
        dataset, corpus = root / f"{prefix}_dataset.hdf5", root / f"{prefix}_corpus.hdf5"
        if dataset.is_file() and corpus.is_file():
            return dataset, corpus
    expected = f"{_HDF5_FILES[kind][0]}_dataset.hdf5 and {_HDF5_FILES[kind][0]}_corpus.hdf5"
    raise DataError(
        f"{root}: expected {expected} (from {NOGUEIRA_CHO_URL}); found: "
        f"{', '.join(sorted(p.name for p in root.iterdir())) or 'nothing'}. {QUICKSTART_HINT}"
    )
