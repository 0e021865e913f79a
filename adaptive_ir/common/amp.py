"""Mixed precision for one device: autocast and, for fp16, a GradScaler (``torch.amp``)."""

from __future__ import annotations

import contextlib
from typing import Protocol

import torch
from torch import nn


class AmpSettings(Protocol):
    """What an AmpContext is made from (``config.TrainingConfig`` has both fields). Read-only members, so a
    narrower type (TrainingConfig's ``Literal`` amp_dtype) fits."""

    @property
    def use_amp(self) -> bool: ...
    @property
    def amp_dtype(self) -> str: ...


def native_bf16(device: torch.device) -> bool:
    """bf16 with hardware support: CUDA compute capability ≥ 8.0 (Ampere on). ``torch.cuda.is_bf16_supported()``
    is also True on older GPUs (a T4) through slow emulation, so it cannot decide alone."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


class AmpContext:
    """autocast + GradScaler for a device: on CUDA, ``auto`` is bf16 where it is native and fp16 with loss
    scaling elsewhere; bf16 on the CPU only when asked (``dtype='bfloat16'``); a no-op when disabled."""

    def __init__(self, device: torch.device, enabled: bool, dtype: str = "auto"):
        self.device_type = device.type
        if dtype == "auto":
            if device.type == "cuda":
                dtype = "bfloat16" if native_bf16(device) else "float16"
            else:
                enabled = False  # CPU autocast is slower than fp32 on most CPUs: opt in with amp_dtype
                dtype = "bfloat16"
        self.enabled = enabled
        self.dtype = getattr(torch, dtype)
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=enabled and self.dtype == torch.float16)

    def autocast(self, cache: bool = True):
        """``cache``: keep each weight's cast for the context's lifetime (torch's default; off under a CUDA graph
        capture)."""
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype, cache_enabled=cache)

    @classmethod
    def of(cls, device: torch.device, settings: AmpSettings) -> AmpContext:
        """The context a run's training settings ask for on ``device``."""
        return cls(device, settings.use_amp, settings.amp_dtype)


class Autocast(nn.Module):
    """Runs ``module`` under the AmpContext's autocast. DataParallel's worker threads re-enter autocast with the
    default dtype (fp16 on CUDA), so the configured dtype has to be set inside each replica."""

    def __init__(self, module: nn.Module, amp: AmpContext):
        super().__init__()
        self.module, self.amp = module, amp

    def forward(self, *inputs):
        with self.amp.autocast():
            return self.module(*inputs)


__all__ = ["AmpContext", "AmpSettings", "Autocast", "native_bf16"]
