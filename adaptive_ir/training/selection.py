"""Which checkpoint a run keeps: greedy dev evaluations scored by the reward's own metric, the best one so far, and
the patience that stops a run that no longer improves."""

from __future__ import annotations

import ir_measures

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.config import Config
from adaptive_ir.evaluation.agent import agent_run
from adaptive_ir.evaluation.metrics import MEASURES, METRIC_NAMES, drop_excluded, evaluate_run
from adaptive_ir.rl.env import QuerySet
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.workspace import Tables, Workspace


def selection_metric(cfg: Config) -> dict[str, float]:
    """The dev metric that picks the best checkpoint: the reward's own mix, as ir-measures names it."""
    k = cfg.retrieval.reward_k
    names = {"recall": f"R@{k}", "mrr": f"RR@{k}"}
    return {names[m]: w for m, w in cfg.reward_terms.items() if w}


def dev_score(cfg: Config, ws: Workspace, agent: Agent, amp: AmpContext, qs: QuerySet, tables: Tables
              ) -> tuple[dict[str, float], float]:
    """Greedy evaluation of ``agent`` on dev queries ``qs``: (every metric, the selection score)."""
    _, _, qrels = ws.collection.split("dev")
    run, _ = agent_run(cfg, ws, agent, amp, qs, tables)
    run = drop_excluded(run, ws.collection.excluded_docs("dev"))
    wanted = selection_metric(cfg)
    metrics = evaluate_run(qrels, run, MEASURES + [ir_measures.parse_measure(m) for m in wanted
                                                   if m not in METRIC_NAMES], qids=qs.qids)
    return metrics, sum(w * metrics[m] for m, w in wanted.items())


class Selection:
    """The best dev score so far, where it was reached, and the evaluations (or episodes) since: what decides
    best.pt and early stopping (``training.early_stopping_patience`` evaluations, or
    ``early_stopping_patience_episodes``)."""

    def __init__(self, cfg: Config):
        self.tc = cfg.training
        self.best, self.best_update, self.bad_evals = -1.0, -1, 0
        self.best_episodes = 0
        """Training episodes at the best dev evaluation (patience counted in episodes)."""

    def record(self, score: float, update: int, episodes: int) -> bool:
        """Count an evaluation; True when it is the best so far (its model is the new best.pt)."""
        if score > self.best + 1e-9:
            self.best, self.best_update, self.bad_evals, self.best_episodes = score, update, 0, episodes
            return True
        self.bad_evals += 1
        return False

    def exhausted(self, episodes: int) -> bool:
        """Whether the patience has run out."""
        if self.tc.early_stopping_patience_episodes is not None:
            return episodes - self.best_episodes >= self.tc.early_stopping_patience_episodes
        return self.tc.early_stopping_patience > 0 and self.bad_evals >= self.tc.early_stopping_patience

    def counters(self) -> dict:
        """The checkpoint's counters of the selection."""
        return {"best": self.best, "best_update": self.best_update, "bad_evals": self.bad_evals,
                "best_episodes": self.best_episodes}

    def load(self, c: dict) -> None:
        self.best, self.best_update, self.bad_evals = c["best"], c["best_update"], c["bad_evals"]
        self.best_episodes = c.get("best_episodes", 0)  # absent from checkpoints of older versions


__all__ = ["Selection", "dev_score", "selection_metric"]
