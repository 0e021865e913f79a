"""Measuring: ir-measures metrics, TREC runs and the BM25 / RM3 baseline runs (``metrics``), the agent's greedy
runs (``agent``), every method's runs on a split with the fixed rules and the dev-chosen rule (``methods``), the
qrels oracle (``oracle``), paired statistics over seeds (``stats``) and the queries a rewrite helps and hurts
(``risk``)."""

from adaptive_ir.evaluation.agent import agent_run
from adaptive_ir.evaluation.methods import Method, evaluate_split, split_runs
from adaptive_ir.evaluation.metrics import MEASURES, METRIC_NAMES, Run, evaluate_run, format_table, per_query
from adaptive_ir.evaluation.oracle import oracle_run
from adaptive_ir.evaluation.risk import format_risk, risk_table
from adaptive_ir.evaluation.stats import min_detectable_effect, paired

__all__ = ["MEASURES", "METRIC_NAMES", "Method", "Run", "agent_run", "evaluate_run", "evaluate_split", "format_risk",
           "format_table", "min_detectable_effect", "oracle_run", "paired", "per_query", "risk_table", "split_runs"]
