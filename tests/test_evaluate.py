"""Evaluation: ir-measures means against hand-computed values (every query of a split counts, unjudged or
unranked ones at 0), runs that hold only documents sharing a term with the query, the BM25 / RM3 baselines against
every row of ``../shared/datasets/BASELINES.md``, the TREC run file and the Markdown table."""

from __future__ import annotations

import ir_measures
import numpy as np
import pytest
from helpers import TINY_DOCS, beir

from adaptive_ir.data import Collection, MemoryCorpus
from adaptive_ir.evaluation.metrics import (
    MEASURES,
    METRIC_NAMES,
    bm25_run,
    evaluate_run,
    format_table,
    per_query,
    read_trec_run,
    rm3_expansion,
    rm3_run,
    to_run,
    write_trec_run,
)
from adaptive_ir.retrieval.feedback import SemanticFeedback, relevance_model, rm3_queries
from adaptive_ir.retrieval.retriever import Retriever

# q1: relevant d1, d3, d5 retrieved at ranks 1, 3, 12; q2: d8 is judged non-relevant (grade 0) and ranked first,
# the one relevant doc d2 second; q3 is judged but absent from the run (it must count as 0, not be dropped).
QRELS = {"q1": {"d1": 1, "d3": 2, "d5": 1}, "q2": {"d2": 1, "d8": 0}, "q3": {"d9": 1}}
RUN = {
    "q1": {f"d{i}": 100.0 - i for i in [1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12]} | {"d5": 50.0},
    "q2": {"d8": 3.0, "d2": 2.0, "d4": 1.0},
}


def tiny_collection() -> Collection:
    return Collection("tiny", MemoryCorpus([f"d{i}" for i in range(len(TINY_DOCS))], [""] * len(TINY_DOCS), TINY_DOCS),
                      {}, {})


def test_evaluate_run_equals_hand_computed():
    got = evaluate_run(QRELS, RUN)
    assert list(got) == METRIC_NAMES
    expected = {
        "R@10": (2 / 3 + 1 + 0) / 3,
        "R@40": (1 + 1 + 0) / 3,
        "R@100": (1 + 1 + 0) / 3,
        # AP@40 (trec_eval map_cut): precision at each relevant rank, divided by the number of relevant docs
        "AP@40": ((1 / 1 + 2 / 3 + 3 / 12) / 3 + (1 / 2) / 1 + 0) / 3,
        "RR@10": (1 + 1 / 2 + 0) / 3,
    }
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-9), name
    # nDCG@10 of q2 alone: one relevant doc at rank 2 → 1/log2(3)
    assert evaluate_run({"q2": QRELS["q2"]}, RUN)["nDCG@10"] == pytest.approx(1 / 1.5849625007211562, abs=1e-9)


def test_empty_ranking_counts_as_zero():
    one = evaluate_run({"q1": QRELS["q1"]}, RUN)
    both = evaluate_run({"q1": QRELS["q1"], "q3": QRELS["q3"]}, {**RUN, "q3": {}})
    for name in METRIC_NAMES:
        assert both[name] == pytest.approx(one[name] / 2)


def test_queries_without_judgments_count_as_zero():
    # q4 has an empty qrels entry and q5 none at all (Nogueira & Cho keep queries whose relevant titles are all
    # missing from the corpus): ir-measures would leave both out of the mean; each must count as 0
    one = evaluate_run({"q1": QRELS["q1"]}, RUN)
    got = evaluate_run({"q1": QRELS["q1"], "q4": {}}, {**RUN, "q4": {"d1": 1.0}}, qids=["q1", "q4", "q5"])
    for name in METRIC_NAMES:
        assert got[name] == pytest.approx(one[name] / 3), name
    by_hand = evaluate_run({"q1": QRELS["q1"], "q4": {}}, RUN)
    assert by_hand["R@40"] == pytest.approx(1 / 2) and by_hand["RR@10"] == pytest.approx(1 / 2)


