"""Rollouts: sampled episodes into the buffer (training) and greedy rewrites (evaluation, inference)."""

from __future__ import annotations

import math

import torch

from .buffer import RolloutBuffer
from .env import QuerySet, ReformulationEnv
from .policy import Agent
from .ppo import AmpContext


def greedy_actions(logp: torch.Tensor) -> torch.Tensor:
    """Deterministic actions from (B, M+1) log-probs (STOP last), in two stages: STOP when P(STOP) > ½, else the
    most likely term. A plain argmax over M+1 actions stops whenever P(STOP) beats every single term, even when
    continuing is far more likely than stopping."""
    stop = logp[:, -1] > math.log(0.5)
    return torch.where(stop, logp.shape[1] - 1, logp[:, :-1].argmax(1))


@torch.no_grad()
def policy_step(agent: Agent, amp: AmpContext, qs: QuerySet, env: ReformulationEnv,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batched forward for every episode: (actions, log-probs, values). Greedy when generator is None."""
    step = torch.full_like(env.qidx, env.t)
    with amp.autocast():
        logits, values = agent(qs, env.qidx, env.chosen, step)
    logp_all = torch.log_softmax(logits.float(), dim=1)
    if generator is None:
        actions = greedy_actions(logp_all)
    else:
        # sampled on the CPU generator so a seed gives the same actions on every device
        actions = torch.multinomial(logp_all.exp().cpu(), 1, generator=generator).squeeze(1).to(logits.device)
    return actions, logp_all.gather(1, actions[:, None]).squeeze(1), values.float()


@torch.no_grad()
def collect(agent: Agent, amp: AmpContext, qs: QuerySet, env: ReformulationEnv, buf: RolloutBuffer,
            qidx: torch.Tensor, column: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Roll out episodes for ``qidx`` (B,) into buffer columns ``column:column+B``; returns per-episode stats."""
    agent.eval()  # dropout off: rollout log-probs must be those the update recomputes
    env.reset(qidx)
    cols = slice(column, column + qidx.shape[0])
    start = env.metric.clone()
    length = torch.zeros_like(qidx)
    for t in range(env.max_steps):
        if not env.alive.any():
            break
        buf.qidx[t, cols] = qidx
        buf.chosen[t, cols] = env.chosen
        buf.alive[t, cols] = env.alive
        actions, logp, values = policy_step(agent, amp, qs, env, generator)
        buf.actions[t, cols], buf.logprobs[t, cols], buf.values[t, cols] = actions, logp, values
        length += env.alive.long()
        reward, terminated, truncated = env.step(actions)
        buf.rewards[t, cols], buf.terminated[t, cols] = reward, terminated
        if truncated.any():
            # cut by the step limit, not ended: GAE bootstraps from V(s_T)
            rows = truncated.nonzero().squeeze(1)
            with amp.autocast():
                _, v = agent(qs, qidx[rows], env.chosen[rows], torch.full_like(rows, env.t))
            buf.bootstrap[column + rows] = v.float()
    return {"return": env.metric - start, "final_metric": env.metric, "length": length.float()}


@torch.no_grad()
def greedy_rewrite(agent: Agent, amp: AmpContext, env: ReformulationEnv, qidx: torch.Tensor,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewrite queries ``qidx`` greedily (or sampled, for query variants): final (terms, weights) tensors."""
    agent.eval()
    env.reset(qidx)
    while env.alive.any():
        actions, _, _ = policy_step(agent, amp, env.qs, env, generator)
        env.step(actions)
    return env.terms, env.weights
