"""The PPO update: clipped policy loss, clipped value loss, entropy bonus, under torch.amp when asked.

No minibatch reads a value on the host. The transitions are indexed once per update (their count comes from the
rollout statistics), every minibatch has the same static size (the tail of the last one is masked), and a
minibatch whose gradients are not finite, or that comes after the KL early stop, is skipped *on the device*:
the fused Adam step takes a ``found_inf`` flag and leaves the parameters, moments and step count untouched.
Statistics are summed on the device and read once at the end.

The minibatches after a KL early stop are not run at all once the host knows of the stop: on the CPU, where a read
is free, it is read after every minibatch; on an accelerator once before each epoch (one sync per epoch, none per
minibatch), so the rest of the epoch in which the stop falls still runs, masked. Each epoch's minibatch order is
drawn even when the epoch is skipped, so the generator's stream does not depend on the mode (under float16 AMP the
loss scaler also counts the masked minibatches, so its scale, and through it the rounding, may differ).

On CUDA (one process, no float16 loss scaler) each update captures its minibatch step (forward, loss, backward,
clipping, the fused Adam step, the statistics) once as a CUDA graph and replays it per minibatch: a 26k-parameter
policy's minibatch is a few hundred kernels of microseconds each, whose launches cost more than their work. The
replay runs the same kernels on the same memory, so it computes what the eager step computes, bit for bit
(``tests/test_cuda.py``). The capture is redone every update, so nothing it holds (the learning rate, the
optimizer's state after a resume) can go stale.

Under DDP every rank runs the same number of minibatches (the largest rank's count, agreed by the caller), so
every backward's gradient all-reduce has a partner; the skip decisions are taken from the all-reduced gradients
and the all-reduced approximate KL, hence identical on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.distributed import dist_info
from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.common.hostsync import allowed_sync
from adaptive_ir.config import TrainingConfig
from adaptive_ir.rl.buffer import RolloutBuffer
from adaptive_ir.rl.env import QuerySet
from adaptive_ir.rl.policy import Agent

NAN_ADVICE = ("the loss or its gradients were not finite in {n} minibatches in a row: try --no-amp and a lower "
              "training.learning_rate (e.g. 1e-4)")


_TRAINING = TrainingConfig()


@dataclass
class PPOSettings:
    """The update's settings: the ``training`` section's PPO keys (``from_config``), whose defaults these are."""

    clip_epsilon: float = _TRAINING.clip_epsilon
    value_loss_coef: float = _TRAINING.value_loss_coef
    entropy_coef: float = _TRAINING.entropy_coef
    max_grad_norm: float = _TRAINING.max_grad_norm
    epochs: int = _TRAINING.ppo_epochs
    minibatch_size: int = _TRAINING.batch_size
    target_kl: float | None = _TRAINING.target_kl
    clip_value: bool = True
    cuda_graph: bool = _TRAINING.cuda_graph
    """Replay each update's minibatch step as a CUDA graph where it can be (module docstring)."""
    max_nonfinite: int = 20
    """Consecutive non-finite minibatches before training stops with NAN_ADVICE."""

    @classmethod
    def from_config(cls, tc: TrainingConfig) -> PPOSettings:
        return cls(clip_epsilon=tc.clip_epsilon, value_loss_coef=tc.value_loss_coef, entropy_coef=tc.entropy_coef,
                   max_grad_norm=tc.max_grad_norm, epochs=tc.ppo_epochs, minibatch_size=tc.batch_size,
                   target_kl=tc.target_kl, cuda_graph=tc.cuda_graph)


def make_optimizer(params, lr: float) -> torch.optim.Adam:
    """The update's optimizer: Adam with the fused kernel, which takes the skip flag (``found_inf``) on the
    device, so skipping a step needs no host read."""
    return torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)


class _Samples(NamedTuple):
    """The update's transitions, one row each."""

    qidx: torch.Tensor
    chosen: torch.Tensor
    started: torch.Tensor
    step: torch.Tensor
    actions: torch.Tensor
    old_logp: torch.Tensor
    old_values: torch.Tensor
    adv: torch.Tensor
    ret: torch.Tensor


