"""Gymnasium front ends of the batched env: ``ReformulateVectorEnv`` (``num_envs`` episodes per step, each
restarting on its own) and ``ReformulateEnv`` (one episode, for ``gymnasium.make`` and ``check_env``).

**Observation** (a ``Dict``; M candidates, D embedding dimensions, F miner features, L expansion weights):
``query`` (D,) the query's embedding; ``candidates`` (M, D) its candidate terms' embeddings (zero rows past its
candidates); ``features`` (M, F) the miner's features of each candidate, as mined; ``valid`` (M,) which slots hold a
candidate; ``chosen`` (M,) those added so far; ``step`` the steps taken; ``action_mask`` (M·L + 1,) the legal actions;
with a choice of start (``retrieval.start: choose``) also ``query_features`` (G,) and ``switched``.
**Action**: ``Discrete(M·L + 1)``: action a < M·L adds candidate a // L at weight ``levels[a % L]``; M·L is STOP (with
a choice of start, ``Discrete(M·L + 2)``: M·L switches to RM3, legal at the first step, and M·L + 1 is STOP). An
action the mask forbids ends the episode as STOP does. **Reward**: the change of the reward metric (R@40 by default)
of the rewritten query's ranking, from the judgments, so an episode's return is metric(final) − metric(start).
**Episode end**: STOP, or the ``max_steps``-th step (terminal: the step is observed, there is nothing to
bootstrap), never a truncation. Episodes start from queries of the split drawn uniformly with the env's seed.
Autoreset as Gymnasium 1.x defines it: ``NextStep`` by default (the step after an episode ends starts the next one:
reward 0, its action ignored), or ``SameStep``, the first observation of the next episode returned with the last
one's in ``info["final_obs"]``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from adaptive_ir.config import Config
from adaptive_ir.envs.source import EnvSource

ENV_ID = "adaptive_ir/Reformulate-v0"


OBSERVATIONS = ("embeddings", "rows")
"""What an observation holds of the query and the candidates: their embeddings, or their rows in the env's
``query_table`` and ``term_table`` (a policy looks them up; the observation is then about 25× smaller)."""


def observation_space(src: EnvSource, observation: str = "embeddings") -> spaces.Dict:
    """One episode's observation space."""
    m, d, f = src.qs.max_candidates, src.tables.query.shape[1], src.qs.cand_feats.shape[2]
    box = lambda *shape: spaces.Box(-np.inf, np.inf, shape, np.float32)  # noqa: E731
    if observation == "rows":
        ids: dict[str, spaces.Space] = {"query_row": spaces.Discrete(src.tables.query.shape[0]),
                                        "candidate_rows": spaces.MultiDiscrete([src.tables.term.shape[0]] * m)}
    else:
        ids = {"query": box(d), "candidates": box(m, d)}
    qf = src.qs.query_feats
    choice = ({"query_features": box(qf.shape[1]), "switched": spaces.Discrete(2)}
              if src.env.choice and qf is not None else {})
    return spaces.Dict({**ids, "features": box(m, f), "valid": spaces.MultiBinary(m), "chosen": spaces.MultiBinary(m),
                        "step": spaces.Discrete(src.env.max_steps + 1),
                        "action_mask": spaces.MultiBinary(src.num_actions), **choice})


_INTEGERS = ("step", "query_row", "candidate_rows", "switched")


