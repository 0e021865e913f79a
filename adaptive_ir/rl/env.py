"""The batched reformulation environment: B episodes in lockstep, as tensors on one device.

An episode starts from a query q0 (the query's words, each of weight 1, or a weighted query such as its RM3
expansion: ``QuerySet.term_weights``). At each step the agent appends one of the query's M candidate terms at one of
L weights (``levels``; a term can be chosen once) or takes STOP. Action a < M·L adds candidate a // L at weight
``levels[a % L]`` (candidate-major: a candidate's L actions are adjacent); action ``stop`` = M·L is STOP. After every step the rewritten query's ranking is scored
against the qrels; the reward is the change of the reward metric, so an episode's undiscounted return telescopes
to metric(final query) − metric(q0). STOP ends the episode, and so does reaching ``max_steps``: no action, hence
no reward, is possible after the limit and the step fraction is part of the observation, so that state is
terminal (its value is 0, nothing to bootstrap).

**Choosing the start** (``QuerySet.alt_terms``, ``retrieval.start: choose``). One more action, M·L (STOP is then
M·L + 1, still the last), is legal at an episode's first step only: it replaces the query with the other start (its
RM3 expansion) and counts as a step. So STOP at once is the query, the switch then STOP is RM3, and either may be
followed by the agent's terms: the action space holds both baselines, and the switch's reward is RM3's metric
minus the query's.

**Ranking rule.** Documents are ordered by score, ties by corpus position (lower first), and only documents with
a score > 0 are retrieved (a document matching no query term is not a result). Scores are float32 sums of
weight × impact added in slot order, the order of ``BM25Index.score``, so the rewards equal those of the
rewritten query searched from scratch, bit for bit. ``exclude_docs`` removes one document per query from its
ranking (Nogueira & Cho leave out the document whose title is the query).

**A step costs O(k + the chosen term's postings), whatever the corpus size.** Expansion weights are > 0, so
scores only rise: after a term is added the new top k is the old top k (moved up) merged with the documents the
term touches, and nothing else can enter. Each episode keeps its top-k ranking keys (``index.ranking_keys``) and
a *score lane*: a float32 row over the corpus holding its query's current scores, from which a touched
document's previous score is read in O(1) (an exact previous score is what the merge needs; looking it up in the
postings of every query term costs a binary search per term). Only cells under the episode's postings are ever
written, and they are zeroed again when the lane is reused, so the lanes cost memory (episodes × documents × 4
bytes: 1.1 GiB for 256 episodes over 1.09M documents), not time. The reward reads relevance from the judged
(query, document) pairs kept as one sorted array (ragged qrels: no padding to the most-judged query).

Two implementations of the same arithmetic: on the CPU, compiled kernels (``kernels.py``) that work on the
episodes that expand only and on exactly their postings (``compact``); on accelerators, tensor operations of
fixed shapes that need no host-device synchronisation in a step: every episode gathers a block as wide as the
longest candidate posting list among the batch's queries (known on the host when the batch starts), episodes
that do not expand add a padding term with no postings, and the lanes are zeroed with one fill per batch. Both
give the same rewards (tested); the accelerator mode is the one the sync-detector test runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from adaptive_ir.common.errors import ConfigError
from adaptive_ir.common.hostsync import allowed_sync
from adaptive_ir.common.memory import available_memory
from adaptive_ir.mining.candidates import CandidateSet
from adaptive_ir.retrieval import kernels
from adaptive_ir.retrieval.index import POSITIVE_KEY, BM25Index, best_distinct, key_docs, ranking_keys


@dataclass
class QuerySet:
    """Everything the env and the policy need about Q queries, as device tensors indexed by query position."""

    qids: list[str]
    terms: torch.Tensor
    """(Q, L0) term ids of the query each episode starts from, padded with the index's pad id."""
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
    rel_indptr: torch.Tensor
    """(Q + 1,) int64: query i's relevant documents are ``rel_docs[rel_indptr[i]:rel_indptr[i + 1]]``."""
    rel_docs: torch.Tensor
    """(J,) int64 corpus positions of the relevant documents (grade ≥ 1), ascending within each query: ragged,
    no padding to the most-judged query."""
    n_rel: torch.Tensor
    """(Q,) number of relevant documents (float)."""
    cand_weight: torch.Tensor
    """(Q, M) weight multiplier of each candidate once added to the query (1 = uniform)."""
    exclude_docs: torch.Tensor
    """(Q,) corpus position of a document that is never retrieved for that query in the reward, -1 for none."""
    first_keys: torch.Tensor | None = None
    """(Q, K) int64 ranking keys of each query's own BM25 top K (``CandidateSet.first``), the rankings episodes
    start from; None: the env searches them once."""
    term_weights: torch.Tensor | None = None
    """(Q, L0) float32 weights of ``terms`` (0 on padding); None: each term weighs 1 (a query's own words)."""
    alt_terms: torch.Tensor | None = None
    """(Q, L0) term ids of the other start an episode may choose at its first step (``retrieval.start: choose``:
    the query's RM3 expansion), padded; None: no such choice."""
    alt_weights: torch.Tensor | None = None
    """(Q, L0) float32 weights of ``alt_terms`` (0 on padding)."""
    query_feats: torch.Tensor | None = None
    """(Q, G) float32 features of each whole query (``mining.query_features``) the policy chooses its start from."""

    @classmethod
    def build(cls, qids: list[str], query_terms: list[list[int]], cands: CandidateSet, term_rows: np.ndarray,
              q_rows: np.ndarray, qrels: dict[str, dict[str, int]] | None, doc_positions,
              pad_id: int, device: str | torch.device, cand_weight: np.ndarray | None = None,
              exclude_docs: np.ndarray | None = None, query_weights: list[list[float]] | None = None,
              alt_query: tuple[list[list[int]], list[list[float]]] | None = None,
              query_feats: np.ndarray | None = None) -> QuerySet:
        """``term_rows[i, j]`` is the embedding row of candidate j of query i (already computed);
        ``doc_positions(ids)`` gives the corpus positions of document ids (-1 if unknown), e.g.
        ``Collection.doc_positions``; ``exclude_docs`` (Q,) int64 corpus positions, -1 = none (the default);
        ``query_weights``: one weight per term of ``query_terms`` where the episodes start from a weighted query
        (``retrieval.start``; the candidates' first rankings are then not theirs, and the env searches its own);
        ``alt_query``: (term ids, weights) of the start each episode may switch to at its first step, with
        ``query_feats`` (Q, G) to choose by (``retrieval.start: choose``)."""
        q = len(qids)
        width = max(1, max((len(t) for t in query_terms), default=1))
        alt_terms = alt_weights = None
        if alt_query is not None:
            width = max(width, max((len(t) for t in alt_query[0]), default=1))
            alt_terms = np.full((q, width), pad_id, dtype=np.int64)
            alt_weights = np.zeros((q, width), np.float32)
            for i, (t, w) in enumerate(zip(*alt_query)):
                alt_terms[i, : len(t)], alt_weights[i, : len(w)] = t, w
        terms = np.full((q, width), pad_id, dtype=np.int64)
        weights = None if query_weights is None else np.zeros((q, width), np.float32)
        for i, t in enumerate(query_terms):
            terms[i, : len(t)] = t
            if weights is not None and query_weights is not None:  # both or neither
                if len(query_weights[i]) != len(t):
                    raise ValueError(f"query {qids[i]}: {len(query_weights[i])} weights for {len(t)} terms")
                weights[i, : len(t)] = query_weights[i]
        # every judged pair at once (one id lookup for the whole split), then sorted and deduplicated per query
        judged = [[d for d, g in (qrels or {}).get(qid, {}).items() if g >= 1] for qid in qids]
        owner = np.repeat(np.arange(q, dtype=np.int64), [len(j) for j in judged])
        pos = np.asarray(doc_positions([d for j in judged for d in j]), np.int64).reshape(-1)
        span = int(pos.max(initial=0)) + 1
        pairs = np.unique(owner[pos >= 0] * span + pos[pos >= 0])
        rel_docs = (pairs % span).astype(np.int64)
        n_rel = np.bincount(pairs // span, minlength=q).astype(np.int64)
        rel_indptr = np.concatenate([[0], np.cumsum(n_rel)]).astype(np.int64)
        exclude = np.full(q, -1, np.int64) if exclude_docs is None else np.asarray(exclude_docs, np.int64)
        if exclude.shape != (q,):
            raise ValueError(f"exclude_docs must have one entry per query ({q}), got shape {exclude.shape}")
        valid = cands.valid
        tt = lambda a, dt=None: torch.as_tensor(a, dtype=dt).to(device)  # noqa: E731
        return cls(qids=list(qids), terms=tt(terms), cand_terms=tt(np.where(valid, cands.terms, pad_id)),
                   cand_valid=tt(valid), cand_rows=tt(term_rows, torch.long),
                   cand_feats=tt(cands.features, torch.float32), q_rows=tt(q_rows, torch.long),
                   rel_indptr=tt(rel_indptr), rel_docs=tt(rel_docs), n_rel=tt(n_rel, torch.float32),
                   cand_weight=tt(np.ones(valid.shape, np.float32) if cand_weight is None else cand_weight,
                                  torch.float32),
                   exclude_docs=tt(exclude),
                   first_keys=None if cands.first is None or weights is not None else tt(cands.first),
                   term_weights=None if weights is None else tt(weights),
                   alt_terms=None if alt_terms is None else tt(alt_terms),
                   alt_weights=None if alt_weights is None else tt(alt_weights),
                   query_feats=None if query_feats is None else tt(query_feats, torch.float32))

    def __len__(self) -> int:
        return len(self.qids)

    @property
    def max_candidates(self) -> int:
        return self.cand_terms.shape[1]


LANES_SHARE = 0.5
"""The share of the memory available that the score lanes may take (the index, tables and batch need the rest)."""


def lanes_fit(episodes: int, num_docs: int, device: torch.device, available: int | None = None) -> bool:
    """Whether ``episodes`` score lanes over ``num_docs`` documents take at most LANES_SHARE of the memory
    available (``available`` bytes; default ``available_memory(device)``; unknown counts as fitting)."""
    free = available_memory(device) if available is None else available
    return free is None or episodes * num_docs * 4 <= LANES_SHARE * free


def require_lanes_fit(episodes: int, num_docs: int, device: torch.device, key: str,
                      available: int | None = None) -> None:
    """Raise ConfigError, in one line naming ``key`` and the value that fits, when ``episodes`` score lanes over
    ``num_docs`` documents (4 bytes a cell: ``ReformulationEnv``) need more than LANES_SHARE of the memory
    available (``available`` bytes; default ``available_memory(device)``). Checked as soon as the collection's
    size is known, before minutes of indexing and mining (MS MARCO: 256 episodes × 8.8M documents = 8.4 GiB)."""
    free = available_memory(device) if available is None else available
    if free is None or lanes_fit(episodes, num_docs, device, free):
        return
    need = episodes * num_docs * 4
    fits = int(LANES_SHARE * free // (4 * max(num_docs, 1)))
    raise ConfigError(f"{key} {episodes}: the env's score lanes need {episodes} episodes × {num_docs:,} documents × "
                      f"4 bytes = {need / 2**30:.1f} GiB, more than half of the {free / 2**30:.1f} GiB available on "
                      f"{device.type}; set {key} to {fits} or less" if fits else
                      f"{key}: one episode's score lane over {num_docs:,} documents needs {4 * num_docs / 2**30:.1f} "
                      f"GiB, more than half of the {free / 2**30:.1f} GiB available on {device.type}")


def per_action(cand: torch.Tensor, levels: int) -> torch.Tensor:
    """(B, M) per-candidate values as (B, M·L), one per action but STOP, candidate-major (``ReformulationEnv``)."""
    return cand.unsqueeze(-1).expand(-1, -1, levels).reshape(cand.shape[0], -1)


# ---------------------------------------------------------------------------------------------- the reward
class Judgements:
    """The qrels of a QuerySet as one sorted array of ``query position × num_docs + document`` keys (ragged: as
    long as the judged pairs), and the reward metric of top-k rankings read from it."""

    def __init__(self, rel_indptr: torch.Tensor, rel_docs: torch.Tensor, n_rel: torch.Tensor, num_docs: int,
                 weights: dict[str, float]):
        """``rel_indptr``, ``rel_docs``, ``n_rel`` as in ``QuerySet``; ``weights`` the reward mix."""
        device = rel_docs.device
        owner = torch.repeat_interleave(torch.arange(len(n_rel), device=device), rel_indptr[1:] - rel_indptr[:-1],
                                        output_size=rel_docs.numel())
        # a last key above every probe, so a search never falls off the end
        self.keys = torch.cat([owner * num_docs + rel_docs,
                               torch.full((1,), torch.iinfo(torch.int64).max, device=device)])
        self.num_docs = num_docs
        self.rel_indptr, self.rel_docs = rel_indptr, rel_docs
        self.recall_coef = weights.get("recall", 0.0) / n_rel.clamp(min=1)
        self.mrr_weight = weights.get("mrr", 0.0)

    def metric(self, qidx: torch.Tensor, topk: torch.Tensor, kernel: bool = False) -> torch.Tensor:
        """Σ weight · metric of each ranking: 'recall' = R@k, 'mrr' = RR@k, for (B, k) ranking keys (best first,
        -1 padded) of the queries at positions ``qidx`` (B,). ``kernel``: the CPU kernel (``kernels.topk_metric``,
        one call instead of a dozen small tensor operations; equal up to float rounding of the mix)."""
        if kernel:
            host = np.empty(topk.shape[0], np.float32)
            kernels.topk_metric(topk.numpy(), qidx.numpy(), self.rel_indptr.numpy(), self.rel_docs.numpy(),
                                self.recall_coef.numpy(), self.mrr_weight, host)
            return torch.from_numpy(host)
        probe = qidx[:, None] * self.num_docs + key_docs(topk)
        hit = (self.keys[torch.searchsorted(self.keys, probe)] == probe) & (topk >= POSITIVE_KEY)
        out = hit.sum(1) * self.recall_coef[qidx]
        if self.mrr_weight:
            ranks = torch.arange(1, topk.shape[1] + 1, device=topk.device)
            first = torch.where(hit, ranks, topk.shape[1] + 1).amin(1)  # rank of the best relevant document
            out = torch.add(out, (first <= topk.shape[1]) / first, alpha=self.mrr_weight)
        return out


# ---------------------------------------------------------------------------------------------- the env
class ReformulationEnv:
    """B episodes over a QuerySet; see the module docstring.

    ``compact``: the CPU kernels, working on the expanding episodes only (None = on the CPU); False runs the
    accelerator code (tests run it on the CPU)."""

    def __init__(self, queries: QuerySet, index: BM25Index, max_steps: int = 5, reward_k: int = 40,
                 reward_weights: dict[str, float] | None = None, expansion_weight: float | Sequence[float] = 1.0,
                 scored: bool = True, compact: bool | None = None):
        """``expansion_weight``: the weight of an added term, or the L weights an action chooses among."""
        self.qs, self.index = queries, index
        self.max_steps, self.reward_k = max_steps, reward_k
        self.reward_weights = reward_weights or {"recall": 1.0}
        self.levels = tuple(float(w) for w in (expansion_weight if isinstance(expansion_weight, Sequence)
                                               else (expansion_weight,)))
        if not self.levels or min(self.levels) <= 0:
            raise ValueError(f"expansion weights must be > 0 (scores may only rise), got {self.levels}")
        self.scored = scored
        """False for inference rewrites: no reward, so no scoring per step (``metric`` stays 0)."""
        self.M, self.L = queries.max_candidates, len(self.levels)
        self.choice = queries.alt_terms is not None
        """Whether the first step may switch to the other start (``QuerySet.alt_terms``)."""
        self.switch = self.M * self.L
        """The action that switches to the other start (when ``choice``)."""
        self.stop = self.M * self.L + self.choice
        """The STOP action (the last one)."""
        self.device = queries.terms.device
        self._level_weights = torch.tensor(self.levels, dtype=torch.float32, device=self.device)
        cpu = self.device.type == "cpu"
        if compact and not cpu:
            raise ValueError("compact mode (the CPU kernels) needs the QuerySet and the index on the CPU")
        self.compact = cpu if compact is None else compact
        self.k = min(reward_k, index.num_docs)
        # host-side sizes, read once here so that no step has to: postings of every query and of its longest
        # candidate posting list (the accelerator mode's block widths)
        lengths = (index.indptr[1:] - index.indptr[:-1]).cpu().numpy()
        self._q0_postings = lengths[queries.terms.cpu().numpy()].astype(np.int32)  # (Q, L0): per query term
        cands = queries.cand_terms.cpu().numpy()
        self._widest = lengths[cands].max(1) if cands.size else np.zeros(len(queries), np.int64)
        alt = queries.alt_terms
        self._alt_postings = None if alt is None else lengths[alt.cpu().numpy()].astype(np.int32)
        self.judged = (Judgements(queries.rel_indptr, queries.rel_docs, queries.n_rel, index.num_docs,
                                  self.reward_weights) if scored else None)
        # each query's first ranking, one longer than k: the excluded document may be in it
        width = min(self.k + 1, index.num_docs)
        first = queries.first_keys
        if scored and (first is None or first.shape[1] < width):
            first = index.topk_keys(queries.terms, queries.term_weights, width)
        self._first = first[:, :width] if scored and first is not None else None  # scored: never None here
        self._first_alt = (index.topk_keys(queries.alt_terms, queries.alt_weights, width)
                           if scored and queries.alt_terms is not None else None)
        self.lanes: torch.Tensor | None = None
        """(rows, num_docs) float32 score lanes, rows ≥ the batch size; zero outside the current episodes' cells."""
        self.terms: torch.Tensor | None = None
        """(B, L0 + max_steps) term ids of the current episodes; None before the first batch on these lanes."""
        self._term_max: np.ndarray | None = None
        """Each term's largest impact (``kernels.term_max``), the bound of the CPU's trials; made by the first."""

    # ------------------------------------------------------------------ episode state
    def reset(self, qidx: torch.Tensor) -> None:
        """Start one episode per query position in ``qidx`` (B,), a CPU tensor: the host picks the episodes and
        sizes their work from its own copy of the posting counts."""
        qs, b, m = self.qs, qidx.shape[0], self.M
        if self.scored:
            self._reuse_lanes(b)
        self.qidx = qidx.to(self.device, non_blocking=True)
        self.terms, self.weights = self._start_queries(self.qidx)
        self.steps = torch.zeros(b, dtype=torch.long, device=self.device)
        """(B,) steps each episode has taken (episodes restarted by ``restart`` count from their own start)."""
        # per-episode candidate tables with one extra slot, M, where the actions of episodes that do not expand
        # are sent: a padding term of weight 0 and no postings, whose "chosen" flag is scratch
        self._chosen = torch.zeros((b, m + 1), dtype=torch.bool, device=self.device)
        self._cand_terms, self._cand_weight = self._candidate_tables(self.qidx)
        self.alive = torch.ones(b, dtype=torch.bool, device=self.device)
        self.started = torch.zeros(b, dtype=torch.bool, device=self.device)
        """(B,) episodes that switched to the other start."""
        self.exclude = qs.exclude_docs[self.qidx]
        if not self.scored:
            self.metric = torch.zeros(b, device=self.device)
            return
        with allowed_sync():  # host data (.numpy() of a device tensor would raise): no device is waited for
            host = qidx.numpy()
        self._host_qidx = host.copy()
        if not self.compact:  # the accelerator code's block width: a power of two, few shapes for torch.compile
            self._offsets = torch.arange(self._block_width(host), device=self.device)
        l0 = qs.terms.shape[1]
        self._fill(None, self.terms[:, :l0], self.weights[:, :l0], self._q0_postings[host])
        self.topk = self._first_topk(self.qidx, self.exclude)
        assert self.judged is not None  # set when scored
        self.metric = self.judged.metric(self.qidx, self.topk, self.compact)
        if self.choice:
            self.alt_topk = self._first_topk(self.qidx, self.exclude, self._first_alt)
            self.alt_metric = self.judged.metric(self.qidx, self.alt_topk, self.compact)
            """(B,) the reward metric of each episode's other start (what the switch reaches)."""

    def restart(self, rows: torch.Tensor, qidx: torch.Tensor) -> None:
        """Start new episodes in rows ``rows`` of the current batch for the query positions ``qidx`` (both CPU
        tensors), the other rows' episodes going on as they are: a vector env's autoreset, episodes no longer in
        lockstep. The same state as ``reset`` gives those rows (tested)."""
        assert self.terms is not None  # after reset
        r = rows.to(self.device, non_blocking=True)
        q = qidx.to(self.device, non_blocking=True)
        if self.scored:
            self._clear_rows(rows, r)
        self.qidx.index_copy_(0, r, q)
        terms, weights = self._start_queries(q)
        self.terms.index_copy_(0, r, terms)
        self.weights.index_copy_(0, r, weights)
        self.steps.index_fill_(0, r, 0)
        self._chosen.index_fill_(0, r, False)
        cand_terms, cand_weight = self._candidate_tables(q)
        self._cand_terms.index_copy_(0, r, cand_terms)
        self._cand_weight.index_copy_(0, r, cand_weight)
        self.alive.index_fill_(0, r, True)
        self.started.index_fill_(0, r, False)
        self.exclude.index_copy_(0, r, self.qs.exclude_docs[q])
        if not self.scored:
            self.metric.index_fill_(0, r, 0.0)
            return
        with allowed_sync():  # host data, as in reset
            host_rows, host = rows.numpy(), qidx.numpy()
        self._host_qidx[host_rows] = host
        if not self.compact:  # the block must hold the new queries' candidate postings too
            self._offsets = torch.arange(max(self._block_width(host), self._offsets.numel()), device=self.device)
        l0 = self.qs.terms.shape[1]
        self._fill(host_rows, terms[:, :l0], weights[:, :l0], self._q0_postings[host])
        assert self.judged is not None  # set when scored
        topk = self._first_topk(q, self.exclude[r])
        self.topk.index_copy_(0, r, topk)
        self.metric.index_copy_(0, r, self.judged.metric(q, topk, self.compact))
        if self.choice:
            alt = self._first_topk(q, self.exclude[r], self._first_alt)
            self.alt_topk.index_copy_(0, r, alt)
            self.alt_metric.index_copy_(0, r, self.judged.metric(q, alt, self.compact))

    def _start_queries(self, qidx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L0 + max_steps) term ids and weights of episodes starting from the queries ``qidx``."""
        qs, l0 = self.qs, self.qs.terms.shape[1]
        terms = torch.full((qidx.shape[0], l0 + self.max_steps), self.index.pad_id, dtype=torch.long,
                           device=self.device)
        terms[:, :l0] = qs.terms[qidx]
        weights = torch.zeros(terms.shape, device=self.device)
        weights[:, :l0] = ((qs.terms[qidx] != self.index.pad_id).float() if qs.term_weights is None
                           else qs.term_weights[qidx])
        return terms, weights

    def _candidate_tables(self, qidx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidates' term ids and weights of the queries ``qidx``, with the extra padding slot M."""
        pad = torch.nn.functional.pad
        return (pad(self.qs.cand_terms[qidx], (0, 1), value=self.index.pad_id),
                pad(self.qs.cand_weight[qidx], (0, 1), value=0.0))

    def _block_width(self, host_qidx: np.ndarray) -> int:
        """The accelerator code's block: a power of two ≥ the queries' longest candidate posting list (few
        shapes for torch.compile)."""
        return 1 << max(0, int(self._widest[host_qidx].max(initial=1)) - 1).bit_length()

    def _first_topk(self, qidx: torch.Tensor, exclude: torch.Tensor, table: torch.Tensor | None = None
                    ) -> torch.Tensor:
        """(B, k) ranking keys of the queries' first rankings (or of ``table``'s: the other start's), their
        excluded document left out."""
        table = self._first if table is None else table
        assert table is not None  # set when scored
        first = table[qidx]
        first = torch.where((key_docs(first) == exclude[:, None]) & (first >= 0), -1, first)
        return torch.nn.functional.pad(first.topk(min(self.k, first.shape[1]), dim=1).values,
                                       (0, self.k - min(self.k, first.shape[1])), value=-1)

    def release_lanes(self) -> None:
        """Give the score lanes back (episodes × documents × 4 bytes: 8.2 GiB for 256 episodes over MS MARCO's
        8.8M passages); the next batch makes new ones."""
        self.lanes = self.terms = None

    def _reuse_lanes(self, b: int) -> None:
        """Lanes for ``b`` episodes, zero: the last batch's cells are cleared (on the CPU only the cells its
        queries' postings touched; on an accelerator with one fill), or bigger lanes are made."""
        n = self.index.num_docs
        if self.lanes is None or self.lanes.shape[0] < b:
            self.lanes, self.terms = torch.zeros((b, n), device=self.device), None
        elif self.terms is not None:
            used = self.terms.shape[0]
            if self.compact:
                kernels.lanes_clear(self.index.indptr.numpy(), self.index.indices.numpy(), self.lanes.numpy(),
                                    np.arange(used), self.terms.numpy())
            else:
                self.lanes[:used].zero_()

    def _clear_rows(self, host_rows: torch.Tensor, rows: torch.Tensor) -> None:
        """Zero the lanes of some rows (``_reuse_lanes`` for part of the batch)."""
        assert self.lanes is not None and self.terms is not None  # after reset
        if self.compact:
            kernels.lanes_clear(self.index.indptr.numpy(), self.index.indices.numpy(), self.lanes.numpy(),
                                host_rows.numpy(), self.terms[rows].numpy())
        else:
            self.lanes.index_fill_(0, rows, 0.0)

    def _fill(self, host_rows: np.ndarray | None, terms: torch.Tensor, weights: torch.Tensor,
              q0_postings: np.ndarray) -> None:
        """Score the episodes' q0 (``terms``, ``weights``: their first L0 slots) into their zeroed lanes: rows
        ``host_rows``, or the whole batch when None (its ranking is the query's first one, kept)."""
        assert self.lanes is not None  # set by reset
        if self.compact:
            idx = self.index
            rows = np.arange(terms.shape[0]) if host_rows is None else host_rows
            kernels.lanes_fill(idx.indptr.numpy(), idx.indices.numpy(), idx.data.numpy(), self.lanes.numpy(),
                               rows, terms.numpy(), weights.numpy())
        elif host_rows is None:
            self.index.add_by_slot(self.lanes.view(-1), terms, weights, q0_postings.sum(0))
        else:  # some rows: scored into a block of their own, then copied into place
            block = torch.zeros((terms.shape[0], self.index.num_docs), device=self.device)
            self.index.add_by_slot(block.view(-1), terms, weights, q0_postings.sum(0))
            self.lanes.index_copy_(0, torch.from_numpy(host_rows).to(self.device), block)

    @property
    def chosen(self) -> torch.Tensor:
        """(B, M) candidates already added."""
        return self._chosen[:, : self.M]

    def legal(self) -> torch.Tensor:
        """(B, stop + 1) legal actions: every weight of the unchosen valid candidates, the switch at the first step
        (``choice``), and STOP (always legal)."""
        cand = per_action(self.qs.cand_valid[self.qidx] & ~self.chosen, self.L)
        switch = [(self.steps == 0)[:, None]] if self.choice else []
        return torch.cat([cand, *switch, torch.ones_like(cand[:, :1])], dim=1)

    def is_legal(self, actions: torch.Tensor) -> torch.Tensor:
        """(B,) whether each episode's action is among ``legal()``'s, read for that action alone."""
        slot = torch.div(actions, self.L, rounding_mode="floor").clamp(0, self.M - 1)[:, None]
        open_ = (self.qs.cand_valid[self.qidx].gather(1, slot) & ~self.chosen.gather(1, slot)).squeeze(1)
        first = (actions == self.switch) & (self.steps == 0) if self.choice else torch.zeros_like(open_)
        return (actions == self.stop) | first | ((actions >= 0) & (actions < self.switch) & open_)

    def _decode(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(expand, candidate slot (B, 1), term, weight) of (B,) actions: slot M (the padding term, weight 0) where
        the episode does not expand."""
        expand = self.alive & (actions < self.switch)
        slot = torch.where(expand, torch.div(actions, self.L, rounding_mode="floor"), self.M)[:, None]
        level = torch.where(expand, actions % self.L, 0)
        term = self._cand_terms.gather(1, slot).squeeze(1)
        weight = self._cand_weight.gather(1, slot).squeeze(1) * self._level_weights[level]
        return expand, slot, term, weight

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Apply (B,) actions; returns (reward, terminated), each (B,). Episodes that already ended ignore their
        action (reward 0, not terminated again); STOP and the step that reaches ``max_steps`` terminate."""
        expand, slot, term, weight = self._decode(actions)
        assert self.terms is not None  # set by reset
        switch = self.alive & (actions == self.switch) & (self.steps == 0) if self.choice else None
        if switch is not None:
            self._switch(switch)
        # each episode writes its own next column (episodes restarted apart are at different steps); one that
        # does not expand writes back what is there (padding, or its last term once it has taken every step)
        col = (self.qs.terms.shape[1] + self.steps).clamp_(max=self.terms.shape[1] - 1)[:, None]
        self.terms.scatter_(1, col, torch.where(expand[:, None], term[:, None], self.terms.gather(1, col)))
        self.weights.scatter_(1, col, torch.where(expand[:, None], weight[:, None], self.weights.gather(1, col)))
        self._chosen.scatter_(1, slot, True)
        if self.scored:
            assert self.judged is not None  # set when scored
            self.topk = self._added(term, weight, expand, self.topk)
            # episodes that did not expand kept their ranking, so their metric comes out unchanged: reward 0
            new = self.judged.metric(self.qidx, self.topk, self.compact)
            reward = new - self.metric
            self.metric = new
        else:
            reward = torch.zeros_like(weight)
        self.steps += self.alive
        last = self.steps >= self.max_steps
        going = expand if switch is None else expand | switch
        terminated = self.alive & (~going | last)  # took STOP, or its last step
        self.alive = going & ~last
        return reward, terminated

    def _switch(self, mask: torch.Tensor) -> None:
        """Episodes ``mask`` (B,) (at their first step) leave their query for the other start: its terms and
        weights, its scores in their lanes, its first ranking."""
        assert self.terms is not None and self.qs.alt_terms is not None and self.qs.alt_weights is not None
        l0 = self.qs.terms.shape[1]
        alt_t, alt_w = self.qs.alt_terms[self.qidx], self.qs.alt_weights[self.qidx]
        if self.scored:
            assert self.lanes is not None
            if self.compact:
                rows = mask.nonzero().squeeze(1)
                if rows.numel():
                    assert self._alt_postings is not None
                    host = rows.numpy()
                    self._clear_rows(rows, rows)
                    self._fill(host, alt_t[rows], alt_w[rows], self._alt_postings[self._host_qidx[host]])
            else:  # every row, fixed shapes: those that stay are multiplied by 1 and add weight-0 slots
                assert self._alt_postings is not None
                b = mask.shape[0]
                self.lanes[:b].mul_((~mask)[:, None])
                self.index.add_by_slot(self.lanes.view(-1), alt_t, alt_w * mask[:, None],
                                       self._alt_postings[self._host_qidx].sum(0))
            self.topk = torch.where(mask[:, None], self.alt_topk, self.topk)
        self.terms[:, :l0] = torch.where(mask[:, None], alt_t, self.terms[:, :l0])
        self.weights[:, :l0] = torch.where(mask[:, None], alt_w, self.weights[:, :l0])
        self.started |= mask

    def trial(self, actions: torch.Tensor) -> torch.Tensor:
        """The reward metric each episode would reach by taking ``actions`` (B,) (STOP: its current one), leaving
        the episodes as they are (the oracle tries every candidate this way)."""
        expand, _, term, weight = self._decode(actions)
        assert self.judged is not None  # trials score: a scored env
        return self.judged.metric(self.qidx, self._added(term, weight, expand, self.topk, undo=True), self.compact)

    def trial_all(self) -> torch.Tensor:
        """(B, M·L) the reward metric after each term action (``trial`` of every one; empty slots and episodes
        that ended keep their current metric). On the CPU, one kernel call (``kernels.lanes_trial_all``): a
        candidate whose postings cannot lift a document from below an episode's k-th score is looked up in that
        episode's best documents only, which at millions of documents is most candidates and most of the oracle's
        time; the same top k as reading every posting."""
        if not self.compact:
            return torch.stack([self.trial(torch.full_like(self.qidx, j)) for j in range(self.switch)], 1)
        assert self.judged is not None and self.lanes is not None and self.terms is not None  # a scored episode
        actions = [self._decode(torch.full_like(self.qidx, j)) for j in range(self.switch)]
        pad = self.index.pad_id
        terms = torch.stack([torch.where(expand, term, pad) for expand, _, term, _ in actions], 1)
        weights = torch.stack([torch.where(expand, weight, 0.0) for expand, _, _, weight in actions], 1)
        keys = np.empty((self.switch, *self.topk.shape), np.int64)
        idx = self.index
        if self._term_max is None:
            self._term_max = kernels.term_max(idx.indptr.numpy(), idx.data.numpy())
        kernels.lanes_trial_all(idx.indptr.numpy(), idx.indices.numpy(), idx.data.numpy(), self._term_max,
                                self.lanes.numpy(), self.terms.numpy(), terms.numpy(), weights.numpy(),
                                self.exclude.numpy(), self.topk.numpy(), keys)
        return torch.stack([self.judged.metric(self.qidx, torch.from_numpy(keys[j]), True)
                            for j in range(self.switch)], 1)

    # ------------------------------------------------------------------ scoring
    def _added(self, term: torch.Tensor, weight: torch.Tensor, expand: torch.Tensor, topk: torch.Tensor,
               undo: bool = False) -> torch.Tensor:
        """The top-k keys once each episode adds ``term`` × ``weight`` (weight 0 and the padding term where it does
        not expand); the lanes keep the new scores unless ``undo``."""
        idx = self.index
        assert self.lanes is not None  # set by reset (scored episodes)
        if self.compact:
            rows = expand.nonzero().squeeze(1)
            out = topk.clone()
            if rows.numel():
                part = topk[rows]
                kernels.lanes_add(idx.indptr.numpy(), idx.indices.numpy(), idx.data.numpy(), self.lanes.numpy(),
                                  rows.numpy(), term[rows].numpy(), weight[rows].numpy(), self.exclude[rows].numpy(),
                                  part.numpy(), undo)
                out[rows] = part
            return out
        b, n = term.shape[0], idx.num_docs
        start = idx.indptr[term]
        valid = self._offsets < (idx.indptr[term + 1] - start)[:, None]  # (B, width)
        pos = (start[:, None] + self._offsets).clamp_(max=idx.data.shape[0] - 1)
        docs = idx.indices[pos].long()
        lanes = self.lanes.view(-1)
        target = torch.arange(b, device=self.device)[:, None] * n + docs
        saved = lanes[target] if undo else None
        lanes.index_add_(0, target.view(-1), (idx.data[pos] * (valid * weight[:, None])).view(-1))
        score = lanes[target]
        touched = torch.where(valid & (docs != self.exclude[:, None]), ranking_keys(score, docs), -1)
        old_docs = key_docs(topk)
        old = torch.where(topk >= 0, ranking_keys(self.lanes.gather(1, old_docs), old_docs), -1)
        if saved is not None:  # undo
            lanes.index_put_((target.view(-1),), saved.view(-1))
        # a document may be in both lists, with equal keys
        return best_distinct(torch.cat([old, touched], 1), topk.shape[1], copies=2)
