"""An outside learner's policy measured as ``adaptive-ir evaluate`` measures ours: one greedy episode per query of
the split, the final rewrites searched and scored with the report's metrics against BM25's."""

from __future__ import annotations

from collections.abc import Callable

import torch

from adaptive_ir.common.measures import HEADLINE
from adaptive_ir.envs.source import EnvSource
from adaptive_ir.evaluation.metrics import bm25_run, drop_excluded, evaluate_run, to_run

Act = Callable[[dict[str, torch.Tensor]], torch.Tensor]
"""A policy: observation tensors (``EnvSource.observe``, B rows) → (B,) actions."""


@torch.no_grad()
def evaluate_policy(source: EnvSource, act: Act, batch_size: int = 256) -> dict[str, dict[str, float]]:
    """``{"agent": {metric: mean}, "bm25": {...}}`` over every query of ``source``'s split (its env is reset for
    it: build the source on the split to measure). An action the mask forbids is STOP, as in the envs."""
    env, qs, ws = source.env, source.qs, source.ws
    top_k = source.cfg.retrieval.top_k
    scores, docs = [], []
    for lo in range(0, len(qs), batch_size):
        env.reset(torch.arange(lo, min(len(qs), lo + batch_size)))
        while bool(env.alive.any()):
            env.step(source.legalize(act(source.observe()).to(env.device).long()))
        assert env.terms is not None  # set by reset
        s, d = ws.retriever.index.search(env.terms, env.weights, k=top_k)
        scores.append(s.cpu())
        docs.append(d.cpu())
    qids, texts, qrels = ws.collection.split(source.split)
    excluded = ws.collection.excluded_docs(source.split)
    agent = to_run(qs.qids, ws.retriever.doc_ids, torch.cat(scores).numpy(), torch.cat(docs).numpy())
    bm25 = bm25_run(ws.retriever, qids, texts, top_k)
    return {name: evaluate_run(qrels, drop_excluded(run, excluded), qids=qids)
            for name, run in (("agent", agent), ("bm25", bm25))}


def learner_report(config: str, data_dir: str | None, split: str, act: Act, env_steps: int,
                   **overrides: object) -> dict:
    """What an outside learner's run ends by printing as one JSON line: ``{"split", "env_steps", "agent":
    {"R@40", "nDCG@10"}, "bm25": {...}}``, its greedy policy ``act`` measured on ``split`` (on the CPU)."""
    result = evaluate_policy(EnvSource.build(config, data_dir, split, "cpu", **overrides), act)
    return {"split": split, "env_steps": int(env_steps),
            **{name: {m: round(values[m], 4) for m in HEADLINE} for name, values in result.items()}}


__all__ = ["evaluate_policy", "learner_report"]
