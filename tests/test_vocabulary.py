"""The vocabulary kept as arrays (``retrieval/vocabulary.py``): ids and texts as a list and a dict would give them,
whatever the CRC-32s do, saved and memory-mapped with the index, and an index saved with ``vocab.json`` still read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptive_ir.common.strings import Strings
from adaptive_ir.retrieval.vocabulary import TermIds, Vocabulary

TERMS = ["über", "fox", "", "東京", "x1", "fox2", "a b", "quick"]


def test_ids_and_texts_are_a_dicts_and_a_lists():
    v = Vocabulary.from_terms(TERMS, [t.upper() for t in TERMS])
    assert len(v) == len(TERMS) and list(v.terms) == TERMS and v.terms[-1] == "quick" and v.terms[1:3] == ["fox", ""]
    assert v.surface[3] == "東京" and v.surface[0] == "ÜBER"
    assert {t: v.ids[t] for t in TERMS} == {t: i for i, t in enumerate(TERMS)}
    assert "fox" in v.ids and "fo" not in v.ids and 3 not in v.ids and v.ids.get("nope") is None
    with pytest.raises(KeyError):
        v.ids["nope"]
    with pytest.raises(IndexError):
        v.terms[len(TERMS)]
    assert v.encode(["quick", "nope", "fox", "quick"]) == [7, 1, 7]
    assert v.encode_many([["fox"], [], ["nope", "über"]]) == [[1], [], [0]]
    assert v.terms == TERMS and v.terms == Strings.of(TERMS) and v.terms != Strings.of(TERMS[:-1])


def test_colliding_hashes_are_told_apart_by_their_text(monkeypatch):
    import adaptive_ir.retrieval.vocabulary as vocabulary

    # every text under one hash: each lookup walks the whole run and compares texts
    monkeypatch.setattr(vocabulary, "_crc", lambda texts: np.zeros(len(texts), np.uint32))
    ids = TermIds.of(Strings.of(TERMS))
    assert not ids.hashes.any()
    words = ["x1", "fox", "missing", "quick", ""]
    assert ids.positions(words).tolist() == [4, 1, -1, 7, 2]


def test_saved_mapped_and_the_older_json_form(tmp_path):
    v = Vocabulary.from_terms(TERMS, TERMS[::-1])
    v.save(tmp_path)
    back = Vocabulary.load(tmp_path)
    assert isinstance(back.terms.buf.base, np.memmap) and isinstance(back.ids.hashes.base, np.memmap)  # mapped, read as arrays
    assert back.terms == v.terms and back.surface == TERMS[::-1] and back.encode(TERMS) == list(range(len(TERMS)))
    plain = Vocabulary.from_terms(TERMS)
    plain.save(tmp_path / "plain")
    assert Vocabulary.load(tmp_path / "plain").surface_forms is None


def test_an_index_saved_with_vocab_json_is_still_read(tmp_path):
    from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms

    corpus = CorpusTerms.build([["the quick brown fox", "a lazy dog", "quick dogs"]], Analyzer())
    corpus.save(tmp_path)
    for f in tmp_path.glob("vocab_*.npy"):  # as an index of an earlier version left it
        f.unlink()
    (tmp_path / "vocab.json").write_text(json.dumps(list(corpus.vocab.terms)), encoding="utf-8")
    old = CorpusTerms.load(tmp_path)
    assert old.vocab.terms == corpus.vocab.terms and old.vocab.encode(["quick", "fox"]) == corpus.vocab.encode(
        ["quick", "fox"])
