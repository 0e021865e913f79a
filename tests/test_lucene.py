"""Anserini parity: Lucene's English analysis (tokens and Porter stems against Lucene's own outputs), Lucene's BM25
(length norm bytes, impacts), the stemmed vocabulary's surface forms, the settings as config keys and cache keys,
and SciFact's published BM25 figures reproduced by the shipped configs/scifact-anserini.yaml."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import Stemmer
from helpers import beir
from ir_measures import R, nDCG

from adaptive_ir.config import ConfigError, load_config
from adaptive_ir.data import Collection, MemoryCorpus
from adaptive_ir.evaluation.metrics import bm25_run, evaluate_run
from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms
from adaptive_ir.retrieval.index import LENGTH_TABLE, BM25Index, LuceneWeights, length_norm_byte
from adaptive_ir.retrieval.lucene import standard_tokens
from adaptive_ir.retrieval.porter import porter_stem
from adaptive_ir.retrieval.retriever import Retriever, index_folder

FIXTURE = json.loads((Path(__file__).parent / "data" / "lucene_english.json").read_text(encoding="utf-8"))
"""Lucene 9.9.1's outputs (tests/data/LuceneDump.java): texts with their tokens unstemmed ("words") and stemmed,
and 2,131 corpus words with their Porter stems (every word of SciFact, NFCorpus, Cranfield and CISI where
Snowball's porter stemmer disagrees with Lucene's, and samples)."""


@pytest.mark.parametrize("case", FIXTURE["texts"], ids=lambda c: c["text"][:30])
def test_analyzer_equals_lucene(case):
    """Possessives, U.S.A-style words, decimals, connectors, emoji, CJK, Hebrew quotes, combining marks, final
    sigma and İ, words over 255 characters, corpus documents with non-ASCII text."""
    assert Analyzer(kind="lucene").tokenize(case["text"]) == case["words"]
    assert Analyzer(kind="lucene", stemmer="porter").tokenize(case["text"]) == case["stems"]


def test_porter_equals_lucene_not_snowball():
    words, expected = list(FIXTURE["porter"]), list(FIXTURE["porter"].values())
    assert [porter_stem(w) for w in words] == expected
    # Porter's own examples (PorterStemmer.java's comments)
    assert [porter_stem(w) for w in ["caresses", "ponies", "ties", "agreed", "disabled", "matting", "mating",
                                     "meeting", "milling", "messing", "meetings", "feed"]] == \
        ["caress", "poni", "ti", "agre", "disabl", "mat", "mate", "meet", "mill", "mess", "meet", "feed"]
    # the Snowball algorithms are other stemmers: the fixture holds words where they disagree with Lucene's
    for algorithm in ("porter", "english"):
        assert Stemmer.Stemmer(algorithm).stemWords(words) != expected


def test_tokens_longer_than_255_are_cut():
    assert [len(t) for t in standard_tokens("a" * 600)] == [255, 255, 90]


def test_length_norm_byte_is_lucenes_smallfloat():
    """SmallFloat.byte4ToInt(intToByte4(n)) as Lucene 9.9.1 printed it."""
    lengths = [0, 1, 23, 24, 25, 39, 40, 41, 100, 150, 200, 255, 300, 1000]
    decoded = [0, 1, 23, 24, 25, 39, 40, 40, 96, 144, 200, 248, 280, 984]
    assert LENGTH_TABLE[length_norm_byte(np.array(lengths))].tolist() == decoded
    assert np.all(np.diff(LENGTH_TABLE) > 0) and LENGTH_TABLE[255] == 2013265944


def test_lucene_impacts_follow_bm25similarity():
    """idf · tf/(tf + k1·(1 − b + b·dl/avgdl)) with dl the decoded norm byte, in float32 (BM25Similarity's
    rewrite weight − weight/(1 + tf/norm) differs from the plain fraction only by float rounding)."""
    df, n, k1, b, avgdl = np.array([3, 1, 50]), 100, 0.9, 0.4, 37.5
    w = LuceneWeights.from_df(df, n, k1, b, avgdl)
    terms, tf, dl = np.array([0, 1, 2, 0]), np.array([1, 2, 3, 7]), np.array([10, 100, 41, 1000])
    got = w.impacts(terms, tf, dl)
    assert got.dtype == np.float32
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    dec = LENGTH_TABLE[length_norm_byte(dl)]
    expected = idf[terms] * tf / (tf + k1 * (1 - b + b * dec / avgdl))
    np.testing.assert_allclose(got, expected, rtol=2e-6)
    assert dec.tolist() == [10, 96, 40, 984]  # 100, 41 and 1000 tokens are read back shorter


def _collection(texts: list[str]) -> Collection:
    corpus = MemoryCorpus([f"d{i}" for i in range(len(texts))], [""] * len(texts), texts)
    return Collection("tiny", corpus, {}, {})


TEXTS = ["Diseases and the disease: a disease's course.", "Cells, cell biology; the cells' fate", "",
         "Generalization generalizes general ideas", "the and of"]


def test_stemmed_vocabulary_and_surface_forms():
    corpus = CorpusTerms.build([TEXTS], Analyzer(kind="lucene", stemmer="porter"))
    v = corpus.vocab
    assert v.terms[:3] == ["diseas", "cours", "cell"]
    # each stem reads as its most frequent word; a tie goes to the word seen first
    assert [v.surface[v.ids[t]] for t in ["diseas", "cell", "gener"]] == ["disease", "cells", "generalization"]
    d0 = dict(zip(corpus.terms[corpus.indptr[0]:corpus.indptr[1]].tolist(),
                  corpus.tf[corpus.indptr[0]:corpus.indptr[1]].tolist()))
    assert d0 == {v.ids["diseas"]: 3, v.ids["cours"]: 1}  # "disease's" loses its possessive, then stems
    assert corpus.doc_len.tolist() == [4, 5, 0, 4, 0]
    # the unstemmed default keeps no surface array: terms are their own surface
    plain = CorpusTerms.build([TEXTS], Analyzer()).vocab
    assert plain.surface_forms is None and plain.surface is plain.terms


def test_stemming_over_chunks_equals_one_chunk():
    """Stem ids follow first occurrence whatever the chunking (new words are stemmed chunk by chunk)."""
    analyzer = Analyzer(kind="bm25s", stemmer="porter")
    whole = CorpusTerms.build([TEXTS * 3], analyzer)
    chunked = CorpusTerms.build(([t] for t in TEXTS * 3), analyzer)
    assert whole.vocab.terms == chunked.vocab.terms and whole.vocab.surface == chunked.vocab.surface
    assert np.array_equal(whole.terms, chunked.terms) and np.array_equal(whole.tf, chunked.tf)


def test_index_cache_is_keyed_by_the_analyzer_and_scoring(tmp_path):
    coll = _collection(TEXTS)
    stemmed = Analyzer(kind="lucene", stemmer="porter")
    r = Retriever.cached(coll, tmp_path, 0.9, 0.4, analyzer=stemmed, scoring="lucene")
    folders = {index_folder(tmp_path, r.corpus_sha256, 0.9, 0.4, "lucene", a, s)
               for a in (Analyzer(), Analyzer(kind="lucene"), stemmed) for s in ("bm25s", "lucene")}
    assert len(folders) == 6
    # the saved index brings its analyzer and surface forms back
    again = Retriever.cached(coll, tmp_path, 0.9, 0.4, analyzer=stemmed, scoring="lucene")
    assert again.analyzer.settings == {"kind": "lucene", "stemmer": "porter"}
    assert again.vocab.surface == r.vocab.surface and again.encode(["diseases"]) == r.encode(["disease"])
    assert again.index.meta["doc_count"] == 3  # Lucene's N: documents with at least one token


def test_config_keys_and_checks(tmp_path):
    cfg = load_config("scifact-anserini")
    rc = cfg.retrieval
    assert (rc.analyzer, rc.stemmer, rc.bm25_scoring, rc.bm25_k1, rc.bm25_b, rc.top_k) == \
        ("lucene", "porter", "lucene", 0.9, 0.4, 1000)
    assert load_config("scifact").retrieval.analyzer == "bm25s"  # the old settings stay as they were
    with pytest.raises(ConfigError, match="stem_variants"):
        load_config("scifact-anserini", {"candidate_mining.stem_variants": True})
    with pytest.raises(ConfigError, match="retrieval.idf"):
        load_config("scifact-anserini", {"retrieval.idf": "okapi"})
    with pytest.raises(ValueError, match="idf"):
        BM25Index.build(CorpusTerms.build([TEXTS], Analyzer()), idf="okapi", scoring="lucene")


def test_scifact_reproduces_anserini_bm25_flat():
    """Anserini's beir-v1.0.0-scifact.flat regression (test split, -bm25 -hits 1000): nDCG@10 0.6789, R@100
    0.9253, R@1000 0.9767; the shipped config's settings, our build and search."""
    coll = beir("scifact", dev_fraction=0)
    rc = load_config("scifact-anserini").retrieval
    retriever = Retriever.build(coll, rc.bm25_k1, rc.bm25_b, rc.idf, analyzer=Analyzer(kind=rc.analyzer,
                                stemmer=rc.stemmer), scoring=rc.bm25_scoring)
    assert int(retriever.corpus.doc_len.sum()) == 838128  # the regression's index_stats "total terms"
    qids, texts, qrels = coll.split("test")
    got = evaluate_run(qrels, bm25_run(retriever, qids, texts, rc.top_k), [nDCG @ 10, R @ 100, R @ 1000], qids=qids)
    assert math.isclose(got["nDCG@10"], 0.6789, abs_tol=5e-4)
    assert math.isclose(got["R@100"], 0.9253, abs_tol=5e-4)
    assert math.isclose(got["R@1000"], 0.9767, abs_tol=5e-4)
