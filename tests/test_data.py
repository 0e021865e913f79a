"""Tests for adaptive_ir.data: every loader on tiny files written here, bad input, the embedded default
collection (including that its lexical mismatch is real), and the real collections when they are present."""

from __future__ import annotations

import gzip
import json
import logging
import re
import sys
import types
import zipfile
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adaptive_ir.common.errors import AdaptiveIRError, DataError
from adaptive_ir.data import (
    Collection,
    MemoryCorpus,
    carve_dev,
    load_beir,
    load_collection,
    load_ir_datasets,
    load_msmarco,
    load_trec,
    load_trec_dir,
    make_default,
    make_default_with_oracle,
    natural_key,
)
from adaptive_ir.data.lines import read_queries

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"

# --------------------------------------------------------------------------------------------------------------
# Tiny files
# --------------------------------------------------------------------------------------------------------------

DOCS = [
    {"_id": "d1", "title": "Aspirin", "text": "aspirin reduces fever"},
    {"_id": "d2", "title": "Ibuprofen", "text": "ibuprofen reduces pain"},
    {"_id": "d3", "title": "", "text": ""},  # an empty document is harmless and kept
    {"_id": "d4", "title": "Paracetamol", "text": "paracetamol for fever"},
]
QUERIES = {str(i): f"query number {i}" for i in range(1, 13)} | {"99": "never judged"}
TRAIN_QRELS = [(str(q), "d1", 1) for q in range(1, 11)]
TEST_QRELS = [("11", "d2", 1), ("11", "d4", 2), ("12", "d1", 1)]


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_qrels(path: Path, rows, header: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"] if header else []
    path.write_text("\n".join(lines + [f"{q}\t{d}\t{s}" for q, d, s in rows]) + "\n", encoding="utf-8")
    return path


def make_beir(root: Path, docs=DOCS, queries=QUERIES, train=TRAIN_QRELS, test=TEST_QRELS) -> Path:
    write_jsonl(root / "corpus.jsonl", docs)
    write_jsonl(root / "queries.jsonl", [{"_id": q, "text": t} for q, t in queries.items()])
    if train is not None:
        write_qrels(root / "qrels" / "train.tsv", train)
    write_qrels(root / "qrels" / "test.tsv", test, header=False)
    return root


@pytest.fixture
def beir(tmp_path) -> Path:
    return make_beir(tmp_path / "tiny")


# --------------------------------------------------------------------------------------------------------------
# Collection, natural order, carve_dev
# --------------------------------------------------------------------------------------------------------------


def test_collection_doc_text_splits_and_split(beir):
    c = load_beir(beir)
    assert c.name == "tiny"
    assert list(c.doc_ids) == ["d1", "d2", "d3", "d4"] and c.num_docs == 4
    assert c.doc_texts_at([0]) == ["Aspirin aspirin reduces fever"]
    assert c.doc_texts_at([2]) == [" "]  # empty documents are kept, exactly title + " " + text
    assert c.doc_texts() == c.doc_texts_at(range(4)) == [t for chunk in c.iter_doc_texts(3) for t in chunk]
    assert c.doc_positions(["d4", "d404", "d1"]).tolist() == [3, -1, 0]
    assert c.splits == ["train", "dev", "test"]
    qids, texts, qrels = c.split("test")
    assert qids == ["11", "12"]
    assert texts == ["query number 11", "query number 12"]
    assert qrels == {"11": {"d2": 1, "d4": 2}, "12": {"d1": 1}}
    assert "99" not in {q for s in c.splits for q in c.queries[s]}  # unjudged queries are left out


def test_keep_queries_forgets_the_others_of_that_split_only(beir):
    c = load_beir(beir)
    dev = c.split("dev")
    c.excluded = {"test": {"11": "d2", "12": "d1"}}
    c.keep_queries("test", ["12", "404"])
    assert c.split("test") == (["12"], ["query number 12"], {"12": {"d1": 1}})
    assert c.excluded == {"test": {"12": "d1"}} and c.split("dev") == dev


def test_split_missing_names_split_and_available(beir):
    with pytest.raises(DataError, match=r"no 'valid' split \(available: train, dev, test\)"):
        load_beir(beir).split("valid")


def test_natural_key_orders_numbers_numerically():
    ids = ["10", "2", "q10", "q2", "1", "01", "b"]
    assert sorted(ids, key=natural_key) == ["01", "1", "2", "10", "b", "q2", "q10"]


def tiny_collection(n_train=10) -> Collection:
    train = {f"t{i}": f"train {i}" for i in range(n_train)}
    test = {"x1": "test 1", "x2": "test 2"}
    return Collection(
        "tiny", MemoryCorpus(["d"], [""], ["text"]),
        queries={"train": train, "test": test},
        qrels={"train": {q: {"d": 1} for q in train}, "test": {q: {"d": 1} for q in test}},
    )


def test_carve_dev_is_seeded_disjoint_and_leaves_test_alone():
    c = tiny_collection()
    a, b, other = carve_dev(c, 0.2, seed=7), carve_dev(c, 0.2, seed=7), carve_dev(c, 0.2, seed=8)
    assert a.queries == b.queries and a.qrels == b.qrels
    assert len(a.queries["dev"]) == 2 and len(a.queries["train"]) == 8
    assert set(a.queries["dev"]).isdisjoint(a.queries["train"])
    assert set(a.queries["dev"]) | set(a.queries["train"]) == set(c.queries["train"])
    assert set(a.qrels["dev"]) == set(a.queries["dev"])
    assert a.queries["test"] == c.queries["test"] and a.qrels["test"] == c.qrels["test"]
    assert "dev" not in c.queries  # the input is not modified
    # the rule is the documented one: natural order, then random.Random(seed).shuffle, first round(f * n)
    import random

    order = sorted(c.queries["train"], key=natural_key)
    random.Random(7).shuffle(order)
    assert set(a.queries["dev"]) == set(order[:2])
    assert any(set(carve_dev(c, 0.2, seed=s).queries["dev"]) != set(a.queries["dev"]) for s in range(8, 12))
    assert other.splits == ["train", "dev", "test"]


def test_carve_dev_keeps_at_least_one_query_on_each_side():
    c = carve_dev(tiny_collection(n_train=2), 0.01, seed=0)
    assert len(c.queries["dev"]) == 1 and len(c.queries["train"]) == 1


@pytest.mark.parametrize(
    "collection, fraction, message",
    [
        (tiny_collection(), 0.0, "dev_fraction must be in"),
        (tiny_collection(), 1.0, "dev_fraction must be in"),
        (tiny_collection(n_train=1), 0.5, "need 2"),
        (carve_dev(tiny_collection(), 0.2, 0), 0.2, "already has a 'dev' split"),
        (Collection("t", MemoryCorpus(["d"], [""], [""]), {"test": {"q": "x"}}, {"test": {"q": {"d": 1}}}), 0.2,
         "no 'train'"),
    ],
)
def test_carve_dev_errors(collection, fraction, message):
    with pytest.raises(DataError, match=message):
        carve_dev(collection, fraction, seed=0)


# --------------------------------------------------------------------------------------------------------------
# BEIR
# --------------------------------------------------------------------------------------------------------------


def test_beir_carves_dev_from_train_deterministically(beir):
    a, b = load_beir(beir, dev_fraction=0.3, seed=1), load_beir(beir, dev_fraction=0.3, seed=1)
    assert a.queries == b.queries
    assert len(a.queries["dev"]) == 3 and len(a.queries["train"]) == 7
    assert set(a.queries["dev"]).isdisjoint(a.queries["train"])
    assert set(a.queries["test"]) == {"11", "12"}


def test_beir_uses_an_existing_dev_split(beir):
    write_qrels(beir / "qrels" / "dev.tsv", [("12", "d4", 1)])
    c = load_beir(beir)
    assert c.queries["dev"] == {"12": "query number 12"}
    assert len(c.queries["train"]) == 10  # nothing carved


def test_beir_zip_matches_folder(beir, tmp_path):
    archive = tmp_path / "tiny.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in beir.rglob("*"):
            if f.is_file():
                zf.write(f, f"tiny/{f.relative_to(beir).as_posix()}")
        zf.writestr("__MACOSX/tiny/._corpus.jsonl", b"\x00\x05junk")  # macOS zips carry these
    from_zip, from_dir = load_beir(archive), load_beir(beir)
    assert from_zip == from_dir


def test_beir_zip_errors_name_the_member(beir, tmp_path):
    archive = tmp_path / "tiny.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(beir / "corpus.jsonl", "tiny/corpus.jsonl")
        zf.writestr("tiny/queries.jsonl", '{"_id": "1", "text": "ok"}\n{"_id": "1", "text": "again"}\n')
        zf.write(beir / "qrels" / "test.tsv", "tiny/qrels/test.tsv")
    with pytest.raises(DataError, match=r"tiny\.zip/tiny/queries\.jsonl:2: duplicate query id '1' \(first at line 1\)"):
        load_beir(archive)


def test_beir_zip_with_a_damaged_member_says_so(beir, tmp_path):
    archive = tmp_path / "tiny.zip"
    with zipfile.ZipFile(archive, "w") as zf:  # stored, not deflated: one flipped byte fails the member's CRC
        for f in beir.rglob("*"):
            if f.is_file():
                zf.write(f, f"tiny/{f.relative_to(beir).as_posix()}")
    data = bytearray(archive.read_bytes())
    at = data.index(b'"_id"')  # inside the first member
    data[at + 1] ^= 0x01
    archive.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"tiny\.zip/tiny/\w+\.jsonl:\d+: cannot read \(BadZipFile: .*download or "
                                        r"unpack it again"):
        load_beir(archive)


