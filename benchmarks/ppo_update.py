"""The PPO update alone: samples/s and peak memory in FP32 and under AMP, on the device present.

AMP is bf16 autocast on the CPU; on CUDA, fp16 with GradScaler and bf16 (where native: compute capability ≥ 8).
One buffer is filled once by the engine's rollout (B = training.episodes_per_update episodes); every variant then
starts from the same weights and optimizer state and runs ``training.ppo_epochs`` epochs over it, ``--repeats``
times. Per minibatch (fp32): host-device syncs (``adaptive_ir.common.hostsync``: 0 expected; the update's one read for
its statistics is not counted) and operators that launch kernels (torch.profiler).

Peak memory: CUDA ``max_memory_allocated``; on the CPU, the growth of the process' peak resident set
(``ru_maxrss``) during the variant — a high-water mark, so only growth beyond earlier variants shows.

DataParallel: the per-forward cost of the policy core wrapped in ``nn.DataParallel`` (with autocast inside the
replicas, as training wraps it) against the bare core on one GPU, at the configured minibatch size and at
``trainer.DATA_PARALLEL_MIN_BATCH``; needs ≥ 2 CUDA devices, and is ``null`` with the reason otherwise.

    python benchmarks/ppo_update.py --config scifact --data-dir ../shared/datasets/scifact --json benchmarks/results/ppo_update.json
"""

from __future__ import annotations

import copy
import resource
import sys
import time

import _common as common
import torch

from adaptive_ir.common.amp import AmpContext, Autocast, native_bf16
from adaptive_ir.rl.buffer import RolloutBuffer, compute_gae
from adaptive_ir.rl.factory import build_agent, make_env
from adaptive_ir.rl.ppo import PPOSettings, make_optimizer, ppo_update
from adaptive_ir.rl.rollout import collect
from adaptive_ir.training.trainer import DATA_PARALLEL_MIN_BATCH


def rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def data_parallel_overhead(agent, qs, buf, device: torch.device, amp: AmpContext, sizes: list[int],
                           repeats: int = 20) -> dict:
    """Milliseconds per forward (and backward) of the bare core vs the same core under nn.DataParallel, for
    minibatches of each size in ``sizes`` built from the buffer's transitions (repeated to size)."""
    if device.type != "cuda" or torch.cuda.device_count() < 2:
        return {"ms_per_forward": None, "reason": "needs >= 2 CUDA devices"}
    wrapped = torch.nn.DataParallel(Autocast(agent.core, amp))
    n = int(buf.alive.sum())
    idx = buf.flat_valid(n)
    rows = {}
    for size in sizes:
        pick = idx[torch.arange(size, device=device) % n]
        ep = agent.episode_inputs(qs, buf.qidx.reshape(-1)[pick])
        chosen = buf.chosen.reshape(-1, buf.chosen.shape[-1])[pick]
        step = torch.div(pick, buf.qidx.shape[1], rounding_mode="floor")
        out = {}
        for name, runner in (("bare", agent.core), ("data_parallel", wrapped)):
            object.__setattr__(agent, "_runner", runner)

            def forward_backward(ep=ep, chosen=chosen, step=step):
                with amp.autocast():
                    logits, values = agent(ep, chosen, step, parallel=True)
                (logits.float().logsumexp(1).mean() + values.float().mean()).backward()

            forward_backward()  # warm-up: replicas, kernels
            common.sync(device)
            t0 = time.perf_counter()
            for _ in range(repeats):
                forward_backward()
            common.sync(device)
            out[name] = (time.perf_counter() - t0) / repeats * 1e3
        object.__setattr__(agent, "_runner", agent.core)
        agent.zero_grad(set_to_none=True)
        rows[str(size)] = {**out, "overhead_ms": out["data_parallel"] - out["bare"]}
    return {"ms_per_forward_backward": rows, "gpus": torch.cuda.device_count()}


