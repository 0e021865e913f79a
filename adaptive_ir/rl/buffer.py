"""The on-policy rollout buffer: preallocated once on the training device, time-major, ids not vectors."""

from __future__ import annotations

import torch


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor, alive: torch.Tensor,
                gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over real time steps, vectorised over episodes.

    All inputs are (T, E). ``alive[t]`` marks episodes that acted at step t; ``terminated[t]`` marks the last
    one, a STOP or the step that reached the limit (T: no action and so no reward can follow, and the step
    fraction is observed, so nothing is bootstrapped). Returns (advantages, returns), 0 where not alive.
    """
    steps = rewards.shape[0]
    adv = torch.zeros_like(rewards)
    next_value = next_adv = torch.zeros_like(rewards[0])
    for t in reversed(range(steps)):
        if t + 1 < steps:
            # an episode alive at t+1 continues into it; one that stopped at t has nothing after it
            cont = alive[t + 1].to(rewards.dtype)
            next_value = values[t + 1] * cont
            next_adv = adv[t + 1] * cont
        nonterminal = (~terminated[t]).to(rewards.dtype)
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        adv[t] = (delta + gamma * lam * nonterminal * next_adv) * alive[t]
    return adv, (adv + values) * alive


class RolloutBuffer:
    """Transitions of ``episodes`` lockstep episodes of at most ``steps`` steps with M candidates each."""

    def __init__(self, steps: int, episodes: int, num_candidates: int, device: str | torch.device):
        shape = (steps, episodes)
        self.qidx = torch.zeros(shape, dtype=torch.long, device=device)
        self.chosen = torch.zeros((*shape, num_candidates), dtype=torch.bool, device=device)
        self.started = torch.zeros(shape, dtype=torch.bool, device=device)
        """Whether the episode had switched to the other start (``retrieval.start: choose``) when it acted."""
        self.actions = torch.zeros(shape, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(shape, device=device)
        self.values = torch.zeros(shape, device=device)
        self.rewards = torch.zeros(shape, device=device)
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=device)
        self.alive = torch.zeros(shape, dtype=torch.bool, device=device)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._tensors())

    def _tensors(self):
        return (self.qidx, self.chosen, self.started, self.actions, self.logprobs, self.values, self.rewards,
                self.terminated, self.alive)

    def clear(self) -> None:
        """On-policy: nothing from an earlier update survives into the next."""
        for t in self._tensors():
            t.zero_()

    def flat_valid(self, count: int) -> torch.Tensor:
        """Flat (t * E + e) indices of the ``count`` transitions that happened (``count`` = alive.sum(), known to
        the caller from the rollout statistics: with it the size is static and no value is read)."""
        return torch.nonzero_static(self.alive.reshape(-1), size=count).squeeze(1)
