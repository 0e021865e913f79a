"""The accelerator path on a real CUDA device, against the CPU: the same rankings, score lanes and rewards, step for
step (the GPU's fixed-shape tensor code against the CPU kernels); the same top k from the batched search; no
host-device synchronisation in a rollout step or a PPO minibatch by CUDA's own account (its sync-debug mode, a
second witness beside ``adaptive_ir.common.hostsync``); and the same training run twice from one seed.

Skipped where no CUDA device is present (CI). ``scripts/gpu_check.sh`` runs it with the GPU benchmarks."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import default_collection, query_world, tiny_config

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.hostsync import cuda_sync_sites
from adaptive_ir.rl.buffer import RolloutBuffer, compute_gae
from adaptive_ir.rl.env import ReformulationEnv
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.ppo import PPOSettings, make_optimizer, ppo_update
from adaptive_ir.rl.rollout import collect, policy_step, step_counters
from adaptive_ir.training.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

CUDA = torch.device("cuda")
K = 40
MIXES = [({"recall": 1.0}, 0.6), ({"recall": 0.7, "mrr": 0.3}, 0.6), ({"recall": 1.0}, (0.5, 1.0, 2.0))]


@pytest.fixture(scope="module")
def cpu_world():
    return query_world(24)


@pytest.fixture(scope="module")
def gpu_world():
    return query_world(24, device="cuda")


@pytest.mark.parametrize("mix, weight", MIXES)
def test_the_gpu_env_keeps_the_cpu_kernels_rankings_lanes_and_rewards(cpu_world, gpu_world, mix, weight):
    same_steps(cpu_world, gpu_world, mix, weight)


def test_the_gpu_env_started_from_rm3_keeps_the_cpu_kernels_rankings_lanes_and_rewards():
    # retrieval.start = rm3: a weighted q0 of query words and RM3 terms, filled into the lanes slot by slot
    same_steps(query_world(24, start="rm3"), query_world(24, device="cuda", start="rm3"), *MIXES[2])


def same_steps(cpu_world, gpu_world, mix, weight) -> None:
    """Random legal rollouts of both envs side by side: lanes and rankings equal bit for bit at every step."""
    qidx = torch.arange(0, 24, 2).repeat(3)[:23]  # fewer episodes than queries, repeats
    cpu = ReformulationEnv(cpu_world.qs, cpu_world.retriever.index, 4, K, mix, expansion_weight=weight, compact=True)
    gpu = ReformulationEnv(gpu_world.qs, gpu_world.retriever.index, 4, K, mix, expansion_weight=weight)
    assert not gpu.compact and gpu.device.type == "cuda"
    gen = torch.Generator().manual_seed(1)
    cpu.reset(qidx)
    gpu.reset(qidx)
    b, expanded = len(qidx), 0
    while True:
        # bit for bit: each document's terms are summed in the same order on both devices
        assert torch.equal(gpu.lanes[:b].cpu(), cpu.lanes[:b])
        assert torch.equal(gpu.topk.cpu(), cpu.topk)
        torch.testing.assert_close(gpu.metric.cpu(), cpu.metric, atol=1e-6, rtol=0)
        if not cpu.alive.any():
            break
        legal = cpu.legal().float()
        legal[:, -1] = 0.2
        actions = torch.multinomial(legal, 1, generator=gen).squeeze(1)
        expanded += int((cpu.alive & (actions < cpu.stop)).sum())
        r_cpu, t_cpu = cpu.step(actions)
        r_gpu, t_gpu = gpu.step(actions.to(CUDA))
        torch.testing.assert_close(r_gpu.cpu(), r_cpu, atol=1e-6, rtol=0)
        assert torch.equal(t_gpu.cpu(), t_cpu)
    assert expanded > b


def test_the_gpu_search_returns_the_cpu_kernels_top_k(cpu_world, gpu_world):
    env = ReformulationEnv(cpu_world.qs, cpu_world.retriever.index, 4, K, {"recall": 1.0}, (0.5, 1.0, 2.0))
    qidx = torch.arange(24)
    env.reset(qidx)
    gen = torch.Generator().manual_seed(3)
    while env.alive.any():  # rewritten queries: several weighted terms per document
        env.step(torch.multinomial(env.legal().float(), 1, generator=gen).squeeze(1))
    terms, weights = env.terms, env.weights
    want = cpu_world.retriever.index.topk_keys(terms, weights, 100)
    index = gpu_world.retriever.index
    # a scratch of 5 rows (the collection's documents × 5 cells): several chunks, as a large batch would make
    got = index.topk_keys(terms.to(CUDA), weights.to(CUDA), 100, max_cells=5 * index.num_docs)
    assert torch.equal(got.cpu(), want)
    assert torch.equal(index.score(terms.to(CUDA), weights.to(CUDA)).cpu(),
                       cpu_world.retriever.index.score(terms, weights))


@pytest.mark.parametrize("dtype", [None, "float16", "bfloat16"], ids=["fp32", "fp16+scaler", "bf16"])
def test_rollout_steps_and_ppo_minibatches_do_not_sync_on_cuda(gpu_world, dtype):
    if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
        pytest.skip("no native bf16 on this GPU")
    amp = AmpContext(CUDA, dtype is not None, dtype or "float16")
    qs = gpu_world.qs
    torch.manual_seed(0)
    agent = Agent(gpu_world.emb_dim, qs.cand_feats.shape[-1], max_steps=4, hidden_dim=16, num_heads=2,
                  num_layers=1, levels=3).to(CUDA)
    agent.core.init_stop_prior(3 * qs.max_candidates)
    agent.use_tables(gpu_world.tables)
    env = ReformulationEnv(qs, gpu_world.retriever.index, 4, K, {"recall": 0.7, "mrr": 0.3}, (0.5, 1.0, 2.0))
    gen = torch.Generator(CUDA).manual_seed(0)
    qidx = torch.arange(len(qs))

    def steps():
        for step in step_counters(env, len(qidx)):
            actions, _, _ = policy_step(agent, amp, ep, env, step, gen)
            env.step(actions)

    buf = RolloutBuffer(4, 2 * len(qs), qs.max_candidates, CUDA)
    # the first round on a fresh device initialises what it uses once (a warm-up, as every run's first round)
    first = cuda_sync_sites(lambda: collect(agent, amp, qs, env, buf, qidx, 0, gen))
    print("syncs of the first collect round:", first)
    rounds = cuda_sync_sites(lambda: [collect(agent, amp, qs, env, buf, qidx, c, gen) for c in (0, len(qidx))])
    assert len(rounds) <= 2, (rounds, first)  # at most one per collect round (its start), none per step
    env.reset(qidx)
    ep = agent.episode_inputs(qs, env.qidx)
    assert cuda_sync_sites(steps) == [], first
    adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, 0.99, 0.95)
    samples = int(buf.alive.sum())
    opt = make_optimizer(agent.parameters(), 1e-3)
    settings = PPOSettings(epochs=2, minibatch_size=8, target_kl=0.5)
    stats = {}
    syncs = cuda_sync_sites(lambda: stats.update(ppo_update(agent, opt, amp, buf, qs, adv, ret, settings,
                                                            torch.Generator(CUDA).manual_seed(0), samples)))
    assert stats["minibatches"] >= 2 * (settings.epochs + 1)
    # the KL stop read once per epoch and the statistics once, not per minibatch; the graph's capture (fp32, bf16)
    # synchronises once before it starts
    assert len(syncs) <= settings.epochs + 1 + (not amp.scaler.is_enabled()), syncs
    assert all(st["step"] > 0 for st in opt.state.values())


def _collected(world, amp):
    """An agent and the buffer of one collect round on CUDA, with its advantages."""
    qs = world.qs
    torch.manual_seed(0)
    agent = Agent(world.emb_dim, qs.cand_feats.shape[-1], max_steps=4, hidden_dim=16, num_heads=2,
                  num_layers=1, levels=3).to(CUDA)
    agent.use_tables(world.tables)
    env = ReformulationEnv(qs, world.retriever.index, 4, K, {"recall": 1.0})
    buf = RolloutBuffer(4, 2 * len(qs), qs.max_candidates, CUDA)
    stats = collect(agent, amp, qs, env, buf, torch.arange(len(qs)).repeat(2), 0, torch.Generator(CUDA).manual_seed(0))
    adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, 0.99, 0.95)
    return agent, buf, adv, ret, int(stats["length"].sum())


@pytest.mark.parametrize("dtype", [None, "bfloat16"], ids=["fp32", "bf16"])
@pytest.mark.parametrize("target_kl", [None, 1e-4], ids=["no-stop", "kl-stop"])
def test_the_graphed_update_is_the_eager_update_bit_for_bit(gpu_world, dtype, target_kl):
    if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
        pytest.skip("no native bf16 on this GPU")
    amp = AmpContext(CUDA, dtype is not None, dtype or "float16")
    agent, buf, adv, ret, samples = _collected(gpu_world, amp)
    start = copy.deepcopy(agent.core.state_dict())
    results = []
    for graph in (False, True):
        agent.core.load_state_dict(start)
        opt = make_optimizer(agent.parameters(), 1e-2)
        gen = torch.Generator(CUDA).manual_seed(0)
        settings = PPOSettings(epochs=3, minibatch_size=8, target_kl=target_kl, cuda_graph=graph)
        stats = []
        for lr in (1e-2, 3e-3):  # two updates: the second captures again, with the optimizer's state and a new lr
            for group in opt.param_groups:
                group["lr"] = lr
            stats.append(ppo_update(agent, opt, amp, buf, gpu_world.qs, adv, ret, settings, gen, samples))
        results.append(({k: v.clone() for k, v in agent.core.state_dict().items()}, stats,
                        [st["step"].item() for st in opt.state.values()]))
    (eager, eager_stats, eager_steps), (graphed, graphed_stats, graphed_steps) = results
    diff = max((eager[k].float() - graphed[k].float()).abs().max().item() for k in eager)
    print(f"largest weight difference, graphed vs eager: {diff:g}; steps {eager_steps[0]} vs {graphed_steps[0]}")
    assert eager_steps == graphed_steps and eager_steps[0] > 0
    assert repr(eager_stats) == repr(graphed_stats)  # repr: an explained variance may be nan
    for k in eager:
        assert torch.equal(eager[k], graphed[k]), k


def test_same_seed_same_run_on_cuda(tmp_path):
    runs = []
    for name in ("a", "b"):
        cfg = tiny_config(tmp_path / name, **{"system.device": "cuda", "training.num_epochs": 2,
                                              "training.eval_every": 2})
        trainer = Trainer(cfg, progress=False, collection=default_collection())
        assert trainer.device.type == "cuda"
        trainer.train()
        runs.append(({k: v.cpu() for k, v in trainer.agent.core.state_dict().items()}, trainer.buf.actions.cpu()))
    (state_a, actions_a), (state_b, actions_b) = runs
    assert torch.equal(actions_a, actions_b)
    for k in state_a:
        assert torch.equal(state_a[k], state_b[k]), k
