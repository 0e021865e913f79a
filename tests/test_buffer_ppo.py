"""GAE against hand-computed advantages (the step limit is terminal), the id-only rollout buffer, and the PPO
update (ratio 1 on fresh data, with dropout configured too; bf16 autocast on the CPU; non-finite minibatches
skipped on the device, optimizer state untouched, then reported)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import default_collection, query_world, tiny_config

from adaptive_ir.common.amp import AmpContext, native_bf16
from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.rl.buffer import RolloutBuffer, compute_gae
from adaptive_ir.rl.env import ReformulationEnv
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.ppo import PPOSettings, make_optimizer, ppo_update
from adaptive_ir.rl.rollout import collect
from adaptive_ir.training.trainer import Trainer

CPU_FP32 = AmpContext(torch.device("cpu"), False)

G, L = 0.9, 0.8


def test_gae_matches_hand_computed():
    # columns: A stops at t=1 of T=3; B reaches the limit T=3 (terminal: V(s_T) = 0); C stops at t=0
    r = torch.tensor([[0.5, 0.1, 0.2], [0.0, 0.3, 99.0], [99.0, -0.2, 99.0]])  # 99: never happened
    v = torch.tensor([[0.4, 0.2, 0.6], [0.3, 0.1, 99.0], [99.0, 0.5, 99.0]])
    alive = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 1, 0]], dtype=torch.bool)
    term = torch.tensor([[0, 0, 1], [1, 0, 0], [0, 1, 0]], dtype=torch.bool)
    adv, ret = compute_gae(r, v, term, alive, G, L)

    a1 = 0.0 - 0.3  # STOP: no future
    a0 = (0.5 + G * 0.3 - 0.4) + G * L * a1
    b2 = -0.2 - 0.5  # the last possible step: no future either
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
    term = torch.tensor([[False], [False], [True]])
    adv, ret = compute_gae(r, v, term, alive, 1.0, 1.0)
    torch.testing.assert_close(ret[:, 0], torch.tensor([6.0, 5.0, 3.0]))
    torch.testing.assert_close(adv, ret - v)


def test_buffer_layout_nbytes_and_clear():
    steps, eps, m = 5, 64, 50
    buf = RolloutBuffer(steps, eps, m, "cpu")
    assert buf.chosen.shape == (steps, eps, m) and buf.chosen.dtype == torch.bool
    assert buf.qidx.dtype == buf.actions.dtype == torch.long
    assert buf.logprobs.dtype == buf.values.dtype == buf.rewards.dtype == torch.float32
    assert buf.alive.dtype == buf.terminated.dtype == torch.bool
    tensors = [v for v in vars(buf).values() if isinstance(v, torch.Tensor)]
    assert buf.nbytes == sum(t.numel() * t.element_size() for t in tensors)
    # a buffer copying each candidate's 384-d float32 embedding per transition would be ~this big
    assert buf.nbytes * 100 < steps * eps * m * 384 * 4
    for t in tensors:
        t.fill_(1)
    buf.alive[2, 3] = False
    valid = buf.flat_valid(steps * eps - 1)
    assert valid.numel() == steps * eps - 1 and (2 * eps + 3) not in valid.tolist()
    assert torch.equal(valid, buf.alive.reshape(-1).nonzero().squeeze(1))
    buf.clear()
    assert all(not t.any() for t in tensors) and buf.flat_valid(0).numel() == 0


@pytest.fixture(scope="module")
def world():
    return query_world(24)


def rollout(world, seed: int = 0, stop_bias: float | None = None, num_layers: int = 1,
            levels: tuple[float, ...] = (1.0,)):
    """A fresh agent and one collected batch of episodes (two rounds), with GAE."""
    torch.manual_seed(seed)
    qs = world.qs
    agent = Agent(world.emb_dim, qs.cand_feats.shape[-1], max_steps=4, hidden_dim=16, num_heads=2,
                  num_layers=num_layers, levels=len(levels))
    if stop_bias is not None:
        agent.core.stop_bias.data.fill_(stop_bias)
    agent.use_tables(world.tables)
    env = ReformulationEnv(qs, world.retriever.index, max_steps=4, reward_k=40, expansion_weight=levels)
    buf = RolloutBuffer(4, 2 * len(qs), qs.max_candidates, "cpu")
    qidx = torch.arange(len(qs))
    gen = torch.Generator().manual_seed(seed)
    collect(agent, CPU_FP32, qs, env, buf, qidx, 0, gen)
    collect(agent, CPU_FP32, qs, env, buf, qidx, len(qs), gen)
    adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, 0.99, 0.95)
    return agent, buf, adv, ret


def update(agent, buf, world, adv, ret, settings, lr=1e-3, amp=CPU_FP32, streak=0, optimizer=None):
    optimizer = optimizer or make_optimizer(agent.parameters(), lr)
    return ppo_update(agent, optimizer, amp, buf, world.qs, adv, ret, settings, torch.Generator().manual_seed(0),
                      int(buf.alive.sum()), nonfinite_streak=streak)


def test_collect_fills_buffer_consistently(world):
    agent, buf, _, _ = rollout(world)
    # an episode acts at t only if it acted at t-1 without ending
    assert not (buf.alive[1:] & (buf.terminated | ~buf.alive)[:-1]).any()
    # the last step of every episode is terminal: a STOP, or the step that reached the limit; STOP earns nothing
    stop = buf.alive & (buf.actions == world.qs.max_candidates)
    limit = torch.zeros_like(stop)
    limit[-1] = buf.alive[-1]
    assert torch.equal(buf.terminated, stop | limit) and (buf.rewards[stop] == 0).all()
    assert limit.any() and stop.any()


def test_episodes_reaching_the_step_limit_are_terminal(world):
    # a policy that never stops: every episode with candidates left runs into the limit
    agent, buf, adv, ret = rollout(world, stop_bias=-1e4)
    last = buf.alive[-1]
    assert last.sum() > len(world.qs)
    assert buf.terminated[-1][last].all()
    # no bootstrap: the advantage of the last step is its reward minus its value, nothing after it
    torch.testing.assert_close(adv[-1][last], (buf.rewards[-1] - buf.values[-1])[last])
    torch.testing.assert_close(ret[-1][last], buf.rewards[-1][last])


@pytest.mark.parametrize("levels, num_layers", [((1.0,), 1), ((0.5, 1.0, 2.0), 1), ((0.5, 2.0), 0)])
def test_stored_logprobs_are_recomputed_exactly(world, levels, num_layers):
    agent, buf, adv, ret = rollout(world, levels=levels, num_layers=num_layers)
    if len(levels) > 1:  # the rollout used several weights
        expand = buf.alive & (buf.actions < len(levels) * world.qs.max_candidates)
        assert len((buf.actions[expand] % len(levels)).unique()) == len(levels)
    n = int(buf.alive.sum())
    idx = buf.flat_valid(n)
    steps, eps = buf.qidx.shape
    with torch.no_grad():
        ep = agent.episode_inputs(world.qs, buf.qidx.reshape(-1)[idx])
        logits, values = agent(ep, buf.chosen.reshape(-1, buf.chosen.shape[-1])[idx],
                               torch.div(idx, eps, rounding_mode="floor"))
    logp = torch.log_softmax(logits, 1).gather(1, buf.actions.reshape(-1)[idx, None]).squeeze(1)
    torch.testing.assert_close(logp, buf.logprobs.reshape(-1)[idx], atol=1e-5, rtol=0)
    torch.testing.assert_close(values, buf.values.reshape(-1)[idx], atol=1e-5, rtol=0)


def test_first_minibatch_ratio_is_one_even_with_dropout_configured(tmp_path, caplog):
    # the configured policy (a transformer layer, where dropout would act), a real rollout, and a step of lr 0:
    # the update must recompute exactly the rollout's probabilities. The seed's rl_agent.dropout is accepted but not
    # applied (it would break that), and the user is told
    cfg = tiny_config(tmp_path, **{"rl_agent.num_layers": 1, "rl_agent.dropout": 0.3})
    assert "rl_agent.dropout: 0.3 is not applied" in caplog.text
    t = Trainer(cfg, progress=False, collection=default_collection())
    dropouts = [m for m in t.agent.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(m.p == 0.0 for m in dropouts)  # the transformer layer's, held at 0
    stats = t._collect()
    adv, ret = compute_gae(t.buf.rewards, t.buf.values, t.buf.terminated, t.buf.alive, 0.99, 0.95)
    t.agent.use_tables(t.train_tables)
    s = PPOSettings(epochs=1, minibatch_size=10 ** 6)  # one minibatch: the ratio before any step
    out = ppo_update(t.agent, make_optimizer(t.agent.parameters(), 0.0), t.amp, t.buf, t.train_qs, adv, ret, s,
                     torch.Generator().manual_seed(0), stats["local_steps"])
    assert out["minibatches"] == 1 and out["samples"] == t.buf.alive.sum()
    # not 0: the rollout's batches and the minibatch sum floats in different orders (measured up to 1.2e-9 with
    # two threads); dropout left on would give a KL of order 1e-2
    assert abs(out["approx_kl"]) < 1e-6 and out["clipfrac"] == 0.0
    # a real step moves the policy: the second epoch sees a ratio != 1
    out = ppo_update(t.agent, make_optimizer(t.agent.parameters(), 1e-2), t.amp, t.buf, t.train_qs, adv, ret,
                     PPOSettings(epochs=2, minibatch_size=10 ** 6), torch.Generator().manual_seed(0),
                     stats["local_steps"])
    assert out["approx_kl"] > 1e-6


def test_ignored_features_do_not_move_the_policy(world):
    """rl_agent.ignore_features: the masked inputs change nothing in the logits; the others do."""
    from adaptive_ir.rl.policy import agent_feature_names

    names = agent_feature_names(world.miner.feature_names)
    ignored = {"cooc_mean", "z:cooc_mean", "rank"}
    mask = torch.tensor([n not in ignored for n in names])
    torch.manual_seed(0)
    agent = Agent(world.emb_dim, world.qs.cand_feats.shape[-1], max_steps=4, hidden_dim=16, num_heads=2,
                  num_layers=0, feature_mask=mask)
    agent.use_tables(world.tables)
    qidx = torch.arange(len(world.qs))
    ep = agent.episode_inputs(world.qs, qidx)
    chosen, step = torch.zeros(ep.valid.shape, dtype=torch.bool), torch.zeros(len(qidx))
    base, _ = agent(ep, chosen, step)
    col = world.miner.feature_names.index
    for name, moves in (("cooc_mean", False), ("cooc_min", True)):
        feats = ep.feats.clone()
        feats[..., col(name)] += torch.rand(feats.shape[:2])
        out, _ = agent(ep._replace(feats=feats), chosen, step)
        assert torch.equal(out, base) != moves, name


def test_minibatches_cover_every_sample_once_per_epoch(world):
    # 4 minibatches of 16 slots for the samples, the last one's tail masked: the masked mean of a minibatch is
    # its real samples' mean, so a full pass equals one big minibatch's loss in expectation; here: the counts
    agent, buf, adv, ret = rollout(world)
    n = int(buf.alive.sum())
    stats = update(agent, buf, world, adv, ret, PPOSettings(epochs=3, minibatch_size=16), lr=1e-4)
    assert stats["minibatches"] == 3 * -(-n // 16) and stats["samples"] == n


def test_bf16_autocast_on_cpu(world):
    agent, buf, adv, ret = rollout(world)
    amp = AmpContext(torch.device("cpu"), enabled=True, dtype="bfloat16")
    assert amp.enabled and amp.dtype == torch.bfloat16 and not amp.scaler.is_enabled()  # bf16 needs no scaler
    before = [p.detach().clone() for p in agent.parameters()]
    stats = update(agent, buf, world, adv, ret, PPOSettings(epochs=1, minibatch_size=32), amp=amp)
    for k in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert torch.isfinite(torch.tensor(stats[k])), k
    assert stats["nonfinite_skipped"] == 0 and stats["minibatches"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.parameters()))
    # "auto" on the CPU means off (CPU autocast is opt-in)
    assert not AmpContext(torch.device("cpu"), enabled=True, dtype="auto").enabled


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled")
@pytest.mark.parametrize("capability, dtype", [((7, 5), torch.float16), ((8, 0), torch.bfloat16)])
def test_auto_amp_on_cuda_is_bf16_only_where_native(monkeypatch, capability, dtype):
    # a T4 (7.5) reports bf16 support through emulation; auto must still pick fp16 (and its scaler) there
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    cuda = torch.device("cuda")
    assert native_bf16(cuda) == (capability >= (8, 0))
    amp = AmpContext(cuda, enabled=True, dtype="auto")
    assert amp.enabled and amp.dtype == dtype


def test_update_needs_an_optimizer_that_skips_on_the_device(world):
    agent, buf, adv, ret = rollout(world)
    with pytest.raises(TypeError, match="make_optimizer"):
        update(agent, buf, world, adv, ret, PPOSettings(), optimizer=torch.optim.Adam(agent.parameters()))


class NaNValues(torch.nn.Module):
    """Runs the core but poisons the value of the first ``n`` calls (a stand-in for an fp16 overflow)."""

    def __init__(self, core, n):
        super().__init__()
        self.core, self.n, self.calls = core, n, 0

    def forward(self, *args):
        logits, values = self.core(*args)
        self.calls += 1
        return logits, (values * float("nan") if self.calls <= self.n else values)


def test_nonfinite_minibatch_is_skipped_and_counted(world):
    agent, buf, adv, ret = rollout(world)
    agent.parallelize(NaNValues(agent.core, n=1))
    before = [p.detach().clone() for p in agent.parameters()]
    opt = make_optimizer(agent.parameters(), 1e-3)
    s = PPOSettings(epochs=1, minibatch_size=10 ** 6, max_nonfinite=3)
    stats = update(agent, buf, world, adv, ret, s, optimizer=opt)
    assert stats["nonfinite_skipped"] == 1 and stats["nonfinite_streak"] == 1 and stats["minibatches"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, agent.parameters()))  # no step on a NaN loss
    # skipped on the device: Adam's step count and moments are untouched too
    assert all(st["step"] == 0 and not st["exp_avg"].any() and not st["exp_avg_sq"].any()
               for st in opt.state.values())
    # a finite minibatch resets the streak
    stats = update(agent, buf, world, adv, ret, s, optimizer=opt, streak=2)
    assert stats["nonfinite_skipped"] == 0 and stats["nonfinite_streak"] == 0 and stats["minibatches"] == 1
    assert all(st["step"] == 1 for st in opt.state.values())


def test_repeated_nonfinite_loss_raises_with_advice(world):
    agent, buf, adv, ret = rollout(world)
    agent.parallelize(NaNValues(agent.core, n=10 ** 6))
    s = PPOSettings(epochs=4, minibatch_size=16, max_nonfinite=5)
    with pytest.raises(AdaptiveIRError, match="--no-amp") as err:
        update(agent, buf, world, adv, ret, s)
    batches = 4 * -(-int(buf.alive.sum()) // 16)
    assert f"{batches} minibatches in a row" in str(err.value)  # the update's whole run of them
    # the streak carries over between updates
    agent.parallelize(NaNValues(agent.core, n=1))
    with pytest.raises(AdaptiveIRError, match="learning_rate"):
        update(agent, buf, world, adv, ret, PPOSettings(epochs=1, minibatch_size=10 ** 6, max_nonfinite=5),
               streak=4)


def test_target_kl_stops_stepping_on_the_device(world):
    agent, buf, adv, ret = rollout(world)
    opt = make_optimizer(agent.parameters(), 5e-2)
    s = PPOSettings(epochs=4, minibatch_size=16, target_kl=1e-9)
    stats = update(agent, buf, world, adv, ret, s, optimizer=opt)
    # the first minibatch sees the rollout's policy (KL 0) and steps; the second sees the moved policy, steps
    # and crosses the limit; every later one is skipped (as a break would), not counted
    assert stats["minibatches"] == 2 and stats["nonfinite_skipped"] == 0
    assert all(st["step"] == 2 for st in opt.state.values())



@pytest.mark.parametrize("target_kl", [None, 1e-4], ids=["no-stop", "kl-stop"])
def test_the_replayed_minibatch_step_is_the_eager_one_on_the_cpu(world, monkeypatch, target_kl):
    # everything of the CUDA-graph path but CUDA's API, checked where CI runs: static minibatch buffers refilled
    # per minibatch, a warm-up that must change no weight (its step forced to be skipped) and whose statistics are
    # dropped, then one recorded step replayed; tests/test_cuda.py checks the real capture the same way on a GPU
    import adaptive_ir.rl.ppo as ppo_module

    class Replay:  # what a captured graph does: run the recorded step again, on the same tensors
        def __init__(self, step):
            self.replay = step

    captures = []

    def capture(step, optimizer, force):  # _capture without the side stream and the recording
        force.fill_(True)
        step()  # the warm-up
        force.fill_(False)
        captures.append(1)
        return Replay(step)

    monkeypatch.setattr(ppo_module, "_graphs_on", lambda device: True)
    monkeypatch.setattr(ppo_module, "_capture", capture)
    agent, buf, adv, ret = rollout(world)
    start = copy.deepcopy(agent.core.state_dict())
    results = []
    for graph in (False, True):
        agent.core.load_state_dict(start)
        optimizer = make_optimizer(agent.parameters(), 1e-2)
        settings = PPOSettings(epochs=3, minibatch_size=8, target_kl=target_kl, cuda_graph=graph)
        stats = [update(agent, buf, world, adv, ret, settings, optimizer=optimizer) for _ in range(2)]
        steps = [int(st["step"]) for st in optimizer.state.values()]
        results.append(({k: v.clone() for k, v in agent.core.state_dict().items()}, repr(stats), steps))
    assert len(captures) == 2  # one per update
    (eager, eager_stats, eager_steps), (replayed, replayed_stats, replayed_steps) = results
    assert eager_steps == replayed_steps and eager_steps[0] > 0  # the warm-ups took no Adam step
    assert eager_stats == replayed_stats
    assert all(torch.equal(eager[k], replayed[k]) for k in eager)
