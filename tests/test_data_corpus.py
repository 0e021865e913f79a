"""Corpora kept on disk: every storage (plain, .gz, zip member; jsonl and tsv) gives the same documents by
iteration and by random access, ids are stored compactly and looked up exactly (hash collisions included), and a
file changed after loading is an error, not other documents."""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc
import zipfile

import numpy as np
import pytest

from adaptive_ir.common.errors import DataError
from adaptive_ir.data import textfile
from adaptive_ir.data.corpus import DocIds, MemoryCorpus
from adaptive_ir.data.lines import ZipPath
from adaptive_ir.data.textfile import TextFileCorpus

N = 300


def docs(n: int = N) -> list[dict]:
    rnd = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "café", "naïve", "日本"])
    return [{"_id": f"d{i}", "title": f"t{i}" if i % 3 else "", "text": " ".join(rnd.choice(words, rnd.integers(0, 9)))}
            for i in range(n)]


def expected(rows: list[dict]) -> list[str]:
    return [r["title"] + " " + r["text"] for r in rows]


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict[str, object]:
    """The same documents as plain jsonl (with blank lines and CRLF), .gz, a zip member and tsv."""
    root = tmp_path_factory.mktemp("corpora")
    rows = docs()
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    text = "\r\n".join(lines[:10]) + "\r\n\n\n" + "\n".join(lines[10:]) + "\n"
    (root / "corpus.jsonl").write_text("\ufeff" + text, encoding="utf-8")
    with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(text)
    with zipfile.ZipFile(root / "c.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("c/corpus.jsonl", text)
    (root / "corpus.tsv").write_text("".join(f"{r['_id']}\t{r['title']}\t{r['text']}\n" for r in rows),
                                     encoding="utf-8")
    return {"plain": root / "corpus.jsonl", "gz": root / "corpus.jsonl.gz",
            "zip": ZipPath(root / "c.zip", "c/corpus.jsonl"), "tsv": root / "corpus.tsv"}


@pytest.mark.parametrize("kind", ["plain", "gz", "zip", "tsv"])
def test_iteration_and_random_access_agree_with_the_file(stored, kind):
    corpus = TextFileCorpus(stored[kind])
    rows = docs()
    want = expected(rows)
    assert corpus.num_docs == N and list(corpus.doc_ids) == [r["_id"] for r in rows]
    chunks = list(corpus.iter_doc_texts(chunk_size=7))
    assert [len(c) for c in chunks] == [7] * (N // 7) + [N % 7]
    assert [t for c in chunks for t in c] == want
    assert [t for c in corpus.iter_titles(50) for t in c] == [r["title"] for r in rows]
    picks = np.random.default_rng(1).integers(0, N, 40).tolist() + [0, N - 1, 5, 5]
    assert corpus.doc_texts_at(picks) == [want[i] for i in picks]
    assert corpus.doc_texts_at([]) == []
    assert corpus.doc_positions(["d7", "nope", "d0", "d299", "D7"]).tolist() == [7, -1, 0, 299, -1]
    with pytest.raises(IndexError):
        corpus.doc_texts_at([N])


@pytest.mark.parametrize("kind", ["plain", "gz", "zip"])
def test_reading_by_position_is_one_pass_that_parses_only_the_wanted_lines(stored, kind, monkeypatch):
    # gzip and zip members cannot seek back, so documents are read in corpus order, seeking forward: one
    # decompression per call, and no JSON parsed but the wanted lines
    corpus = TextFileCorpus(stored[kind])
    parsed, opened = [], []
    real_parse, real_open = textfile.parse_doc, textfile.open_binary
    monkeypatch.setattr(textfile, "parse_doc", lambda *a: parsed.append(a[2]) or real_parse(*a))
    monkeypatch.setattr(textfile, "open_binary", lambda p: opened.append(p) or real_open(p))
    picks = [250, 3, 3, 120, 0]
    assert corpus.doc_texts_at(picks) == [expected(docs())[i] for i in picks]
    assert len(opened) == 1 and len(parsed) == 4


def test_storages_compare_by_content(stored):
    plain = TextFileCorpus(stored["plain"])
    assert plain == TextFileCorpus(stored["gz"]) == TextFileCorpus(stored["tsv"])
    rows = docs()
    assert plain == MemoryCorpus([r["_id"] for r in rows], [r["title"] for r in rows], [r["text"] for r in rows])
    assert plain != MemoryCorpus(["d0"], [""], [""])


def test_a_file_changed_after_loading_is_an_error(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a", "text": "one"}\n{"_id": "b", "text": "two"}\n')
    corpus = TextFileCorpus(path)
    assert corpus.doc_texts_at([1]) == [" two"]
    path.write_text('{"_id": "a", "text": "ONE"}\n{"_id": "b", "text": "TWO, longer"}\n')
    for read in (lambda: corpus.doc_texts_at([1]), lambda: list(corpus.iter_doc_texts())):
        with pytest.raises(DataError, match=r"corpus\.jsonl: the file changed after the collection was loaded"):
            read()


def test_duplicate_ids_name_both_lines_even_far_apart(tmp_path):
    rows = docs(1000)
    rows.append({"_id": "d500", "text": "again"})
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n" + "".join(json.dumps(r) + "\n" for r in rows))  # a leading blank line shifts the numbers
    with pytest.raises(DataError, match=r"corpus\.jsonl:1002: duplicate document id 'd500' \(first at line 502\)"):
        TextFileCorpus(path)


def make_ids(ids: list[str], hashes: list[int]) -> DocIds:
    buf = bytearray()
    ends = []
    for d in ids:
        buf += d.encode("utf-8")
        ends.append(len(buf))
    return DocIds(buf, np.array(ends, dtype=np.int64), np.array(hashes, dtype=np.int64))


def test_doc_ids_survive_hash_collisions():
    # three ids stored under the hash of "b": a lookup of "b" must skip the two that only share its hash
    colliding = make_ids(["a", "c", "b", "d"], [hash("b")] * 3 + [hash("d")])
    assert colliding.positions(["b", "d", "a", "e"]).tolist() == [2, 3, -1, -1]
    assert colliding.first_repeat() is None
    # a repeat hidden behind a colliding id in between is still found
    assert make_ids(["a", "x", "b", "a"], [1, 5, 1, 1]).first_repeat() == (0, 3)
    assert make_ids(["a", "b", "b", "a"], [2, 2, 2, 2]).first_repeat() == (1, 2)  # the earliest repeat


def test_doc_ids_as_a_sequence():
    ids = make_ids(["x1", "日本", "x3"], [hash("x1"), hash("日本"), hash("x3")])
    assert len(ids) == 3 and ids[1] == "日本" and ids[-1] == "x3" and ids[0:2] == ["x1", "日本"]
    assert list(ids) == ["x1", "日本", "x3"] and ids.index("x3") == 2 and "日本" in ids and "x4" not in ids
    with pytest.raises(IndexError):
        ids[3]
    with pytest.raises(ValueError):
        ids.index("x4")
    # many at once (a run's top k into ids): the same strings, in the order asked, repeats and the first id included
    assert ids.take(np.array([2, 0, 1, 1])) == ["x3", "x1", "日本", "日本"]
    assert ids.take(np.zeros(0, np.int64)) == []


def test_no_per_document_objects_are_kept(tmp_path):
    """Loading keeps a few bytes per document (ids buffer, offsets, sorted hashes), not Python strings."""
    n = 50_000
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(f'{{"_id": "doc{i:06d}", "title": "t", "text": "some words here"}}\n' for i in range(n)))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    corpus = TextFileCorpus(path)
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    # 9 id bytes + 8 (end) + 8 (offset) + 8 (sorted hash) + 4 (order) = 37; a list of str alone would be ~60
    assert retained / n < 48, retained / n
    assert corpus.doc_ids[n - 1] == f"doc{n - 1:06d}"


def test_zip_member_paths_behave_like_paths(tmp_path):
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("root/qrels/test.tsv", "q\td\t1\n")
    root = ZipPath(archive, "root/")
    assert (root / "qrels").exists() and (root / "qrels" / "test.tsv").exists()
    assert not (root / "qrels" / "dev.tsv").exists()
    assert str(root / "qrels" / "test.tsv") == f"{archive}/root/qrels/test.tsv"
    with (root / "qrels" / "test.tsv").open() as f:
        assert f.read() == b"q\td\t1\n"
    assert os.fspath(archive) in str(root)
