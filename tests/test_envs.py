"""The standard-RL front ends: Gymnasium's checker and TorchRL's spec check pass; seeds are honoured; and the rewards
an outside learner (sb3-contrib's MaskablePPO, TorchRL's PPO loss) receives are exactly the engine's, each episode
replayed on its own on a fresh batched env."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")
pytest.importorskip("torchrl")

from gymnasium.utils.env_checker import check_env  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402

from adaptive_ir.envs import ENV_ID, EnvSource  # noqa: E402
from adaptive_ir.rl.env import ReformulationEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def keys(tmp_path) -> dict[str, object]:
    """Config keys for a small, private run of the quick start's collection."""
    return {"training__output_dir": str(tmp_path / "runs" / "x"), "data__max_train_queries": 40}


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    """Every step the batched env takes: which query each row plays, the actions applied, the rewards."""

    def __init__(self, env: ReformulationEnv):
        self.env, self.log = env, []
        step = env.step

        def recording(actions):
            qidx, alive = env.qidx.clone(), env.alive.clone()
            reward, terminated = step(actions)
            self.log.append((qidx, alive, actions.clone(), reward.clone(), terminated.clone()))
            return reward, terminated

        env.step = recording

    def episodes(self) -> list[tuple[int, list[int], list[float]]]:
        """(query position, actions, rewards) of every episode that ended, per row in order of steps."""
        out, open_ = [], {}
        for qidx, alive, actions, reward, terminated in self.log:
            for row in np.flatnonzero(alive.numpy()).tolist():
                ep = open_.setdefault(row, (int(qidx[row]), [], []))
                ep[1].append(int(actions[row]))
                ep[2].append(float(reward[row]))
                if terminated[row]:
                    out.append(open_.pop(row))
        return out

    def replay_matches(self, source: EnvSource) -> int:
        """Replays each episode alone on a fresh env over the same queries; asserts equal rewards, bit for bit."""
        episodes = self.episodes()
        for q, actions, rewards in episodes:
            fresh = ReformulationEnv(source.qs, source.ws.retriever.index, self.env.max_steps, self.env.reward_k,
                                     self.env.reward_weights, self.env.levels)
            fresh.reset(torch.tensor([q]))
            got = [float(fresh.step(torch.tensor([a]))[0][0]) for a in actions]
            assert got == rewards, (q, actions)
            assert not fresh.alive.any()  # the episode ended where it ended
        return len(episodes)


def test_gymnasium_checker_passes_and_registration_makes_both_forms(keys):
    env = gym.make(ENV_ID, **keys)
    check_env(env.unwrapped, skip_render_check=True)
    venv = gym.make_vec(ENV_ID, num_envs=5, **keys)
    obs, _ = venv.reset(seed=0)
    assert venv.observation_space.contains(obs) and obs["action_mask"].shape[0] == 5
    m, levels = obs["valid"].shape[1], len(venv.unwrapped.source.cfg.retrieval.levels)
    assert venv.single_action_space.n == m * levels + 1


def test_same_seed_same_episodes_and_next_step_autoreset(keys):
    def run(seed: int):
        venv = gym.make_vec(ENV_ID, num_envs=6, **keys)
        obs, _ = venv.reset(seed=seed)
        rng, seen = np.random.default_rng(1), [obs]
        for _ in range(14):
            mask = obs["action_mask"].astype(bool)
            acts = np.array([rng.choice(np.flatnonzero(row)) for row in mask])
            obs, reward, terminated, truncated, _ = venv.step(acts)
            seen.append((obs, reward, terminated))
            assert not truncated.any()
            if _ and (ended := seen[-2][2]).any():  # NextStep: the step after the end starts the next episode
                assert (reward[ended] == 0).all() and not terminated[ended].any() and (obs["step"][ended] == 0).all()
        return seen

    a, b, c = run(3), run(3), run(4)
    assert all(np.array_equal(x[1], y[1]) and np.array_equal(x[0]["query"], y[0]["query"]) for x, y in zip(a[1:], b[1:]))
    assert not np.array_equal(a[0]["query"], c[0]["query"])  # another seed, other queries


def test_same_step_autoreset_returns_the_final_observation(keys):
    venv = gym.make_vec(ENV_ID, num_envs=4, autoreset_mode=AutoresetMode.SAME_STEP, **keys)
    obs, _ = venv.reset(seed=0)
    stop = venv.single_action_space.n - 1
    obs, reward, terminated, _, info = venv.step(np.full(4, stop))
    assert terminated.all() and (reward == 0).all() and info["_final_obs"].all()
    assert (obs["step"] == 0).all() and (info["final_obs"]["step"] == 1).all()  # STOP at once: one step taken


