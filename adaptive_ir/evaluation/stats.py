"""Paired significance tests over the queries of a split, and the spread over training seeds.

Two systems evaluated on the same n queries give paired per-query values ``a`` and ``b``. The tests ask whether
the mean of ``a − b`` could be a chance result:

* a two-sided **paired randomization test** (sign-flip permutation test; Smucker, Allan & Carterette 2007): under
  the null each difference is as likely to have the other sign, so the p-value is the share of the 2ⁿ sign
  assignments whose mean difference is at least as far from 0 as the observed one. ``scipy.stats.permutation_test``
  enumerates all of them when 2ⁿ ≤ the permutation budget, and otherwise samples that many (seeded, so a table is
  reproducible) with the +1 correction that keeps a sampled p-value valid (never 0);
* the **paired t-test** (``scipy.stats.ttest_rel``), for readers used to it.

Beside them, the **minimum detectable effect**: the mean difference the paired t-test over these n queries would
find significant with a given power, at the observed spread of the differences. It says what a split can show:
on CISI's 23 test queries no difference smaller than several points of R@40 is likely to be significant.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

N_PERMUTATIONS = 10_000
"""Random sign assignments of the randomization test (exact enumeration when 2ⁿ is not larger)."""
PERMUTATION_SEED = 0
"""Seed of the sampled sign assignments, so a table's p-values are the same on every run."""
TIE_TOLERANCE = 1e-9
"""Per-query differences within this count as ties."""
SMALL_SPLIT = 100
"""Splits with fewer queries are labelled small: one query then moves a mean by more than 1 %, and paired tests
over so few queries miss differences of a few points (Cranfield's 67 and CISI's 23 test queries are small)."""


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def _differences(a, b) -> np.ndarray:
    """Per-query a − b, a difference within TIE_TOLERANCE counted as 0: a mean over seeds of equal values leaves
    last-bit noise (3 × x / 3 ≠ x), which the tests would otherwise read as many small wins of one sign."""
    a, b = _pair(a, b)
    d = a - b
    return np.where(np.abs(d) <= TIE_TOLERANCE, 0.0, d)


def randomization_p(a, b, n_permutations: int = N_PERMUTATIONS, seed: int = PERMUTATION_SEED) -> float:
    """Two-sided p-value of the paired randomization (sign-flip) test of mean(a − b) = 0."""
    d = _differences(a, b)
    if not d.any():
        return 1.0  # no difference at all: every sign assignment gives the observed mean, 0
    result = stats.permutation_test((d, np.zeros_like(d)), _mean_difference, permutation_type="samples",
                                    vectorized=True, n_resamples=n_permutations, alternative="two-sided", batch=1000,
                                    random_state=np.random.default_rng(seed))
    return float(result.pvalue)


def t_test_p(a, b) -> float:
    """Two-sided p-value of the paired t-test (1.0 when a and b are equal on every query, where t is 0/0)."""
    d = _differences(a, b)
    if not d.any():
        return 1.0
    return float(stats.ttest_1samp(d, 0.0).pvalue)


MDE_ALPHA = 0.05
"""Two-sided level of the minimum detectable effect."""
MDE_POWER = 0.8
"""Power of the minimum detectable effect (Cohen's usual 80 %)."""


def min_detectable_effect(a, b, alpha: float = MDE_ALPHA, power: float = MDE_POWER) -> float:
    """Smallest |mean(a − b)| that the two-sided paired t-test at level ``alpha`` over these queries detects with
    probability ``power``, were the differences spread as they are here: (t₁₋α/₂ + t_power) · sd / √n, with
    n − 1 degrees of freedom (the usual normal-approximation formula with t quantiles). 0 when every query ties."""
    d = _differences(a, b)
    if d.size < 2 or not d.any():
        return 0.0
    df = d.size - 1
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * d.std(ddof=1) / np.sqrt(d.size))


def wins_ties_losses(a, b, tol: float = TIE_TOLERANCE) -> tuple[int, int, int]:
    """Queries where a is above b, within ``tol`` of it, below it."""
    a, b = _pair(a, b)
    d = a - b
    return int(np.sum(d > tol)), int(np.sum(np.abs(d) <= tol)), int(np.sum(d < -tol))


@dataclass
class Paired:
    """One paired comparison of system a against system b on one metric."""

    metric: str
    n: int
    """Queries compared."""
    mean_a: float
    mean_b: float
    delta: float
    """mean(a) − mean(b)."""
    p_randomization: float
    p_t: float
    wins: int
    ties: int
    losses: int
    mde: float
    """``min_detectable_effect``: the |delta| this split detects with 80 % power (t-test, 0.05)."""

    def to_dict(self) -> dict:
        return asdict(self)


def paired(metric: str, a, b, n_permutations: int = N_PERMUTATIONS, seed: int = PERMUTATION_SEED) -> Paired:
    """Both tests and the per-query wins/ties/losses of a against b."""
    a, b = _pair(a, b)
    return Paired(metric, len(a), float(a.mean()), float(b.mean()), float(a.mean() - b.mean()),
                  randomization_p(a, b, n_permutations, seed), t_test_p(a, b), *wins_ties_losses(a, b),
                  min_detectable_effect(a, b))


def mean_std(values) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof 1) of per-seed figures; std is None for a single seed."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), (float(v.std(ddof=1)) if v.size > 1 else None)


def _pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired values need two equal-length, non-empty 1-d arrays, got {a.shape} and {b.shape}")
    return a, b
