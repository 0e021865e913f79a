"""The qrels oracle (Nogueira & Cho 2017): greedy best-term selection *with* the qrels. Greedy, so a bound in practice
rather than in theory: a policy whose early terms pay only with later ones can pass it (seen by up to 0.02 R@40).

At each of the ``max_steps`` steps, every unchosen candidate is tried at every expansion weight (added to the episode's ranking and taken
back: ``ReformulationEnv.trial``) and the one that raises the reward metric most is kept; the rewrite stops when no
candidate raises it. Same candidates, same step budget and same reward as the agent, so agent gain / oracle gain is the share of the
gain the greedy oracle reaches that the agent takes. With a choice of start (``retrieval.start: choose``) the first
step also tries the switch to the other start (RM3), so the oracle is at least the per-query better of the query and
RM3.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from adaptive_ir.evaluation.metrics import Run, to_run
from adaptive_ir.retrieval.index import BM25Index
from adaptive_ir.rl.env import QuerySet, ReformulationEnv


@torch.no_grad()
def oracle_rewrite(qs: QuerySet, index: BM25Index, max_steps: int, reward_k: int, weights: dict[str, float],
                   expansion_weight: float | Sequence[float] = 1.0, batch_size: int = 64
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Final (terms, weights) of the greedy oracle for every query of ``qs``: the env's own episodes, each
    step trying every candidate (``ReformulationEnv.trial``) and taking the best one while it gains."""
    env = ReformulationEnv(qs, index, max_steps, reward_k, weights, expansion_weight)
    out_t, out_w = [], []
    m = env.switch
    for lo in range(0, len(qs), batch_size):
        env.reset(torch.arange(lo, min(len(qs), lo + batch_size)))
        for step in range(max_steps):
            legal = env.legal()[:, :m]
            score = env.trial_all().masked_fill(~legal, -1.0)
            if env.choice and step == 0:
                score = torch.cat([score, env.alt_metric[:, None]], 1)
            gain, slot = score.max(1)
            take = env.alive & (gain > env.metric + 1e-9)
            env.step(torch.where(take, slot, env.stop))  # the others stop
            if not take.any():
                break
        assert env.terms is not None  # set by reset
        out_t.append(env.terms.clone())
        out_w.append(env.weights.clone())
    return torch.cat(out_t), torch.cat(out_w)


def oracle_run(qs: QuerySet, index: BM25Index, doc_ids: list[str], max_steps: int, reward_k: int,
               weights: dict[str, float], expansion_weight: float | Sequence[float] = 1.0, top_k: int = 100) -> Run:
    terms, wts = oracle_rewrite(qs, index, max_steps, reward_k, weights, expansion_weight)
    scores, idx = index.search(terms, wts, k=top_k)
    return to_run(qs.qids, doc_ids, scores.cpu().numpy(), idx.cpu().numpy())