def test_beir_bad_zip(tmp_path):
    (tmp_path / "x.zip").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a valid zip"):
        load_beir(tmp_path / "x.zip")
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as zf:
        zf.writestr("readme.txt", "hi")
    with pytest.raises(DataError, match="no corpus.jsonl inside the zip"):
        load_beir(tmp_path / "empty.zip")


def test_beir_drops_queries_without_relevant_docs(beir, caplog):
    write_qrels(beir / "qrels" / "test.tsv", TEST_QRELS + [("1", "d3", 0)])
    with caplog.at_level(logging.WARNING, logger="adaptive_ir.data"):
        c = load_beir(beir)
    assert "1" not in c.queries["test"]
    assert "dropped 1 queries with no relevant document" in caplog.text and "test/1" in caplog.text


def beir_case(tmp_path, corpus=None, queries=None, qrels=None) -> Path:
    """A tiny BEIR folder where any of the three files may be replaced by raw bytes."""
    root = make_beir(tmp_path / "bad")
    if corpus is not None:
        (root / "corpus.jsonl").write_bytes(corpus)
    if queries is not None:
        (root / "queries.jsonl").write_bytes(queries)
    if qrels is not None:
        (root / "qrels" / "test.tsv").write_bytes(qrels)
    return root


GOOD_CORPUS = "".join(json.dumps(d) + "\n" for d in DOCS).encode()
GOOD_QUERIES = "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()).encode()


