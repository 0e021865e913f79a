"""The Nogueira & Cho HDF5 files, on tiny files written here: each way their code (dl4ir-query-reformulator)
reads the files, reproduced — repeated titles, dangling citations, empty queries, the query's own document,
bad UTF-8, splits read only when asked — and the collection streamed from disk."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch

from adaptive_ir.common.errors import DataError
from adaptive_ir.config import load_config
from adaptive_ir.data import HDF5Corpus, load_collection, load_hdf5
from adaptive_ir.evaluation.metrics import bm25_run, drop_excluded, evaluate_run
from adaptive_ir.retrieval.retriever import Retriever
from adaptive_ir.rl.env import ReformulationEnv

VSTR = h5py.string_dtype("utf-8")


def write_h5(path: Path, datasets: dict, fixed_bytes: bool = False) -> Path:
    """Write string datasets, as variable-length UTF-8 or as fixed-length bytes (both occur in old files)."""
    with h5py.File(path, "w") as f:
        for key, rows in datasets.items():
            if fixed_bytes:
                f.create_dataset(key, data=np.array([r if isinstance(r, bytes) else r.encode() for r in rows]))
            else:
                f.create_dataset(key, data=rows, dtype=VSTR)
    return path


CORPUS = {
    "title": ["Deep learning", "Café society", "Deep learning", "Word vectors", "Lucene"],
    "text": ["nets", "coffee", "duplicate row", "embeddings", "search engine"],
}
DATASET = {
    "queries_train": ["Query reformulation", "Neural ranking", "Orphan paper"],
    "doc_ids_train": [
        "['Deep learning', 'Word vectors', 'A paper not in the corpus']",
        "['Lucene']",
        "['Missing one', 'Missing two']",
    ],
    # Python 2 wrote UTF-8 byte strings as escapes: read in Python 3 they are mojibake, repaired on lookup
    "queries_valid": ["Coffee", "   "],
    "doc_ids_valid": ["['Caf\\xc3\\xa9 society']", "['Lucene']"],
    # an MS Academic query is the title of its own paper, which is in the corpus (row 3)
    "queries_test": ["Word Vectors."],
    "doc_ids_test": ["[u'Lucene', u'Deep learning']"],
}


def make_msa(root: Path, fixed_bytes: bool = False, corpus: dict | None = None, **overrides) -> tuple[Path, Path]:
    root.mkdir(parents=True, exist_ok=True)
    return (
        write_h5(root / "msa_dataset.hdf5", DATASET | overrides, fixed_bytes),
        write_h5(root / "msa_corpus.hdf5", corpus or CORPUS, fixed_bytes),
    )


def cfg(dataset_type: str, data_dir: Path, exclude_query_title: bool | None = None):
    return SimpleNamespace(dataset_type=dataset_type, data_dir=str(data_dir), dev_fraction=0.2, ir_datasets_id=None,
                           exclude_query_title=exclude_query_title)


@pytest.mark.parametrize("fixed_bytes", [False, True])
def test_every_row_is_a_document_and_qrels_follow_their_title_map(tmp_path, caplog, fixed_bytes):
    dataset, corpus = make_msa(tmp_path, fixed_bytes)
    with caplog.at_level(logging.WARNING, logger="adaptive_ir.data"):
        c = load_hdf5(dataset, corpus)
    assert c.name == "msa" and c.splits == ["train", "dev", "test"]
    # ids are the rows (their Lucene 'id' field): unique and space-free even where a title repeats
    assert list(c.doc_ids) == ["0", "1", "2", "3", "4"] and c.num_docs == 5
    assert c.doc_texts() == ["Deep learning nets", "Café society coffee", "Deep learning duplicate row",
                             "Word vectors embeddings", "Lucene search engine"]
    assert c.doc_texts_at([4, 2]) == ["Lucene search engine", "Deep learning duplicate row"]
    # a repeated title is relevant at its LAST row (their get_title_id_map keeps the last row of a title)
    assert c.qrels["train"]["train-0"] == {"2": 1, "3": 1} and c.qrels["train"]["train-1"] == {"4": 1}
    assert c.qrels["dev"]["dev-0"] == {"1": 1}  # the mojibake citation, repaired
    assert c.qrels["test"] == {"test-0": {"4": 1, "2": 1}}
    assert "1 cited titles occur in more than one row" in caplog.text and "'Deep learning'" in caplog.text
    assert "3 cited titles are not in the corpus" in caplog.text


def test_an_earlier_row_of_a_repeated_title_is_searchable_but_not_a_hit(tmp_path):
    c = load_hdf5(*make_msa(tmp_path))
    retriever = Retriever.build(c)
    scores, idx = retriever.search(retriever.encode(["deep learning"]), k=5)
    assert {0, 2} <= set(idx[0][scores[0] > 0].tolist())  # both rows are indexed
    qrels = {"train-0": c.qrels["train"]["train-0"]}  # relevant: rows 2 and 3
    # their recall counts an id only if it is the title map's row: retrieving row 0 earns nothing
    assert evaluate_run(qrels, {"train-0": {"0": 2.0, "3": 1.0}})["R@10"] == pytest.approx(0.5)
    assert evaluate_run(qrels, {"train-0": {"2": 2.0, "3": 1.0}})["R@10"] == pytest.approx(1.0)


def test_queries_without_relevant_documents_and_empty_queries_are_kept(tmp_path, caplog):
    dataset, corpus = make_msa(tmp_path)
    with caplog.at_level(logging.WARNING, logger="adaptive_ir.data"):
        c = load_hdf5(dataset, corpus)
    qids, texts, qrels = c.split("train")
    assert qids == ["train-0", "train-1", "train-2"] and qrels["train-2"] == {}  # every citation dangles: recall 0
    assert c.queries["dev"] == {"dev-0": "Coffee", "dev-1": "   "} and c.qrels["dev"]["dev-1"] == {"4": 1}
    assert "1 queries have no relevant document in the corpus; kept" in caplog.text and "'train-2'" in caplog.text
    assert "1 queries have empty text; kept" in caplog.text and "'dev-1'" in caplog.text


def test_no_relevant_document_anywhere_means_the_files_do_not_match(tmp_path):
    dataset, corpus = make_msa(tmp_path, corpus={"title": ["Other"], "text": ["x"]})
    with pytest.raises(DataError, match="no query has a relevant document in .*do the files match"):
        load_hdf5(dataset, corpus)


def test_rows_that_are_not_utf8_are_replaced_and_counted_once(tmp_path, caplog):
    corpus = {"title": [t.encode() for t in CORPUS["title"]],
              "text": [b"nets", b"coffee", b"\xff\xfe row", b"embeddings", b"caf\xe9"]}
    dataset, corpus_path = make_msa(tmp_path, fixed_bytes=True, corpus=corpus,
                                    queries_train=[b"Query reformulation", b"Neural \xe9", b"Orphan paper"])
    with caplog.at_level(logging.WARNING, logger="adaptive_ir.data"):
        c = load_hdf5(dataset, corpus_path)
        assert "msa_dataset.hdf5: 1 rows are not valid UTF-8" in caplog.text
        assert c.queries["train"]["train-1"] == "Neural \ufffd"
        caplog.clear()
        texts = c.doc_texts()
        assert texts[2] == "Deep learning \ufffd\ufffd row" and texts[4] == "Lucene caf\ufffd"
        assert caplog.text.count("rows are not valid UTF-8") == 1
        assert "msa_corpus.hdf5: 2 rows are not valid UTF-8" in caplog.text and "first at row 2" in caplog.text
        caplog.clear()
        c.doc_texts()
        assert "not valid UTF-8" not in caplog.text  # one warning per corpus, not one per pass
    assert c.doc_texts_at([2]) == ["Deep learning \ufffd\ufffd row"]


def test_only_the_splits_asked_for_are_read(tmp_path, monkeypatch):
    dataset, _ = make_msa(tmp_path)
    read: list[tuple[str, str]] = []  # (file, array) of every read of array data
    real = h5py.Dataset.__getitem__

    def recording(self, args, *more, **kw):
        read.append((Path(self.file.filename).name, self.name.lstrip("/")))
        return real(self, args, *more, **kw)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", recording)
    training = load_collection(cfg("msa", tmp_path), 0, splits=("train", "dev"))
    assert training.splits == ["train", "dev"]
    assert {k for f, k in read if f == dataset.name} == {"queries_train", "doc_ids_train", "queries_valid",
                                                        "doc_ids_valid"}
    assert "text" not in {k for f, k in read if f == "msa_corpus.hdf5"}  # titles suffice to load
    read.clear()
    test = load_collection(cfg("msa", tmp_path), 0, splits=("test",), corpus=training.corpus)
    assert test.splits == ["test"] and {k for f, k in read if f == dataset.name} == {"queries_test", "doc_ids_test"}
    assert load_collection(cfg("msa", tmp_path), 0, splits=("dev",)).splits == ["dev"]  # no carving: no train


def test_the_query_title_document_is_excluded_for_the_nogueira_cho_types(tmp_path):
    make_msa(tmp_path)
    c = load_collection(cfg("msa", tmp_path), 0)
    assert c.excluded_docs("test") == {"test-0": "3"}  # 'Word Vectors.' is the title of row 3
    assert c.excluded_docs("train") == {} and c.excluded_docs("dev") == {}
    assert load_collection(cfg("msa", tmp_path, exclude_query_title=False), 0).excluded_docs("test") == {}
    # the same query asked of a type where the option is off by default
    assert load_hdf5(tmp_path / "msa_dataset.hdf5", tmp_path / "msa_corpus.hdf5").excluded == {}
    qids, texts, qrels = c.split("test")
    run = bm25_run(Retriever.build(c), qids, texts, k=5)
    assert next(iter(run["test-0"])) == "3"  # BM25 ranks the query's own paper first...
    kept = drop_excluded(run, c.excluded_docs("test"))
    assert "3" not in kept["test-0"] and len(kept["test-0"]) == len(run["test-0"]) - 1  # ...and it is dropped


def test_a_repeated_title_excludes_its_last_row(tmp_path):
    make_msa(tmp_path, queries_test=["deep   LEARNING"])
    assert load_collection(cfg("msa", tmp_path), 0).excluded_docs("test") == {"test-0": "2"}


def test_evaluation_drops_the_excluded_document_from_every_run(tmp_path):
    from adaptive_ir.evaluation.methods import evaluate_split
    from adaptive_ir.rl.workspace import Workspace

    # the Lucene row mentions word vectors too, so the test query still retrieves something once its own title
    # row (3, "Word vectors") is left out
    make_msa(tmp_path / "msa", corpus={**CORPUS, "text": [*CORPUS["text"][:4], "search engine over word vectors"]})
    config = load_config("quickstart", {"data.dataset_type": "msa", "data.data_dir": str(tmp_path / "msa"),
                                        "training.output_dir": str(tmp_path / "out"), "system.device": "cpu",
                                        "candidate_mining.top_k0": "3", "candidate_mining.min_candidates": "1"})
    ws = Workspace(config, torch.device("cpu"), progress=False, splits=("train", "dev"))
    train, _ = ws.split("train", judged_only=True)
    assert train.qids == ["train-0", "train-1"]  # training skips the query with no relevant document
    dev, _ = ws.split("dev")
    assert dev.qids == ["dev-0", "dev-1"]  # evaluation keeps every query, the empty one too
    evaluate_split(config, ws, None, None, "test", baselines=True, run_dir=tmp_path / "runs", oracle=True)
    assert ws.collection.excluded_docs("test") == {"test-0": "3"}
    for method in ("bm25", "rm3", "oracle"):
        docs = [line.split()[2] for line in (tmp_path / "runs" / f"test.{method}.trec").read_text().splitlines()]
        assert docs and "3" not in docs, method
    # the RL reward never counts it either: judged relevant on purpose, it stays unretrieved
    qs, _ = ws.query_set("test", ["test-0"], ["Word Vectors."], {"test-0": {"3": 1, "4": 1}})
    assert qs.exclude_docs.tolist() == [3]
    env = ReformulationEnv(qs, ws.retriever.index, max_steps=1, reward_k=40)
    env.reset(torch.arange(1))
    assert env.metric.tolist() == [0.5]  # row 4 found, row 3 (the query's own title) never


def test_row_ids_resolve_only_canonical_row_numbers(tmp_path):
    c = load_hdf5(*make_msa(tmp_path))
    assert c.doc_positions(["4", "04", "5", "x", "-1", "\u0663", "0"]).tolist() == [4, -1, -1, -1, -1, -1, 0]
    assert c.doc_ids[-1] == "4" and c.doc_ids[1:3] == ["1", "2"] and "3" in c.doc_ids and "03" not in c.doc_ids


def test_missing_dataset_lists_what_is_there(tmp_path):
    dataset, corpus = make_msa(tmp_path)
    with h5py.File(dataset, "a") as f:
        del f["doc_ids_valid"]
    message = r"msa_dataset\.hdf5 \(key 'doc_ids_valid'\): dataset missing \(found: doc_ids_test, doc_ids_train, que"
    with pytest.raises(DataError, match=message):
        load_hdf5(dataset, corpus)


@pytest.mark.parametrize(
    "override, message",
    [
        ({"doc_ids_test": ["__import__('os').system('exit 3')"]}, r"doc_ids_test'\) row 0: not a Python list literal"),
        ({"doc_ids_test": ["{'a': 1}"]}, r"doc_ids_test'\) row 0: expected a list of title strings"),
        ({"doc_ids_test": ["['Lucene']", "['Lucene']"]}, r"'queries_test' has 1 rows but 'doc_ids_test' has 2"),
    ],
)
def test_bad_rows(tmp_path, override, message):
    dataset, corpus = make_msa(tmp_path, **override)
    with pytest.raises(DataError, match=message):
        load_hdf5(dataset, corpus)


def test_not_strings_not_hdf5_and_missing(tmp_path):
    dataset, corpus = make_msa(tmp_path)
    with h5py.File(corpus, "a") as f:
        del f["text"]
        f["text"] = np.arange(5)
    with pytest.raises(DataError, match=r"msa_corpus\.hdf5 \(key 'text'\): expected a 1-D array of strings"):
        load_hdf5(dataset, corpus)
    with h5py.File(corpus, "a") as f:
        del f["text"]
        f.create_dataset("text", data=["a", "b"], dtype=VSTR)
    with pytest.raises(DataError, match=r"'title' has 5 rows but 'text' has 2"):
        HDF5Corpus(corpus)
    (tmp_path / "fake.hdf5").write_text("hello")
    with pytest.raises(DataError, match="not a readable HDF5 file"):
        load_hdf5(dataset, tmp_path / "fake.hdf5")
    with pytest.raises(DataError, match="file not found; the HDF5 files are listed at https://github.com/nyu-dl"):
        load_hdf5(dataset, tmp_path / "none.hdf5")


def test_load_collection_finds_each_type_and_spelling(tmp_path):
    make_msa(tmp_path / "msa")
    assert load_collection(cfg("msa", tmp_path / "msa"), 0).name == "msa"
    car = tmp_path / "car"
    car.mkdir()
    for kind in ("dataset", "corpus"):  # the dl4ir-query-reformulator README spells them trec-car_*
        (car / f"trec-car_{kind}.hdf5").write_bytes((tmp_path / "msa" / f"msa_{kind}.hdf5").read_bytes())
    assert load_collection(cfg("trec_car", car), 0).name == "trec_car"
