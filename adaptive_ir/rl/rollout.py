"""Rollouts: sampled episodes into the buffer (training) and greedy rewrites (evaluation, inference).

On an accelerator a collect round runs exactly ``max_steps`` lockstep steps whatever the episodes do (ended ones
are masked), and samples on the device (Gumbel-max with a generator living there), so a round needs no value on the
host: the Python loop only queues kernels. The CPU's compact mode, where a read is free, forwards only the episodes
still running and ends the round when none is. The same seed gives the same actions on the same kind of device.
"""

from __future__ import annotations

import math

import torch

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.rl.buffer import RolloutBuffer
from adaptive_ir.rl.env import QuerySet, ReformulationEnv
from adaptive_ir.rl.policy import Agent, EpisodeInputs


def greedy_actions(logp: torch.Tensor, switch: int | None = None) -> torch.Tensor:
    """Deterministic actions from (B, A+1) log-probs (STOP last), in stages, as the policy is factorised: with a
    choice of start (``switch``: the switch's index), the switch when its probability is above ½ (the selector's
    decision); then STOP when it is likelier than adding a term (without a switch: P(STOP) > ½), else the most
    likely (term, weight). A plain argmax over all actions stops (or switches) whenever that one action beats every
    single term, even when adding a term is far more likely."""
    if switch is None:
        stop = logp[:, -1] > math.log(0.5)
        return torch.where(stop, logp.shape[1] - 1, logp[:, :-1].argmax(1))
    p_term, p_stop = torch.logsumexp(logp[:, :switch], dim=1), logp[:, -1]
    rest = torch.where(p_stop > p_term, logp.shape[1] - 1, logp[:, :switch].argmax(1))
    return torch.where(logp[:, switch] > math.log(0.5), switch, rest)


def sample_actions(logp: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One action per row of (B, A) log-probs, drawn on their device: argmax(logp + Gumbel noise) is a sample
    of the categorical distribution (Gumbel-max). A noise of −inf (from u = 0) only ever loses."""
    u = torch.rand(logp.shape, generator=generator, device=logp.device)
    return (logp - u.log_().neg_().log_()).argmax(1)


@torch.no_grad()
def policy_step(agent: Agent, amp: AmpContext, ep: EpisodeInputs, env: ReformulationEnv, step: torch.Tensor,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batched forward for every episode: (actions, log-probs, values). Greedy when generator is None.

    In the env's compact (CPU) mode the forward skips the episodes that ended (their action is STOP, their
    log-prob and value 0: the env ignores them and the buffer masks them)."""
    rows = env.alive.nonzero().squeeze(1) if env.compact else None
    chosen, started = env.chosen, env.started
    if rows is not None:
        ep, chosen, step, started = EpisodeInputs(*(x[rows] for x in ep)), chosen[rows], step[rows], started[rows]
    with amp.autocast():
        logits, values = agent(ep, chosen, step, started)
    logp_all = torch.log_softmax(logits.float(), dim=1)
    actions = (greedy_actions(logp_all, env.switch if env.choice else None) if generator is None
               else sample_actions(logp_all, generator))
    logp, values = logp_all.gather(1, actions[:, None]).squeeze(1), values.float()
    if rows is not None:
        b = env.alive.shape[0]
        actions = torch.full((b,), env.stop, device=rows.device).index_copy_(0, rows, actions)
        logp, values = (torch.zeros(b, device=rows.device).index_copy_(0, rows, x) for x in (logp, values))
    return actions, logp, values


def step_counters(env: ReformulationEnv, batch: int) -> list[torch.Tensor]:
    """The step index as a (B,) tensor for each step of a round, made once per round."""
    steps = torch.arange(env.max_steps, device=env.device)
    return [steps[t].expand(batch) for t in range(env.max_steps)]


@torch.no_grad()
def collect(agent: Agent, amp: AmpContext, qs: QuerySet, env: ReformulationEnv, buf: RolloutBuffer,
            qidx: torch.Tensor, column: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Roll out episodes for ``qidx`` (B,) (a CPU tensor) into buffer columns ``column:column+B``; returns
    per-episode stats as device tensors (read by the caller once per round or less)."""
    agent.eval()
    env.reset(qidx)
    b = qidx.shape[0]
    cols = slice(column, column + b)
    ep = agent.episode_inputs(qs, env.qidx)
    start = env.metric.clone()
    buf.qidx[:, cols] = env.qidx
    for t, step in enumerate(step_counters(env, b)):
        if env.compact and not env.alive.any():
            break  # compact (CPU) mode reads values anyway, and the remaining steps would all be masked
        buf.chosen[t, cols] = env.chosen
        buf.started[t, cols] = env.started
        buf.alive[t, cols] = env.alive
        actions, logp, values = policy_step(agent, amp, ep, env, step, generator)
        buf.actions[t, cols], buf.logprobs[t, cols], buf.values[t, cols] = actions, logp, values
        reward, terminated = env.step(actions)
        buf.rewards[t, cols], buf.terminated[t, cols] = reward, terminated
    length = buf.alive[:, cols].sum(0)
    return {"return": env.metric - start, "final_metric": env.metric, "length": length.float(),
            "switched": env.started.float()}


@torch.no_grad()
def greedy_rewrite(agent: Agent, amp: AmpContext, env: ReformulationEnv, qidx: torch.Tensor,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewrite queries ``qidx`` (a CPU tensor) greedily (or sampled, for query variants): final (terms, weights)."""
    agent.eval()
    env.reset(qidx)
    ep = agent.episode_inputs(env.qs, env.qidx)
    for step in step_counters(env, qidx.shape[0]):
        if env.compact and not env.alive.any():
            break
        actions, _, _ = policy_step(agent, amp, ep, env, step, generator)
        env.step(actions)
    assert env.terms is not None  # set by reset
    return env.terms, env.weights
