"""The batched reformulation environment: B episodes in lockstep, as tensors on one device.

An episode starts from a query q0. At each step the agent appends one of the query's M candidate terms (a term
can be chosen once) or takes STOP (action index M). After every step the rewritten query's ranking is scored
against the qrels; the reward is the change of the reward metric, so an episode's undiscounted return telescopes
to metric(final query) − metric(q0). STOP ends the episode, and so does reaching ``max_steps``: no action, hence
no reward, is possible after the limit and the step fraction is part of the observation, so that state is
terminal (its value is 0, nothing to bootstrap).

**Ranking rule.** Documents are ordered by score, ties by corpus position (lower first), and only documents with
a score > 0 are retrieved (a document matching no query term is not a result; a top-k list would pad short
rankings with arbitrary zero-score documents). A relevant document is retrieved at rank k or better when fewer
than k documents outrank it, so the metric needs no sorted list: the k-th best key and a count
(``ranked_metric``). ``exclude_docs`` removes one document per query from its ranking (Nogueira & Cho leave out
the document whose title is the query).

**No host round trip in a step.** Every step does the same tensor work whatever the actions: episodes that ended
add a padding term with no postings and are masked. Scores are kept per episode as a (B, num_docs) matrix, and
a step adds only the new term's postings, gathered into a fixed (B, P) block (P = the longest posting list among
the QuerySet's candidates, known on the host), so shapes never depend on data. An episode starts from a copy of
its query's first scores and metric, computed once per QuerySet when all of them fit ``max_state_cells`` (each
query starts many episodes), else from a search sized on the host. When even the (B, num_docs) state would exceed
``max_state_cells``, each step re-scores the whole rewritten query instead (chunked; on an accelerator this reads
the posting count once per chunk).

On the CPU the host *is* the device, so reading a count costs nothing, while masked work costs the same as real
work: there (``compact``) a step works on the episodes that expand only, with exactly sized gathers. Both modes
compute the same rewards (tested); the accelerator mode is the one the sync-detector test runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from .candidates import CandidateSet
from .hostsync import allowed_sync
from .index import BM25Index

MAX_STATE_CELLS = {"cpu": 1 << 25, "accelerator": 1 << 28}
"""Largest B × num_docs the per-episode score state may have (fp32 state plus int64 ranking keys: ~12 bytes a
cell at the peak) before the env re-scores whole queries each step instead."""

_POSITIVE_KEY = 1 << 32
"""The smallest ranking key of a document with a score > 0 (see ``ranking_keys``)."""


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
    exclude_docs: torch.Tensor
    """(Q,) corpus position of a document that is never retrieved for that query in the reward, -1 for none."""
    has_exclusions: bool = False
    """Whether any query excludes a document (host-side: the env skips the masking work when none does)."""

    @classmethod
    def build(cls, qids: list[str], query_terms: list[list[int]], cands: CandidateSet, term_rows: np.ndarray,
              q_rows: np.ndarray, qrels: dict[str, dict[str, int]] | None, doc_positions,
              pad_id: int, device: str | torch.device, cand_weight: np.ndarray | None = None,
              exclude_docs: np.ndarray | None = None) -> "QuerySet":
        """``term_rows[i, j]`` is the embedding row of candidate j of query i (already computed);
        ``doc_positions(ids)`` gives the corpus positions of document ids (-1 if unknown), e.g.
        ``Collection.doc_positions``; ``exclude_docs`` (Q,) int64 corpus positions, -1 = none (the default)."""
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
        exclude = np.full(q, -1, np.int64) if exclude_docs is None else np.asarray(exclude_docs, np.int64)
        if exclude.shape != (q,):
            raise ValueError(f"exclude_docs must have one entry per query ({q}), got shape {exclude.shape}")
        valid = cands.valid
        t = lambda a, dt=None: torch.as_tensor(a, dtype=dt).to(device)  # noqa: E731
        return cls(qids=list(qids), terms=t(terms), cand_terms=t(np.where(valid, cands.terms, pad_id)),
                   cand_valid=t(valid), cand_rows=t(term_rows, torch.long),
                   cand_feats=t(cands.features, torch.float32), q_rows=t(q_rows, torch.long),
                   rel_docs=t(rel_docs), n_rel=t([float(len(r)) for r in rel], torch.float32),
                   cand_weight=t(np.ones(valid.shape, np.float32) if cand_weight is None else cand_weight,
                                 torch.float32),
                   exclude_docs=t(exclude), has_exclusions=bool((exclude >= 0).any()))

    def __len__(self) -> int:
        return len(self.qids)

    @property
    def max_candidates(self) -> int:
        return self.cand_terms.shape[1]


# ---------------------------------------------------------------------------------------------- the reward
def ranking_keys(scores: torch.Tensor, low: torch.Tensor | None = None) -> torch.Tensor:
    """(B, N) int64 keys whose order is the ranking order: score first, then lower corpus position.

    The bits of a float32 ≥ 0 read as an int32 grow with its value, so (bits << 32) + (2^32 − 1 − position) is a
    distinct key per document. Scores ≤ 0 get keys below ``_POSITIVE_KEY`` (their mutual order is not kept;
    they are never retrieved and never outrank a retrieved document, so it never matters). ``low``: the
    position part, ``position_keys(N)``, when the caller keeps it.
    """
    if low is None:
        low = position_keys(scores.shape[1], scores.device)
    return torch.add(low, scores.view(torch.int32).long(), alpha=1 << 32)


def position_keys(num_docs: int, device: torch.device) -> torch.Tensor:
    """The low 32 bits of ``ranking_keys``: 2^32 − 1 − position, so a lower position ranks first among ties."""
    return (1 << 32) - 1 - torch.arange(num_docs, device=device)


class Judged(NamedTuple):
    """The relevance judgements of B queries in the form the ranking reads them."""

    docs: torch.Tensor
    """(B, R) corpus positions of the relevant documents (padding points at document 0, masked by ``valid``)."""
    valid: torch.Tensor
    """(B, R) real entries."""
    recall_coef: torch.Tensor
    """(B,) the recall weight / the number of relevant documents."""

    @classmethod
    def of(cls, rel_docs: torch.Tensor, n_rel: torch.Tensor, weights: dict[str, float]) -> "Judged":
        return cls(rel_docs.clamp(min=0), rel_docs >= 0, weights.get("recall", 0.0) / n_rel.clamp(min=1))

    def take(self, rows: torch.Tensor) -> "Judged":
        return Judged(self.docs[rows], self.valid[rows], self.recall_coef[rows])


def ranked_metric(scores: torch.Tensor, rel_docs: torch.Tensor, n_rel: torch.Tensor, weights: dict[str, float],
                  k: int) -> torch.Tensor:
    """Σ weight · metric of each row's ranking (see the module docstring for the rule): 'recall' = R@k,
    'mrr' = RR@k. ``scores`` (B, N) float32, ``rel_docs`` (B, R) corpus positions, -1 padded."""
    return rank_metric(scores, Judged.of(rel_docs, n_rel, weights), weights.get("mrr", 0.0), k)


def rank_metric(scores: torch.Tensor, judged: Judged, mrr_weight: float, k: int, low: torch.Tensor | None = None
                ) -> torch.Tensor:
    """``ranked_metric`` over prepared judgements (the env prepares them once per episode).

    Equal to sorting every row and reading its top k, without a sort or any data-dependent shape: a relevant
    document is retrieved when its key is at least the k-th best key and its score is > 0, and the rank of the
    best retrieved one is the number of keys above it.
    """
    keys = ranking_keys(scores, low)
    kth = keys.topk(min(k, scores.shape[1]), dim=1).values[:, -1]
    rel_keys = keys.gather(1, judged.docs)
    retrieved = (rel_keys >= kth.clamp(min=_POSITIVE_KEY)[:, None]) & judged.valid
    out = retrieved.sum(1) * judged.recall_coef
    if mrr_weight:
        best = torch.where(retrieved, rel_keys, -1).amax(1)
        rank = (keys > best[:, None]).sum(1)  # documents ranked above the best retrieved relevant one
        out = torch.add(out, (best >= 0) / (rank + 1), alpha=mrr_weight)
    return out


def drop_excluded(scores: torch.Tensor, exclude: torch.Tensor) -> None:
    """Zero (in place) each row's excluded document (``exclude`` (B,), -1 = none): a score of 0 is never
    retrieved and outranks no retrieved document, as if that document were not in the corpus."""
    col = exclude.clamp(min=0)[:, None]
    scores.scatter_(1, col, scores.gather(1, col) * (exclude < 0)[:, None])


def search_reward(index: BM25Index, terms: torch.Tensor, weights: torch.Tensor, rel_docs: torch.Tensor,
                  n_rel: torch.Tensor, mix: dict[str, float], k: int, exclude: torch.Tensor | None = None,
                  max_cells: int | None = None) -> torch.Tensor:
    """Score whole queries (B, L) and rank them with ``ranked_metric``, in chunks of at most ``max_cells``
    (B × num_docs) score cells."""
    if max_cells is None:
        max_cells = MAX_STATE_CELLS["cpu" if index.device.type == "cpu" else "accelerator"]
    chunk = max(1, max_cells // index.num_docs)
    out = []
    for lo in range(0, terms.shape[0], chunk):
        rows = slice(lo, lo + chunk)
        scores = index.score(terms[rows], weights[rows])
        if exclude is not None:
            drop_excluded(scores, exclude[rows])
        out.append(ranked_metric(scores, rel_docs[rows], n_rel[rows], mix, k))
    return torch.cat(out) if out else torch.zeros(0, device=terms.device)


# ---------------------------------------------------------------------------------------------- the env
class ReformulationEnv:
    """B episodes over a QuerySet; see the module docstring.

    ``compact``: work on the expanding episodes only, with exact sizes read from the tensors; None = on the CPU
    only. ``max_state_cells``: the B × num_docs limit of the incremental score state (default by device).
    """

    def __init__(self, queries: QuerySet, index: BM25Index, max_steps: int = 5, reward_k: int = 40,
                 reward_weights: dict[str, float] | None = None, expansion_weight: float = 1.0,
                 scored: bool = True, compact: bool | None = None, max_state_cells: int | None = None):
        self.qs, self.index = queries, index
        self.max_steps, self.reward_k = max_steps, reward_k
        self.reward_weights = reward_weights or {"recall": 1.0}
        self.expansion_weight = expansion_weight
        self.scored = scored
        """False for inference rewrites: no reward, so no scoring per step (``metric`` stays 0)."""
        self.M = queries.max_candidates
        self.device = queries.terms.device
        cpu = self.device.type == "cpu"
        self.compact = cpu if compact is None else compact
        self.max_state_cells = max_state_cells or MAX_STATE_CELLS["cpu" if cpu else "accelerator"]
        # host-side sizes, read once here so that no step has to: postings per query (the first search's exact
        # size) and the longest candidate posting list (the fixed width of a step's gather)
        lengths = (index.indptr[1:] - index.indptr[:-1]).cpu()
        self._q0_postings = lengths[queries.terms.cpu()].sum(1).numpy()
        self.postings_width = int(lengths[queries.cand_terms.cpu()].max()) if queries.cand_terms.numel() else 0
        self._slots = torch.arange(max(1, self.postings_width), device=self.device)
        self._low = position_keys(index.num_docs, self.device)
        self._initial = self._initial_state() if scored else None

    # ------------------------------------------------------------------ episode state
    def reset(self, qidx: torch.Tensor) -> None:
        """Start one episode per query position in ``qidx`` (B,), a CPU tensor: the host picks the episodes and
        sizes their first search from its own copy of the posting counts."""
        qs, b, m = self.qs, qidx.shape[0], self.M
        self.qidx = qidx.to(self.device, non_blocking=True)
        l0 = qs.terms.shape[1]
        self.t = 0
        self.terms = torch.full((b, l0 + self.max_steps), self.index.pad_id, dtype=torch.long, device=self.device)
        self.terms[:, :l0] = qs.terms[self.qidx]
        self.weights = torch.zeros(self.terms.shape, device=self.device)
        self.weights[:, :l0] = (qs.terms[self.qidx] != self.index.pad_id).float()
        # per-episode candidate tables with one extra slot, M, where the actions of episodes that do not expand
        # are sent: a padding term of weight 0 and no postings, whose "chosen" flag is scratch
        pad = lambda x, value: torch.nn.functional.pad(x, (0, 1), value=value)  # noqa: E731
        self._chosen = torch.zeros((b, m + 1), dtype=torch.bool, device=self.device)
        self._cand_terms = pad(qs.cand_terms[self.qidx], self.index.pad_id)
        self._cand_weight = pad(self.expansion_weight * qs.cand_weight[self.qidx], 0.0)
        self._cand_start = self.index.indptr[self._cand_terms]
        self._cand_count = self.index.indptr[self._cand_terms + 1] - self._cand_start
        self.alive = torch.ones(b, dtype=torch.bool, device=self.device)
        self.judged = Judged.of(qs.rel_docs[self.qidx], qs.n_rel[self.qidx], self.reward_weights)
        self.exclude = qs.exclude_docs[self.qidx] if qs.has_exclusions else None
        self.scores = None
        if not self.scored:
            self.metric = torch.zeros(b, device=self.device)
            return
        if b * self.index.num_docs > self.max_state_cells:
            self.metric = self._rescore(None)
        elif self._initial is not None:
            self.scores = self._initial[0].index_select(0, self.qidx)
            self.metric = self._initial[1].index_select(0, self.qidx)
        else:
            with allowed_sync():  # host data (.numpy() of a device tensor would raise): no device is waited for
                total = int(self._q0_postings[qidx.numpy()].sum())
            self.scores = self.index.score(self.terms[:, :l0], self.weights[:, :l0], total=total)
            if self.exclude is not None:
                drop_excluded(self.scores, self.exclude)
            self.metric = self._rank(self.scores, self.judged)

    def _initial_state(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Every query's q0 scores (Q, num_docs) and metric, computed once when they fit ``max_state_cells``: an
        episode then starts with a copy instead of a search (each query starts many episodes)."""
        qs, n = self.qs, self.index.num_docs
        if not len(qs) or len(qs) * n > self.max_state_cells:
            return None
        scores, metrics = [], []
        for lo in range(0, len(qs), 256):
            rows = slice(lo, lo + 256)
            s = self.index.score(qs.terms[rows], (qs.terms[rows] != self.index.pad_id).float())
            if qs.has_exclusions:
                drop_excluded(s, qs.exclude_docs[rows])
            scores.append(s)
            metrics.append(self._rank(s, Judged.of(qs.rel_docs[rows], qs.n_rel[rows], self.reward_weights)))
        return torch.cat(scores), torch.cat(metrics)

    @property
    def chosen(self) -> torch.Tensor:
        """(B, M) candidates already added."""
        return self._chosen[:, : self.M]

    def legal(self) -> torch.Tensor:
        """(B, M+1) legal actions: unchosen valid candidates, and STOP (always legal)."""
        cand = self.qs.cand_valid[self.qidx] & ~self.chosen
        return torch.cat([cand, torch.ones_like(cand[:, :1])], dim=1)

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Apply (B,) actions; returns (reward, terminated), each (B,). Episodes that already ended ignore their
        action (reward 0, not terminated again); STOP and the step that reaches ``max_steps`` terminate."""
        expand = self.alive & (actions < self.M)
        slot = torch.where(expand, actions, self.M)[:, None]
        term = self._cand_terms.gather(1, slot).squeeze(1)
        weight = self._cand_weight.gather(1, slot).squeeze(1)
        col = self.qs.terms.shape[1] + self.t
        self.terms[:, col], self.weights[:, col] = term, weight
        self._chosen.scatter_(1, slot, True)
        if self.scored:
            new = self._metric_after(slot, term, weight, expand)
            # episodes that did not expand kept their scores, so their metric comes out unchanged: reward 0
            reward = new - self.metric
            self.metric = new
        else:
            reward = torch.zeros_like(weight)
        self.t += 1
        if self.t < self.max_steps:
            terminated = self.alive ^ expand  # alive, and took STOP
            self.alive = expand
        else:
            terminated, self.alive = self.alive, torch.zeros_like(expand)
        return reward, terminated

    # ------------------------------------------------------------------ scoring
    def _metric_after(self, slot: torch.Tensor, term: torch.Tensor, weight: torch.Tensor, expand: torch.Tensor
                      ) -> torch.Tensor:
        """Reward metric of every episode once ``term`` × ``weight`` is added (weight 0 where not expanding)."""
        rows = expand.nonzero().squeeze(1) if self.compact else None
        if self.scores is None:
            return self._rescore(rows)
        self._add_postings(slot, weight, rows)
        if self.exclude is not None:
            drop_excluded(self.scores, self.exclude)
        if rows is None:
            return self._rank(self.scores, self.judged)
        new = self.metric.clone()
        if rows.numel():
            new[rows] = self._rank(self.scores[rows], self.judged.take(rows))
        return new

    def _rank(self, scores: torch.Tensor, judged: Judged) -> torch.Tensor:
        return rank_metric(scores, judged, self.reward_weights.get("mrr", 0.0), self.reward_k, self._low)

    def _add_postings(self, slot: torch.Tensor, weight: torch.Tensor, rows: torch.Tensor | None) -> None:
        """scores[b] += weight[b] · impacts of the term in ``slot``: one fixed (B, P) gather and scatter, or, in
        compact mode, for the expanding ``rows`` only, as wide as their longest posting list."""
        index = self.index
        start = self._cand_start.gather(1, slot)
        count = self._cand_count.gather(1, slot)
        slots = self._slots
        if rows is not None:
            if not rows.numel():
                return
            start, count, weight = start[rows], count[rows], weight[rows]
            slots = slots[: max(1, int(count.max()))]
        width = slots.shape[0]
        pos = (start + slots).clamp_(max=index.data.shape[0] - 1).view(-1)
        docs = index.indices.index_select(0, pos).view(-1, width).long()
        vals = index.data.index_select(0, pos).view(-1, width) * ((slots < count) * weight[:, None])
        if rows is None:
            self.scores.scatter_add_(1, docs, vals)
        else:
            target = docs + rows[:, None] * index.num_docs
            self.scores.view(-1).index_add_(0, target.view(-1), vals.view(-1))

    def _rescore(self, rows: torch.Tensor | None) -> torch.Tensor:
        """Reward metric from whole-query searches (the state would not fit): all episodes, or ``rows`` only."""
        qs = self.qs
        pick = (lambda x: x) if rows is None else (lambda x: x[rows])  # noqa: E731
        q = pick(self.qidx)
        values = search_reward(self.index, pick(self.terms), pick(self.weights), qs.rel_docs[q], qs.n_rel[q],
                               self.reward_weights, self.reward_k, None if self.exclude is None else pick(self.exclude),
                               self.max_state_cells)
        if rows is None:
            return values
        new = self.metric.clone()
        new[rows] = values
        return new