def _losses(agent: Agent, amp: AmpContext, qs: QuerySet, d: _Samples, mb: torch.Tensor, w: torch.Tensor,
            s: PPOSettings, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Minibatch ``mb`` (sample indices; weight ``w`` 0 for padding): the loss, and (policy loss, value loss,
    entropy, approximate KL, clip fraction) as masked means over its real samples. ``cache``: autocast's cache of
    cast weights (off under a graph capture, as torch asks)."""
    ep = agent.episode_inputs(qs, d.qidx[mb])
    with amp.autocast(cache):
        logits, values = agent(ep, d.chosen[mb], d.step[mb], d.started[mb], parallel=True)
    logp_all = torch.log_softmax(logits.float(), dim=1)
    logp = logp_all.gather(1, d.actions[mb, None]).squeeze(1)
    values, old_values, adv, ret = values.float(), d.old_values[mb], d.adv[mb], d.ret[mb]
    log_ratio = logp - d.old_logp[mb]
    ratio = log_ratio.exp()
    count = w.sum().clamp(min=1)
    mean = lambda x: (w * x).sum() / count  # noqa: E731
    pg = mean(torch.max(-adv * ratio, -adv * ratio.clamp(1 - s.clip_epsilon, 1 + s.clip_epsilon)))
    if s.clip_value:
        v_clip = old_values + (values - old_values).clamp(-s.clip_epsilon, s.clip_epsilon)
        v_loss = 0.5 * mean(torch.max((values - ret) ** 2, (v_clip - ret) ** 2))
    else:
        v_loss = 0.5 * mean((values - ret) ** 2)
    entropy = mean(-(logp_all.exp() * logp_all).sum(1))
    loss = pg + s.value_loss_coef * v_loss - s.entropy_coef * entropy
    with torch.no_grad():
        stats = torch.stack([pg, v_loss, entropy, mean((ratio - 1) - log_ratio),
                             mean(((ratio - 1).abs() > s.clip_epsilon).float())])
    return loss, stats


def _graphs_on(device: torch.device) -> bool:
    """Whether the update's minibatch step is captured as a graph on ``device`` (CUDA's)."""
    return device.type == "cuda"


def _capture(step, optimizer: torch.optim.Optimizer, force: torch.Tensor) -> torch.cuda.CUDAGraph:
    """``step`` captured as a CUDA graph, after one eager warm-up run on a side stream (cuBLAS, autograd and the
    optimizer's state initialise there, outside the capture) with ``force`` set, so that it changes no weight."""
    force.fill_(True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    # the fused Adam computes the same either way; its capturable flag only admits the capture
    saved = [group["capturable"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["capturable"] = True
    graph = torch.cuda.CUDAGraph()
    try:
        optimizer.zero_grad(set_to_none=True)  # the captured backward writes gradients of its own
        # thread-local: the GPU telemetry's sampling thread may run meanwhile
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            step()
    finally:
        for group, flag in zip(optimizer.param_groups, saved):
            group["capturable"] = flag
    force.fill_(False)
    return graph


def ppo_update(agent: Agent, optimizer: torch.optim.Optimizer, amp: AmpContext, buf: RolloutBuffer,
               qs: QuerySet, advantages: torch.Tensor, returns: torch.Tensor, s: PPOSettings,
               generator: torch.Generator, samples: int, group_samples: int | None = None,
               nonfinite_streak: int = 0, stop_check: str | None = None) -> dict[str, float]:
    """One PPO update over the buffer's ``samples`` valid transitions (= ``buf.alive.sum()``, known to the caller);
    returns logged statistics. ``group_samples``: the largest ``samples`` over the DDP ranks (every rank runs the
    minibatches that many samples need). ``optimizer`` must take ``found_inf`` (``make_optimizer``).
    ``stop_check``: when the host reads the KL stop, "minibatch" or "epoch" (module docstring); None: minibatch on
    the CPU, epoch elsewhere."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        raise TypeError("ppo_update needs an optimizer that skips steps on the device (found_inf): "
                        "use adaptive_ir.rl.ppo.make_optimizer (fused Adam)")
    if samples < 1:
        raise ValueError("ppo_update needs at least one transition")
    n, device = samples, buf.alive.device
    size = max(1, min(s.minibatch_size, max(n, group_samples or n)))
    batches = -(-max(n, group_samples or n) // size)
    idx = buf.flat_valid(n)
    adv = advantages.reshape(-1)[idx]
    d = _Samples(buf.qidx.reshape(-1)[idx], buf.chosen.reshape(-1, buf.chosen.shape[-1])[idx],
                 buf.started.reshape(-1)[idx],
                 torch.div(idx, buf.qidx.shape[1], rounding_mode="floor"), buf.actions.reshape(-1)[idx],
                 buf.logprobs.reshape(-1)[idx], buf.values.reshape(-1)[idx],
                 (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8) if n > 1 else adv, returns.reshape(-1)[idx])
    # every minibatch has `size` slots; slots past this rank's samples point at sample 0 and weigh 0
    weight = (torch.arange(batches * size, device=device) < n).float().view(batches, size)
    pad = torch.zeros(batches * size - n, dtype=torch.long, device=device)

    params = [p for p in agent.parameters() if p.requires_grad]
    world = dist_info()[1]
    sums = torch.zeros(5, device=device)  # policy_loss, value_loss, entropy, approx_kl, clipfrac
    stepped, skipped = torch.zeros((), device=device), torch.zeros((), device=device)
    streak = torch.full((), float(nonfinite_streak), device=device)
    worst = streak.clone()
    stopped = torch.zeros((), dtype=torch.bool, device=device)
    force = torch.zeros((), dtype=torch.bool, device=device)  # skip the step whatever it computes (graph warm-up)
    per_minibatch = (stop_check or ("minibatch" if device.type == "cpu" else "epoch")) == "minibatch"
    graphed = (s.cuda_graph and _graphs_on(device) and world == 1 and not amp.scaler.is_enabled()
               and not agent.parallelized)

    def minibatch(mb: torch.Tensor, w: torch.Tensor) -> None:
        """One minibatch's step; its state lives in the tensors above, updated in place (a graph replays it)."""
        loss, row = _losses(agent, amp, qs, d, mb, w, s, cache=not graphed)
        optimizer.zero_grad(set_to_none=True)
        amp.scaler.scale(loss).backward()
        amp.scaler.unscale_(optimizer)
        # after DDP's all-reduce the gradients, hence this norm and the skip, are the same on every rank
        norm = nn.utils.clip_grad_norm_(params, s.max_grad_norm, foreach=True)
        nonfinite = ~torch.isfinite(norm) & ~stopped
        skip = nonfinite | stopped
        if graphed:
            skip = skip | force
        # read by the fused step; Optimizer's stub lacks it (torch's GradScaler ignores the same)
        optimizer.found_inf = skip.float()  # type: ignore[attr-defined]
        optimizer.step()
        amp.scaler.update()
        if s.target_kl is not None and world > 1:  # the stop decision must be the same on every rank
            torch.distributed.all_reduce(row[3])
            row[3] /= world
        sums.add_(torch.where(skip, 0.0, row))
        stepped.add_((~skip).float())
        skipped.add_(nonfinite.float())
        # in place, as many operators as the expressions they replace: +1 where not finite, kept while stopped, else 0
        streak.mul_(nonfinite | stopped).add_(nonfinite)
        torch.maximum(worst, streak, out=worst)
        if s.target_kl is not None:
            stopped.logical_or_(~skip & (row[3] > s.target_kl))

    run = minibatch
    if graphed:
        static_mb, static_w = torch.zeros(size, dtype=torch.long, device=device), weight[0].clone()
        graph = _capture(lambda: minibatch(static_mb, static_w), optimizer, force)
        for t in (sums, stepped, skipped, stopped):  # the warm-up's statistics are not the update's
            t.zero_()
        streak.fill_(float(nonfinite_streak))
        worst.copy_(streak)

        def run(mb: torch.Tensor, w: torch.Tensor) -> None:
            static_mb.copy_(mb)
            static_w.copy_(w)
            graph.replay()

    halted = False  # the host knows of the KL stop: what is left is skipped, not run
    agent.eval()  # the network the rollout sampled from: no train-only behaviour may change the ratio
    try:
        for epoch in range(s.epochs):
            order = torch.cat([torch.randperm(n, generator=generator, device=device), pad]).view(batches, size)
            if s.target_kl is not None and epoch and not halted and not per_minibatch:
                with allowed_sync():  # once per epoch (identical on every DDP rank: the KL is all-reduced)
                    halted = bool(stopped)
            if halted:
                continue
            for mb, w in zip(order, weight):
                run(mb, w)
                if s.target_kl is not None and per_minibatch:
                    with allowed_sync():
                        halted = bool(stopped)
                    if halted:
                        break
    finally:  # the flag belongs to this update: no later step() may see it
        optimizer.__dict__.pop("found_inf", None)
        if graphed:  # the gradients live in the graph's memory: let both go
            optimizer.zero_grad(set_to_none=True)
    var_y = d.ret.var(unbiased=False)
    var_res = (d.ret - d.old_values).var(unbiased=False)
    with allowed_sync():  # the update's one read, for the log
        read = torch.cat([sums / stepped.clamp(min=1), torch.stack([stepped, skipped, streak, worst, var_y,
                                                                    var_res])]).tolist()
    pg, v_loss, ent, kl, clipfrac, count, skipped, streak, worst, var_y, var_res = read
    if worst >= s.max_nonfinite:
        raise AdaptiveIRError(NAN_ADVICE.format(n=int(worst)))
    return {"policy_loss": pg, "value_loss": v_loss, "entropy": ent, "approx_kl": kl, "clipfrac": clipfrac,
            "explained_variance": float("nan") if var_y == 0 else 1 - var_res / var_y,
            "nonfinite_skipped": int(skipped), "nonfinite_streak": int(streak), "minibatches": int(count),
            "samples": n}
