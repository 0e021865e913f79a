"""The training loop: precompute → mine → (collect → update)* → dev evaluation → checkpoint, and resume."""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict, cast

import torch
from torch import nn
from tqdm.auto import tqdm

from adaptive_ir.artifacts.checkpoint import (
    CHECKPOINT_FORMAT,
    describe_origin,
    init_policy_path,
    load_compatible,
    load_policy_from,
    require_init_policy,
    save_checkpoint,
)
from adaptive_ir.artifacts.spec import data_identity, policy_spec
from adaptive_ir.common.amp import AmpContext, Autocast
from adaptive_ir.common.distributed import dist_info, ranks_on_this_machine
from adaptive_ir.common.hostsync import allowed_sync
from adaptive_ir.common.io import atomic_write_bytes, atomic_write_json
from adaptive_ir.common.memory import trim_heap
from adaptive_ir.common.progress import duration, peak_rss_gib
from adaptive_ir.common.telemetry import GPUTelemetry, PhaseTimer, Window, describe_time
from adaptive_ir.config import Config, config_to_dict, resolve_device
from adaptive_ir.evaluation.methods import evaluate_split
from adaptive_ir.evaluation.metrics import format_table
from adaptive_ir.evaluation.risk import format_risk
from adaptive_ir.rl.buffer import compute_gae
from adaptive_ir.rl.env import QuerySet, lanes_fit
from adaptive_ir.rl.factory import build_agent
from adaptive_ir.rl.ppo import PPOSettings, make_optimizer, ppo_update
from adaptive_ir.rl.rollout import collect
from adaptive_ir.rl.selector import fitted_selector
from adaptive_ir.rl.warmstart import first_step_gains, warm_start
from adaptive_ir.rl.workspace import Tables, Workspace, seed_everything
from adaptive_ir.training.monitor import Monitor
from adaptive_ir.training.selection import Selection, dev_score
from adaptive_ir.training.sources import Sources, sampler_seed

log = logging.getLogger(__name__)
GPU_SAMPLE_INTERVAL_S = 0.1
"""Seconds between GPU telemetry samples (utilisation, memory, temperature): the newest is logged with each row,
and all of them make the utilisation summary of the training phase and of its collect windows (so a collect phase
of a few seconds still holds samples; a sample costs a few NVML reads on a daemon thread)."""
TIME_PARTS = ("collect", "update", "dev_evaluation", "checkpointing", "warm_start")
"""The parts of the training phase timed in ``result["training_time"]`` (what none covers is ``other``): rollouts,
the PPO update (GAE, minibatches, scheduler), dev evaluation (and the final pick on the whole dev split), checkpoint
writes, the first-step warm start."""
SELECTOR_QUERIES = 1000
"""Train queries of each collection the start selector is fitted on (``retrieval.start: choose``): a seeded sample,
the same for every fit of a run."""
RANK_SEED_STRIDE = 100_003
"""Rank r of a DDP run seeds its action and minibatch generators with seed + r × this (rank 0 = single-process)."""
DATA_PARALLEL_MIN_BATCH = 4096
"""Smallest PPO minibatch (training.batch_size) that DataParallel splits over the GPUs of one process. Each
forward through it replicates the policy, scatters the inputs and starts a thread per GPU, which costs more than
a whole forward of the shipped policies at the usual minibatch sizes; below this size the update runs on one
GPU (``benchmarks/ppo_update.py --device cuda`` measures the wrapper's overhead on the machine at hand; DDP is
the multi-GPU path that pays, see docs/multi_gpu.md)."""


def parallel_wrapper(core: nn.Module, device: torch.device, amp: AmpContext, minibatch_size: int
                     ) -> nn.Module | None:
    """The wrapper the PPO update's forwards run through (rollouts and evaluation always use the bare core on
    one device): DDP inside a process group (torchrun); DataParallel over every visible GPU when the run is on
    cuda / cuda:0, there are several, and minibatches are large enough to pay for it; else None."""
    if dist_info()[1] > 1:
        ids = [device.index] if device.type == "cuda" else None
        # the core has no buffers (no batch norm), so a no-grad forward (rollout, rank 0's dev evaluation, both
        # on the bare core anyway) runs no collective
        return nn.parallel.DistributedDataParallel(core, device_ids=ids)
    if (device.type == "cuda" and device.index in (None, 0) and torch.cuda.device_count() > 1
            and minibatch_size >= DATA_PARALLEL_MIN_BATCH):
        return nn.DataParallel(Autocast(core, amp))
    return None


