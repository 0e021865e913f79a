"""GAE against hand-computed advantages, the id-only rollout buffer, and the PPO update (ratio 1 on fresh data,
bf16 autocast on the CPU, non-finite losses skipped then reported)."""

from __future__ import annotations

import pytest
import torch

from adaptive_ir.buffer import RolloutBuffer, compute_gae
from adaptive_ir.env import ReformulationEnv
from adaptive_ir.errors import AdaptiveIRError
from adaptive_ir.policy import Agent
from adaptive_ir.ppo import AmpContext, PPOSettings, ppo_update
from adaptive_ir.rollout import collect

from helpers import query_world

G, L = 0.9, 0.8


def test_gae_matches_hand_computed():
    # columns: A stops at t=1 of T=3; B is cut at T=3 (bootstrapped); C stops at t=0
    r = torch.tensor([[0.5, 0.1, 0.2], [0.0, 0.3, 99.0], [99.0, -0.2, 99.0]])  # 99: never happened
    v = torch.tensor([[0.4, 0.2, 0.6], [0.3, 0.1, 99.0], [99.0, 0.5, 99.0]])
    alive = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 1, 0]], dtype=torch.bool)
    term = torch.tensor([[0, 0, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    boot = torch.tensor([0.0, 0.7, 0.0])
    adv, ret = compute_gae(r, v, term, alive, boot, G, L)

    a1 = 0.0 - 0.3  # STOP: no future
    a0 = (0.5 + G * 0.3 - 0.4) + G * L * a1
    b2 = -0.2 + G * 0.7 - 0.5  # truncated: bootstrap V(s_T)
    b1 = 0.3 + G * 0.5 - 0.1 + G * L * b2
    b0 = 0.1 + G * 0.1 - 0.2 + G * L * b1
    c0 = 0.2 - 0.6
    expected = torch.tensor([[a0, b0, c0], [a1, b1, 0.0], [0.0, b2, 0.0]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, (expected + v) * alive)
    assert (adv[~alive] == 0).all() and (ret[~alive] == 0).all()


def test_gae_with_gamma_lambda_one_is_return_minus_value():
    r = torch.tensor([[1.0], [2.0], [3.0]])
    v = torch.tensor([[0.5], [0.25], [0.125]])
    alive = torch.ones(3, 1, dtype=torch.bool)
    adv, ret = compute_gae(r, v, torch.zeros(3, 1, dtype=torch.bool), alive, torch.tensor([4.0]), 1.0, 1.0)
    torch.testing.assert_close(ret[:, 0], torch.tensor([10.0, 9.0, 7.0]))
    torch.testing.assert_close(adv, ret - v)


def test_buffer_layout_nbytes_and_clear():
    steps, eps, m = 5, 64, 50
    buf = RolloutBuffer(steps, eps, m, "cpu")
    assert buf.chosen.shape == (steps, eps, m) and buf.chosen.dtype == torch.bool
    assert buf.qidx.dtype == buf.actions.dtype == torch.long
    assert buf.logprobs.dtype == buf.values.dtype == buf.rewards.dtype == torch.float32
    assert buf.alive.dtype == buf.terminated.dtype == torch.bool and buf.bootstrap.shape == (eps,)
    tensors = [v for v in vars(buf).values() if isinstance(v, torch.Tensor)]
    assert buf.nbytes == sum(t.numel() * t.element_size() for t in tensors)
    # a buffer copying each candidate's 384-d float32 embedding per transition would be ~this big
    assert buf.nbytes * 100 < steps * eps * m * 384 * 4
    for t in tensors:
        t.fill_(1)
    buf.alive[2, 3] = False
    assert buf.flat_valid().numel() == steps * eps - 1 and (2 * eps + 3) not in buf.flat_valid().tolist()
    buf.clear()
    assert all(not t.any() for t in tensors) and buf.flat_valid().numel() == 0


@pytest.fixture(scope="module")
def world():
    return query_world(24)


def rollout(world, dropout: float = 0.0, seed: int = 0):
    """A fresh agent and one collected batch of episodes, with GAE."""
    torch.manual_seed(seed)
    qs = world.qs
    agent = Agent(world.emb_dim, qs.cand_feats.shape[-1], max_steps=4, hidden_dim=16, num_heads=2,
                  dropout=dropout)
    agent.use_tables(world.tables)
    amp = AmpContext(torch.device("cpu"), enabled=False)
    env = ReformulationEnv(qs, world.retriever.index, max_steps=4, reward_k=40)
    buf = RolloutBuffer(4, 2 * len(qs), qs.max_candidates, "cpu")
    qidx = torch.arange(len(qs))
    gen = torch.Generator().manual_seed(seed)
    collect(agent, amp, qs, env, buf, qidx, 0, gen)
    collect(agent, amp, qs, env, buf, qidx, len(qs), gen)
    adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, buf.bootstrap, 0.99, 0.95)
    return agent, buf, adv, ret


def test_collect_fills_buffer_consistently(world):
    agent, buf, _, _ = rollout(world)
    # an episode acts at t only if it acted at t-1 without ending
    ended = buf.terminated | ~buf.alive
    assert not (buf.alive[1:] & ended[:-1]).any()
    # STOP is terminated, and never gets a reward; a bootstrap value only where the episode ran to the limit
    stop = buf.alive & (buf.actions == world.qs.max_candidates)
    assert torch.equal(stop, buf.terminated) and (buf.rewards[stop] == 0).all()
    assert torch.equal(buf.bootstrap != 0, buf.alive[-1] & ~buf.terminated[-1])


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_stored_logprobs_are_recomputed_exactly(world, dropout):
    agent, buf, adv, ret = rollout(world, dropout=dropout)
    idx = buf.flat_valid()
    steps, eps = buf.qidx.shape
    agent.eval()  # the update's forward must reproduce the rollout's; dropout is the only train/eval difference
    with torch.no_grad():
        logits, values = agent(world.qs, buf.qidx.reshape(-1)[idx], buf.chosen.reshape(-1, buf.chosen.shape[-1])[idx],
                               torch.div(idx, eps, rounding_mode="floor"))
    logp = torch.log_softmax(logits, 1).gather(1, buf.actions.reshape(-1)[idx, None]).squeeze(1)
    torch.testing.assert_close(logp, buf.logprobs.reshape(-1)[idx], atol=1e-5, rtol=0)
    torch.testing.assert_close(values, buf.values.reshape(-1)[idx], atol=1e-5, rtol=0)


def test_first_minibatch_ratio_is_one(world):
    agent, buf, adv, ret = rollout(world)
    opt = torch.optim.Adam(agent.parameters(), lr=1e-12)
    s = PPOSettings(epochs=1, minibatch_size=10 ** 6)  # one minibatch: the ratio before any step
    stats = ppo_update(agent, opt, AmpContext(torch.device("cpu"), False), buf, world.qs, adv, ret, s,
                       torch.Generator().manual_seed(0))
    assert stats["minibatches"] == 1 and stats["samples"] == buf.alive.sum()
    assert abs(stats["approx_kl"]) < 1e-6 and stats["clipfrac"] == 0.0
    # a real step moves the policy: the second epoch sees a ratio != 1
    stats = ppo_update(agent, torch.optim.Adam(agent.parameters(), lr=1e-2), AmpContext(torch.device("cpu"), False),
                       buf, world.qs, adv, ret, PPOSettings(epochs=2, minibatch_size=10 ** 6),
                       torch.Generator().manual_seed(0))
    assert stats["approx_kl"] > 1e-6


def test_bf16_autocast_on_cpu(world):
    agent, buf, adv, ret = rollout(world)
    amp = AmpContext(torch.device("cpu"), enabled=True, dtype="bfloat16")
    assert amp.enabled and amp.dtype == torch.bfloat16 and not amp.scaler.is_enabled()  # bf16 needs no scaler
    before = [p.detach().clone() for p in agent.parameters()]
    stats = ppo_update(agent, torch.optim.Adam(agent.parameters(), lr=1e-3), amp, buf, world.qs, adv, ret,
                       PPOSettings(epochs=1, minibatch_size=32), torch.Generator().manual_seed(0))
    for k in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert torch.isfinite(torch.tensor(stats[k])), k
    assert stats["nonfinite_skipped"] == 0 and stats["minibatches"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.parameters()))
    # "auto" on the CPU means off (CPU autocast is opt-in)
    assert not AmpContext(torch.device("cpu"), enabled=True, dtype="auto").enabled


class NaNValues(torch.nn.Module):
    """Runs the core but poisons the value of the first ``n`` calls (a stand-in for an fp16 overflow)."""

    def __init__(self, core, n):
        super().__init__()
        self.core, self.n, self.calls = core, n, 0

    def forward(self, *args):
        logits, values = self.core(*args)
        self.calls += 1
        return logits, (values * float("nan") if self.calls <= self.n else values)


def test_nonfinite_loss_is_skipped_and_counted(world):
    agent, buf, adv, ret = rollout(world)
    agent.parallelize(NaNValues(agent.core, n=1))
    before = [p.detach().clone() for p in agent.parameters()]
    s = PPOSettings(epochs=1, minibatch_size=10 ** 6, max_nonfinite=3)
    stats = ppo_update(agent, torch.optim.Adam(agent.parameters(), lr=1e-3), AmpContext(torch.device("cpu"), False),
                       buf, world.qs, adv, ret, s, torch.Generator().manual_seed(0))
    assert stats["nonfinite_skipped"] == 1 and stats["nonfinite_streak"] == 1 and stats["minibatches"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, agent.parameters()))  # no step on a NaN loss
    # a finite minibatch resets the streak
    stats = ppo_update(agent, torch.optim.Adam(agent.parameters(), lr=1e-3), AmpContext(torch.device("cpu"), False),
                       buf, world.qs, adv, ret, s, torch.Generator().manual_seed(0), nonfinite_streak=2)
    assert stats["nonfinite_skipped"] == 0 and stats["nonfinite_streak"] == 0 and stats["minibatches"] == 1


def test_repeated_nonfinite_loss_raises_with_advice(world):
    agent, buf, adv, ret = rollout(world)
    agent.parallelize(NaNValues(agent.core, n=10 ** 6))
    s = PPOSettings(epochs=4, minibatch_size=16, max_nonfinite=5)
    with pytest.raises(AdaptiveIRError, match="--no-amp") as err:
        ppo_update(agent, torch.optim.Adam(agent.parameters()), AmpContext(torch.device("cpu"), False), buf,
                   world.qs, adv, ret, s, torch.Generator().manual_seed(0))
    assert "5 minibatches in a row" in str(err.value)
    # the streak carries over between updates
    agent.parallelize(NaNValues(agent.core, n=1))
    with pytest.raises(AdaptiveIRError, match="learning_rate"):
        ppo_update(agent, torch.optim.Adam(agent.parameters()), AmpContext(torch.device("cpu"), False), buf,
                   world.qs, adv, ret, s, torch.Generator().manual_seed(0), nonfinite_streak=4)
