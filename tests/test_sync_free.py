"""No host-device synchronisation inside a rollout step or a PPO minibatch, proven on the CPU with the detector
(``adaptive_ir.common.hostsync``), which sees the sync primitives whatever the device. The env runs its accelerator mode
(fixed shapes; the CPU's compact mode reads counts on purpose). The detector itself is checked to catch what it
must, so the proof cannot pass vacuously."""

from __future__ import annotations

import pytest
import torch
from helpers import query_world

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.hostsync import HostSyncError, SyncDetector, allowed_sync
from adaptive_ir.rl.buffer import RolloutBuffer, compute_gae
from adaptive_ir.rl.env import ReformulationEnv
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.ppo import PPOSettings, make_optimizer, ppo_update
from adaptive_ir.rl.rollout import collect, greedy_rewrite


@pytest.fixture(scope="module")
def world():
    return query_world(24)


def test_detector_catches_the_sync_primitives():
    x = torch.arange(6.0)
    caught = {
        "item": lambda: x[0].item(), "if": lambda: bool(x[0] > 1), "int": lambda: int(x[1]), "float": lambda: float(x[1]),
        "tolist": lambda: x.tolist(), "cpu": lambda: x.cpu(), "numpy": lambda: x.numpy(), "nonzero": lambda: x.nonzero(),
        "mask": lambda: x[x > 2], "masked_select": lambda: x.masked_select(x > 2), "unique": lambda: x.unique(),
        "from host": lambda: torch.tensor([1, 2]), "repeat_interleave": lambda: x.repeat_interleave(x.long()),
        "equal": lambda: torch.equal(x, x), "format": lambda: f"{x[0]:.1f}", "range": lambda: range(x[2].long()),
    }
    for name, fn in caught.items():
        with pytest.raises(HostSyncError), SyncDetector():
            fn()
        with SyncDetector(raise_on_sync=False) as d:
            fn()
        assert len(d.events) == 1, (name, d.events)  # reported once, not per layer
    free = [lambda: torch.nonzero_static(x, size=2), lambda: x.repeat_interleave(x.long(), output_size=15),
            lambda: torch.where(x > 2, x, 0), lambda: x.topk(2), lambda: torch.full((2,), 3.0), lambda: x[1:3]]
    for fn in free:
        with SyncDetector():
            fn()
    with SyncDetector():
        with allowed_sync():
            x.tolist()


def agent_env_buffer(world, amp: AmpContext, compact: bool = False):
    torch.manual_seed(0)
    qs = world.qs
    # several expansion weights: the action decoding is on the path under test
    agent = Agent(world.emb_dim, qs.cand_feats.shape[-1], max_steps=4, hidden_dim=16, num_heads=2, num_layers=0,
                  levels=3)
    agent.core.init_stop_prior(3 * qs.max_candidates)
    agent.use_tables(world.tables)
    env = ReformulationEnv(qs, world.retriever.index, 4, 40, {"recall": 0.7, "mrr": 0.3}, (0.5, 1.0, 2.0),
                           compact=compact)
    buf = RolloutBuffer(4, 2 * len(qs), qs.max_candidates, "cpu")
    return agent, env, buf


@pytest.mark.parametrize("amp", [AmpContext(torch.device("cpu"), False),
                                 AmpContext(torch.device("cpu"), True, "float16")], ids=["fp32", "fp16+scaler"])