BAD_INPUT = [
    ({"corpus": GOOD_CORPUS + b"{not json\n"}, r"corpus\.jsonl:5: not valid JSON"),
    ({"corpus": GOOD_CORPUS + b"[1, 2]\n"}, r"corpus\.jsonl:5: expected a JSON object, got list"),
    ({"corpus": GOOD_CORPUS + b'{"title": "t", "text": "x"}\n'}, r"corpus\.jsonl:5: no '_id' field"),
    (
        {"corpus": GOOD_CORPUS + b'{"_id": "d2", "text": "x"}\n'},
        r"corpus\.jsonl:5: duplicate document id 'd2' \(first at line 2\)",
    ),
    ({"corpus": GOOD_CORPUS + b'{"_id": "d9", "text": 5}\n'}, r"corpus\.jsonl:5 \(key 'text'\): expected a string"),
    ({"corpus": b"\n\n"}, r"corpus\.jsonl: no documents"),
    ({"corpus": GOOD_CORPUS + b'{"_id": "d 9", "text": "x"}\n'},
     r"corpus\.jsonl:5: document id 'd 9' is empty or holds whitespace"),
    ({"queries": b'{"_id": "", "text": "q"}\n'}, r"queries\.jsonl:1: query id '' is empty or holds whitespace"),
    (  # the text under a key we do not read (MS MARCO v2): an error, not an empty document
        {"corpus": GOOD_CORPUS + b'{"_id": "d9", "passage": "words"}\n'},
        r"corpus\.jsonl:5: no text field \('text'; also accepted: contents, body, 'title'\); the line's keys: _id, passage",
    ),
    (
        {"corpus": GOOD_CORPUS + b'{"_id": "d9", "text": "caf\xe9"}\n'},
        r"corpus\.jsonl:5: not valid UTF-8 .*re-encode the file as UTF-8",
    ),
    (
        {"queries": GOOD_QUERIES + b'{"_id": "3", "text": "again"}\n'},
        r"queries\.jsonl:14: duplicate query id '3' \(first at line 3\)",
    ),
    ({"queries": b'{"_id": "1", "text": "  "}\n'}, r"queries\.jsonl:1: query '1' has empty text"),
    ({"queries": b'{"text": "no id"}\n'}, r"queries\.jsonl:1: no '_id' field"),
    ({"queries": b'{"_id": "1", "text": "ok"}\nnope\n'}, r"queries\.jsonl:2: not valid JSON"),
    ({"qrels": b"11\td404\t1\n"}, r"test\.tsv:1: document 'd404' is judged here but is not in the corpus"),
    ({"qrels": b"11\td1\t1\n777\td1\t1\n"}, r"test\.tsv:2: query '777' is judged here but has no text"),
    ({"qrels": b"query-id\tcorpus-id\tscore\n11\td1\thigh\n"}, r"test\.tsv:2: relevance 'high' is not an integer"),
    ({"qrels": b"11\td1\t1.5\n"}, r"test\.tsv:1: relevance '1.5' is not an integer"),
    ({"qrels": b"11\td1\n"}, r"test\.tsv:1: expected 'query-id<TAB>corpus-id<TAB>score'"),
    ({"qrels": b"11\td1\t1\n11\td1\t2\n"}, r"test\.tsv:2: \(11, d1\) judged twice with different grades"),
    ({"qrels": b"11\td1\t1\n12\td1\t\xff\n"}, r"test\.tsv:2: not valid UTF-8"),
]
"""(files replaced, the error message expected) of a BEIR folder."""


@pytest.mark.parametrize("files, message", BAD_INPUT)
def test_beir_bad_input(tmp_path, files, message):
    root = beir_case(tmp_path, **files)
    with pytest.raises(DataError, match=message):
        load_beir(root)


