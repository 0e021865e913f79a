"""The measures every report holds, by their ir-measures names: one list for the evaluation stage, which computes
them, and the config stage, which names them when a seed config asks for others."""

METRIC_NAMES = ["R@10", "R@40", "R@100", "AP@40", "nDCG@10", "RR@10"]
"""Recall at 10, 40 and 100, average precision at 40, nDCG@10 and reciprocal rank at 10 (``str(R@40) == 'R@40'``)."""

HEADLINE = ("R@40", "nDCG@10")
"""The two measures a comparison leads with (paired tests, the parity checks, an outside learner's report): the
reward's own R@40, and nDCG@10 for the top of the ranking."""

__all__ = ["HEADLINE", "METRIC_NAMES"]