def to_numpy(obs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Observation tensors (fresh ones: ``EnvSource.observe``) as numpy arrays of the space's dtypes, without a copy
    where the dtype is already the space's."""
    out = {}
    for key, value in obs.items():
        value = value.detach().cpu()
        dtype = np.float32 if value.is_floating_point() else np.int64 if key in _INTEGERS else np.int8
        out[key] = value.numpy().astype(dtype, copy=False)
    return out


class ReformulateVectorEnv(VectorEnv):
    """``num_envs`` episodes in one batched env (see the module docstring); built by
    ``gymnasium.make_vec(ENV_ID, num_envs=B, data_dir=..., split=..., **config_keys)``."""

    def __init__(self, num_envs: int = 1, config: str | Config = "quickstart", data_dir: str | None = None,
                 split: str = "train", device: str | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, observation: str = "embeddings",
                 **overrides: Any):
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation={observation!r}: expected one of {', '.join(OBSERVATIONS)}")
        self.source = EnvSource.build(config, data_dir, split, device, **overrides)
        self.num_envs, self.rows = int(num_envs), observation == "rows"
        self.query_table = self.source.tables.query.cpu().numpy()
        """(queries, D) the split's query embeddings (``query_row`` indexes it)."""
        self.term_table = self.source.tables.term.cpu().numpy()
        """(terms + 1, D) the candidate terms' embeddings, a zero row last (``candidate_rows`` index it)."""
        self.metadata = {"autoreset_mode": AutoresetMode(autoreset_mode)}
        self.single_observation_space = observation_space(self.source, observation)
        self.single_action_space = spaces.Discrete(self.source.num_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        self._ended = np.zeros(self.num_envs, dtype=bool)
        self._rng = np.random.default_rng()

    def _draw(self, n: int) -> torch.Tensor:
        """Query positions of ``n`` new episodes (a CPU tensor)."""
        return torch.from_numpy(self._rng.integers(0, len(self.source.qs), n))

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed[0] if isinstance(seed, list) else seed)
            self.single_action_space.seed(seed[0] if isinstance(seed, list) else seed)
        self.source.env.reset(self._draw(self.num_envs))
        self._ended[:] = False
        return to_numpy(self.source.observe(self.rows)), {}

    def step(self, actions: np.ndarray):
        src = self.source
        acts = torch.as_tensor(np.asarray(actions, dtype=np.int64)).to(src.env.device)
        reward_t, terminated_t = src.env.step(src.legalize(acts))
        reward = reward_t.cpu().numpy().astype(np.float32)
        terminated = terminated_t.cpu().numpy().copy()
        same_step = self.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        info: dict[str, Any] = {}
        if same_step and terminated.any():
            info = {"final_obs": to_numpy(src.observe(self.rows)), "_final_obs": terminated.copy()}
        restart = terminated if same_step else self._ended  # NextStep: the episodes that ended at the last step
        if restart.any():
            rows = np.flatnonzero(restart)
            src.env.restart(torch.from_numpy(rows), self._draw(len(rows)))
        if not same_step:
            self._ended = terminated
        return to_numpy(src.observe(self.rows)), reward, terminated, np.zeros(self.num_envs, dtype=bool), info

    def action_masks(self) -> np.ndarray:
        """(num_envs, M·L + 1) the legal actions (what sb3-contrib's MaskablePPO asks an env for)."""
        return self.source.env.legal().cpu().numpy().copy()


class ReformulateEnv(gym.Env):
    """One episode at a time over the batched env (``gymnasium.make(ENV_ID, ...)``): what Gymnasium's
    ``check_env`` and single-env code expect."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, config: str | Config = "quickstart", data_dir: str | None = None, split: str = "train",
                 device: str | None = None, observation: str = "embeddings", **overrides: Any):
        self.vec = ReformulateVectorEnv(1, config, data_dir, split, device, AutoresetMode.DISABLED, observation,
                                        **overrides)
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.vec._rng = self.np_random  # the episode's query drawn with Gymnasium's own seeded generator
        obs, info = self.vec.reset()
        return {k: v[0] for k, v in obs.items()}, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.vec.step(np.asarray([action]))
        return {k: v[0] for k, v in obs.items()}, float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def action_masks(self) -> np.ndarray:
        return self.vec.action_masks()[0]


def register() -> None:
    """``ENV_ID`` in Gymnasium's registry, single and vector (done on ``import adaptive_ir.envs``)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=ReformulateEnv, vector_entry_point=ReformulateVectorEnv)


__all__ = ["ENV_ID", "OBSERVATIONS", "ReformulateEnv", "ReformulateVectorEnv", "observation_space", "register"]