def gzip_in_place(path: Path) -> Path:
    """Replace a file by its gzipped copy ``<name>.gz``."""
    gz = path.with_name(path.name + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    return gz


def gzip_beir(root: Path) -> Path:
    for f in [root / "corpus.jsonl", root / "queries.jsonl", *(root / "qrels").iterdir()]:
        gzip_in_place(f)
    return root


def test_beir_gzipped_files_load_as_the_plain_ones(beir, tmp_path):
    plain = load_beir(beir)
    gz = load_beir(gzip_beir(make_beir(tmp_path / "gz")), name="tiny")
    assert gz == plain and gz.corpus.path.name == "corpus.jsonl.gz"
    assert gz.doc_texts_at([3, 0]) == plain.doc_texts_at([3, 0])
    assert load_beir(tmp_path / "gz", splits=["test"]).qrels == load_beir(beir, splits=["test"]).qrels
    archive = tmp_path / "gz.zip"  # a zip of gzipped files reads the same too
    with zipfile.ZipFile(archive, "w") as zf:
        for f in (tmp_path / "gz").rglob("*"):
            zf.write(f, f"gz/{f.relative_to(tmp_path / 'gz').as_posix()}")
    assert load_beir(archive, name="tiny") == plain


def test_beir_prefers_the_plain_file_when_both_are_there(beir):
    (beir / "queries.jsonl.gz").write_bytes(gzip.compress(b'{"_id": "1", "text": "other text"}\n'))
    assert load_beir(beir).queries["train"]["1"] == "query number 1"


@pytest.mark.parametrize("files, message", BAD_INPUT)
def test_beir_bad_input_in_gzipped_files_names_the_file_and_line(tmp_path, files, message):
    root = beir_case(tmp_path, **files)
    for f in [root / "corpus.jsonl", root / "queries.jsonl", root / "qrels" / "test.tsv"]:
        gzip_in_place(f)
    with pytest.raises(DataError, match=message.replace(r"\.jsonl", r"\.jsonl\.gz").replace(r"\.tsv", r"\.tsv\.gz")):
        load_beir(root)


def test_beir_truncated_gzip_names_the_line_it_stopped_at(beir):
    gz = gzip_in_place(beir / "corpus.jsonl")
    gz.write_bytes(gz.read_bytes()[:-12])
    with pytest.raises(DataError, match=r"corpus\.jsonl\.gz:\d+: cannot read"):
        load_beir(beir)


def test_beir_without_any_relevant_judgment(tmp_path):
    root = make_beir(tmp_path / "zeros", train=None, test=[("11", "d1", 0), ("12", "d2", -1)])
    with pytest.raises(DataError, match="'zeros': no query has a relevant document"):
        load_beir(root)


def test_beir_missing_folder_and_files(tmp_path):
    with pytest.raises(DataError, match=r"nowhere: BEIR folder or zip not found; get one from https://public\.ukp"):
        load_beir(tmp_path / "nowhere")
    root = make_beir(tmp_path / "noq")
    (root / "queries.jsonl").unlink()
    with pytest.raises(DataError, match=r"queries\.jsonl: file not found"):
        load_beir(root)
    root = make_beir(tmp_path / "noqrels")
    for f in (root / "qrels").iterdir():
        f.unlink()
    with pytest.raises(DataError, match="no train.tsv, dev.tsv or test.tsv"):
        load_beir(root)


def test_beir_tolerates_bom_crlf_blank_lines_and_integer_ids(tmp_path):
    root = tmp_path / "win"
    make_beir(root)
    (root / "corpus.jsonl").write_bytes(
        b'\xef\xbb\xbf{"_id": 1, "title": null, "text": "x"}\r\n\r\n{"_id": "2", "text": "y"}\r\n'
    )
    write_qrels(root / "qrels" / "test.tsv", [("11", "1", 1), ("12", "2", 1)])
    (root / "qrels" / "train.tsv").unlink()
    c = load_beir(root)
    assert list(c.doc_ids) == ["1", "2"] and c.doc_texts() == [" x", " y"]
    assert c.splits == ["test"]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(["corpus", "queries", "qrels"]),
    garbage=st.one_of(
        st.binary(max_size=200),
        st.lists(st.text(max_size=40), max_size=6).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
        st.lists(
            st.sampled_from(['{"_id": "d1"}', '{"_id": 3, "text": null}', "11\td1\t1", "12 0 d2 1", "{}", "\t\t"]),
            max_size=6,
        ).map(lambda ls: "\n".join(ls).encode()),
    ),
)
def test_beir_garbage_gives_a_collection_or_a_data_error(tmp_path, which, garbage):
    root = beir_case(tmp_path, **{which: garbage})
    try:
        assert isinstance(load_beir(root), Collection)
    except AdaptiveIRError:
        pass


# --------------------------------------------------------------------------------------------------------------
# TREC
# --------------------------------------------------------------------------------------------------------------

TOPICS_SGML = """<top>
<num> Number: 301
<title> International Organized Crime

<desc> Description:
Identify organizations that participate in international criminal activity.

<narr> Narrative:
A relevant document must name the organization.
</top>

<top>
<num> Number: 302 </num>
<title> Poliomyelitis and Post-Polio </title>
<desc> Description: Is the disease of Poliomyelitis (polio) under control? </desc>
</top>
"""


def make_trec(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "topics.robust.txt").write_text(TOPICS_SGML)
    (root / "qrels.test.txt").write_text("301 0 FBIS3-1 1\n301 0 FBIS3-2 0\n302 0 LA-7 2\n")
    write_jsonl(
        root / "corpus.jsonl",
        [
            {"docno": "FBIS3-1", "title": "Mafia", "contents": "organized crime"},
            {"id": "FBIS3-2", "text": "weather"},
            {"_id": "LA-7", "title": "Polio", "text": "vaccines"},
        ],
    )
    return root


def test_trec_sgml_topics_jsonl_corpus(tmp_path):
    root = make_trec(tmp_path / "robust")
    c = load_trec(root / "topics.robust.txt", {"test": root / "qrels.test.txt"}, root / "corpus.jsonl")
    assert c.name == "robust"
    assert list(c.doc_ids) == ["FBIS3-1", "FBIS3-2", "LA-7"]
    assert c.doc_texts() == ["Mafia organized crime", " weather", "Polio vaccines"]
    assert c.queries == {"test": {"301": "International Organized Crime", "302": "Poliomyelitis and Post-Polio"}}
    assert c.qrels["test"] == {"301": {"FBIS3-1": 1, "FBIS3-2": 0}, "302": {"LA-7": 2}}
    both = load_trec(
        root / "topics.robust.txt", {"test": root / "qrels.test.txt"}, root / "corpus.jsonl",
        topic_fields=("title", "desc"),
    )
    assert both.queries["test"]["302"] == (
        "Poliomyelitis and Post-Polio Is the disease of Poliomyelitis (polio) under control?"
    )


TOPICS_XML = """<?xml version="1.0" encoding="UTF-8"?>
<webtrack2009>
<topic number="1" type="faceted">
  <query>obama family tree</query>
  <description>Find information on President Barack Obama's family
  history &amp; genealogy.
  </description>
  <subtopic number="1" type="nav">
  Find the TIME magazine photo essay "Barack Obama's Family Tree".
  </subtopic>
</topic>
<topic number='2' type="single"><query>french lick resort &amp; casino</query>
<description>Find information on the resort.</description></topic>
</webtrack2009>
"""


def test_trec_xml_topics(tmp_path):
    # TREC 2009+ (Web, Session, ...) topics: the number an attribute, title in <query>, entities unescaped
    (tmp_path / "topics.xml").write_text(TOPICS_XML)
    assert read_queries(tmp_path / "topics.xml") == {"1": "obama family tree", "2": "french lick resort & casino"}
    (tmp_path / "one-line.xml").write_text("".join(TOPICS_XML.splitlines()))  # a file written without newlines
    assert read_queries(tmp_path / "one-line.xml") == read_queries(tmp_path / "topics.xml")
    both = read_queries(tmp_path / "topics.xml", topic_fields=("title", "desc"))
    assert both["1"] == "obama family tree Find information on President Barack Obama's family history & genealogy."