def test_collect_and_update_make_no_host_sync(world, amp):
    agent, env, buf = agent_env_buffer(world, amp)
    qidx = torch.arange(len(world.qs))
    gen = torch.Generator().manual_seed(0)
    with SyncDetector():
        s1 = collect(agent, amp, world.qs, env, buf, qidx, 0, gen)
        s2 = collect(agent, amp, world.qs, env, buf, qidx, len(qidx), gen)
        adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, 0.99, 0.95)
    # the caller's one read per collect phase
    samples = int(torch.cat([s1["length"], s2["length"]]).sum())
    assert samples == buf.alive.sum() > len(qidx)
    opt = make_optimizer(agent.parameters(), 1e-3)
    settings = PPOSettings(epochs=2, minibatch_size=16, target_kl=0.5)
    with SyncDetector(raise_on_sync=False) as d:
        # the accelerator's path: the KL stop is read once per epoch, in allowed_sync (the CPU reads it per minibatch)
        stats = ppo_update(agent, opt, amp, buf, world.qs, adv, ret, settings, torch.Generator().manual_seed(0),
                           samples, stop_check="epoch")
    assert d.events == []
    assert stats["minibatches"] > 0 and all(st["step"] > 0 for st in opt.state.values())
    assert amp.scaler.is_enabled() == (amp.enabled and amp.dtype == torch.float16)


def test_episode_start_and_step_make_no_host_sync_when_the_lanes_grow(world):
    # a batch larger than any before makes new lanes; starting it and stepping it read nothing from the device
    _, env, _ = agent_env_buffer(world, AmpContext(torch.device("cpu"), False))
    env.reset(torch.arange(4))
    with SyncDetector():
        env.reset(torch.arange(len(world.qs)).repeat(2))
        env.step(torch.zeros(2 * len(world.qs), dtype=torch.long))
        env.trial(torch.ones(2 * len(world.qs), dtype=torch.long))
    assert env.lanes.shape[0] == 2 * len(world.qs)


def test_greedy_rewrite_makes_no_host_sync(world):
    agent, env, _ = agent_env_buffer(world, AmpContext(torch.device("cpu"), False))
    with SyncDetector():
        greedy_rewrite(agent, AmpContext(torch.device("cpu"), False), env, torch.arange(len(world.qs)))


def test_compact_mode_reads_counts_and_the_detector_sees_it(world):
    # the CPU's default mode reads values on purpose (free on the CPU); the detector must notice
    agent, env, buf = agent_env_buffer(world, AmpContext(torch.device("cpu"), False), compact=True)
    with SyncDetector(raise_on_sync=False) as d:
        collect(agent, AmpContext(torch.device("cpu"), False), world.qs, env, buf, torch.arange(len(world.qs)), 0,
                torch.Generator().manual_seed(0))
    assert "aten::nonzero" in d.events and "Tensor.__bool__" in d.events


def test_a_choice_of_start_makes_no_host_sync():
    # retrieval.start = choose on the accelerator path: the switch rescores its episodes' lanes with fixed shapes,
    # the rollout stores who switched, the update and the greedy (kind-first) decision read nothing either
    from adaptive_ir.mining.query_features import QUERY_FEATURES

    world = query_world(24, start="choose")
    qs, amp = world.qs, AmpContext(torch.device("cpu"), False)
    torch.manual_seed(0)
    agent = Agent(world.emb_dim, qs.cand_feats.shape[-1], max_steps=4, hidden_dim=16, num_heads=2, num_layers=0,
                  levels=3, query_dim=len(QUERY_FEATURES))
    agent.core.init_stop_prior(3 * qs.max_candidates)
    agent.use_tables(world.tables)
    env = ReformulationEnv(qs, world.retriever.index, 4, 40, {"recall": 1.0}, (0.5, 1.0, 2.0), compact=False)
    buf = RolloutBuffer(4, len(qs), qs.max_candidates, "cpu")
    qidx = torch.arange(len(qs))
    with SyncDetector():
        s = collect(agent, amp, qs, env, buf, qidx, 0, torch.Generator().manual_seed(1))
        adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, 0.99, 0.95)
        greedy_rewrite(agent, amp, env, qidx)
    assert buf.started.any()  # some episodes switched, on the path under test
    opt, samples = make_optimizer(agent.parameters(), 1e-3), int(s["length"].sum())  # the caller's one read
    with SyncDetector(raise_on_sync=False) as d:
        ppo_update(agent, opt, amp, buf, qs, adv, ret, PPOSettings(epochs=1, minibatch_size=16),
                   torch.Generator().manual_seed(0), samples, stop_check="epoch")
    assert d.events == []
