"""Evaluation: ir-measures means against hand-computed values, the BM25 / RM3 baselines against the figures in
``../shared/datasets/BASELINES.md``, the TREC run file and the Markdown table."""

from __future__ import annotations

import pytest

from adaptive_ir.evaluate import METRIC_NAMES, bm25_run, evaluate_run, format_table, rm3_run, write_trec_run
from adaptive_ir.retrieval import Retriever

from helpers import beir

# q1: relevant d1, d3, d5 retrieved at ranks 1, 3, 12; q2: d8 is judged non-relevant (grade 0) and ranked first,
# the one relevant doc d2 second; q3 is judged but absent from the run (it must count as 0, not be dropped).
QRELS = {"q1": {"d1": 1, "d3": 2, "d5": 1}, "q2": {"d2": 1, "d8": 0}, "q3": {"d9": 1}}
RUN = {
    "q1": {f"d{i}": 100.0 - i for i in [1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12]} | {"d5": 50.0},
    "q2": {"d8": 3.0, "d2": 2.0, "d4": 1.0},
}


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


# BASELINES.md, test split: R@10, R@40, R@100, nDCG@10, MAP@40 (our AP@40)
BASELINES = {
    "scifact": {"bm25": (0.774, 0.859, 0.876, 0.662, 0.626), "rm3": (0.778, 0.866, 0.896, 0.614, 0.561)},
    "cranfield": {"bm25": (0.400, 0.538, 0.645, 0.360, 0.266), "rm3": (0.407, 0.582, 0.714, 0.377, 0.298)},
    "cisi": {"bm25": (0.110, 0.257, 0.411, 0.323, 0.116), "rm3": (0.110, 0.288, 0.442, 0.316, 0.136)},
}


@pytest.mark.parametrize("name", list(BASELINES))
def test_baselines_match_published_table(name):
    coll = beir(name)
    qids, texts, qrels = coll.split("test")
    retriever = Retriever.build(coll)
    runs = {"bm25": bm25_run(retriever, qids, texts, k=100), "rm3": rm3_run(retriever, qids, texts, k=100)}
    for method, expected in BASELINES[name].items():
        got = evaluate_run(qrels, runs[method])
        for metric, value in zip(["R@10", "R@40", "R@100", "nDCG@10", "AP@40"], expected):
            assert got[metric] == pytest.approx(value, abs=0.005), f"{name} {method} {metric}"


def test_write_trec_run(tmp_path):
    path = tmp_path / "runs" / "test.bm25.trec"
    write_trec_run(path, RUN, "bm25")
    lines = path.read_text().splitlines()
    assert len(lines) == sum(len(d) for d in RUN.values())
    rows = [line.split(" ") for line in lines]
    assert all(len(r) == 6 and r[1] == "Q0" and r[5] == "bm25" for r in rows)
    q2 = [r for r in rows if r[0] == "q2"]
    assert [(r[2], r[3], r[4]) for r in q2] == [("d8", "1", "3.000000"), ("d2", "2", "2.000000"),
                                                ("d4", "3", "1.000000")]
    q1 = [r for r in rows if r[0] == "q1"]
    assert [int(r[3]) for r in q1] == list(range(1, 13))
    scores = [float(r[4]) for r in q1]
    assert scores == sorted(scores, reverse=True) and q1[-1][2] == "d5"


def test_format_table():
    table = format_table({"bm25": {"R@10": 0.5, "R@40": 0.75}, "agent": {"R@10": 0.625}}, "dev")
    lines = table.splitlines()
    assert lines[0] == "**dev**"
    assert lines[2] == "| method | R@10 | R@40 |"
    assert lines[3] == "|---|---|---|"
    assert lines[4] == "| bm25 | 0.5000 | 0.7500 |"
    assert lines[5] == "| agent | 0.6250 | – |"
    assert "**" not in format_table({"bm25": {"R@10": 0.5}})