CollectStats = TypedDict("CollectStats", {"return": float, "final_metric": float, "length": float, "switched": float,
                                           "episodes": int, "steps": int, "local_steps": int, "max_local_steps": int})
"""What ``Trainer._collect`` returns: the update's mean return, final metric and episode length, the share of its
episodes that switched to the other start (``retrieval.start: choose``), its episodes and steps (over every rank),
and this rank's and the largest rank's transitions."""


def episodes_per_round(cfg: Config, device: torch.device, num_docs: int, available: int | None = None,
                       ranks_here: int = 1) -> int:
    """B of each collect round: episodes_per_update on an accelerator (training.accelerator_one_round) where the
    score lanes of that many episodes fit ``available`` bytes (default: the device's free memory), else
    collect_batch_size. Runs that also train on other collections keep collect_batch_size: their lanes are sized
    by collections not loaded yet. On the CPU the ``ranks_here`` DDP ranks of one machine share its memory, so they
    share collect_batch_size's lanes: rounds of collect_batch_size / ranks_here each, and more of them (every rank
    still collects episodes_per_update); on accelerators each rank has its own device's memory."""
    tc = cfg.training
    if (tc.accelerator_one_round and device.type != "cpu" and not cfg.data.also_train_on
            and tc.episodes_per_update > tc.collect_batch_size
            and lanes_fit(tc.episodes_per_update, num_docs, device, available)):
        return tc.episodes_per_update
    if device.type == "cpu":
        return max(1, tc.collect_batch_size // ranks_here)
    return tc.collect_batch_size


class Trainer:
    """Owns everything a run needs; ``train()`` runs it, ``test()`` evaluates the best checkpoint."""

    def __init__(self, cfg: Config, resume: str | Path | None = None, progress: bool = True,
                 collection=None, run: dict | None = None):
        self.rank, self.world = dist_info()
        self.run = run  # the identity of the run (RunDir.identity) its checkpoints record; None outside one
        self.is_main = self.rank == 0
        self.cfg, self.progress = cfg, progress and self.is_main
        tc = cfg.training
        if not cfg.embeddings.freeze:
            log.warning("embeddings.freeze: false is not supported (the embedding tables are precomputed data "
                        "shared by train, dev and test); training with frozen embeddings")
        if tc.init_from and not resume:
            require_init_policy(cfg)  # before the precompute: a missing source policy fails at once
        seed_everything(cfg.system.seed)
        self.device = torch.device(resolve_device(cfg.system.device))
        if not self.is_main:
            torch.distributed.barrier()  # rank 0 builds the on-disk caches first; the others then read them
        # test qrels stay unread while training: evaluate_split loads the test split on demand
        self.ws = Workspace(cfg, self.device, collection=collection, progress=self.progress,
                            splits=("train", "dev"), lanes=tc.collect_batch_size)
        self.train_qs, self.train_tables = self.ws.split("train", cfg.data.max_train_queries, judged_only=True)
        # the train queries it does not train on leave the collection, which reads them no more: a large train
        # split is hundreds of MiB of Python strings and dicts in every DDP rank (WikiCAR's 273k queries: 285 MiB)
        self.ws.collection.keep_queries("train", self.train_qs.qids)
        has_dev = "dev" in self.ws.collection.splits and self.is_main  # dev evaluation is rank 0's alone
        # evaluated during training: the whole dev split, or its fixed sample (training.dev_subsample)
        self.dev_qs: QuerySet | None
        self.dev_tables: Tables | None
        self.dev_qs, self.dev_tables = self.ws.split("dev", sample=tc.dev_subsample) if has_dev else (None, None)
        if self.is_main and self.world > 1:
            torch.distributed.barrier()
        self.agent = build_agent(cfg, self.ws, self.device)
        self.spec, self.data_id = policy_spec(cfg, self.ws), data_identity(self.ws)
        self.init_sha256 = None
        """sha256 of the training.init_from weights this run started from (kept in its checkpoints)."""
        if tc.init_from and not resume:  # before DDP wraps the core: every rank starts from the same weights
            source, self.init_sha256 = load_policy_from(cfg, self.ws)
            self.agent.core.load_state_dict(source["model"])
            log.info("policy starts from %s; sha256 %s", describe_origin(init_policy_path(cfg), source),
                     self.init_sha256)
        self.amp = AmpContext.of(self.device, tc)
        self._parallelize()
        self.optimizer = make_optimizer(self.agent.parameters(), tc.learning_rate)
        self.episodes_per_round = episodes_per_round(cfg, self.device, self.ws.collection.num_docs,
                                                     ranks_here=ranks_on_this_machine())
        if self.episodes_per_round > tc.collect_batch_size:
            log.info("collecting each update's %d episodes in one round on %s (training.accelerator_one_round)",
                     self.episodes_per_round, self.device.type)
        elif self.episodes_per_round < tc.collect_batch_size:
            log.info("rounds of %d episodes: the %d ranks on this machine share training.collect_batch_size's "
                     "score lanes", self.episodes_per_round, ranks_on_this_machine())
        self.rounds = max(1, math.ceil(tc.episodes_per_update / self.episodes_per_round))
        seed = cfg.system.seed + RANK_SEED_STRIDE * self.rank
        self.sources = Sources(cfg, self.device, self.rank, self.world, self.rounds * self.episodes_per_round,
                               self.progress)
        primary = self.sources.add(self.ws, self.train_qs, self.train_tables, sampler_seed(seed, 0))
        for i, folder in enumerate(cfg.data.also_train_on, 1):
            self.sources.add_also(folder, sampler_seed(seed, i), self.ws)
        self.env, self.shard, self.buf = primary.env, primary.shard, primary.buf
        n_train = self.sources.num_queries
        self.total_updates = tc.num_epochs and max(1, math.ceil(tc.num_epochs * n_train
                                                                / (self.world * self.rounds * self.episodes_per_round)))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, (lambda u: max(0.0, 1.0 - u / max(1, self.total_updates))) if tc.anneal_lr else (lambda u: 1.0))
        if tc.compile:
            self._compile()
        # actions and minibatch orders are drawn where they are used; the host only picks the episodes
        self.action_gen = torch.Generator(self.device).manual_seed(seed)
        self.minibatch_gen = torch.Generator(self.device).manual_seed(seed + 1)
        self.update = self.episodes = self.steps = 0
        self.warm_started = False
        self.nonfinite_streak = self.nonfinite_total = 0
        self.selection = Selection(cfg)
        self.full_dev: dict | None = None  # with a dev sample: the final pick's figures on the whole dev split
        self.ckpt_dir = tc.checkpoint_path_dir
        self.stop_signal: int | None = None
        self._timer: PhaseTimer | None = None  # while train() runs: where its time goes (save() counts itself)
        if resume:
            self.load(resume)
        # the precompute read the whole forward index (mining) and much of the inverted one: those pages leave
        # resident memory (the page cache keeps them), and training reads back the posting lists it touches, so
        # its peak is the score lanes' and the lists', not the mining's (at 8.8M documents: -1.9 GiB)
        self.ws.retriever.release_pages()
        trim_heap()

    def _parallelize(self) -> None:
        """DDP under torchrun, or DataParallel over all visible GPUs for large minibatches: the PPO update's
        forwards run through the wrapper; state_dict keys do not change."""
        wrapper = parallel_wrapper(self.agent.core, self.device, self.amp, self.cfg.training.batch_size)
        if wrapper is not None:
            self.agent.parallelize(wrapper)
            log.info("%s: %s", type(wrapper).__name__, f"{self.world} processes" if self.world > 1
                     else f"{torch.cuda.device_count()} GPUs for the PPO update")

    def _compile(self) -> None:
        """torch.compile the rollout's policy forward and env step as whole graphs (CUDA graphs on CUDA). The env
        then runs its fixed-shape mode on every device: the CPU's compact mode reads counts, a graph break."""
        mode = "reduce-overhead" if self.device.type == "cuda" else None
        self.agent.compile_local(mode)
        for src in self.sources:
            src.env.compact = False
            # the instance's step becomes its compiled version (through vars(): mypy refuses assigning to a method)
            vars(src.env)["step"] = torch.compile(src.env.step, fullgraph=True, mode=mode)

    # ------------------------------------------------------------------ loop
    def train(self) -> dict:
        tc = self.cfg.training
        # rank 0 alone logs, saves, evaluates; a resumed run's log loses the rows after its checkpoint (replayed)
        monitor = Monitor(tc.log_path_dir, (self.update, self.steps) if self.update else None) if self.is_main else None
        gpu = GPUTelemetry(GPU_SAMPLE_INTERVAL_S).start() if self.is_main else None
        # on a GPU each part's time includes the work it queued: one synchronize per part boundary, none inside
        sync = (lambda: torch.cuda.synchronize(self.device)) if self.device.type == "cuda" else None
        timer = self._timer = PhaseTimer(TIME_PARTS, sync).start()
        first_update = self.update
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        ppo = PPOSettings.from_config(tc)
        bar = tqdm(total=self.total_updates, initial=self.update, desc="train", disable=not self.progress)
        consistent = True  # weights, optimizer, scheduler, generators and counters agree: last.pt may be written
        try:
            if tc.warm_start_queries and not self.warm_started and self.total_updates:
                consistent = False  # the warm start moves the weights before warm_started is set
                with self.ws.phases("warm start"), timer.part("warm_start"):
                    self._warm_start(monitor)
                consistent = True
            while self.update < self.total_updates and self.stop_signal is None:
                consistent = False
                t0, episodes_before = time.perf_counter(), self.episodes
                with timer.part("collect"):
                    stats = self._collect()
                t_collect = time.perf_counter() - t0
                with timer.part("update"):
                    src = self.source
                    adv, ret = compute_gae(src.buf.rewards, src.buf.values, src.buf.terminated, src.buf.alive,
                                           tc.gamma, tc.gae_lambda)
                    if tc.entropy_coef_final is not None:
                        frac = self.update / max(1, self.total_updates - 1)
                        ppo.entropy_coef = tc.entropy_coef + frac * (tc.entropy_coef_final - tc.entropy_coef)
                    self.agent.use_tables(src.tables)
                    losses = ppo_update(self.agent, self.optimizer, self.amp, src.buf, src.qs, adv, ret, ppo,
                                        self.minibatch_gen, stats["local_steps"], stats["max_local_steps"],
                                        self.nonfinite_streak)
                    # ppo_update returns both counts as ints (its dict[str, float] holds them)
                    self.nonfinite_streak = cast(int, losses.pop("nonfinite_streak"))
                    self.nonfinite_total += cast(int, losses["nonfinite_skipped"])
                    self.scheduler.step()
                self.update += 1
                consistent = True
                elapsed = self.ws.phases.add("training", time.perf_counter() - t0)
                # the learning rates are floats: make_optimizer is given a float lr, which LambdaLR scales
                lr = cast(float, self.scheduler.get_last_lr()[0])
                row = {"charts/episodic_return": stats["return"], "charts/final_metric": stats["final_metric"],
                       "charts/episode_length": stats["length"], "charts/learning_rate": lr,
                       "charts/SPS": stats["steps"] / elapsed, "charts/episodes_per_s": stats["episodes"] / t_collect,
                       **{f"losses/{k}": v for k, v in losses.items() if k not in ("minibatches", "samples")},
                       "losses/nonfinite_total": self.nonfinite_total}
                if self.source.env.choice:
                    row["charts/switched"] = stats["switched"]
                if self.is_main and (self.update % tc.log_freq == 0 or self.update == self.total_updates):
                    assert monitor is not None and gpu is not None  # rank 0 made both
                    monitor.log(self.update, row | gpu.latest(), self.steps, self.episodes)
                bar.update(1)
                bar.set_postfix(ret=f"{stats['return']:.3f}", eps=f"{row['charts/episodes_per_s']:.0f}/s")
                stop = False
                if self.dev_qs is not None and self._eval_due(episodes_before):
                    consistent = False  # an evaluation that fails is redone on resume: last.pt stays behind it
                    t_eval = time.perf_counter()
                    assert monitor is not None  # dev_qs is set on rank 0 alone (has_dev), which made the monitor
                    with timer.part("dev_evaluation"):  # best.pt's write inside counts as checkpointing
                        stop = self._evaluate_dev(monitor)
                    self.ws.phases.add("dev evaluation", time.perf_counter() - t_eval)
                    consistent = True
                if self.is_main and self.update % tc.save_freq == 0:
                    self.save(self.ckpt_dir / "last.pt")
                if self.world > 1:
                    stop = self._agree_to_stop(stop)
                if stop:
                    patience = (f"{tc.early_stopping_patience_episodes} episodes" if tc.early_stopping_patience_episodes
                                else f"{tc.early_stopping_patience} evaluations")
                    log.info("early stopping: no dev improvement in %s", patience)
                    break
            sampled = self.dev_qs is not None and len(self.dev_qs) < len(self.ws.collection.split("dev")[0])
            if sampled and self.selection.best_update >= 0 and self.stop_signal is None:
                assert monitor is not None  # sampled: dev_qs is set, on rank 0 alone, which made the monitor
                with self.ws.phases("dev selection", "dev selection (whole dev split)"), timer.part("dev_evaluation"):
                    self._pick_on_full_dev(monitor)
        finally:
            bar.close()
            for s, h in old_handlers.items():
                signal.signal(s, h)
            if self.is_main:
                if consistent:
                    self.save(self.ckpt_dir / "last.pt")
                    if self.selection.best_update < 0:  # no dev split: the last model is the best we know
                        self.save(self.ckpt_dir / "best.pt")
                else:  # an exception mid-update: its weights moved, its counters did not; resume replays it whole
                    log.warning("update %d stopped half-way; %s is left as it was (the last consistent state)",
                                self.update + 1, self.ckpt_dir / "last.pt")
            self._timer = None
            if self.is_main:
                assert monitor is not None and gpu is not None  # rank 0 made both
                gpu.stop()
                monitor.close()
        spent = self._time_split(timer.stop(), gpu, self.update - first_update)
        if self.is_main:
            log.info("time per phase: %s; peak RSS %.2f GiB", ", ".join(
                f"{k} {duration(v)}" for k, v in self.ws.phases.seconds.items()), peak_rss_gib())
            log.info("%s", describe_time(spent))
        return {"updates": self.update, "best_dev": self.selection.best, "best_update": self.selection.best_update,
                "interrupted": self.stop_signal is not None, "dev_full": self.full_dev, **self.ws.phases.summary(),
                "training_time": spent}

    def _time_split(self, timer: PhaseTimer, gpu: GPUTelemetry | None, updates: int) -> dict:
        """Where this session's training phase went: its wall seconds, split into ``TIME_PARTS`` and the rest
        (seconds and share), the updates it made, and ``gpu``: None on the CPU; on a GPU, the peak memory torch
        allocated and reserved, and (with nvitop) each GPU's mean and median utilisation over the training phase,
        over its collect windows and over its update windows, and peak memory used."""
        out: dict = {"updates": updates, **timer.summary(), "gpu": None}
        t0, t1 = timer.t0, timer.t1
        assert t0 is not None and t1 is not None  # the timer train() started and stopped
        windows: dict[str, Sequence[Window]] = {"training": [(t0, t1)], "collect": timer.windows["collect"],
                                                "update": timer.windows["update"]}
        telemetry = gpu.summary(windows) if gpu is not None else None
        if self.device.type == "cuda":
            mib = 2**20
            out["gpu"] = {"torch_peak_allocated_mib": round(torch.cuda.max_memory_allocated(self.device) / mib, 1),
                          "torch_peak_reserved_mib": round(torch.cuda.max_memory_reserved(self.device) / mib, 1),
                          **(telemetry or {"samples": 0, "gpus": []})}
        elif telemetry is not None:  # a stand-in device (tests)
            out["gpu"] = telemetry
        return out

    def _warm_start(self, monitor: Monitor | None) -> None:
        """The first-step warm start (``warmstart.py``) on a seeded sample of this rank's train queries (the same
        size on every DDP rank, so their minibatches pair up)."""
        tc = self.cfg.training
        t0 = time.perf_counter()
        n = min(tc.warm_start_queries, len(self.train_qs) // self.world)
        gen = torch.Generator().manual_seed(self.cfg.system.seed + RANK_SEED_STRIDE * self.rank + 3)
        qidx = self.shard[torch.randperm(len(self.shard), generator=gen)[:n]]
        self.agent.use_tables(self.train_tables)
        gains = first_step_gains(self.env, qidx, self.episodes_per_round)
        t_gains = time.perf_counter() - t0
        stats = warm_start(self.agent, self.optimizer, self.amp, self.env, qidx.to(self.device), gains,
                           tc.warm_start_epochs, tc.batch_size, tc.entropy_coef, tc.max_grad_norm, self.minibatch_gen)
        self.warm_started = True
        log.info("warm start on %d train queries (every candidate tried in %.0f s, %.0f s in all): reward of the "
                 "most likely term %.4f -> %.4f (expected %.4f -> %.4f); first step, STOP included: expected %.4f -> "
                 "%.4f, greedy %.4f -> %.4f", n, t_gains, time.perf_counter() - t0, stats["term_best_before"],
                 stats["term_best_after"], stats["term_expected_before"], stats["term_expected_after"],
                 stats["expected_before"], stats["expected_after"], stats["greedy_before"], stats["greedy_after"])
        if monitor is not None:
            monitor.log(0, {f"warm_start/{k}": v for k, v in stats.items()})

    def _on_signal(self, signum, frame) -> None:
        # finish the update in flight, checkpoint, then leave (handled in train's loop condition)
        log.warning("signal %d: checkpointing and stopping after this update", signum)
        self.stop_signal = signum

    def _agree_to_stop(self, early_stop: bool) -> bool:
        """DDP: rank 0's early-stopping decision and any rank's SIGINT/SIGTERM, shared so all ranks leave the
        loop after the same update (a rank that left alone would hang the others' all-reduces)."""
        flags = torch.tensor([int(early_stop), self.stop_signal or 0], device=self.device)
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        self.stop_signal = int(flags[1]) or None
        return bool(flags[0])

    def _collect(self) -> CollectStats:
        """One update's episodes, all on one collection (``self.source``, into its buffer ``self.buf``)."""
        src = self.source = self.sources.draw()
        self.buf = src.buf
        src.buf.clear()
        self.agent.use_tables(src.tables)
        rets, finals, lens, switched = [], [], [], []
        for r in range(self.rounds):
            qidx = src.shard[src.sampler.next(self.episodes_per_round)]
            s = collect(self.agent, self.amp, src.qs, src.env, src.buf, qidx, r * self.episodes_per_round,
                        self.action_gen)
            rets.append(s["return"])
            finals.append(s["final_metric"])
            lens.append(s["length"])
            switched.append(s["switched"])
        local = torch.cat(lens).sum()  # this rank's transitions: the update's sample count
        means = torch.stack([torch.cat(rets).mean(), torch.cat(finals).mean(), torch.cat(lens).mean(),
                             torch.cat(switched).mean(), local])
        peak = local.clone()
        if self.world > 1:  # every rank rolls out the same number of episodes: the mean of means is the mean
            torch.distributed.all_reduce(means)
            torch.distributed.all_reduce(peak, op=torch.distributed.ReduceOp.MAX)
            means[:4] /= self.world
        with allowed_sync():  # the collect phase's one read
            ret, final, length, share, steps, local, peak = torch.cat([means, local[None], peak[None]]).tolist()
        n_eps = self.world * self.rounds * self.episodes_per_round
        self.episodes += n_eps
        self.steps += int(steps)
        return {"return": ret, "final_metric": final, "length": length, "switched": share, "episodes": n_eps,
                "steps": int(steps),
                "local_steps": int(local), "max_local_steps": int(peak)}

    def _eval_due(self, episodes_before: int) -> bool:
        """Whether the update just made ends with a dev evaluation: every eval_every updates, or each time the
        episode count crosses a multiple of eval_every_episodes, and after the last update."""
        every = self.cfg.training.eval_every_episodes
        if self.update == self.total_updates:
            return True
        if every is None:
            return self.update % self.cfg.training.eval_every == 0
        return self.episodes // every > episodes_before // every

    def _dev_score(self, qs: QuerySet, tables: Tables) -> tuple[dict[str, float], float]:
        return dev_score(self.cfg, self.ws, self.agent, self.amp, qs, tables)

    def _selector(self):
        """The start selector fitted on a fixed sample of every source's train queries for the body (a dev
        evaluation, the checkpoint it keeps), untrained again afterwards (``rl.selector``); a no-op without a
        choice of start."""
        if not self.agent.choice:
            return contextlib.nullcontext({})
        gen = torch.Generator().manual_seed(self.cfg.system.seed + 5)
        parts = [(src.env, src.tables, torch.randperm(len(src.qs), generator=gen)[:SELECTOR_QUERIES].sort().values)
                 for src in self.sources]
        return fitted_selector(self.agent, self.amp, parts, self.episodes_per_round)

    def _evaluate_dev(self, monitor: Monitor) -> bool:
        """Greedy dev evaluation; keeps the best checkpoint; True when early stopping should trigger."""
        assert self.dev_qs is not None and self.dev_tables is not None  # evaluations are due only with a dev split
        with self._selector() as fit:
            metrics, score = self._dev_score(self.dev_qs, self.dev_tables)
            monitor.log(self.update, {f"dev/{k}": v for k, v in metrics.items()} | {"dev/selection": score}
                        | {f"selector/{k}": v for k, v in fit.items()}, self.steps, self.episodes)
            if self.selection.record(score, self.update, self.episodes):
                self.save(self.ckpt_dir / "best.pt")
        return self.selection.exhausted(self.episodes)

    def _pick_on_full_dev(self, monitor: Monitor) -> None:
        """The dev sample's best checkpoint and the last model, scored on the whole dev split: the better one
        (the sample's pick on a tie) is best.pt. The policy is left at the last model (last.pt is saved next)."""
        qs, tables = self.ws.split("dev")
        best_path = self.ckpt_dir / "best.pt"
        with self._selector():  # the last model's selector fitted as each evaluated checkpoint's was
            _, last = self._dev_score(qs, tables)
            picked = last
            if self.selection.best_update != self.update:
                last_model = {k: v.clone() for k, v in self.agent.core.state_dict().items()}
                self.agent.core.load_state_dict(load_compatible(best_path, self.cfg, self.ws)["model"])
                _, picked = self._dev_score(qs, tables)
                self.agent.core.load_state_dict(last_model)
            chosen = "last" if last > picked + 1e-9 else "sample_best"
            if chosen == "last":
                self.save(best_path)
        self.full_dev = {"queries": len(qs), "sample_best": picked, "sample_best_update": self.selection.best_update,
                         "last": last, "last_update": self.update, "chosen": chosen}
        monitor.log(self.update, {"dev_full/sample_best": picked, "dev_full/last": last}, self.steps, self.episodes)
        log.info("whole dev split (%d queries): the sample's best (update %d) %.4f, the last model (update %d) "
                 "%.4f; best.pt is the %s", len(qs), self.selection.best_update, picked, self.update, last,
                 "last model" if chosen == "last" else "sample's best")

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        return {
            "format": CHECKPOINT_FORMAT,
            "run": self.run,
            "config": config_to_dict(self.cfg),
            "spec": self.spec,
            "data": self.data_id,
            "also_data": self.sources.also_data,
            "init_from_sha256": self.init_sha256,
            "model": self.agent.core.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.amp.scaler.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "action": self.action_gen.get_state(),
                    "minibatch": self.minibatch_gen.get_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
            **self.sources.state_dict(),
            "counters": {"update": self.update, "episodes": self.episodes, "steps": self.steps,
                         **self.selection.counters(),
                         "nonfinite_streak": self.nonfinite_streak, "nonfinite_total": self.nonfinite_total,
                         "warm_started": self.warm_started},
        }

    def save(self, path: Path) -> None:
        with self._timer.part("checkpointing") if self._timer is not None else contextlib.nullcontext():
            save_checkpoint(path, self.state())

    def load(self, path: str | Path) -> None:
        s = load_compatible(path, self.cfg, self.ws)
        self.agent.core.load_state_dict(s["model"])
        self.optimizer.load_state_dict(s["optimizer"])
        self.scheduler.load_state_dict(s["scheduler"])
        self.amp.scaler.load_state_dict(s["scaler"])
        torch.set_rng_state(s["rng"]["torch"])
        if s["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(s["rng"]["cuda"])
        self.init_sha256 = s.get("init_from_sha256")
        c = s["counters"]
        if self.is_main:  # the checkpoint holds rank 0's streams and shard order
            seed = self.cfg.system.seed + 3 * c["update"]
            self._restore_generator(self.action_gen, s["rng"]["action"], seed)
            self._restore_generator(self.minibatch_gen, s["rng"]["minibatch"], seed + 1)
            self.sources.load_samplers(s)
        else:  # other DDP ranks start fresh streams, offset by the update so they do not replay the first ones
            seed = self.cfg.system.seed + RANK_SEED_STRIDE * self.rank + 3 * c["update"]
            self.action_gen.manual_seed(seed)
            self.minibatch_gen.manual_seed(seed + 1)
            self.sources.reseed_samplers(seed)
        if "source_rng" in s:  # every rank: the collection drawn per update must stay the same on all
            self.sources.gen.set_state(s["source_rng"])
        self.update, self.episodes, self.steps = c["update"], c["episodes"], c["steps"]
        self.selection.load(c)
        self.nonfinite_streak, self.nonfinite_total = c["nonfinite_streak"], c["nonfinite_total"]
        self.warm_started = c.get("warm_started", self.update > 0)  # checkpoints from before the warm start
        log.info("resumed from %s at update %d", path, self.update)

    @staticmethod
    def _restore_generator(gen: torch.Generator, state: torch.Tensor, seed: int) -> None:
        """A device generator's saved state; one saved on another kind of device does not fit (CPU and CUDA
        generators differ), and the stream restarts from ``seed`` instead: the run goes on, not bit-exactly."""
        try:
            gen.set_state(state)
        except RuntimeError:
            log.warning("checkpoint random streams come from another kind of device; reseeding them")
            gen.manual_seed(seed)

    # ------------------------------------------------------------------ test
    def test(self, checkpoint: str | Path | None = None, oracle: bool = True) -> dict[str, dict[str, float]]:
        """Evaluate the best checkpoint on the test split beside BM25 and RM3; writes test_metrics.json."""
        path = Path(checkpoint) if checkpoint else self.ckpt_dir / "best.pt"
        self.agent.core.load_state_dict(load_compatible(path, self.cfg, self.ws)["model"])
        for src in self.sources:  # training's score lanes are not needed again; the field's index is built next
            src.env.release_lanes()
        trim_heap()
        risk: dict = {}
        results = evaluate_split(self.cfg, self.ws, self.agent, self.amp, "test", baselines=True,
                                 run_dir=Path(self.cfg.training.output_dir) / "runs", oracle=oracle, risk=risk)
        out = Path(self.cfg.training.output_dir)
        title = f"{self.ws.collection.name} / test"
        atomic_write_json(out / "test_metrics.json", results)
        atomic_write_json(out / "test_risk.json", risk)
        atomic_write_bytes(out / "test_metrics.md", (format_table(results, title) + "\n\n"
                                                     + format_risk(risk, title=f"{title}: queries the agent helps "
                                                                   "and hurts") + "\n").encode("utf-8"))
        return results


__all__ = ["Trainer"]
