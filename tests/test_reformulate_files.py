"""Whole query sets reformulated (issue 44): each input format read as a stream, the output record (Lucene string,
Elasticsearch body, ids), the same rewrites as ``Reformulator.reformulate``, the command line with --queries,
stdin and --split, one clear line for bad input, and no half-written output file."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import sys

import numpy as np
import pytest
from helpers import tiny_config

from adaptive_ir.cli import main
from adaptive_ir.common.errors import DataError
from adaptive_ir.inference.queries import Query, as_queries, batches, read_query_file
from adaptive_ir.inference.records import elasticsearch_query, merge_weights, read_jsonl, write_jsonl
from adaptive_ir.inference.reformulate import Reformulator, lucene_query
from adaptive_ir.training.trainer import Trainer

# ----------------------------------------------------------------------------------------------------------------
# Readers
# ----------------------------------------------------------------------------------------------------------------

EXPECTED = [("1", "quick brown fox"), ("q-2", "lazy dogs sleep"), ("3", "query expansion")]


def _ids_texts(path, fmt="auto"):
    return [(q.id, q.text) for q in read_query_file(path, fmt)]


def test_beir_jsonl(tmp_path):
    p = tmp_path / "queries.jsonl"
    p.write_text("\n".join(json.dumps({"_id": i, "text": t, "metadata": {}}) for i, t in EXPECTED) + "\n")
    assert _ids_texts(p) == EXPECTED
    q = next(read_query_file(p))
    assert q.where == f"{p}:1"


def test_jsonl_gz_and_other_keys(tmp_path):
    p = tmp_path / "q.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(json.dumps({"qid": 7, "query": "integer id"}) + "\n")
    assert _ids_texts(p) == [("7", "integer id")]


def test_trec_sgml_topics(tmp_path):
    p = tmp_path / "topics.301-302.txt"
    p.write_text("<top>\n<num> Number: 301\n<title> International Organized Crime\n<desc> Description:\nx\n</top>\n\n"
                 "<top>\n<num> Number: 302\n<title> Poliomyelitis and Post-Polio\n</top>\n")
    assert _ids_texts(p) == [("301", "International Organized Crime"), ("302", "Poliomyelitis and Post-Polio")]


def test_trec_xml_topics(tmp_path):
    p = tmp_path / "topics.xml"
    p.write_text('<topics>\n<topic number="1" type="faceted">\n  <query>obama family tree</query>\n'
                 '  <description>Find information.</description>\n</topic>\n'
                 '<topic number="2"><query>french lick resort</query></topic>\n</topics>\n')
    assert _ids_texts(p) == [("1", "obama family tree"), ("2", "french lick resort")]


def test_tsv(tmp_path):
    p = tmp_path / "queries.tsv"
    p.write_text("".join(f"{i}\t{t}\n" for i, t in EXPECTED))
    assert _ids_texts(p) == EXPECTED


def test_one_query_per_line_ids_are_line_numbers(tmp_path):
    p = tmp_path / "log.txt"
    p.write_text("first query\n\n  second   query \nthird\n")
    assert _ids_texts(p) == [("1", "first query"), ("3", "second query"), ("4", "third")]
    # a line with a tab read as one query per line when asked
    p.write_text("a\tb\n")
    assert _ids_texts(p, "lines") == [("1", "a b")]


def test_stdin():
    stream = io.BytesIO(b"1\tfox\n2\tdog\n")
    assert [(q.id, q.text) for q in read_query_file("-", stdin=stream)] == [("1", "fox"), ("2", "dog")]


def test_reading_is_a_stream(tmp_path):
    p = tmp_path / "big.txt"
    p.write_text("ok\n" * 3 + "bad\tline\n")
    it = read_query_file(p)
    assert next(it).text == "ok"  # the bad line further down is not read yet
    with pytest.raises(DataError):
        list(it)


def test_in_memory_queries_and_batches():
    qs = list(as_queries(["a b", ("x", "c"), Query("y", "d")]))
    assert [(q.id, q.text) for q in qs] == [("1", "a b"), ("x", "c"), ("y", "d")]
    assert [len(b) for b in batches(iter(range(5)), 2)] == [2, 2, 1]


@pytest.mark.parametrize("name, content, fmt, message", [
    ("q.tsv", "1\tfox\n2 no tab here\n", "auto", ":2: expected 'qid<TAB>query text' (no tab found)"),
    ("q.tsv", "1\tfox\n2\t   \n", "auto", ":2: query '2' has empty text"),
    ("q.txt", "fox\n2\tdog\n", "auto", ":2: 'id<TAB>text', but line 1 has no tab (no id)"),
    ("q.jsonl", '{"_id": "1", "text": "fox"}\n{"_id": "2", "text": ""}\n', "auto", ":2: query '2' has empty text"),
    ("q.jsonl", '{"_id": "1", "text": "fox"}\n{"text": "no id"}\n', "auto", ":2: no '_id' field"),
    ("q.jsonl", '{"_id": "1", "text": "fox"}\nnot json\n', "auto", ":2: not valid JSON"),
    ("q.jsonl", '{"_id": "a b", "text": "fox"}\n', "auto", ":1: query id 'a b' is empty or holds whitespace"),
    ("t.txt", "<top>\n<num> 1\n<title> fox\n", "auto", ":1: this topic has no </top>"),
    ("q.txt", "", "auto", ": no queries (the file is empty)"),
    ("q.bin", None, "auto", ":1: not valid UTF-8"),
])
def test_bad_input_is_one_line_naming_file_and_line(tmp_path, name, content, fmt, message):
    p = tmp_path / name
    if content is None:
        p.write_bytes(b"caf\xe9\n")
    else:
        p.write_text(content)
    with pytest.raises(DataError) as e:
        list(read_query_file(p, fmt))
    assert str(e.value).startswith(str(p)) and message in str(e.value) and "\n" not in str(e.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        list(read_query_file(tmp_path / "missing.txt"))
    with pytest.raises(DataError, match="is a folder"):
        list(read_query_file(tmp_path))
    with pytest.raises(DataError, match="choose one of"):
        list(read_query_file(tmp_path / "x", "xml"))


# ----------------------------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------------------------

def test_elasticsearch_body_and_merged_weights():
    pairs = [("fox", 1.0), ("dog", 1.0), ("fox", 1.0), ("cat", 0.5)]
    assert merge_weights(pairs) == {"fox": 2.0, "dog": 1.0, "cat": 0.5}
    body = elasticsearch_query(pairs, "body")
    assert body == {"query": {"bool": {"should": [
        {"match": {"body": {"query": "fox", "boost": 2.0}}},
        {"match": {"body": {"query": "dog", "boost": 1.0}}},
        {"match": {"body": {"query": "cat", "boost": 0.5}}}]}}}
    term = elasticsearch_query(pairs, "contents", "term")["query"]["bool"]["should"][2]
    assert term == {"term": {"contents": {"value": "cat", "boost": 0.5}}}
    assert lucene_query(pairs) == "fox^2 dog cat^0.5"
    with pytest.raises(ValueError):
        elasticsearch_query(pairs, clause="wildcard")


def test_write_jsonl_is_all_or_nothing(tmp_path):
    out = tmp_path / "sub" / "out.jsonl"
    assert write_jsonl(out, ({"id": str(i)} for i in range(3))) == 3
    assert [r["id"] for r in read_jsonl(out)] == ["0", "1", "2"]

    def failing():
        yield {"id": "new"}
        raise DataError("q.tsv:2: broken")

    with pytest.raises(DataError):
        write_jsonl(out, failing())
    assert [r["id"] for r in read_jsonl(out)] == ["0", "1", "2"]  # the old file stays as it was
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.jsonl"]  # no temporary left behind


# ----------------------------------------------------------------------------------------------------------------
# A trained agent: records, the same rewrites as reformulate(), the command line
# ----------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("reffiles") / "run"  # its caches beside it, shared with no other module
    cfg = tiny_config(out, **{"training.num_epochs": 2})
    trainer = Trainer(cfg, progress=False)
    trainer.train()
    ref = Reformulator(cfg, trainer.ws, trainer.agent, trainer.amp)
    ref.ws.load_split("test")  # training read train and dev only
    return cfg, ref, cfg.training.checkpoint_path_dir / "best.pt"


def test_fused_records_carry_the_weights_the_greedy_rewrite_searched(trained, monkeypatch):
    """With query variants fused by RRF: every term's weight is the (summed) weight it was searched with, the
    Elasticsearch body and the Lucene query hold the same terms and weights, and the greedy variant's terms are
    those of the rewrite without fusion."""
    _, ref, _ = trained
    qids, texts, _ = ref.ws.collection.split("test")
    qids, texts = qids[:6], texts[:6]
    greedy = ref.reformulate(list(zip(qids, texts)), top_docs=5)
    monkeypatch.setattr(ref.cfg.rl_agent, "num_query_variants", 2)
    fused = ref.reformulate(list(zip(qids, texts)), top_docs=5)
    assert any(r["added_terms"] for r in fused)
    for g, n in zip(greedy, fused):
        should = {c["match"]["contents"]["query"]: c["match"]["contents"]["boost"]
                  for c in n["elasticsearch"]["query"]["bool"]["should"]}
        assert n["added_terms"] == g["added_terms"] and n["lucene_query"] == g["lucene_query"]
        assert all(t["weight"] == should[t["term"]] > 0 for t in n["added_terms"] + n["start_terms"])
        lucene = dict(x.split("^") if "^" in x else (x, "1") for x in n["lucene_query"].split())
        assert {t: float(w) for t, w in lucene.items()} == pytest.approx(should)
        assert len(n["top_docs"]) == 5


def test_records_are_reformulates_rewrites(trained):
    cfg, ref, _ = trained
    qids, texts, _ = ref.ws.collection.split("test")
    qids, texts = qids[:12], texts[:12]
    new = ref.reformulate(list(zip(qids, texts)), top_docs=5, field="body")
    assert [r["id"] for r in new] == qids and [r["text"] for r in new] == texts
    for n in new:
        assert n["rewritten"] == " ".join([n["text"], *(t["term"] for t in n["start_terms"] + n["added_terms"])])
        assert all(t["weight"] > 0 for t in n["added_terms"])
        should = n["elasticsearch"]["query"]["bool"]["should"]
        assert {c["match"]["body"]["query"] for c in should} == {
            x.rpartition("^")[0].replace("\\", "") if "^" in x else x.replace("\\", "")
            for x in n["lucene_query"].split()}
        json.dumps(n)  # plain JSON
    # an independent computation: the query's own words (weight 1 each) and the added terms at their weights,
    # searched from scratch, rank the same top documents with the same scores
    r = ref.ws.retriever
    assert ref.cfg.retrieval.start == "query" and r.vocab.surface is r.vocab.terms  # words are the index's terms
    for text, n in zip(texts, new):
        own = r.encode([text])[0]
        added = [(r.vocab.ids[t["term"]], t["weight"]) for t in n["added_terms"]]
        scores, idx = r.search([own + [t for t, _ in added]], [[1.0] * len(own) + [w for _, w in added]], k=5)
        ranked = [(r.doc_ids[d], float(sc)) for d, sc in zip(idx[0], scores[0]) if sc > 0]
        assert [d["id"] for d in n["top_docs"]] == [d for d, _ in ranked]
        np.testing.assert_allclose([d["score"] for d in n["top_docs"]], [sc for _, sc in ranked], rtol=1e-6)
    # no documents asked for: no search, the same rewrites
    bare = ref.reformulate(list(zip(qids, texts)), top_docs=0)
    assert all("top_docs" not in r for r in bare)
    assert [r["lucene_query"] for r in bare] == [r["lucene_query"] for r in new]


def test_reformulate_file_streams_in_batches(trained, tmp_path):
    cfg, ref, _ = trained
    qids, texts, _ = ref.ws.collection.split("test")
    p = tmp_path / "q.tsv"
    p.write_text("".join(f"{q}\t{t}\n" for q, t in zip(qids[:10], texts[:10])))
    calls = []
    batch = ref.reformulate
    ref.reformulate = lambda qs, *a: calls.append(len(qs)) or batch(qs, *a)
    try:
        records = list(ref.reformulate_file(p, batch_size=4))
    finally:
        del ref.reformulate
    assert calls == [4, 4, 2] and [r["id"] for r in records] == qids[:10]
    assert [r["lucene_query"] for r in records] == [r["lucene_query"] for r in ref.reformulate(
        list(zip(qids[:10], texts[:10])))]


def test_cli_queries_file_to_output(trained, tmp_path, capsys):
    cfg, ref, ckpt = trained
    qids, texts, _ = ref.ws.collection.split("test")
    p = tmp_path / "queries.jsonl"
    p.write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in zip(qids[:6], texts[:6])))
    out = tmp_path / "rewrites.jsonl"
    assert main(["reformulate", "--checkpoint", str(ckpt), "--device", "cpu", "--queries", str(p), "--output",
                 str(out), "--field", "text", "--top-docs", "3", "--batch-size", "4", "--no-progress"]) == 0
    records = list(read_jsonl(out))
    assert [r["id"] for r in records] == qids[:6]
    assert set(records[0]) == {"id", "text", "start_terms", "added_terms", "rewritten", "lucene_query",
                               "elasticsearch", "top_docs"}
    assert all(len(r["top_docs"]) == 3 for r in records)  # --top-docs 3: every rewrite retrieves more than that
    assert "text" in records[0]["elasticsearch"]["query"]["bool"]["should"][0]["match"]
    assert "wrote 6 rewrites" in capsys.readouterr().err


def test_cli_stdin_and_split(trained, monkeypatch, capsys):
    cfg, ref, ckpt = trained
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"quick fox\ndog\n")))
    assert main(["reformulate", "--checkpoint", str(ckpt), "--device", "cpu", "--queries", "-", "--format", "json",
                 "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["1", "2"]
    assert main(["reformulate", "--checkpoint", str(ckpt), "--device", "cpu", "--split", "test", "--format",
                 "lucene", "--no-progress"]) == 0
    qids, _, _ = ref.ws.collection.split("test")
    assert [x.split("\t")[0] for x in capsys.readouterr().out.splitlines()] == qids


def test_cli_bad_input_one_line_and_nothing_written(trained, tmp_path, capsys):
    cfg, ref, ckpt = trained
    p = tmp_path / "q.tsv"
    p.write_text("1\tfox\n" * 5 + "6 no id\n")
    out = tmp_path / "out.jsonl"
    assert main(["reformulate", "--checkpoint", str(ckpt), "--device", "cpu", "--queries", str(p), "--output",
                 str(out), "--batch-size", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: {p}:6: expected 'qid<TAB>query text' (no tab found)"
    assert list(tmp_path.iterdir()) == [p]  # no output, no temporary
    # an unreadable file is reported before the policy loads
    assert main(["reformulate", "--checkpoint", str(ckpt), "--queries", str(tmp_path / "nope.txt")]) == 2
    assert "nope.txt: file not found" in capsys.readouterr().err
    assert main(["reformulate", "--checkpoint", str(ckpt), "--queries", str(p), "fox"]) == 2
    assert "give the queries one way" in capsys.readouterr().err


def test_cli_interrupted_leaves_no_output(trained, tmp_path, monkeypatch, capsys):
    cfg, ref, ckpt = trained
    p = tmp_path / "q.txt"
    p.write_text("fox\ndog\ncat\n")
    out = tmp_path / "out.jsonl"
    seen = []

    def interrupt(self, queries, *a, **k):
        if seen:
            raise KeyboardInterrupt
        seen.append(1)
        return [{"id": q.id} for q in queries]

    monkeypatch.setattr(Reformulator, "reformulate", interrupt)
    assert main(["reformulate", "--checkpoint", str(ckpt), "--queries", str(p), "--output", str(out),
                 "--batch-size", "2", "--no-progress"]) == 130
    assert sorted(x.name for x in tmp_path.iterdir()) == ["q.txt"]


def test_memo_embedder_reuses_the_last_list_and_single_words():
    import numpy as np

    from adaptive_ir.inference.memo import MemoEmbedder

    class Fake:
        dim = 2
        calls: list = []

        def encode(self, texts):
            self.calls.append(list(texts))
            return np.array([[len(t), t.count(" ")] for t in texts], np.float32)

    inner = Fake()
    memo = MemoEmbedder(inner, capacity=2)
    a = memo.encode(["two words", "fox"])
    assert np.array_equal(memo.encode(["two words", "fox"]), a) and len(inner.calls) == 1  # the same list again
    b = memo.encode(["fox", "dog", "cat"])  # fox known
    assert inner.calls[-1] == ["dog", "cat"] and b.tolist() == [[3, 0], [3, 0], [3, 0]]
    assert list(memo.words) == ["dog", "cat"]  # capacity 2: least recently used dropped; phrases never kept
    assert memo.dim == 2 and memo.encoded == 4 and memo.reused == 3


def test_memo_store_keeps_words_across_runs(tmp_path):
    import numpy as np

    from adaptive_ir.inference.memo import MemoEmbedder

    class Fake:
        dim = 2

        def __init__(self):
            self.calls = []

        def encode(self, texts):
            self.calls.append(list(texts))
            return np.array([[len(t), t.count("o")] for t in texts], np.float32)

    store = tmp_path / "words"
    first = MemoEmbedder(Fake(), store=store)
    first.encode(["a fox", "fox", "dog"])
    first.save()
    assert sorted(np.load(store / "words.npy").tolist()) == ["dog", "fox"]  # phrases never kept
    writer = MemoEmbedder(Fake(), store=store)  # another run, meanwhile
    assert writer.stored == 2
    writer.encode(["owl"])
    writer.save()
    inner = Fake()
    second = MemoEmbedder(inner, store=store)
    assert second.stored == 3
    out = second.encode(["fox", "cat", "owl"])
    assert inner.calls == [["cat"]] and out.tolist() == [[3, 1], [3, 0], [3, 1]]
    first.encode(["emu"])
    first.save()  # merged with owl, which this run never met
    assert sorted(np.load(store / "words.npy").tolist()) == ["dog", "emu", "fox", "owl"]
    small = MemoEmbedder(Fake(), capacity=2, store=store)
    assert list(small.words) == ["dog", "emu"]  # the two used last: first's save put owl before its own words
    unused = MemoEmbedder(Fake(), store=tmp_path / "unused")
    unused.encode(["a fox"])
    unused.save()
    assert not (tmp_path / "unused").exists()  # no word encoded: nothing written
    np.save(store / "vectors.npy", np.zeros((4, 2), np.float32))  # damaged: its checksum fails, so it is not used
    assert MemoEmbedder(Fake(), store=store).stored == 0
    assert MemoEmbedder(Fake(), words=False, store=store).store is None


def test_reformulate_file_reuses_the_words_an_earlier_run_encoded(trained, monkeypatch):
    import adaptive_ir.inference.memo as memo_mod

    cfg, ref, _ = trained
    qids, texts, _ = ref.ws.collection.split("test")
    made = []

    class Recorded(memo_mod.MemoEmbedder):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(memo_mod, "MemoEmbedder", Recorded)
    queries = list(zip(qids[:8], texts[:8]))
    store = ref.ws.emb_cache.folder / "words"
    shutil.rmtree(store, ignore_errors=True)  # what earlier tests of this module stored
    first = list(ref.reformulate_file(queries, batch_size=4))
    second = list(ref.reformulate_file(queries, batch_size=4))
    assert [r["lucene_query"] for r in second] == [r["lucene_query"] for r in first]
    assert made[0].store == store and (store / "meta.json").is_file()
    assert made[0].stored == 0 < made[1].stored
    assert made[1].encoded < made[0].encoded  # the candidate words came from the store: only query texts encoded
