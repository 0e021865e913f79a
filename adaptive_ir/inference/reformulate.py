"""Inference: rewrite queries with a trained agent and retrieve with the rewritten queries."""

from __future__ import annotations

from pathlib import Path

import torch

from adaptive_ir.artifacts.checkpoint import describe_origin, load_for_inference
from adaptive_ir.config import Config
from adaptive_ir.rl.env import QuerySet, ReformulationEnv
from adaptive_ir.evaluation.metrics import Run, to_run
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.ppo import AmpContext
from adaptive_ir.rl.rollout import greedy_rewrite
from adaptive_ir.rl.workspace import Tables, Workspace


def make_env(cfg: Config, ws: Workspace, qs: QuerySet, scored: bool = True) -> ReformulationEnv:
    rc, tc = cfg.retrieval, cfg.training
    weights = tc.reward_weights or {rc.reward_metric: 1.0}
    return ReformulationEnv(qs, ws.retriever.index, cfg.rl_agent.max_steps_per_episode, rc.reward_k, weights,
                            rc.levels, scored=scored)


def rrf(runs: list[Run], k: int, depth: int) -> Run:
    """Reciprocal rank fusion: score(d) = Σ_runs 1 / (k + rank(d)), ranks from 1; top ``depth`` kept."""
    fused: Run = {}
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
    runs, added = [], [[] for _ in range(len(qs))]
    l0 = qs.terms.shape[1]
    vocab = ws.retriever.vocab.surface
    for v in range(variants):
        scores, docs = [], []
        for lo in range(0, len(qs), batch_size):
            qidx = torch.arange(lo, min(len(qs), lo + batch_size))
            terms, weights = greedy_rewrite(agent, amp, env, qidx, None if v == 0 else gen)
            s, d = ws.retriever.index.search(terms, weights, k=k)
            scores.append(s.cpu())
            docs.append(d.cpu())
            if v == 0:
                for i, row in zip(qidx.tolist(), terms[:, l0:].tolist()):
                    added[i] = [vocab[t] for t in row if t != ws.retriever.index.pad_id]
                if weighted is not None:
                    weighted.extend([(vocab[t], w) for t, w in zip(row_t, row_w) if t != ws.retriever.index.pad_id]
                                    for row_t, row_w in zip(terms.tolist(), weights.tolist()))
        runs.append(to_run(qs.qids, ws.retriever.doc_ids, torch.cat(scores).numpy(), torch.cat(docs).numpy()))
    if variants == 1:
        return runs[0], added
    return rrf(runs, cfg.rrf_fusion.k_constant, k), added


class Reformulator:
    """``Reformulator.load(checkpoint).reformulate(["query", ...])`` → rewritten queries, in batches."""

    def __init__(self, cfg: Config, ws: Workspace, agent: Agent, amp: AmpContext, origin: str | None = None):
        self.cfg, self.ws, self.agent, self.amp = cfg, ws, agent, amp
        self.origin = origin
        """Which run (and update) the agent's checkpoint came from, as one line; None when built in memory."""

    @classmethod
    def load(cls, checkpoint: str | Path, device: str = "auto", data_dir: str | None = None) -> "Reformulator":
        cfg, ws, agent, amp, state = load_for_inference(checkpoint, device, data_dir)
        return cls(cfg, ws, agent, amp, describe_origin(checkpoint, state))

    @classmethod
    def from_pretrained(cls, policy: str | Path, data_dir: str | None = None, device: str = "auto",
                        progress: bool = False, **overrides) -> "Reformulator":
        """A trained policy (a shipped policy's name, an exported folder or a checkpoint) over a collection it may
        never have seen: ``data_dir`` a BEIR folder (None: the embedded collection), indexed and embedded on first
        use with the policy's own settings and cached under ``runs/pretrained/<collection>``."""
        import torch

        from adaptive_ir.artifacts.checkpoint import agent_from_policy, pretrained_config
        from adaptive_ir.config import resolve_device

        cfg, path, state = pretrained_config(policy, data_dir, {k.replace("__", "."): v for k, v in overrides.items()})
        cfg.system.device = device
        dev = torch.device(resolve_device(device))
        ws = Workspace(cfg, dev, progress=progress, splits=())
        agent = agent_from_policy(path, state, cfg, ws, dev)
        return cls(cfg, ws, agent, AmpContext(dev, cfg.training.use_amp, cfg.training.amp_dtype),
                   describe_origin(path, state))

    def reformulate(self, queries: list[str], top_docs: int = 10) -> list[dict]:
        """For each query text: the rewritten query, the terms the start added (``start_terms``: RM3's with
        ``retrieval.start: rm3``, else none), the terms the agent added, the rewrite as Lucene query syntax (the
        analyzed terms with their weights, ``lucene_query``) and the top documents (id, score)."""
        qids = [f"q{i}" for i in range(len(queries))]
        qs, tables = self.ws.query_set("adhoc", qids, queries, None, cache_candidates=False)
        weighted: list[list[tuple[str, float]]] = []
        run, added = agent_run(self.cfg, self.ws, self.agent, self.amp, qs, tables, weighted=weighted)
        vocab, pad = self.ws.retriever.vocab.surface, self.ws.retriever.index.pad_id
        own = self.ws.retriever.encode(queries)
        out = []
        for qid, text, words, start, terms, pairs in zip(qids, queries, own, qs.terms.tolist(), added, weighted):
            ranked = sorted(run[qid].items(), key=lambda kv: -kv[1])[:top_docs]
            extra = [vocab[t] for t in start if t != pad and t not in words]
            out.append({"query": text, "start_terms": extra, "added_terms": terms,
                        "rewritten": " ".join([text, *extra, *terms]), "lucene_query": lucene_query(pairs),
                        "top_docs": ranked})
        return out


LUCENE_SPECIAL = set('+-&|!(){}[]^"~*?:\\/')
"""Characters Lucene's classic query parser reads as syntax; a term holding one is escaped with a backslash."""


def lucene_escape(term: str) -> str:
    return "".join("\\" + c if c in LUCENE_SPECIAL else c for c in term)


def lucene_query(pairs: list[tuple[str, float]]) -> str:
    """A weighted bag of words in Lucene's classic query syntax (what Lucene's QueryParser, Solr, Elasticsearch's
    query_string and Anserini/Pyserini through Lucene's parser read): ``term`` for weight 1, ``term^0.5`` otherwise.
    A term that occurs more than once (a repeated query word) gets the sum of its weights, which is how BM25 scores
    it here; terms keep their first position. Terms are the analyzer's output: the parser analyzes them again."""
    total: dict[str, float] = {}
    for term, weight in pairs:
        total[term] = total.get(term, 0.0) + weight
    return " ".join(lucene_escape(t) if abs(w - 1.0) < 1e-6 else f"{lucene_escape(t)}^{w:.4g}"
                    for t, w in total.items())
