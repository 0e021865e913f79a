"""The generated BEIR folders the scale benchmarks measure (``data.synthetic``) and ``data.collection.sample_split``."""

import json
from collections import Counter

from bm25s.stopwords import STOPWORDS_EN

from adaptive_ir.data import load_beir
from adaptive_ir.data.collection import sample_split
from adaptive_ir.data.synthetic import SyntheticSettings, write_synthetic_beir


def test_a_synthetic_folder_is_seeded_and_shaped(tmp_path):
    settings = SyntheticSettings(2000, vocab=5000, doc_len=80.0, non_ascii=0.3, train_queries=40, test_queries=10,
                                 seed=3)
    a = write_synthetic_beir(tmp_path / "a", settings)
    b = write_synthetic_beir(tmp_path / "b", settings)
    assert (a / "corpus.jsonl").read_bytes() == (b / "corpus.jsonl").read_bytes()  # same seed, same corpus
    other = write_synthetic_beir(tmp_path / "c", SyntheticSettings(2000, vocab=5000, seed=4))
    assert (other / "corpus.jsonl").read_bytes() != (a / "corpus.jsonl").read_bytes()
    docs = [json.loads(line) for line in (a / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    lengths = [len(d["text"].split()) for d in docs]
    assert len(docs) == 2000 and 70 < sum(lengths) / len(lengths) < 90
    assert 0.25 < sum(not d["text"].isascii() for d in docs) / len(docs) < 0.35
    words = [w.strip(".") for d in docs for w in d["text"].split()]
    top = Counter(words).most_common(1)[0][0]
    assert top in STOPWORDS_EN and len(set(words)) > 2000  # Zipfian: stopwords on top, a long tail
    ids = {d["_id"] for d in docs}
    for split, n in (("train", 40), ("test", 10)):
        rows = (a / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]
        assert len(rows) == n and all(r.split("\t")[1] in ids for r in rows)


def test_sample_split_keeps_a_seeded_sample_in_order_with_its_judgments(tmp_path):
    folder = write_synthetic_beir(tmp_path / "c", SyntheticSettings(1500, vocab=5000, train_queries=60,
                                                                     test_queries=20, seed=5))
    collection = load_beir(folder)
    qids, _, qrels = collection.split("train")
    capped = sample_split(collection, "train", 7, seed=1)
    kept, texts, kept_qrels = capped.split("train")
    assert len(kept) == 7 and set(kept) <= set(qids) and kept == sorted(kept, key=qids.index)  # the split's order
    assert kept == sample_split(collection, "train", 7, seed=1).split("train")[0]  # seeded
    assert kept != sample_split(collection, "train", 7, seed=2).split("train")[0]
    assert texts == [collection.queries["train"][q] for q in kept] and kept_qrels == {q: qrels[q] for q in kept}
    assert capped.queries["test"] == collection.queries["test"]  # other splits untouched
    assert sample_split(collection, "train", 1000, seed=1) is collection


def test_a_grown_collection_keeps_the_real_one_and_adds_distractors_of_its_statistics(tmp_path):
    from adaptive_ir.data.synthetic import DISTRACTOR_PREFIX, grow_beir

    source = write_synthetic_beir(tmp_path / "src", SyntheticSettings(300, vocab=2000, train_queries=20,
                                                                     test_queries=10, seed=2))
    (source / "qrels" / "dev.tsv").write_text((source / "qrels" / "test.tsv").read_text())  # every split goes
    settings = grow_beir(source, tmp_path / "big", 1000, seed=7)
    big = tmp_path / "big"
    assert settings["real_docs"] == 300 and settings["num_docs"] == 1000
    lines = (big / "corpus.jsonl").read_bytes().splitlines(keepends=True)
    real = (source / "corpus.jsonl").read_bytes()
    assert b"".join(lines[:300]) == real and len(lines) == 1000  # the real documents first, byte for byte
    for name in ("queries.jsonl", "qrels/train.tsv", "qrels/test.tsv", "qrels/dev.tsv"):
        assert (big / name).read_bytes() == (source / name).read_bytes()
    added = [json.loads(line) for line in lines[300:]]
    assert [d["_id"] for d in added] == [f"{DISTRACTOR_PREFIX}{i}" for i in range(700)]
    real_docs = [json.loads(line)["text"] for line in real.decode().splitlines()]
    real_words = {w for t in real_docs for w in t.split()}
    real_lengths = {len(t.split()) for t in real_docs}
    assert all(set(d["text"].split()) <= real_words and len(d["text"].split()) in real_lengths for d in added)
    assert not {d["text"] for d in added} & set(real_docs)  # drawn word by word, never a real paragraph
    top = Counter(w for d in added for w in d["text"].split()).most_common(1)[0][0]
    assert top == Counter(w for t in real_docs for w in t.split()).most_common(1)[0][0]  # its frequencies
    assert "not a new benchmark" in (big / "README.md").read_text()
    grown = load_beir(big)
    assert grown.num_docs == 1000 and grown.qrels["test"] == load_beir(source).qrels["test"]
    again = grow_beir(source, tmp_path / "again", 1000, seed=7)
    assert (tmp_path / "again" / "corpus.jsonl").read_bytes() == (big / "corpus.jsonl").read_bytes() and again
