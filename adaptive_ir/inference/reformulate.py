"""Inference: rewrite queries with a trained agent and retrieve with the rewritten queries."""

from __future__ import annotations

from pathlib import Path

import torch

from adaptive_ir.artifacts.checkpoint import describe_origin, load_for_inference
from adaptive_ir.common.amp import AmpContext
from adaptive_ir.config import Config
from adaptive_ir.evaluation.agent import agent_run
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.workspace import Workspace


class Reformulator:
    """``Reformulator.load(checkpoint).reformulate(["query", ...])`` → rewritten queries, in batches."""

    def __init__(self, cfg: Config, ws: Workspace, agent: Agent, amp: AmpContext, origin: str | None = None):
        self.cfg, self.ws, self.agent, self.amp = cfg, ws, agent, amp
        self.origin = origin
        """Which run (and update) the agent's checkpoint came from, as one line; None when built in memory."""

    @classmethod
    def load(cls, checkpoint: str | Path, device: str = "auto", data_dir: str | None = None) -> Reformulator:
        cfg, ws, agent, amp, state = load_for_inference(checkpoint, device, data_dir)
        return cls(cfg, ws, agent, amp, describe_origin(checkpoint, state))

    @classmethod
    def from_pretrained(cls, policy: str | Path, data_dir: str | None = None, device: str = "auto",
                        progress: bool = False, **overrides) -> Reformulator:
        """A trained policy (a shipped policy's name, an exported folder or a checkpoint) over a collection it may
        never have seen: ``data_dir`` a BEIR folder (None: the embedded collection), indexed and embedded on first
        use with the policy's own settings and cached under ``runs/pretrained/<collection>``."""

        from adaptive_ir.artifacts.checkpoint import agent_from_policy, pretrained_config
        from adaptive_ir.config import resolve_device

        cfg, path, state = pretrained_config(policy, data_dir, {k.replace("__", "."): v for k, v in overrides.items()})
        cfg.system.device = device
        dev = torch.device(resolve_device(device))
        ws = Workspace(cfg, dev, progress=progress, splits=())
        agent = agent_from_policy(path, state, cfg, ws, dev)
        return cls(cfg, ws, agent, AmpContext.of(dev, cfg.training),
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
