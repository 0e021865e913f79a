"""Paired significance tests: the randomization p-value against full enumeration of the sign flips, the t-test
against its formula, wins/ties/losses and the spread over seeds by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from adaptive_ir.evaluation import stats


def enumerated_p(d: np.ndarray) -> float:
    """Share of all 2ⁿ sign assignments whose |mean| reaches the observed |mean(d)|."""
    signs = np.array(list(itertools.product([1.0, -1.0], repeat=len(d))))
    means = np.abs((signs * d).mean(1))
    return float(np.mean(means >= abs(d.mean()) - 1e-12))


def test_randomization_p_on_a_tiny_example_by_hand():
    # differences 0.4, -0.1, 0.4, 0: |mean| = 0.175 is reached only when both 0.4s share a sign
    # (±(0.4 + 0.4 ± 0.1) ≥ 0.7): 4 of the 8 sign patterns of the non-zero differences, so p = 1/2
    a, b = [0.5, 0.2, 0.9, 0.4], [0.1, 0.3, 0.5, 0.4]
    assert stats.randomization_p(a, b) == pytest.approx(0.5, abs=1e-12)
    # all three non-zero differences positive and distinct: only the observed pattern and its mirror image
    # reach the observed mean, 2 of 8
    assert stats.randomization_p([1.0, 2.0, 3.0], [0.5, 1.0, 1.5]) == pytest.approx(2 / 8, abs=1e-12)


def test_randomization_p_is_exact_when_the_sign_flips_fit_the_budget():
    rng = np.random.default_rng(3)
    a, b = rng.random(10), rng.random(10)
    assert stats.randomization_p(a, b) == pytest.approx(enumerated_p(a - b), abs=1e-12)
    assert stats.randomization_p(a, a) == 1.0


def test_sampled_randomization_p_is_close_to_exact_and_reproducible():
    rng = np.random.default_rng(5)
    a = rng.random(16)
    b = a - 0.05 + 0.5 * rng.random(16) - 0.25  # a small shift buried in noise
    exact = enumerated_p(a - b)  # 65,536 sign patterns > the 10,000 sampled
    p = stats.randomization_p(a, b)
    assert 0.01 < exact < 0.99
    assert p == pytest.approx(exact, abs=0.02)  # 4 standard errors of a 10,000-sample estimate
    assert stats.randomization_p(a, b) == p  # fixed seed
    assert stats.randomization_p(a, b, seed=1) != p


def test_min_detectable_effect_is_found_with_its_power():
    """At the MDE of n differences with spread sd, the paired t-test at 0.05 rejects in about 80 % of splits (the
    t-quantile formula is the usual approximation: checked by simulation), at half of it far less often."""
    n, sd = 23, 0.1  # CISI's test split, about the spread of R@40 differences there
    rng = np.random.default_rng(0)
    d = rng.normal(0.0, sd, n)
    mde = stats.min_detectable_effect(d, np.zeros(n))
    assert mde == pytest.approx((sps.t.ppf(0.975, n - 1) + sps.t.ppf(0.8, n - 1)) * d.std(ddof=1) / math.sqrt(n),
                                rel=1e-12)
    draws = rng.normal(0.0, 1.0, (20_000, n)) * d.std(ddof=1)

    def power(shift: float) -> float:
        return float(np.mean(sps.ttest_1samp(draws + shift, 0.0, axis=1).pvalue < 0.05))

    assert power(mde) == pytest.approx(0.8, abs=0.02)
    assert power(mde / 2) < 0.4
    assert stats.min_detectable_effect(d, d) == 0.0  # every query ties
    assert stats.paired("R@40", d, np.zeros(n)).mde == mde


def test_t_test_p_equals_its_formula():
    a = np.array([0.61, 0.42, 0.93, 0.35, 0.70, 0.58])
    b = np.array([0.50, 0.45, 0.80, 0.30, 0.52, 0.61])
    d = a - b
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    assert stats.t_test_p(a, b) == pytest.approx(2 * sps.t.sf(abs(t), len(d) - 1), rel=1e-12)
    assert stats.t_test_p(a, a) == 1.0  # 0/0 in scipy: no difference at all


def test_last_bit_noise_of_a_seed_mean_is_a_tie_not_a_significant_difference():
    # an agent that always stops equals BM25 on every query; its mean over 3 seeds carries last-bit noise
    # (3 × x / 3 ≠ x), mostly of one sign: the tests must see ties (p = 1), as wins/ties/losses does
    rng = np.random.default_rng(0)
    bm25 = rng.random(50) / 3 + 0.1
    agent = np.mean([bm25, bm25, bm25], axis=0) * (1 + 1e-15)
    assert np.count_nonzero(agent != bm25) > 40 and stats.wins_ties_losses(agent, bm25) == (0, 50, 0)
    assert stats.randomization_p(agent, bm25) == 1.0 and stats.t_test_p(agent, bm25) == 1.0
    # one real difference among them: the same p-values as without the noise
    agent[7] += 0.2
    clean = bm25.copy()
    clean[7] = agent[7]
    assert stats.randomization_p(agent, bm25) == stats.randomization_p(clean, bm25) < 1.0
    assert stats.t_test_p(agent, bm25) == stats.t_test_p(clean, bm25)


def test_wins_ties_losses_and_paired_summary():
    a, b = [0.5, 0.2, 0.9, 0.4, 0.3], [0.1, 0.3, 0.5, 0.4, 0.3 + 1e-12]
    assert stats.wins_ties_losses(a, b) == (2, 2, 1)
    row = stats.paired("R@40", a, b)
    assert (row.n, row.wins, row.ties, row.losses) == (5, 2, 2, 1)
    assert row.delta == pytest.approx(np.mean(a) - np.mean(b))
    assert row.to_dict()["metric"] == "R@40"
    with pytest.raises(ValueError, match="equal-length"):
        stats.paired("R@40", [0.1, 0.2], [0.1])


def test_mean_std_over_seeds():
    mean, std = stats.mean_std([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4) and std == pytest.approx(0.2)  # sample std (ddof 1)
    assert stats.mean_std([0.3]) == (0.3, None)


def test_trisk_counts_a_loss_twice_and_is_studentised():
    from adaptive_ir.evaluation.risk import trisk

    d = np.array([0.2, -0.1, 0.0, 0.3, -0.05])
    r = np.array([0.2, -0.2, 0.0, 0.3, -0.1])  # losses doubled (alpha 1)
    assert trisk(d) == pytest.approx(r.mean() / (r.std(ddof=1) / np.sqrt(5)))
    assert trisk(np.zeros(4)) == 0.0
    # a rewrite that gains 0.1 on half the queries and loses 0.1 on the other half has mean 0 but is risky
    assert trisk(np.array([0.1, -0.1] * 30)) < -2


def test_risk_table_counts_the_queries_each_baseline_wins_and_loses():
    from adaptive_ir.evaluation.risk import format_risk, risk_table

    qrels = {"a": {"d1": 1}, "b": {"d2": 1}, "c": {"d3": 1}}
    agent = {"a": {"d1": 2.0, "x": 1.0}, "b": {"x": 2.0, "d2": 1.0}, "c": {"y": 1.0}}
    bm25 = {"a": {"x": 2.0, "d1": 1.0}, "b": {"y": 1.0}, "c": {"y": 1.0}}
    table = risk_table(qrels, {"agent": agent, "bm25": bm25}, ["a", "b", "c"], "agent", ["bm25"])
    row = table["bm25"]
    # nDCG@10: a rises (d1 first), b rises (d2 found), c ties; R@40: only b rises
    assert (row["nDCG@10 helped"], row["nDCG@10 hurt"]) == (2, 0)
    assert (row["R@40 helped"], row["R@40 hurt"]) == (1, 0)
    text = format_risk(table)
    assert text.splitlines()[0].startswith("| agent against | R@40 helped") and "| bm25 | 1 | 0 |" in text
