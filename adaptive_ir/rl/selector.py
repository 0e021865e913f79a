"""Fitting the start selector of a policy with a choice of start (``retrieval.start: choose``; ``StartSelector``).

Which start a query should take is a choice with full information on train queries: the env gives the metric the
policy reaches greedily from each (the query, and its RM3 expansion), so the selector is fitted as a cost-sensitive
classifier, not learned by policy gradient: a logistic regression on the standardised query features, each query
weighted by how much the choice matters to it (|metric from RM3 − metric from the query|; ties are left out), with
an L2 penalty. While PPO trains the selector is untrained (probability ½), so both starts are rolled out equally;
the trainer fits it for each dev evaluation and keeps it in the checkpoints it selects (``fitted_selector``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.hostsync import allowed_sync
from adaptive_ir.rl.env import ReformulationEnv
from adaptive_ir.rl.policy import Agent, StartSelector
from adaptive_ir.rl.rollout import greedy_rewrite

FORCE = 30.0
"""The selector's logit that forces a start (σ(30) = 1 − 1e-13)."""
L2 = 1e-2
"""The logistic regression's L2 penalty, on the weighted mean loss over standardised features."""


def _set(sel: StartSelector, weight, bias: float, mean=None, scale=None) -> None:
    with torch.no_grad():
        sel.linear.weight.copy_(torch.as_tensor(weight, dtype=torch.float32).reshape(sel.linear.weight.shape))
        sel.linear.bias.fill_(bias)
        sel.mean.copy_(torch.as_tensor(np.zeros(sel.mean.shape) if mean is None else mean, dtype=torch.float32))
        sel.scale.copy_(torch.as_tensor(np.ones(sel.scale.shape) if scale is None else scale, dtype=torch.float32))


def selector_of(agent: Agent) -> StartSelector:
    """The start selector of ``agent``'s network (a policy with a choice of start)."""
    sel = getattr(agent.core, "selector", None)
    if not isinstance(sel, StartSelector):
        raise TypeError("this policy has no start selector (retrieval.start: choose)")
    return sel


def reset_selector(sel: StartSelector) -> None:
    """Back to the untrained selector: probability ½ for every query."""
    _set(sel, np.zeros(sel.mean.shape[0]), 0.0)


@torch.no_grad()
def start_outcomes(agent: Agent, amp: AmpContext, env: ReformulationEnv, qidx: torch.Tensor, batch: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(metric from the query, metric from RM3) of the policy's greedy rewrites of queries ``qidx`` (a CPU tensor)
    over the scored ``env``, each start forced by the selector's logit."""
    sel = selector_of(agent)
    saved = {k: v.clone() for k, v in sel.state_dict().items()}
    out = []
    try:
        for logit in (-FORCE, FORCE):
            _set(sel, np.zeros(sel.mean.shape[0]), logit)
            metric = []
            for lo in range(0, len(qidx), batch):
                greedy_rewrite(agent, amp, env, qidx[lo:lo + batch])
                metric.append(env.metric.float().cpu())
            with allowed_sync():  # once per start, outside any rollout
                out.append(torch.cat(metric).numpy().astype(np.float64))
    finally:
        sel.load_state_dict(saved)
    return out[0], out[1]


def fit_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = L2, iterations: int = 50
                 ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """(weights, bias, mean, scale) of a weighted L2 logistic regression of ``y`` on ``x`` standardised by (mean,
    scale), by Newton's method (G + 1 unknowns)."""
    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 1e-8, scale, 1.0)
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = w / w.sum()
    beta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[-1] = 0.0  # the bias is not penalised
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-z @ beta))
        grad = z.T @ (w * (p - y)) + penalty * beta
        hess = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(beta))
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-10:
            break
    return beta[:-1], float(beta[-1]), mean, scale


def fit_gains(sel: StartSelector, x: np.ndarray, gain: np.ndarray) -> None:
    """Fit ``sel`` in place to queries with features ``x`` (Q, G) and ``gain`` (Q,), what RM3's start reaches minus
    what the query's does: the logistic regression on the queries where the start matters, each weighted by what
    is at stake; where one start is never worse, a constant forcing it."""
    decided = np.abs(gain) > 1e-9
    if decided.sum() < 2 or len(set((gain[decided] > 0).tolist())) < 2:
        _set(sel, np.zeros(x.shape[1]), FORCE if gain.sum() > 0 else -FORCE)
    else:
        _set(sel, *fit_logistic(x[decided], (gain[decided] > 0).astype(np.float64), np.abs(gain[decided])))


def fit_selector(agent: Agent, amp: AmpContext, parts: Sequence[tuple[ReformulationEnv, object, torch.Tensor]],
                 batch: int) -> dict[str, float]:
    """Fit ``agent``'s selector on the train queries of ``parts`` ((scored env, its embedding tables, query
    positions) per collection); returns what it was fitted on and how it chooses there."""
    feats, gains = [], []
    for env, tables, qidx in parts:
        agent.use_tables(tables)
        from_query, from_rm3 = start_outcomes(agent, amp, env, qidx, batch)
        assert env.qs.query_feats is not None  # a choice of start has them
        feats.append(env.qs.query_feats[qidx.to(env.device)].float().cpu().numpy().astype(np.float64))
        gains.append(from_rm3 - from_query)
    x, gain = np.concatenate(feats), np.concatenate(gains)
    sel = selector_of(agent)
    fit_gains(sel, x, gain)
    with torch.no_grad():
        switch = (sel(torch.as_tensor(x, dtype=torch.float32)) > 0).numpy()
    return {"queries": float(len(x)), "rm3_better": float((gain > 1e-9).sum()),
            "query_better": float((gain < -1e-9).sum()), "switched": float(switch.mean()),
            "gain": float(np.where(switch, gain, 0.0).mean())}


@contextmanager
def fitted_selector(agent: Agent, amp: AmpContext, parts: Sequence[tuple[ReformulationEnv, object, torch.Tensor]],
                    batch: int) -> Iterator[dict[str, float]]:
    """The selector fitted for the body (a dev evaluation, the checkpoint it keeps), then untrained again so that
    training goes on rolling out both starts equally."""
    stats = fit_selector(agent, amp, parts, batch)
    try:
        yield stats
    finally:
        reset_selector(selector_of(agent))


__all__ = ["fit_gains", "fit_logistic", "fit_selector", "fitted_selector", "reset_selector", "selector_of", "start_outcomes"]
