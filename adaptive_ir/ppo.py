"""The PPO update: clipped policy loss, clipped value loss, entropy bonus, under torch.amp when asked."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from .buffer import RolloutBuffer
from .env import QuerySet
from .errors import AdaptiveIRError
from .policy import Agent

NAN_ADVICE = ("the loss was not finite in {n} minibatches in a row: try --no-amp and a lower "
              "training.learning_rate (e.g. 1e-4)")


@dataclass
class PPOSettings:
    clip_epsilon: float = 0.2
    value_loss_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    epochs: int = 4
    minibatch_size: int = 64
    target_kl: float | None = None
    clip_value: bool = True
    max_nonfinite: int = 20
    """Consecutive non-finite minibatches before training stops with NAN_ADVICE."""


class AmpContext:
    """autocast + GradScaler for a device: fp16 with loss scaling on CUDA (bf16 where supported),
    bf16 on the CPU only when asked (``dtype='bfloat16'``); a no-op when disabled."""

    def __init__(self, device: torch.device, enabled: bool, dtype: str = "auto"):
        self.device_type = device.type
        if dtype == "auto":
            if device.type == "cuda":
                dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
            else:
                enabled = False  # CPU autocast is slower than fp32 on most CPUs: opt in with amp_dtype
                dtype = "bfloat16"
        self.enabled = enabled
        self.dtype = getattr(torch, dtype)
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=enabled and self.dtype == torch.float16)

    def autocast(self):
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


def ppo_update(agent: Agent, optimizer: torch.optim.Optimizer, amp: AmpContext, buf: RolloutBuffer,
               qs: QuerySet, advantages: torch.Tensor, returns: torch.Tensor, s: PPOSettings,
               generator: torch.Generator, nonfinite_streak: int = 0) -> dict[str, float]:
    """One PPO update over the buffer's valid transitions; returns logged statistics."""
    idx = buf.flat_valid()
    n = idx.numel()
    steps, episodes = buf.qidx.shape
    t_of = torch.div(idx, episodes, rounding_mode="floor")
    qidx = buf.qidx.reshape(-1)[idx]
    chosen = buf.chosen.reshape(-1, buf.chosen.shape[-1])[idx]
    actions, old_logp = buf.actions.reshape(-1)[idx], buf.logprobs.reshape(-1)[idx]
    old_values = buf.values.reshape(-1)[idx]
    adv, ret = advantages.reshape(-1)[idx], returns.reshape(-1)[idx]
    adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8) if n > 1 else adv

    params = [p for p in agent.parameters() if p.requires_grad]
    stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0}
    count = skipped = 0
    stop_early = False
    agent.train()
    for _ in range(s.epochs):
        perm = torch.randperm(n, generator=generator, device="cpu").to(idx.device)
        for lo in range(0, n, s.minibatch_size):
            mb = perm[lo:lo + s.minibatch_size]
            with amp.autocast():
                logits, values = agent(qs, qidx[mb], chosen[mb], t_of[mb])
            dist = torch.distributions.Categorical(logits=logits.float())
            logp = dist.log_prob(actions[mb])
            log_ratio = logp - old_logp[mb]
            ratio = log_ratio.exp()
            pg = torch.max(-adv[mb] * ratio, -adv[mb] * ratio.clamp(1 - s.clip_epsilon, 1 + s.clip_epsilon)).mean()
            if s.clip_value:
                v_clip = old_values[mb] + (values - old_values[mb]).clamp(-s.clip_epsilon, s.clip_epsilon)
                v_loss = 0.5 * torch.max((values - ret[mb]) ** 2, (v_clip - ret[mb]) ** 2).mean()
            else:
                v_loss = 0.5 * ((values - ret[mb]) ** 2).mean()
            entropy = dist.entropy().mean()
            loss = pg + s.value_loss_coef * v_loss - s.entropy_coef * entropy
            if not torch.isfinite(loss):
                skipped += 1
                nonfinite_streak += 1
                if nonfinite_streak >= s.max_nonfinite:
                    raise AdaptiveIRError(NAN_ADVICE.format(n=nonfinite_streak))
                continue
            nonfinite_streak = 0
            optimizer.zero_grad(set_to_none=True)
            amp.scaler.scale(loss).backward()
            amp.scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(params, s.max_grad_norm)
            amp.scaler.step(optimizer)  # skips the step itself if the fp16 gradients overflowed
            amp.scaler.update()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
                stats["policy_loss"] += pg.item()
                stats["value_loss"] += v_loss.item()
                stats["entropy"] += entropy.item()
                stats["approx_kl"] += approx_kl.item()
                stats["clipfrac"] += ((ratio - 1).abs() > s.clip_epsilon).float().mean().item()
            count += 1
            if s.target_kl is not None and approx_kl.item() > s.target_kl:
                stop_early = True
                break
        if stop_early:
            break
    out = {k: v / max(count, 1) for k, v in stats.items()}
    var_y = ret.var(unbiased=False)
    out["explained_variance"] = float("nan") if var_y == 0 else float(1 - (ret - old_values).var(unbiased=False) / var_y)
    out["nonfinite_skipped"] = skipped
    out["nonfinite_streak"] = nonfinite_streak
    out["minibatches"] = count
    out["samples"] = n
    return out
