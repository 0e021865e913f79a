"""Risk: how many queries a rewrite helps and hurts against each baseline, and a risk-sensitive summary.

A mean gain can hide many queries made worse; a practitioner replacing BM25 or RM3 with the agent's rewrites wants
the count of each, per metric, and one number that weighs the losses more: TRisk (Dinçer, Macdonald & Ounis,
SIGIR 2014), the studentised URisk with α = 1 (a loss counts twice). For each query δ = agent − baseline; r = δ for
δ ≥ 0, (1 + α)·δ for δ < 0; URisk = mean(r) and TRisk = URisk / (sd(r) / √n). TRisk > 2: the rewrite's gains hold
up with its losses counted twice (significant at about 5 %); < −2: it is significantly riskier than the baseline.
"""

from __future__ import annotations

import numpy as np
from ir_measures import parse_measure

from adaptive_ir.evaluation.metrics import Run, per_query
from adaptive_ir.evaluation.stats import TIE_TOLERANCE

RISK_ALPHA = 1.0
"""URisk's α: a loss weighs 1 + α times a gain of the same size."""
RISK_METRICS = ("R@40", "nDCG@10")
"""The metrics risk is counted on: the reward's recall and the head of the ranking."""


def trisk(delta: np.ndarray, alpha: float = RISK_ALPHA) -> float:
    """TRisk of per-query differences (0 when every query ties; ±inf when every query moves by the same r)."""
    r = np.where(delta >= 0, delta, (1 + alpha) * delta)
    if not np.abs(r).max(initial=0.0) > TIE_TOLERANCE:
        return 0.0
    sd = r.std(ddof=1) if r.size > 1 else 0.0
    if sd == 0:
        return float(np.sign(r.mean()) * np.inf)
    return float(r.mean() / (sd / np.sqrt(r.size)))


def risk_table(qrels: dict[str, dict[str, int]], runs: dict[str, Run], qids: list[str], method: str,
               against: list[str]) -> dict[str, dict[str, float]]:
    """{baseline: {"<metric> helped", "<metric> hurt", "<metric> TRisk"}} of ``method``'s run against each run of
    ``against``, over the queries ``qids`` (every query of the split, as the means are)."""
    measures = [parse_measure(m) for m in RISK_METRICS]
    values = {name: per_query(qrels, runs[name], measures, qids) for name in [method, *against]}
    table: dict[str, dict[str, float]] = {}
    for base in against:
        row: dict[str, float] = {}
        for m in RISK_METRICS:
            delta = values[method][m] - values[base][m]
            delta = np.where(np.abs(delta) <= TIE_TOLERANCE, 0.0, delta)
            row[f"{m} helped"] = int((delta > 0).sum())
            row[f"{m} hurt"] = int((delta < 0).sum())
            row[f"{m} TRisk"] = trisk(delta)
        table[base] = row
    return table


def format_risk(table: dict[str, dict[str, float]], method: str = "agent", title: str = "") -> str:
    """A Markdown table of ``risk_table``'s rows: queries ``method`` helps and hurts, and TRisk, per metric."""
    head = [f"{method} against", *(f"{m} {c}" for m in RISK_METRICS for c in ("helped", "hurt", "TRisk"))]
    lines = [f"**{title}**", ""] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for base, row in table.items():
        cells = [c for m in RISK_METRICS for c in (f"{int(row[f'{m} helped'])}", f"{int(row[f'{m} hurt'])}",
                                                   f"{row[f'{m} TRisk']:+.2f}")]
        lines.append("| " + " | ".join([base, *cells]) + " |")
    return "\n".join(lines)


__all__ = ["RISK_ALPHA", "RISK_METRICS", "format_risk", "risk_table", "trisk"]