def main() -> None:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    device = common.setup(args)
    ws = common.workspace(args, device)
    cfg, tc = ws.cfg, ws.cfg.training
    qs, tables = ws.split("train")
    episodes = 16 if args.quick else tc.episodes_per_update
    repeats = 1 if args.quick else args.repeats
    ppo_epochs = 1 if args.quick else tc.ppo_epochs

    torch.manual_seed(args.seed)
    agent = build_agent(cfg, ws, device)
    agent.use_tables(tables)
    env = make_env(cfg, ws, qs)
    buf = RolloutBuffer(cfg.rl_agent.max_steps_per_episode, episodes, qs.max_candidates, device)
    qidx = torch.randperm(len(qs), generator=torch.Generator().manual_seed(args.seed))
    qidx = qidx[torch.arange(episodes) % len(qs)]
    stats = collect(agent, AmpContext(device, False), qs, env, buf, qidx, 0,
                    torch.Generator(device).manual_seed(args.seed))
    transitions = int(stats["length"].sum())
    adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, tc.gamma, tc.gae_lambda)
    settings = PPOSettings(tc.clip_epsilon, tc.value_loss_coef, tc.entropy_coef, tc.max_grad_norm, ppo_epochs,
                           tc.batch_size, None)  # no KL early stop: every variant does the same work
    start = copy.deepcopy(agent.state_dict())

    variants = {"fp32": AmpContext(device, False)}
    if device.type == "cuda":
        variants["amp_fp16"] = AmpContext(device, True, "float16")
        if native_bf16(device):
            variants["amp_bf16"] = AmpContext(device, True, "bfloat16")
    else:
        variants["amp_bf16"] = AmpContext(device, True, "bfloat16")

    rows = {}
    for name, amp in variants.items():
        agent.load_state_dict(start)
        optimizer = make_optimizer(agent.parameters(), tc.learning_rate)
        gen = torch.Generator(device).manual_seed(args.seed)
        update = lambda optimizer=optimizer, amp=amp, gen=gen: ppo_update(  # noqa: E731
            agent, optimizer, amp, buf, qs, adv, ret, settings, gen, transitions)
        update()  # warm-up (kernels, Adam state)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        rss0 = rss_bytes()
        best, samples, stats = float("inf"), 0, {}
        for _ in range(repeats):
            common.sync(device)
            t0 = time.perf_counter()
            stats = update()
            common.sync(device)
            best = min(best, time.perf_counter() - t0)
            samples = stats["samples"] * ppo_epochs
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else rss_bytes() - rss0
        rows[name] = {"samples_per_s": samples / best, "seconds": best, "samples": samples,
                      "peak_memory_bytes": int(peak), "dtype": str(amp.dtype) if amp.enabled else "float32",
                      "approx_kl": stats["approx_kl"], "nonfinite_skipped": stats["nonfinite_skipped"]}
        print(f"{name:9s} {rows[name]['samples_per_s']:10.1f} samples/s", flush=True)
        if name == "fp32":
            batches = stats["minibatches"]  # of the whole update (every epoch)
            syncs = common.count_syncs(update)
            ops = common.count_ops(update, device)
            cuda_syncs = common.count_cuda_syncs(update, device)  # the update's one statistics read included
            counts = {"minibatches": batches, "syncs_per_minibatch": len(syncs) / batches,
                      "sync_kinds": sorted(set(syncs)), "cuda_reported_syncs_per_update": cuda_syncs,
                      **{f"{k}_per_minibatch": v / batches for k, v in ops.items()}}
            counts["ops_per_minibatch"] = counts.pop("aten_ops_per_minibatch")

    amp_names = [n for n in rows if n != "fp32"]
    best_amp = max(amp_names, key=lambda n: rows[n]["samples_per_s"])
    payload = {
        "benchmark": "ppo_update", "machine": common.machine(device),
        "settings": {"config": args.config, "collection": ws.collection.name, "episodes": episodes,
                     "transitions": transitions, "minibatch_size": tc.batch_size, "ppo_epochs": ppo_epochs,
                     "hidden_dim": cfg.rl_agent.hidden_dim, "num_layers": cfg.rl_agent.num_layers,
                     "max_candidates": qs.max_candidates, "repeats": repeats,
                     "memory_measure": "cuda max_memory_allocated" if device.type == "cuda"
                     else "ru_maxrss growth (high-water mark)", "quick": args.quick},
        "samples_per_s": {"fp32": rows["fp32"]["samples_per_s"], "amp": rows[best_amp]["samples_per_s"]},
        "amp_variant": best_amp,
        "amp_speedup": rows[best_amp]["samples_per_s"] / rows["fp32"]["samples_per_s"],
        "peak_memory_bytes": {n: r["peak_memory_bytes"] for n, r in rows.items()},
        "variants": rows,
        "per_minibatch_counts": counts,
        "data_parallel": data_parallel_overhead(agent, qs, buf, device, AmpContext(device, tc.use_amp, tc.amp_dtype),
                                                sorted({tc.batch_size, DATA_PARALLEL_MIN_BATCH})),
    }
    fig, ax = common.figure()
    ax.bar(list(rows), [r["samples_per_s"] for r in rows.values()], color="tab:blue")
    ax.set(ylabel="samples / s", title=f"PPO update — {ws.collection.name}, {device.type}, "
           f"hidden {cfg.rl_agent.hidden_dim}")
    payload["plot"] = common.save_plot(fig, args, "ppo_update")
    common.write_json(args.json, payload)


if __name__ == "__main__":
    main()
