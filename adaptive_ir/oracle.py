"""The reachable upper bound (Nogueira & Cho 2017): greedy best-term selection *with* the qrels.

At each of the ``max_steps`` steps, every unchosen candidate is tried (one batched search of B × M rewritten
queries) and the one that raises the reward metric most is kept; the rewrite stops when no candidate raises it.
Same candidates, same step budget and same reward as the agent, so agent gain / oracle gain is the share of the
reachable gain the agent takes.
"""

from __future__ import annotations

import torch

from .env import QuerySet, search_reward
from .evaluate import Run, to_run
from .index import BM25Index


@torch.no_grad()
def oracle_rewrite(qs: QuerySet, index: BM25Index, max_steps: int, reward_k: int, weights: dict[str, float],
                   expansion_weight: float = 1.0, batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Final (terms, weights) of the greedy oracle for every query of ``qs``."""
    out_t, out_w = [], []
    m = qs.max_candidates
    for lo in range(0, len(qs), batch_size):
        q = torch.arange(lo, min(len(qs), lo + batch_size), device=qs.terms.device)
        b, l0 = q.numel(), qs.terms.shape[1]
        terms = torch.full((b, l0 + max_steps), index.pad_id, dtype=torch.long, device=q.device)
        terms[:, :l0] = qs.terms[q]
        wts = torch.zeros(terms.shape, device=q.device)
        wts[:, :l0] = 1.0
        exclude = qs.exclude_docs[q] if qs.has_exclusions else None
        best = search_reward(index, terms, wts, qs.rel_docs[q], qs.n_rel[q], weights, reward_k, exclude)
        legal = qs.cand_valid[q].clone()
        live = torch.ones(b, dtype=torch.bool, device=q.device)
        for t in range(max_steps):
            # every (query, candidate) pair as one rewritten query: (b·m, L)
            trial = terms.repeat_interleave(m, 0)
            trial_w = wts.repeat_interleave(m, 0)
            trial[:, l0 + t] = qs.cand_terms[q].reshape(-1)
            trial_w[:, l0 + t] = expansion_weight * qs.cand_weight[q].reshape(-1)
            qq = q.repeat_interleave(m)
            score = search_reward(index, trial, trial_w, qs.rel_docs[qq], qs.n_rel[qq], weights, reward_k,
                                  None if exclude is None else exclude.repeat_interleave(m)).view(b, m)
            score = score.masked_fill(~legal, -1.0)
            gain, slot = score.max(1)
            take = live & (gain > best + 1e-9)
            rows = take.nonzero().squeeze(1)
            terms[rows, l0 + t] = qs.cand_terms[q[rows], slot[rows]]
            wts[rows, l0 + t] = expansion_weight * qs.cand_weight[q[rows], slot[rows]]
            legal[rows, slot[rows]] = False
            best = torch.where(take, gain, best)
            live = take
            if not live.any():
                break
        out_t.append(terms)
        out_w.append(wts)
    width = max(t.shape[1] for t in out_t)
    return (torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=index.pad_id) for t in out_t]),
            torch.cat([torch.nn.functional.pad(w, (0, width - w.shape[1])) for w in out_w]))


def oracle_run(qs: QuerySet, index: BM25Index, doc_ids: list[str], max_steps: int, reward_k: int,
               weights: dict[str, float], expansion_weight: float = 1.0, top_k: int = 100) -> Run:
    terms, wts = oracle_rewrite(qs, index, max_steps, reward_k, weights, expansion_weight)
    scores, idx = index.search(terms, wts, k=top_k)
    return to_run(qs.qids, doc_ids, scores.cpu().numpy(), idx.cpu().numpy())