def test_trec_tsv_topics_tsv_corpus_and_carving(tmp_path):
    (tmp_path / "topics.tsv").write_text("".join(f"q{i}\ttopic {i}\n" for i in range(10)))
    (tmp_path / "corpus.tsv").write_text("a\tTitle A\tText A\nb\t\tText B\n")
    (tmp_path / "train.qrels").write_text("".join(f"q{i} 0 a 1\n" for i in range(8)))
    (tmp_path / "test.qrels").write_text("q8\t0\tb\t1\nq9\t0\ta\t1\n")
    c = load_trec(
        tmp_path / "topics.tsv",
        {"train": tmp_path / "train.qrels", "test": tmp_path / "test.qrels"},
        tmp_path / "corpus.tsv",
        dev_fraction=0.25,
        seed=3,
    )
    assert c.doc_texts() == ["Title A Text A", " Text B"]
    assert len(c.queries["dev"]) == 2 and len(c.queries["train"]) == 6
    assert c.queries["test"] == {"q8": "topic 8", "q9": "topic 9"}


def test_trec_dir_convention(tmp_path):
    root = make_trec(tmp_path / "robust")
    c = load_trec_dir(root)
    assert set(c.queries["test"]) == {"301", "302"}
    (root / "corpus.jsonl").unlink()
    message = r"one corpus\.jsonl or corpus\.tsv, .*\(found: qrels\.test\.txt, topics\.robust\.txt\)"
    with pytest.raises(DataError, match=message):
        load_trec_dir(root)


@pytest.mark.parametrize(
    "topics, message",
    [
        ("<top>\n<title> no number\n</top>\n", r"topics:1: topic without a <num>"),
        ("<top>\n<num> Number: 5\n<title>\n</top>\n", r"topics:1: query '5' has empty text"),
        ("q1 no tab here\n", r"topics:1: expected 'qid<TAB>query text'"),
        ("<top>\n<num> 7\n<title> a\n</top>\n<top>\n<num> 7\n<title> b\n</top>\n", r"topics:5: duplicate query id '7'"),
        ("<top>\n<num> 1\n<title> a\n</top>\n<top>\n<num> 2\n<title> b\n", r"topics:5: this topic has no </top> \(the file"),
        ("<top>\n<num> 1\n<title> a\n<top>\n<num> 2\n<title> b\n</top>\n", r"topics:1: .*no </top> before .*line 4"),
        ('<topics>\n<topic number="3">\n<query>a</query>\n</topics>\n', r"topics:2: this topic has no </topic>"),
        ("<topics>\n<topic>\n<query>a</query>\n</topic>\n</topics>\n", r"topics:2: topic without a number= number"),
    ],
)
def test_trec_bad_topics(tmp_path, topics, message):
    root = make_trec(tmp_path)
    (root / "topics").write_text(topics)
    with pytest.raises(DataError, match=message):
        load_trec(root / "topics", {"test": root / "qrels.test.txt"}, root / "corpus.jsonl")


def test_trec_bad_corpus_tsv(tmp_path):
    root = make_trec(tmp_path)
    (root / "corpus.tsv").write_text("a\ttext\nb\n")
    with pytest.raises(DataError, match=r"corpus\.tsv:2: expected 'docid<TAB>text'"):
        load_trec(root / "topics.robust.txt", {"test": root / "qrels.test.txt"}, root / "corpus.tsv")


