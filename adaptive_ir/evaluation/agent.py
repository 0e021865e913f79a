"""The agent's runs over a split: greedy rewrites searched, and several variants fused by reciprocal rank."""

from __future__ import annotations

import logging

import torch

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.config import Config
from adaptive_ir.evaluation.metrics import Run, to_run
from adaptive_ir.rl.env import QuerySet
from adaptive_ir.rl.factory import make_env
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.rollout import greedy_rewrite
from adaptive_ir.rl.workspace import Tables, Workspace

log = logging.getLogger(__name__)


def rrf(runs: list[Run], k: int, depth: int) -> Run:
    """Reciprocal rank fusion: score(d) = Σ_runs 1 / (k + rank(d)), ranks from 1; top ``depth`` kept."""
    fused: dict[str, dict[str, float]] = {}
    for q in runs[0]:
        scores: dict[str, float] = {}
        for run in runs:
            ranked = sorted(run[q].items(), key=lambda kv: -kv[1])
            for rank, (d, _) in enumerate(ranked, 1):
                scores[d] = scores.get(d, 0.0) + 1.0 / (k + rank)
        fused[q] = dict(sorted(scores.items(), key=lambda kv: -kv[1])[:depth])
    return fused


@torch.no_grad()
def agent_run(cfg: Config, ws: Workspace, agent: Agent, amp: AmpContext, qs: QuerySet, tables: Tables,
              batch_size: int = 256, seed: int = 0, weighted: list | None = None) -> tuple[Run, list[list[str]]]:
    """The agent's ranked lists for every query of ``qs`` and the terms it added to each.

    Greedy (deterministic) with one variant; with ``num_query_variants`` = n > 1, the greedy rewrite plus n−1
    sampled ones (seeded, so still reproducible) are fused with reciprocal rank fusion. ``weighted``, when given, is
    filled with each greedy rewrite as searched: its (term, weight) pairs, original terms first.
    """
    agent.use_tables(tables)
    env = make_env(cfg, ws, qs, scored=False)  # the final rewrite is searched below; per-step rewards unused
    k = cfg.retrieval.top_k
    variants = cfg.rl_agent.num_query_variants
    gen = torch.Generator(qs.terms.device).manual_seed(seed)
    runs: list[Run] = []
    added: list[list[str]] = [[] for _ in range(len(qs))]
    l0 = qs.terms.shape[1]
    vocab = ws.retriever.vocab.surface
    switched = 0
    for v in range(variants):
        scores, docs = [], []
        for lo in range(0, len(qs), batch_size):
            qidx = torch.arange(lo, min(len(qs), lo + batch_size))
            terms, weights = greedy_rewrite(agent, amp, env, qidx, None if v == 0 else gen)
            s, d = ws.retriever.index.search(terms, weights, k=k)
            scores.append(s.cpu())
            docs.append(d.cpu())
            if v == 0:
                switched += int(env.started.sum()) if env.choice else 0
                for i, row in zip(qidx.tolist(), terms[:, l0:].tolist()):
                    added[i] = [vocab[t] for t in row if t != ws.retriever.index.pad_id]
                if weighted is not None:
                    weighted.extend([(vocab[t], w) for t, w in zip(row_t, row_w) if t != ws.retriever.index.pad_id]
                                    for row_t, row_w in zip(terms.tolist(), weights.tolist()))
        runs.append(to_run(qs.qids, ws.retriever.doc_ids, torch.cat(scores).numpy(), torch.cat(docs).numpy()))
    if env.choice:
        log.info("agent: %d of %d queries switched to RM3", switched, len(qs))
    if variants == 1:
        return runs[0], added
    return rrf(runs, cfg.rrf_fusion.k_constant, k), added


__all__ = ["agent_run", "rrf"]
