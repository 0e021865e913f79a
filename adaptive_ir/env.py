"""The batched reformulation environment: B episodes in lockstep, as tensors on one device.

An episode starts from a query q0. At each step the agent appends one of the query's M candidate terms (a term
can be chosen once) or takes STOP (action index M). After every step the rewritten query is searched with BM25
(one batched call for all live episodes) and scored against the qrels; the reward is the change of the reward
metric, so an episode's undiscounted return telescopes to metric(final query) − metric(q0). STOP ends the
episode (terminated); reaching ``max_steps`` cuts it (truncated, bootstrapped in GAE).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from .candidates import CandidateSet
from .index import BM25Index


@dataclass
class QuerySet:
    """Everything the env and the policy need about Q queries, as device tensors indexed by query position."""

    qids: list[str]
    terms: torch.Tensor
    """(Q, L0) query term ids, padded with the index's pad id."""
    cand_terms: torch.Tensor
    """(Q, M) candidate term ids, pad id where invalid."""
    cand_valid: torch.Tensor
    """(Q, M) bool."""
    cand_rows: torch.Tensor
    """(Q, M) rows into the term embedding table (its last row is the zero padding row)."""
    cand_feats: torch.Tensor
    """(Q, M, F) candidate features."""
    q_rows: torch.Tensor
    """(Q,) rows into the query embedding table."""
    rel_docs: torch.Tensor
    """(Q, R) indices of relevant documents (grade ≥ 1), -1 padded; empty for unjudged queries."""
    n_rel: torch.Tensor
    """(Q,) number of relevant documents (float)."""
    cand_weight: torch.Tensor
    """(Q, M) weight multiplier of each candidate once added to the query (1 = uniform)."""

    @classmethod
    def build(cls, qids: list[str], query_terms: list[list[int]], cands: CandidateSet, term_rows: np.ndarray,
              q_rows: np.ndarray, qrels: dict[str, dict[str, int]] | None, doc_positions,
              pad_id: int, device: str | torch.device, cand_weight: np.ndarray | None = None) -> "QuerySet":
        """``term_rows[i, j]`` is the embedding row of candidate j of query i (already computed);
        ``doc_positions(ids)`` gives the corpus positions of document ids (-1 if unknown), e.g.
        ``Collection.doc_positions``."""
        q = len(qids)
        width = max(1, max((len(t) for t in query_terms), default=1))
        terms = np.full((q, width), pad_id, dtype=np.int64)
        for i, t in enumerate(query_terms):
            terms[i, : len(t)] = t
        rel = []
        for qid in qids:
            pos = doc_positions([d for d, g in (qrels or {}).get(qid, {}).items() if g >= 1])
            rel.append(pos[pos >= 0].tolist())
        rel_docs = np.full((q, max(1, max((len(r) for r in rel), default=1))), -1, dtype=np.int64)
        for i, r in enumerate(rel):
            rel_docs[i, : len(r)] = r
        valid = cands.valid
        t = lambda a, dt=None: torch.as_tensor(a, dtype=dt).to(device)  # noqa: E731
        return cls(qids=list(qids), terms=t(terms), cand_terms=t(np.where(valid, cands.terms, pad_id)),
                   cand_valid=t(valid), cand_rows=t(term_rows, torch.long),
                   cand_feats=t(cands.features, torch.float32), q_rows=t(q_rows, torch.long),
                   rel_docs=t(rel_docs), n_rel=t([float(len(r)) for r in rel], torch.float32),
                   cand_weight=t(np.ones(valid.shape, np.float32) if cand_weight is None else cand_weight,
                                 torch.float32))

    def __len__(self) -> int:
        return len(self.qids)

    @property
    def max_candidates(self) -> int:
        return self.cand_terms.shape[1]


def reward_metric(top_docs: torch.Tensor, rel_docs: torch.Tensor, n_rel: torch.Tensor,
                  weights: dict[str, float]) -> torch.Tensor:
    """Σ weight · metric over the ranked lists ``top_docs`` (B, k): 'recall' = R@k, 'mrr' = RR@k.

    Queries without relevant documents score 0.
    """
    hit = (top_docs[:, :, None] == rel_docs[:, None, :]).any(-1)  # (B, k); -1 padding never matches a doc
    out = torch.zeros(top_docs.shape[0], device=top_docs.device)
    if weights.get("recall"):
        out += weights["recall"] * hit.sum(1) / n_rel.clamp(min=1)
    if weights.get("mrr"):
        rank = torch.arange(1, top_docs.shape[1] + 1, device=top_docs.device, dtype=torch.float32)
        out += weights["mrr"] * (hit / rank).max(1).values  # 1/rank of the first hit (0 if none)
    return out


def search_reward(index: BM25Index, terms: torch.Tensor, weights: torch.Tensor, rel_docs: torch.Tensor,
                  n_rel: torch.Tensor, mix: dict[str, float], k: int) -> torch.Tensor:
    """Search a batch of queries and score each ranked list with ``reward_metric``.

    A document that matches no query term was not retrieved: topk fills short lists with zero-score docs in
    arbitrary order, which would credit (or take away) recall for no reason, so they are masked to -2 (which
    matches neither a document nor the -1 padding of rel_docs).
    """
    scores, top = index.search(terms, weights, k=k)
    return reward_metric(top.masked_fill(scores <= 0, -2), rel_docs, n_rel, mix)