def test_trec_gzip_corpus(tmp_path):
    import gzip

    root = make_trec(tmp_path)
    with gzip.open(root / "corpus.jsonl.gz", "wb") as f:
        f.write((root / "corpus.jsonl").read_bytes())
    c = load_trec(root / "topics.robust.txt", {"test": root / "qrels.test.txt"}, root / "corpus.jsonl.gz")
    assert list(c.doc_ids) == ["FBIS3-1", "FBIS3-2", "LA-7"] and c.doc_texts_at([2, 0]) == ["Polio vaccines",
                                                                                          "Mafia organized crime"]
    whole = gzip.compress("".join(f'{{"_id": "x{i}", "text": "t"}}\n' for i in range(5000)).encode())
    (root / "broken.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"broken\.jsonl\.gz:\d+: cannot read"):
        load_trec(root / "topics.robust.txt", {"test": root / "qrels.test.txt"}, root / "broken.jsonl.gz")


# --------------------------------------------------------------------------------------------------------------
# MS MARCO
# --------------------------------------------------------------------------------------------------------------


def make_msmarco(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "collection.tsv").write_text("".join(f"{p}\tpassage {p}\n" for p in range(20)))
    (root / "queries.train.tsv").write_text("".join(f"{q}\ttrain query {q}\n" for q in range(100, 120)))
    (root / "queries.dev.tsv").write_text("".join(f"{q}\tdev query {q}\n" for q in range(900, 905)))
    (root / "qrels.train.tsv").write_text("".join(f"{q}\t0\t{q % 20}\t1\n" for q in range(100, 120)))
    (root / "qrels.dev.tsv").write_text("".join(f"{q} 0 {q % 20} 1\n" for q in range(900, 905)))
    return root


def test_msmarco_dev_is_test_and_dev_is_carved(tmp_path):
    c = load_msmarco(make_msmarco(tmp_path / "msmarco"), dev_fraction=0.25, seed=0)
    assert c.name == "msmarco" and len(c.doc_ids) == 20 and c.doc_texts_at([3]) == [" passage 3"]
    assert set(c.queries["test"]) == {str(q) for q in range(900, 905)}
    assert c.qrels["test"]["900"] == {"0": 1}
    assert len(c.queries["dev"]) == 5 and len(c.queries["train"]) == 15
    assert set(c.queries["dev"]) <= {str(q) for q in range(100, 120)}


def test_msmarco_collection_is_held_in_a_few_bytes_a_passage(tmp_path):
    """collection.tsv of MS MARCO's shape (numeric ids, passages of about 60 words), 200,000 passages: what the
    loaded collection holds is arrays, about 20 bytes a passage (its id and its line's offset), never a Python
    string or object per passage (a list of 8.8M ids would take 0.5 GB before any work)."""
    import gc
    import tracemalloc

    root = tmp_path / "marco"
    root.mkdir()
    words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
    n = 200_000
    with open(root / "collection.tsv", "w") as f:
        for pid in range(n):
            f.write(f"{pid}\t" + " ".join(words[(pid + i) % len(words)] for i in range(60)) + "\n")
    (root / "queries.dev.tsv").write_text("".join(f"{q}\tdev query {q}\n" for q in range(5)))
    (root / "qrels.dev.tsv").write_text("".join(f"{q} 0 {q * 7} 1\n" for q in range(5)))
    gc.collect()
    tracemalloc.start()
    try:
        c = load_msmarco(root, splits=("test",))
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert c.num_docs == n and c.doc_ids[123_456] == "123456" and c.doc_texts_at([7])[0].split()[:3] == words[7:10]
    assert held / n < 40, f"{held / n:.0f} bytes a passage"  # a list of the ids alone: about 60


def test_msmarco_prefers_the_small_dev_qrels(tmp_path):
    root = make_msmarco(tmp_path / "m")
    (root / "qrels.dev.small.tsv").write_text("901\t0\t1\t1\n")
    assert load_msmarco(root).queries["test"] == {"901": "dev query 901"}


def test_msmarco_reads_only_the_wanted_splits_queries(tmp_path):
    # a test run never opens queries.train.tsv (808k queries in MS MARCO), nor a training run queries.dev.tsv
    root = make_msmarco(tmp_path / "m")
    (root / "queries.train.tsv").write_text("not a tsv line\n")
    assert set(load_msmarco(root, splits=["test"]).queries["test"]) == {str(q) for q in range(900, 905)}
    with pytest.raises(DataError, match=r"queries\.train\.tsv:1"):
        load_msmarco(root, splits=["dev"])
    root = make_msmarco(tmp_path / "m2")
    (root / "queries.dev.tsv").write_text("not a tsv line\n")
    assert len(load_msmarco(root, splits=["train"], dev_fraction=0.0).queries["train"]) == 20


def test_msmarco_missing(tmp_path):
    with pytest.raises(DataError, match="MS MARCO folder not found"):
        load_msmarco(tmp_path / "nope")
    root = make_msmarco(tmp_path / "m")
    (root / "qrels.train.tsv").unlink()
    with pytest.raises(DataError, match=r"qrels\.train\.tsv: file not found"):
        load_msmarco(root)


# --------------------------------------------------------------------------------------------------------------
# ir_datasets (a fake module: the real one downloads)
# --------------------------------------------------------------------------------------------------------------

Doc = namedtuple("Doc", "doc_id title text")
Query = namedtuple("Query", "query_id text")
TrecQuery = namedtuple("TrecQuery", "query_id title description")
Qrel = namedtuple("Qrel", "query_id doc_id relevance iteration")


class FakeDataset:
    def __init__(self, queries, qrels):
        self.queries, self.qrels = queries, qrels

    def docs_iter(self):
        return iter([Doc("d1", "T1", "one"), Doc("d2", "", "two"), Doc("d3", "T3", "three")])

    def queries_iter(self):
        return iter(self.queries)

    def qrels_iter(self):
        return iter(self.qrels)


class FakeStore:
    def __init__(self):
        self.asked: list[list[str]] = []

    def get_many(self, ids):
        self.asked.append(list(ids))
        return {d.doc_id: d for d in FakeDataset.docs_iter(None) if d.doc_id in ids}


class FakeStoreDataset(FakeDataset):
    """A dataset with a docs_store (random access by id), as most ir_datasets corpora have."""

    store = FakeStore()

    def docs_store(self):
        return self.store


FAKE = {
    "beir/fake/train": FakeDataset(
        [Query(f"t{i}", f"train {i}") for i in range(5)], [Qrel(f"t{i}", "d1", 1, "0") for i in range(5)]
    ),
    "beir/fake/test": FakeStoreDataset(
        [TrecQuery("x", "topic title", "long description"), Query("y", "why")],
        [Qrel("x", "d2", 2, "0"), Qrel("y", "d3", 1, "0")],
    ),
    "beir/fake/broken": FakeDataset([Query("x", "q")], [Qrel("x", "d404", 1, "0")]),
    "beir/fake/blank": FakeDataset([Query("x", " "), Query("z", "")], [Qrel("x", "d1", 1, "0")]),
}


def fake_load(dataset_id):
    return FAKE[dataset_id]  # KeyError for an unknown id, as the real ir_datasets.load


@pytest.fixture
def fake_ir_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "ir_datasets", types.SimpleNamespace(load=fake_load))


def test_ir_datasets_mapping(fake_ir_datasets):
    c = load_ir_datasets({"train": "beir/fake/train", "test": "beir/fake/test"}, dev_fraction=0.2, seed=0)
    assert c.name == "beir-fake"
    assert list(c.doc_ids) == ["d1", "d2", "d3"] and c.doc_texts() == ["T1 one", " two", "T3 three"]
    assert c.doc_texts_at([2, 0]) == ["T3 three", "T1 one"]
    assert c.queries["test"] == {"x": "topic title", "y": "why"}
    assert c.qrels["test"] == {"x": {"d2": 2}, "y": {"d3": 1}}
    assert len(c.queries["dev"]) == 1 and len(c.queries["train"]) == 4


