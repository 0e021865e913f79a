"""A warm start before PPO: the first step's expected reward, with every action's reward known.

At an episode's first step the env can say what each candidate would earn (``ReformulationEnv.trial``: the term
added to the ranking and taken back), so on a seeded sample of train queries the policy's expected first-step
reward is known exactly and is maximised directly: the all-action policy gradient, no sampling and no variance.
The objective is the expected reward of the term the policy would add, Σ_a π(a | q0, not STOP) · r(a): which term
to add, whether to add one at all being left to PPO. With STOP inside the softmax the optimum is found by first
making STOP likely wherever the average term hurts, after which the terms get no gradient (measured on WikiCAR,
where 2 % of the candidates raise R@40 and 4 % lower it: the warm-started policy only stopped); sampled PPO
updates fall into the same trap. PPO then goes on from the warm-started policy, over every step.
"""

from __future__ import annotations

import torch
from torch import nn

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.hostsync import allowed_sync
from adaptive_ir.rl.env import ReformulationEnv, per_action
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.rollout import greedy_actions


@torch.no_grad()
def first_step_gains(env: ReformulationEnv, qidx: torch.Tensor, batch: int) -> torch.Tensor:
    """(N, A − 1) reward of taking each action but STOP as the first action of an episode of query ``qidx[i]`` (a
    CPU tensor), 0 where the candidate slot is empty: M·L terms, and the switch to the other start when the env
    has one. ``batch`` episodes at a time (the env's lanes)."""
    out = []
    for lo in range(0, qidx.shape[0], batch):
        env.reset(qidx[lo:lo + batch])
        legal = env.legal()[:, :env.switch]
        base = env.metric.clone()
        gains = (env.trial_all() - base[:, None]) * legal
        out.append(torch.cat([gains, (env.alt_metric - base)[:, None]], 1) if env.choice else gains)
    return torch.cat(out) if out else torch.zeros((0, env.stop), device=env.device)


def warm_start(agent: Agent, optimizer: torch.optim.Optimizer, amp: AmpContext, env: ReformulationEnv,
               qidx: torch.Tensor, gains: torch.Tensor, epochs: int, minibatch: int, entropy_coef: float,
               max_grad_norm: float, generator: torch.Generator) -> dict[str, float]:
    """Maximise the expected first-step reward of queries ``qidx`` (N,) (on the env's device) with their
    ``first_step_gains`` (N, M·L, and the switch's), ``epochs`` passes in minibatches of static size (padding
    weighs 0). The gains are divided by their spread over real candidates, so the step size does not depend on the
    metric's scale.
    Returns, before and after, the expected reward of the term the policy would add and the reward of its most
    likely term (STOP aside), and the expected and greedy first-step reward (STOP included)."""
    qs, device, terms = env.qs, gains.device, env.switch
    n = qidx.shape[0]
    legal = per_action(qs.cand_valid[qidx], env.L)
    padded = torch.cat([gains, torch.zeros_like(gains[:, :1])], 1)  # STOP earns 0
    gains = gains[:, :terms]  # which term: STOP is left to PPO, the switch to the fitted selector
    scale = gains[legal].std(correction=0).clamp(min=1e-6)  # not NaN with a single legal gain
    size = max(1, min(minibatch, n))
    batches = -(-n // size)
    weight = (torch.arange(batches * size, device=device) < n).float().view(batches, size)
    pad = torch.zeros(batches * size - n, dtype=torch.long, device=device)
    params = [p for p in agent.parameters() if p.requires_grad]

    def policy(rows: torch.Tensor) -> torch.Tensor:
        q = qidx[rows]
        chosen = torch.zeros(qs.cand_valid[q].shape, dtype=torch.bool, device=device)
        with amp.autocast():
            logits, _ = agent(agent.episode_inputs(qs, q), chosen, torch.zeros(rows.shape, device=device),
                              parallel=True)
        return torch.log_softmax(logits.float(), dim=1)

    @torch.no_grad()
    def measure() -> list[float]:
        sums = torch.zeros(4, device=device)
        for lo in range(0, n, size):
            rows = torch.arange(lo, min(n, lo + size), device=device)
            logp = policy(rows)
            top, best = logp[:, :terms].argmax(1), greedy_actions(logp, terms if env.choice else None)
            sums += torch.stack([(torch.softmax(logp[:, :terms], 1) * gains[rows]).sum(),
                                 gains[rows].gather(1, top[:, None]).sum(), (logp.exp() * padded[rows]).sum(),
                                 padded[rows].gather(1, best[:, None]).sum()])
        with allowed_sync():  # one read per measurement, before and after
            return (sums / max(n, 1)).tolist()

    agent.eval()  # no train-only behaviour: the same network PPO's rollouts then sample from
    before = measure()
    try:
        for _ in range(epochs):
            order = torch.cat([torch.randperm(n, generator=generator, device=device), pad]).view(batches, size)
            for mb, w in zip(order, weight):
                logp = torch.log_softmax(policy(mb)[:, :terms], dim=1)  # the term to add: STOP aside
                p = logp.exp()
                reward = (p * gains[mb]).sum(1) / scale
                entropy = -(p * logp.masked_fill(p == 0, 0.0)).sum(1)
                loss = -((reward + entropy_coef * entropy) * w).sum() / w.sum().clamp(min=1)
                optimizer.zero_grad(set_to_none=True)
                amp.scaler.scale(loss).backward()
                amp.scaler.unscale_(optimizer)
                norm = nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
                # a non-finite step is skipped on the device; Optimizer's stub lacks the attribute the fused
                # step reads (torch's GradScaler ignores the same)
                optimizer.found_inf = (~torch.isfinite(norm)).float()  # type: ignore[attr-defined]
                optimizer.step()
                amp.scaler.update()
    finally:
        optimizer.__dict__.pop("found_inf", None)
    after = measure()
    names = ("term_expected", "term_best", "expected", "greedy")
    return {**{f"{k}_before": v for k, v in zip(names, before)}, **{f"{k}_after": v for k, v in zip(names, after)},
            "queries": n}
