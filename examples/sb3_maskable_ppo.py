"""Train sb3-contrib's MaskablePPO on the Gymnasium env, then measure its greedy policy as `adaptive-ir evaluate` does.

    python examples/sb3_maskable_ppo.py --config scifact --data-dir ../shared/datasets/scifact --total-steps 200000

Episodes start from the train split's queries (``gymnasium.make_vec("adaptive_ir/Reformulate-v0", ...)``, its
autoreset in Gymnasium's SameStep mode, which Stable-Baselines3's vector envs follow); the observation, the action
mask and the reward are the engine's own (docs/env.md). Ends by printing one JSON line:
``{"split", "env_steps", "agent": {"R@40", "nDCG@10"}, "bm25": {...}}`` for the greedy policy on dev
(``--split test`` for the test split). Needs ``pip install "adaptive-ir[envs]" sb3-contrib``.
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from sb3_contrib import MaskablePPO
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from adaptive_ir.envs import ENV_ID, ReformulateVectorEnv
from adaptive_ir.envs.evaluate import learner_report
from adaptive_ir.envs.gym_env import to_numpy


class SB3VecEnv(VecEnv):
    """A Gymnasium vector env (SameStep autoreset) as Stable-Baselines3's ``VecEnv``: the last observation of an
    episode goes to ``infos[i]["terminal_observation"]``, and ``env_method("action_masks")`` answers MaskablePPO."""

    def __init__(self, venv: ReformulateVectorEnv):
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self.venv = venv
        self._actions = np.zeros(venv.num_envs, np.int64)

    def reset(self):
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        obs, _ = self.venv.reset(seed=seed)
        self._reset_seeds()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self):
        obs, reward, terminated, truncated, info = self.venv.step(self._actions)
        infos: list[dict] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(info.get("_final_obs", np.zeros(self.num_envs, bool))):
            infos[i]["terminal_observation"] = {k: v[i] for k, v in info["final_obs"].items()}
        return obs, reward, terminated | truncated, infos

    def env_method(self, method_name: str, *args, indices=None, **kwargs):
        if method_name != "action_masks":
            raise AttributeError(f"{method_name}: only action_masks is forwarded")
        masks = self.venv.action_masks().astype(bool)
        return [masks[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices=None):
        return [getattr(self.venv, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value, indices=None) -> None:
        setattr(self.venv, attr_name, value)

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False for _ in self._get_indices(indices)]

    def close(self) -> None:
        pass


def train(env: SB3VecEnv, total_steps: int, n_steps: int = 32, seed: int = 0) -> MaskablePPO:
    """MaskablePPO over ``env`` for ``total_steps`` env steps (every env's steps counted)."""
    env.seed(seed)
    model = MaskablePPO("MultiInputPolicy", env, n_steps=n_steps, batch_size=256, n_epochs=4, learning_rate=3e-4,
                        gamma=1.0, seed=seed, device="cpu", verbose=0)
    return model.learn(total_timesteps=total_steps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="quickstart")
    p.add_argument("--data-dir", default=None, help="a BEIR folder (default: the config's own collection)")
    p.add_argument("--split", default="dev", help="where the greedy policy is measured (dev or test)")
    p.add_argument("--total-steps", type=int, default=20_000, help="env steps of training (all envs together)")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--n-steps", type=int, default=32, help="steps per env per PPO rollout")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--output-dir", default=None,
                   help="training.output_dir: its cache folder (index, candidates, embeddings) is reused by later runs")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    keys = {"training__output_dir": args.output_dir} if args.output_dir else {}
    venv = gym.make_vec(ENV_ID, num_envs=args.num_envs, config=args.config, data_dir=args.data_dir, device="cpu",
                        autoreset_mode=AutoresetMode.SAME_STEP, **keys)
    model = train(SB3VecEnv(venv), args.total_steps, args.n_steps, args.seed)

    def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        numpy_obs = to_numpy(obs)
        actions, _ = model.predict(numpy_obs, action_masks=numpy_obs["action_mask"].astype(bool), deterministic=True)
        return torch.as_tensor(actions)

    print(json.dumps(learner_report(args.config, args.data_dir, args.split, act, model.num_timesteps, **keys)))


if __name__ == "__main__":
    main()