def test_maskable_ppo_receives_the_engines_rewards(keys):
    sb3 = example("sb3_maskable_ppo")
    venv = gym.make_vec(ENV_ID, num_envs=8, autoreset_mode=AutoresetMode.SAME_STEP, **keys).unwrapped
    recorder = Recorder(venv.source.env)
    received = []

    class Seen(sb3.SB3VecEnv):
        def step_wait(self):
            out = super().step_wait()
            received.append(out[1].copy())
            return out

    model = sb3.train(Seen(venv), total_steps=256, n_steps=32)
    assert model.num_timesteps == 256 == 8 * len(received)
    # what the learner got is the env's reward of each step, as is
    assert all(np.array_equal(r, log[3].numpy()) for r, log in zip(received, recorder.log, strict=True))
    assert recorder.replay_matches(venv.source) >= 16


def test_torchrl_specs_and_ppo_receive_the_engines_rewards(keys):
    from torchrl.envs.utils import check_env_specs

    from adaptive_ir.envs.torchrl_env import ReformulateTorchRLEnv

    env = ReformulateTorchRLEnv(8, **keys)
    env.set_seed(0)
    check_env_specs(env)
    recorder = Recorder(env.source.env)
    received = []
    step = env._step

    def seen(tensordict):
        out = step(tensordict)
        received.append(out["reward"].clone())
        return out

    env._step = seen
    _, steps = example("torchrl_ppo").train(env, total_steps=256, n_steps=16, epochs=1, minibatch=64)
    assert steps == 256 == 8 * len(received)
    assert all(torch.equal(r[:, 0], log[3]) for r, log in zip(received, recorder.log, strict=True))
    assert recorder.replay_matches(env.source) >= 16


def test_rows_observation_indexes_the_same_embeddings(keys):
    full = gym.make_vec(ENV_ID, num_envs=4, **keys)
    rows = gym.make_vec(ENV_ID, num_envs=4, observation="rows", **keys)
    check_env(gym.make(ENV_ID, observation="rows", **keys).unwrapped, skip_render_check=True)
    a, _ = full.reset(seed=2)
    b, _ = rows.reset(seed=2)
    for _ in range(6):
        table = rows.unwrapped
        assert np.array_equal(table.query_table[b["query_row"]], a["query"])
        assert np.array_equal(table.term_table[b["candidate_rows"]], a["candidates"])
        assert all(np.array_equal(a[k], b[k]) for k in ("features", "valid", "chosen", "step", "action_mask"))
        acts = np.array([np.flatnonzero(m)[0] for m in a["action_mask"]])
        a, ra, *_ = full.step(acts)
        b, rb, *_ = rows.step(acts)
        assert np.array_equal(ra, rb)


def test_a_policy_that_stops_at_once_reports_bm25(keys):
    # the report's agent row is the rewrites searched, so rewriting nothing is BM25 itself
    from adaptive_ir.common.measures import HEADLINE
    from adaptive_ir.envs.evaluate import learner_report

    def stop(obs):
        return torch.full((obs["action_mask"].shape[0],), obs["action_mask"].shape[1] - 1)

    report = learner_report("quickstart", None, "dev", stop, 123, **keys)
    assert report["split"] == "dev" and report["env_steps"] == 123
    assert set(report["agent"]) == set(HEADLINE) and report["agent"] == report["bm25"]
    assert 0 < report["bm25"]["R@40"] < 1


def test_a_choice_of_start_shows_in_both_front_ends(keys):
    # retrieval.start = choose: one more action (the switch to RM3, legal at the first step), the query features
    # and the switched flag in the observation; the checkers pass and the switch's reward is the engine's
    from torchrl.envs.utils import check_env_specs

    from adaptive_ir.envs.torchrl_env import ReformulateTorchRLEnv

    keys = {**keys, "retrieval__start": "choose"}
    env = gym.make(ENV_ID, **keys)
    check_env(env.unwrapped, skip_render_check=True)
    venv = gym.make_vec(ENV_ID, num_envs=4, **keys)
    obs, _ = venv.reset(seed=0)
    m, levels = obs["valid"].shape[1], len(venv.unwrapped.source.cfg.retrieval.levels)
    assert venv.single_action_space.n == m * levels + 2
    assert obs["action_mask"][:, m * levels].all() and not obs["switched"].any()
    engine = venv.unwrapped.source.env
    recorder, before = Recorder(engine), engine.metric.clone()
    obs, reward, *_ = venv.step(np.full(4, m * levels))
    assert obs["switched"].all() and not obs["action_mask"][:, m * levels].any()
    torch.testing.assert_close(torch.as_tensor(reward, dtype=torch.float32), engine.alt_metric - before)
    venv.step(np.full(4, m * levels + 1))  # STOP: each episode was its query's RM3
    assert recorder.replay_matches(venv.unwrapped.source) == 4
    check_env_specs(ReformulateTorchRLEnv(4, **keys))