def test_ir_datasets_single_id_and_errors(fake_ir_datasets):
    c = load_ir_datasets("beir/fake/test")
    assert c.splits == ["test"]
    assert c.doc_texts_at([2, 1, 2]) == ["T3 three", " two", "T3 three"]  # from the store, by id
    assert FakeStoreDataset.store.asked[-1] == ["d2", "d3"]
    with pytest.raises(DataError, match="does not end in a split"):
        load_ir_datasets("beir/fake")
    with pytest.raises(DataError, match="ir_datasets has no dataset 'beir/nope/test'"):
        load_ir_datasets("beir/nope/test")
    with pytest.raises(DataError, match=r"beir/fake/broken \(key 'x/d404'\): judged document is not in the corpus"):
        load_ir_datasets({"test": "beir/fake/broken"})
    with pytest.raises(DataError, match=r"beir/fake/blank \(key 'x/d1'\): judged query has no text"):
        load_ir_datasets({"test": "beir/fake/blank"})
    with pytest.raises(DataError, match="split names must be train/dev/test"):
        load_ir_datasets({"eval": "beir/fake/test"})


def test_ir_datasets_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "ir_datasets", None)  # makes `import ir_datasets` raise ImportError
    with pytest.raises(DataError, match="pip install ir_datasets"):
        load_ir_datasets("beir/scifact/test")


# --------------------------------------------------------------------------------------------------------------
# The embedded default collection
# --------------------------------------------------------------------------------------------------------------

TOKEN = re.compile(r"(?u)\b\w\w+\b")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


@pytest.fixture(scope="module")
def default_and_oracle():
    return make_default_with_oracle()


def test_default_shape(default_and_oracle):
    c, oracle = default_and_oracle
    assert c.name == "default"
    assert 1900 <= len(c.doc_ids) <= 2100 and len(set(c.doc_ids)) == len(c.doc_ids)
    assert {s: len(c.queries[s]) for s in c.splits} == {"train": 250, "dev": 70, "test": 80}
    all_qids = [q for s in c.splits for q in c.queries[s]]
    assert len(set(all_qids)) == 400 and set(oracle) == set(all_qids)
    for s in c.splits:
        assert set(c.qrels[s]) == set(c.queries[s])
        for q, text in c.queries[s].items():
            assert 2 <= len(text.split()) <= 5
            assert 5 <= len(c.qrels[s][q]) <= 25 and set(c.qrels[s][q].values()) == {1}
    lengths = [len(t.split()) for t in c.corpus.texts]
    assert 60 <= min(lengths) and max(lengths) <= 120
    texts = {s: set(c.queries[s].values()) for s in c.splits}
    assert not texts["test"] & texts["train"]  # no query text leaks from test into train


def test_default_is_deterministic_and_seeded():
    # how fast it is made is a benchmark's question: a wall-clock bound here failed on a machine busy with other jobs
    a = make_default()
    assert a == make_default(seed=13)
    b = make_default(seed=14)
    assert b.corpus.texts != a.corpus.texts and b.queries != a.queries


def test_default_words_survive_any_analyzer(default_and_oracle):
    from bm25s.stopwords import STOPWORDS_EN

    c, _ = default_and_oracle
    vocab = {w for t in c.doc_texts() for w in t.split()}
    assert all(TOKEN.fullmatch(w) for w in vocab)  # one token each under the bm25s pattern
    assert not vocab & set(STOPWORDS_EN)
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")
    assert not vocab & set(sklearn_text.ENGLISH_STOP_WORDS)


def test_default_has_real_lexical_mismatch(default_and_oracle):
    """BM25 with the raw test queries finds a modest share of the relevant documents; adding each query's true
    subtopic words (an oracle expansion) finds many more. The numbers are measured, not assumed."""
    import bm25s

    c, oracle = default_and_oracle
    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index([tokens(t) for t in c.doc_texts()], show_progress=False)
    qids, texts, qrels = c.split("test")

    def recall_at_40(queries: list[list[str]]) -> float:
        ranked, scores = retriever.retrieve(queries, k=40, show_progress=False, n_threads=0)
        # every query matches more than 40 documents, so no zero-score (arbitrarily ordered) document is counted
        assert (scores > 0).all()
        hits = [len({c.doc_ids[i] for i in row} & set(qrels[q])) / len(qrels[q]) for q, row in zip(qids, ranked)]
        return float(np.mean(hits))

    raw = recall_at_40([tokens(t) for t in texts])
    expanded = recall_at_40([tokens(t) + oracle[q] for q, t in zip(qids, texts)])
    assert 0.3 <= raw <= 0.7, raw
    assert expanded >= raw + 0.15, (raw, expanded)


# --------------------------------------------------------------------------------------------------------------
# load_collection
# --------------------------------------------------------------------------------------------------------------


def cfg(dataset_type, data_dir=None, dev_fraction=0.2, ir_datasets_id=None):
    return SimpleNamespace(
        dataset_type=dataset_type, data_dir=data_dir, dev_fraction=dev_fraction, ir_datasets_id=ir_datasets_id
    )


def test_load_collection_dispatches(tmp_path, beir, fake_ir_datasets):
    assert load_collection(cfg("default"), seed=1) == make_default()  # the default ignores the training seed
    assert load_collection(cfg("beir", str(beir), 0.3), seed=5) == load_beir(beir, 0.3, 5)
    assert load_collection(cfg("trec", str(make_trec(tmp_path / "t"))), 0).queries["test"]["301"]
    assert load_collection(cfg("msmarco", str(make_msmarco(tmp_path / "m"))), 0).splits == ["train", "dev", "test"]
    assert load_collection(cfg("ir_datasets", ir_datasets_id="beir/fake/test"), 0).splits == ["test"]