class ReformulationEnv:
    """B episodes over a QuerySet; see the module docstring."""

    def __init__(self, queries: QuerySet, index: BM25Index, max_steps: int = 5, reward_k: int = 40,
                 reward_weights: dict[str, float] | None = None, expansion_weight: float = 1.0,
                 cache_size: int = 10_000, scored: bool = True):
        self.qs, self.index = queries, index
        self.max_steps, self.reward_k = max_steps, reward_k
        self.reward_weights = reward_weights or {"recall": 1.0}
        self.expansion_weight = expansion_weight
        self.cache: OrderedDict = OrderedDict()
        self.cache_size = cache_size
        self.scored = scored
        """False for inference rewrites: no reward, so no search per step (``metric`` stays 0)."""
        self.cache_hits = self.cache_misses = self.searches = 0
        self.M = queries.max_candidates
        device = queries.terms.device
        # chosen-slot bit masks in 62-bit words: a (query, chosen set) key for the reward cache
        words = -(-self.M // 62)
        self._bits = (2 ** (torch.arange(words * 62, device=device) % 62)).view(words, 62)

    # ------------------------------------------------------------------ episode state
    def reset(self, qidx: torch.Tensor) -> None:
        """Start one episode per query position in ``qidx`` (B,)."""
        qs = self.qs
        self.qidx = qidx
        b = qidx.shape[0]
        l0 = qs.terms.shape[1]
        self.terms = torch.full((b, l0 + self.max_steps), self.index.pad_id, dtype=torch.long,
                                device=qidx.device)
        self.terms[:, :l0] = qs.terms[qidx]
        self.weights = torch.zeros(self.terms.shape, device=qidx.device)
        self.weights[:, :l0] = 1.0
        self.chosen = torch.zeros((b, self.M), dtype=torch.bool, device=qidx.device)
        self.alive = torch.ones(b, dtype=torch.bool, device=qidx.device)
        self.t = 0
        self.metric = (self._metrics(torch.arange(b, device=qidx.device)) if self.scored
                       else torch.zeros(b, device=qidx.device))

    def legal(self) -> torch.Tensor:
        """(B, M+1) legal actions: unchosen valid candidates, and STOP (always legal)."""
        cand = self.qs.cand_valid[self.qidx] & ~self.chosen
        return torch.cat([cand, torch.ones_like(cand[:, :1])], dim=1)

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Apply (B,) actions to the live episodes; returns (reward, terminated, truncated), each (B,)."""
        stop = self.alive & (actions == self.M)
        expand = self.alive & (actions < self.M)
        rows = expand.nonzero().squeeze(1)
        reward = torch.zeros(actions.shape[0], device=actions.device)
        if rows.numel():
            slot = actions[rows]
            self.terms[rows, self.qs.terms.shape[1] + self.t] = self.qs.cand_terms[self.qidx[rows], slot]
            self.weights[rows, self.qs.terms.shape[1] + self.t] = (self.expansion_weight
                                                                   * self.qs.cand_weight[self.qidx[rows], slot])
            self.chosen[rows, slot] = True
            if self.scored:
                new = self._metrics(rows)
                reward[rows] = new - self.metric[rows]
                self.metric[rows] = new
        self.t += 1
        truncated = expand & (self.t >= self.max_steps)
        self.alive = expand & ~truncated
        return reward, stop, truncated

    # ------------------------------------------------------------------ scoring
    def _keys(self, rows: torch.Tensor) -> list[tuple]:
        words = self.chosen[rows]
        pad = self._bits.numel() - self.M
        if pad:
            words = torch.nn.functional.pad(words, (0, pad))
        packed = (words.view(len(rows), *self._bits.shape).long() * self._bits).sum(-1)
        return list(zip(self.qidx[rows].tolist(), map(tuple, packed.tolist())))

    def _metrics(self, rows: torch.Tensor) -> torch.Tensor:
        """Reward metric of the current query of episodes ``rows``; searches only cache misses."""
        out = torch.empty(rows.shape[0], device=rows.device)
        if self.cache_size <= 0:
            miss = torch.arange(rows.shape[0], device=rows.device)
            keys = None
        else:
            keys = self._keys(rows)
            cached = [self.cache.get(k) for k in keys]
            hit = [i for i, v in enumerate(cached) if v is not None]
            for i in hit:
                self.cache.move_to_end(keys[i])
            self.cache_hits += len(hit)
            if hit:
                out[hit] = torch.tensor([cached[i] for i in hit], device=rows.device)
            miss = torch.tensor([i for i, v in enumerate(cached) if v is None], dtype=torch.long,
                                device=rows.device)
        if miss.numel():
            r = rows[miss]
            self.searches += 1
            self.cache_misses += int(miss.numel())
            q = self.qidx[r]
            values = search_reward(self.index, self.terms[r], self.weights[r], self.qs.rel_docs[q],
                                   self.qs.n_rel[q], self.reward_weights, self.reward_k)
            out[miss] = values
            if keys is not None:
                for i, v in zip(miss.tolist(), values.tolist()):
                    self.cache[keys[i]] = v
                while len(self.cache) > self.cache_size:
                    self.cache.popitem(last=False)
        return out