def test_per_query_follows_qids_and_equals_ir_measures():
    values = per_query(QRELS, RUN, qids=["q3", "q2", "q1"])
    assert list(values) == METRIC_NAMES
    assert values["R@10"].tolist() == pytest.approx([0.0, 1.0, 2 / 3])
    assert values["RR@10"].tolist() == pytest.approx([0.0, 0.5, 1.0])
    agg = ir_measures.calc_aggregate(MEASURES, {q: QRELS[q] for q in RUN}, RUN)
    two = evaluate_run(QRELS, RUN, qids=["q1", "q2"])
    for m in MEASURES:
        assert two[str(m)] == pytest.approx(agg[m], abs=1e-12), str(m)
    with pytest.raises(ValueError, match="twice"):
        per_query(QRELS, RUN, qids=["q1", "q1"])


def test_runs_list_only_documents_sharing_a_term_with_the_query():
    scores = np.array([[2.5, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    idx = np.array([[3, 0, 1, 2], [0, 1, 2, 3]])
    assert to_run(["a", "b"], ["d0", "d1", "d2", "d3"], scores, idx) == {"a": {"d3": 2.5, "d0": 1.0}, "b": {}}
    # "fox" is in 2 of 8 documents, "zebra" in none: top-5 pads with zero-score documents, which are not results
    coll = tiny_collection()
    r = Retriever.build(coll)
    texts = ["fox", "zebra", "quick fox"]
    bm25 = bm25_run(r, ["fox", "zebra", "quick"], texts, k=5)
    assert sorted(bm25["fox"]) == ["d0", "d1"] and bm25["zebra"] == {}
    rm3 = rm3_run(r, ["fox", "zebra", "quick"], texts, k=5)
    assert rm3["zebra"] == {} and all(s > 0 for docs in rm3.values() for s in docs.values())
    assert 2 <= len(rm3["fox"]) < 5  # RM3's expansion terms reach more documents, never the unmatched ones


def test_rm3_breaks_ties_by_first_appearance_in_the_feedback_documents():
    # one feedback document: every word has tf 1, so all RM1 weights tie; the reference keeps the first ones
    docs = ["zeta alpha beta gamma delta", "alpha omega"]
    coll = Collection("ties", MemoryCorpus(["d0", "d1"], ["", ""], docs), {}, {})
    r = Retriever.build(coll)
    terms = r.encode(["zeta"])
    rm1 = relevance_model(r.corpus, np.array([[0]]), np.array([[1.0]]))
    order = r.first_occurrences([[0]])
    assert [r.vocab.terms[t] for t in order[0]] == ["zeta", "alpha", "beta", "gamma", "delta"]
    t, w = rm3_queries(terms, rm1, 3, 0.5, order)
    assert [r.vocab.terms[i] for i in t[0]] == ["zeta", "alpha", "beta"]
    assert w[0] == pytest.approx([0.5 + 0.5 / 3, 0.5 / 3, 0.5 / 3])
    # with the order reversed, the last words win the tie
    t, _ = rm3_queries(terms, rm1, 2, 0.5, [order[0][::-1]])
    assert [r.vocab.terms[i] for i in t[0]] == ["zeta", "delta", "gamma"]


def test_rm3_reads_documents_only_where_a_tie_decides_the_pruning():
    import scipy.sparse as sp

    from adaptive_ir.retrieval.feedback import ties_decide, top_terms

    rows = sp.csr_matrix(np.array([[0.5, 0.3, 0.2, 0.1, 0.0],      # distinct: the weights alone decide
                                   [0.4, 0.4, 0.1, 0.05, 0.05],    # a tie inside the top 2
                                   [0.5, 0.2, 0.2, 0.1, 0.0],      # the 2nd ties the 3rd: membership
                                   [0.5, 0.3, 0.1, 0.1, 0.0]]))    # a tie below the cut: nothing decided
    assert [ties_decide(rows, q, 2) for q in range(4)] == [False, True, True, False]
    for q in (0, 3):  # where no tie decides, any order gives the same pruning
        assert all(np.array_equal(top_terms(rows, 2, [order] * 4)[0][q], top_terms(rows, 2)[0][q])
                   for order in ([4, 3, 2, 1, 0], [2, 3, 0, 1]))
    # where one does, the order decides: by position in it, terms absent from it last, then by id
    assert top_terms(rows, 2)[0].tolist() == [[0, 1], [0, 1], [0, 1], [0, 1]]
    assert top_terms(rows, 3, [None, [1, 0], [2], None])[0].tolist() == [[0, 1, 2], [1, 0, 2], [0, 2, 1],
                                                                          [0, 1, 2]]
    assert top_terms(rows, 7)[1][0].tolist() == [0.5, 0.3, 0.2, 0.1, 0, 0, 0]
    # documents with distinct counts: RM1 has no tie at the top, and no text is read again
    docs = ["fox " * 5 + "den " * 3 + "kit", "fox fox dog", "cat"]
    coll = Collection("no-ties", MemoryCorpus(["d0", "d1", "d2"], [""] * 3, docs), {}, {})
    r = Retriever.build(coll)
    calls = []
    r.doc_texts = lambda idx: calls.append(list(idx)) or coll.doc_texts_at(idx)
    rm3_expansion(r, r.encode(["fox"]), fb_docs=1, fb_terms=2)
    assert calls == []


@pytest.mark.parametrize("kind, stemmer", [("bm25s", "none"), ("lucene", "porter")])
def test_first_positions_give_the_order_of_the_texts_read_again(kind, stemmer):
    # the index keeps where each term first occurs in its document: the order RM3's ties follow, which an index
    # saved without it reads from the texts again
    from adaptive_ir.data import make_default
    from adaptive_ir.retrieval.analyzer import Analyzer

    coll = make_default()
    r = Retriever.build(coll, analyzer=Analyzer(kind=kind, stemmer=stemmer))
    assert r.corpus.first is not None
    rng = np.random.default_rng(0)
    lists = [rng.choice(coll.num_docs, size=n, replace=False) for n in (1, 3, 10, 10, 25)] + [np.zeros(0, np.int64)]
    kept = r.first_occurrences(lists)
    r.corpus.first = None
    assert kept == r.first_occurrences(lists) and all(kept[:-1]) and kept[-1] == []


def test_rm3_reads_every_feedback_document_in_one_call():
    # a gzipped corpus is decompressed once per read by position: one read per query would be quadratic (an index
    # saved before first positions were kept reads the texts again)
    coll = tiny_collection()
    r = Retriever.build(coll)
    r.corpus.first = None
    calls = []
    r.doc_texts = lambda idx: calls.append(list(idx)) or coll.doc_texts_at(idx)
    texts = ["fox", "quick fox", "lazy dog", "zebra"]
    run = rm3_run(r, ["a", "b", "c", "d"], texts, k=5, fb_docs=3)
    assert len(calls) == 1 and len(calls[0]) == len(set(calls[0]))
    r.doc_texts = coll.doc_texts_at
    assert rm3_run(r, ["a", "b", "c", "d"], texts, k=5, fb_docs=3) == run
    one_by_one = r.first_occurrences([[2, 0]]) + r.first_occurrences([[0]])
    assert r.first_occurrences([[2, 0], [0]]) == one_by_one


# BASELINES.md: R@10, R@40, R@100, nDCG@10, MAP@40 (our AP@40) of BM25 (bm25s) and BM25+RM3 (bm25s). The train
# rows are over all train queries (no dev carved); nfcorpus's own dev split reports R@40 alone.
METRICS = ["R@10", "R@40", "R@100", "nDCG@10", "AP@40"]
BASELINES = {
    ("scifact", "test"): {"bm25": (0.774, 0.859, 0.876, 0.662, 0.626), "rm3": (0.778, 0.866, 0.896, 0.614, 0.561)},
    ("cranfield", "test"): {"bm25": (0.400, 0.538, 0.645, 0.360, 0.266),
                            "rm3": (0.407, 0.582, 0.714, 0.377, 0.298)},
    ("cisi", "test"): {"bm25": (0.110, 0.257, 0.411, 0.323, 0.116), "rm3": (0.110, 0.288, 0.442, 0.316, 0.136)},
    ("nfcorpus", "test"): {"bm25": (0.149, 0.203, 0.239, 0.312, 0.136), "rm3": (0.172, 0.251, 0.303, 0.335, 0.157)},
    ("scifact", "train"): {"bm25": (0.787, 0.869, 0.906, 0.667, 0.629),
                           "rm3": (0.780, 0.878, 0.923, 0.630, 0.584)},
    ("cranfield", "train"): {"bm25": (0.384, 0.589, 0.737, 0.348, 0.270),
                             "rm3": (0.412, 0.642, 0.777, 0.368, 0.299)},
    ("cisi", "train"): {"bm25": (0.128, 0.287, 0.423, 0.382, 0.139), "rm3": (0.120, 0.253, 0.394, 0.369, 0.137)},
    ("nfcorpus", "train"): {"bm25": (0.132, 0.192, 0.230, 0.308, 0.120),
                            "rm3": (0.143, 0.227, 0.291, 0.324, 0.135)},
    ("nfcorpus", "dev"): {"bm25": (None, 0.172, None, None, None), "rm3": (None, 0.211, None, None, None)},
}


@pytest.mark.parametrize("name,split", list(BASELINES), ids=[f"{n}-{s}" for n, s in BASELINES])
def test_baselines_match_published_table(name, split):
    coll = beir(name, dev_fraction=0.0)
    qids, texts, qrels = coll.split(split)
    retriever = Retriever.build(coll)
    runs = {"bm25": bm25_run(retriever, qids, texts, k=100), "rm3": rm3_run(retriever, qids, texts, k=100)}
    for method, expected in BASELINES[name, split].items():
        got = evaluate_run(qrels, runs[method], qids=qids)
        for metric, value in zip(METRICS, expected):
            if value is not None:
                assert got[metric] == pytest.approx(value, abs=0.002), f"{name} {split} {method} {metric}"


def test_write_trec_run(tmp_path):
    path = tmp_path / "runs" / "test.bm25.trec"
    write_trec_run(path, RUN, "bm25")
    lines = path.read_text().splitlines()
    assert len(lines) == sum(len(d) for d in RUN.values())
    rows = [line.split(" ") for line in lines]
    assert all(len(r) == 6 and r[1] == "Q0" and r[5] == "bm25" for r in rows)
    q2 = [r for r in rows if r[0] == "q2"]
    assert [(r[2], r[3], r[4]) for r in q2] == [("d8", "1", "3.0"), ("d2", "2", "2.0"), ("d4", "3", "1.0")]
    q1 = [r for r in rows if r[0] == "q1"]
    assert [int(r[3]) for r in q1] == list(range(1, 13))
    scores = [float(r[4]) for r in q1]
    assert scores == sorted(scores, reverse=True) and q1[-1][2] == "d5"


@pytest.mark.parametrize("first", [0, 1])
def test_tied_documents_rank_in_the_searchs_order_in_memory_and_in_the_trec_file(tmp_path, first):
    # d0 and d1 tie for the last place of the top 2; trec_eval would order them by id, the reward by the search's
    # order: whichever comes first in the search must be the one R@2 and RR@10 see
    scores = np.array([[3.0, 1.0, 1.0, 1.0]], np.float32)
    idx = np.array([[2, first, 1 - first, 3]])
    run = to_run(["q"], ["d0", "d1", "d2", "d3"], scores, idx)
    assert list(run["q"]) == ["d2", f"d{first}", f"d{1 - first}", "d3"]
    got = run["q"]
    assert got["d2"] == 3.0 and got[f"d{first}"] == 1.0 and got["d3"] < got[f"d{1 - first}"] < 1.0
    qrels = {"q": {f"d{first}": 1}}
    path = tmp_path / "run.trec"
    write_trec_run(path, run, "t")
    for got in (run, read_trec_run(path)):
        values = per_query(qrels, got, [ir_measures.R @ 2, ir_measures.RR @ 10])
        assert values["R@2"].tolist() == [1.0] and values["RR@10"].tolist() == [0.5]
    assert read_trec_run(path) == run


def test_format_table():
    table = format_table({"bm25": {"R@10": 0.5, "R@40": 0.75}, "agent": {"R@10": 0.625}}, "dev")
    lines = table.splitlines()
    assert lines[0] == "**dev**"
    assert lines[2] == "| method | R@10 | R@40 |"
    assert lines[3] == "|---|---|---|"
    assert lines[4] == "| bm25 | 0.5000 | 0.7500 |"
    assert lines[5] == "| agent | 0.6250 | – |"
    assert "**" not in format_table({"bm25": {"R@10": 0.5}})


def test_rm3_with_unit_query_words_is_the_same_query_scaled():
    # retrieval.start = rm3: each query word weighs 1 (its count), the whole query scaled by |q| / orig_weight
    coll = tiny_collection()
    r = Retriever.build(coll)
    terms = r.encode(["quick fox fox", "lazy dog"])
    plain = rm3_expansion(r, terms, fb_docs=3, orig_weight=0.4)
    unit = rm3_expansion(r, terms, fb_docs=3, orig_weight=0.4, unit_query=True)
    assert plain[0] == unit[0]
    for q, p, u in zip(terms, plain[1], unit[1]):
        assert np.array(u) == pytest.approx(np.array(p) * len(q) / 0.4)
    # the words keep their counts (plus their RM1 share); the whole query weighs |q| / orig_weight
    fox, quick = (unit[0][0].index(r.encode([w])[0][0]) for w in ("fox", "quick"))
    assert unit[1][0][fox] >= 2.0 and unit[1][0][quick] >= 1.0
    assert sum(unit[1][0]) == pytest.approx(3 / 0.4) and sum(unit[1][1]) == pytest.approx(2 / 0.4)


def test_rm3_expansion_in_chunks_changes_no_number():
    # 100k+ train queries are expanded a chunk at a time; each query's expansion is its own, semantic feedback too
    coll = tiny_collection()
    r = Retriever.build(coll)
    terms = r.encode(["quick fox fox", "lazy dog", "fox", "brown dog jumps"])
    rng = np.random.default_rng(0)
    fb = SemanticFeedback(rng.normal(size=(len(TINY_DOCS), 4)).astype(np.float32), depth=5, identity={"m": "r"})
    vectors = rng.normal(size=(len(terms), 4)).astype(np.float32)
    for feedback, qv in ((None, None), (fb, vectors)):
        whole = rm3_expansion(r, terms, fb_docs=3, feedback=feedback, query_vectors=qv)
        assert rm3_expansion(r, terms, fb_docs=3, feedback=feedback, query_vectors=qv, chunk=1) == whole
        assert rm3_expansion(r, terms, fb_docs=3, feedback=feedback, query_vectors=qv, chunk=3) == whole
    # the query vectors follow their queries into each chunk: reversed queries, reversed expansions
    rev = rm3_expansion(r, terms[::-1], fb_docs=3, feedback=fb, query_vectors=vectors[::-1].copy(), chunk=3)
    assert rev[0] == whole[0][::-1] and rev[1] == whole[1][::-1]


@pytest.mark.parametrize("width", [50, 2 ** 45])
def test_distinct_terms_pack_positions_as_np_unique_reads_them(width):
    # the index build's one sort (packed keys and positions; np.unique's stable argsort when they cannot be packed)
    from adaptive_ir.retrieval.analyzer import _distinct_terms

    rng = np.random.default_rng(1)
    doc_len = rng.integers(0, 40, 30)
    docs = np.repeat(np.arange(30), doc_len)
    ids = rng.integers(0, 50, len(docs))
    keys, first, tf = _distinct_terms(ids, docs, doc_len, width)
    ref_keys, at, ref_tf = np.unique(docs.astype(np.int64) * width + ids, return_index=True, return_counts=True)
    starts = np.cumsum(doc_len) - doc_len
    np.testing.assert_array_equal(keys, ref_keys)
    np.testing.assert_array_equal(tf, ref_tf)
    np.testing.assert_array_equal(first, at - starts[docs[at]])


@pytest.mark.parametrize("stored", ["list", "DocIds"])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_mean_recall_off_the_arrays_is_ir_measures_recall_to_the_last_bit(k, stored):
    # choosing among fixed rules reads R@k off the runs' arrays; it must be evaluate_run's (ir-measures') value,
    # with the ids as a list (small corpora) or as a large corpus keeps them (DocIds: read in one pass, take)
    import ir_measures

    from adaptive_ir.data import make_default
    from adaptive_ir.data.corpus import DocIdsBuilder
    from adaptive_ir.evaluation.metrics import CompactRun, Judged, drop_excluded, evaluate_run, mean_recall

    coll = make_default()
    r = Retriever.build(coll)
    qids, texts, qrels = coll.split("test")
    qrels = {q: dict(v) for q, v in qrels.items()}
    qrels[qids[0]] = {d: 0 for d in qrels[qids[0]]}  # judged, nothing relevant: 0
    qrels[qids[1]][r.doc_ids[0]] = -1  # a negative grade is not relevant
    qrels[qids[2]]["not-in-the-corpus"] = 1  # relevant, never retrieved: it still counts
    scores, idx = r.search(r.encode(texts[:-3]), k=50)  # the last queries have no ranking: 0
    scores[:, 7] = scores[:, 6]  # a tie
    doc_ids = r.doc_ids
    if stored == "DocIds":
        builder = DocIdsBuilder()
        for d in r.doc_ids:
            builder.add(d)
        doc_ids = builder.build()
    run = CompactRun(qids[:-3], doc_ids, scores, idx)
    assert dict(run.items()) == to_run(qids[:-3], r.doc_ids, scores, idx)
    rng = np.random.default_rng(k)
    excluded = {q: r.doc_ids[int(d)] for q, d in zip(qids, idx[:, 0]) if rng.random() < 0.5}
    measure = [ir_measures.parse_measure(f"R@{k}")]
    for ex in ({}, excluded):
        expected = evaluate_run(qrels, drop_excluded(run, ex), measure, qids)[f"R@{k}"]
        assert mean_recall(qrels, run, k, qids, ex) == expected
        assert mean_recall(qrels, run, k, qids, ex, Judged.of(qrels, qids, doc_ids, ex)) == expected
        assert mean_recall(qrels, dict(run.items()), k, qids, ex) == expected  # the dict path
    assert 0 < expected < 1


def test_per_query_in_slices_of_queries_is_per_query_at_once(monkeypatch):
    # large splits are evaluated a slice of queries at a time (bounded memory); each query's values are its own
    from adaptive_ir.data import make_default
    from adaptive_ir.evaluation import metrics

    coll = make_default()
    r = Retriever.build(coll)
    qids, texts, qrels = coll.split("test")
    run = metrics.bm25_run(r, qids[:-2], texts[:-2])  # two queries unranked: 0
    whole = metrics.per_query(qrels, run, qids=qids)
    monkeypatch.setattr(metrics, "EVAL_QUERIES", 7)
    sliced = metrics.per_query(qrels, run, qids=qids)
    assert whole.keys() == sliced.keys() and all(np.array_equal(whole[m], sliced[m]) for m in whole)
    assert len(qids) > 7 and whole["R@40"].any()