@pytest.mark.parametrize(
    "config, message",
    [
        (
            cfg("beir"),
            r"needs data_dir: download a BEIR dataset, e\.g\. "
            r"https://public\.ukp\.informatik\.tu-darmstadt\.de/thakur/BEIR/datasets/scifact\.zip"
            r".*configs/quickstart\.yaml runs with no data",
        ),
        (cfg("beir", "/no/such/nfcorpus"), r"nfcorpus .*does not exist: .*BEIR/datasets/nfcorpus\.zip.*quickstart"),
        (
            cfg("msa", "/no/such/dir"),
            r"does not exist: download the msa HDF5 files .*github\.com/nyu-dl/dl4ir-query-reformulator.*quickstart",
        ),
        (cfg("msmarco", "/no/such/dir"), r"does not exist: download the MS MARCO"),
        (cfg("ir_datasets"), r"needs data\.ir_datasets_id"),
        (cfg("parquet"), r"unknown dataset_type 'parquet'; choose one of default, beir"),
    ],
)
def test_load_collection_explains_missing_data(config, message):
    with pytest.raises(DataError, match=message):
        load_collection(config, seed=0)


def test_splits_limit_which_qrels_files_are_read(tmp_path, beir):
    full = load_beir(beir, seed=3)
    (beir / "qrels" / "test.tsv").write_bytes(b"\xff broken, and never opened\n")
    training = load_collection(cfg("beir", str(beir)), 3, splits=("train", "dev"))
    assert training.splits == ["train", "dev"] and training.queries == {s: full.queries[s] for s in ("train", "dev")}
    with pytest.raises(DataError, match=r"test\.tsv:1: not valid UTF-8"):
        load_collection(cfg("beir", str(beir)), 3, splits=("test",))

    m = make_msmarco(tmp_path / "m")
    assert load_collection(cfg("msmarco", str(m)), 0, splits=("test",)).splits == ["test"]
    assert load_collection(cfg("msmarco", str(m)), 0, splits=("dev",)).splits == ["train", "dev"]
    t = make_trec(tmp_path / "t")
    with pytest.raises(DataError, match=r"needs a qrels\.\{train\}\.\* file"):
        load_collection(cfg("trec", str(t)), 0, splits=("train",))
    assert load_collection(cfg("default"), 0, splits=("test",)).splits == ["test"]


def test_load_collection_lists_files_when_hdf5_pair_is_missing(tmp_path):
    (tmp_path / "readme.txt").write_text("x")
    message = r"expected jeopardy_dataset\.hdf5 and jeopardy_corpus\.hdf5 .*found: readme\.txt"
    with pytest.raises(DataError, match=message):
        load_collection(cfg("jeopardy", str(tmp_path)), 0)


# --------------------------------------------------------------------------------------------------------------
# The real collections (skipped where ../shared/datasets is absent)
# --------------------------------------------------------------------------------------------------------------


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"{path} not present")
    return path


def test_scifact_counts_and_carving():
    c = load_beir(shared("scifact"), dev_fraction=0.2, seed=42)
    assert len(c.doc_ids) == 5183
    assert len(c.queries["test"]) == 300 and sum(len(j) for j in c.qrels["test"].values()) == 339
    train, dev = set(c.queries["train"]), set(c.queries["dev"])
    assert len(train) + len(dev) == 809 and len(dev) == 162
    assert sum(len(c.qrels[s][q]) for s in ("train", "dev") for q in c.qrels[s]) == 919
    assert train.isdisjoint(dev) and (train | dev).isdisjoint(c.queries["test"])
    again = load_beir(shared("scifact"), dev_fraction=0.2, seed=42)
    assert again.queries["dev"] == c.queries["dev"]
    assert load_beir(shared("scifact"), dev_fraction=0.2, seed=43).queries["dev"] != c.queries["dev"]


@pytest.mark.parametrize("name, docs, train_dev, test", [("cranfield", 1400, 158, 67), ("cisi", 1460, 53, 23)])
def test_classic_collections(name, docs, train_dev, test):
    c = load_beir(shared(name))
    assert len(c.doc_ids) == docs and len(c.queries["test"]) == test
    assert len(c.queries["train"]) + len(c.queries["dev"]) == train_dev
    assert set(c.queries["dev"]).isdisjoint(c.queries["train"]) and set(c.queries["dev"]).isdisjoint(c.queries["test"])
    if name == "cranfield":
        empty = [d for d, t in zip(c.doc_ids, c.doc_texts()) if t == " "]
        assert empty == ["471", "995"]  # empty in the original, kept
        assert max(g for j in c.qrels["test"].values() for g in j.values()) == 4


def test_the_corpus_alone_is_read_for_ad_hoc_queries(tmp_path, beir):
    # reformulate --policy/--checkpoint asks for no split: the corpus, and no qrels file opened (a broken one too)
    trec, marco = make_trec(tmp_path / "trec"), make_msmarco(tmp_path / "msmarco")
    for path in [beir / "qrels" / "test.tsv", *trec.glob("qrels.*"), marco / "qrels.train.tsv"]:
        path.write_text("not a qrels line\n")
    (marco / "queries.train.tsv").write_text("not a tsv line\n")
    for c, n in ((load_beir(beir, splits=()), 4), (load_trec_dir(trec, splits=()), load_trec_dir(make_trec(
            tmp_path / "t2")).num_docs), (load_msmarco(marco, splits=()), 20)):
        assert c.num_docs == n and c.queries == {} and c.qrels == {}
