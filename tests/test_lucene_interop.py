"""A weighted rewrite means the same in Lucene as in our search (issue 44): on a tiny collection indexed by Pyserini
and by our Lucene-parity settings (configs/*-anserini.yaml: Lucene's English analyzer, Porter stems, Lucene's BM25
with k1 = 0.9, b = 0.4), the record's Elasticsearch body run as a Lucene BooleanQuery of boosted TermQuerys ranks
the same documents, with the same scores, as our index does. Needs Pyserini and a JDK 21+ (``scripts/setup.sh test``
installs Pyserini): without them it fails, unless ADAPTIVE_IR_SKIP_LUCENE=1 (``helpers.require_pyserini``)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from helpers import TINY_DOCS, require_pyserini

from adaptive_ir.config import load_config
from adaptive_ir.data import Collection, MemoryCorpus
from adaptive_ir.inference.records import elasticsearch_query, merge_weights
from adaptive_ir.interop import body_pairs, boolean_query, build_index
from adaptive_ir.retrieval.analyzer import Analyzer
from adaptive_ir.retrieval.retriever import Retriever

WORDS = ("query expansion retrieval documents ranking feedback relevance recall fox dog cat quick lazy running "
         "runner runs policy agent rewrites terms weights lucene index search engine boolean boosted").split()


def _docs(n: int = 60, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    docs = list(TINY_DOCS)
    while len(docs) < n:
        docs.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) + ".")
    return docs


@pytest.fixture(scope="module")
def lucene(tmp_path_factory):
    require_pyserini()
    folder = tmp_path_factory.mktemp("lucene")
    docs = _docs()
    (folder / "docs").mkdir()
    with open(folder / "docs" / "docs.jsonl", "w") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"id": f"d{i}", "contents": text}) + "\n")
    build_index(folder / "docs", folder / "index", threads=1)
    from pyserini.analysis import Analyzer as LuceneAnalyzer
    from pyserini.analysis import get_lucene_analyzer
    from pyserini.search.lucene import LuceneSearcher

    return docs, LuceneSearcher(str(folder / "index")), LuceneAnalyzer(get_lucene_analyzer())


def _ours(docs: list[str]) -> Retriever:
    rc = load_config("scifact-anserini").retrieval  # the Lucene-parity settings
    coll = Collection("tiny", MemoryCorpus([f"d{i}" for i in range(len(docs))], [""] * len(docs), docs), {}, {})
    return Retriever.build(coll, rc.bm25_k1, rc.bm25_b, rc.idf, analyzer=Analyzer(kind=rc.analyzer,
                           stemmer=rc.stemmer), scoring=rc.bm25_scoring)


@pytest.mark.parametrize("pairs", [
    [("quick", 1.0), ("fox", 1.0), ("dogs", 0.5), ("feedback", 0.25)],
    [("query", 1.0), ("expansion", 1.0), ("running", 2.0), ("retrieval", 0.5), ("query", 1.0)],
    [("recall", 1.0), ("lucene", 0.5), ("boosted", 0.5), ("engine", 0.125), ("rewrites", 1.5)],
])
def test_weighted_rewrite_ranks_the_same_documents(lucene, pairs):
    docs, searcher, analyzer = lucene
    ours = _ours(docs)
    # the record's surface words, as a rewrite names them (a stem shows as its most frequent word)
    surface = [(ours.vocab.surface[ours.encode([t])[0][0]], w) for t, w in pairs]
    body = elasticsearch_query(surface, "contents")
    lucene_pairs = body_pairs({"elasticsearch": body})
    assert lucene_pairs == list(merge_weights(surface).items())
    hits = searcher.search(boolean_query(lucene_pairs, analyzer), k=20)
    terms, weights = [], []
    for t, w in lucene_pairs:
        ids = ours.encode([t])[0]
        terms += ids
        weights += [w] * len(ids)
    scores, idx = ours.search([terms], [weights], k=20)
    got = [(f"d{d}", s) for d, s in zip(idx[0].tolist(), scores[0].tolist()) if s > 0]
    assert [h.docid for h in hits] == [d for d, _ in got]
    # the same scores up to float32 rounding (Lucene multiplies the boost into its BM25 weight before the sum)
    np.testing.assert_allclose([h.score for h in hits], [s for _, s in got], rtol=1e-4)


def test_missing_pyserini_fails_unless_skipping_is_asked(monkeypatch):
    import adaptive_ir.interop as interop

    monkeypatch.setattr(interop, "pyserini_ready", lambda: "no JDK 21+ under $JAVA_HOME or /usr/lib/jvm")
    monkeypatch.delenv("ADAPTIVE_IR_SKIP_LUCENE", raising=False)
    with pytest.raises(pytest.fail.Exception, match="no JDK 21.*ADAPTIVE_IR_SKIP_LUCENE=1"):
        require_pyserini()
    monkeypatch.setenv("ADAPTIVE_IR_SKIP_LUCENE", "1")
    with pytest.raises(pytest.skip.Exception, match="no JDK 21"):
        require_pyserini()
