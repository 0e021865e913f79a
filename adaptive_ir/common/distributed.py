"""The DDP process group as the rest of the code sees it: this process's rank, the world size, and how many of its
processes share this machine."""

from __future__ import annotations

import os

import torch


def dist_info() -> tuple[int, int]:
    """(rank, world size) of the DDP process group, (0, 1) outside one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def ranks_on_this_machine() -> int:
    """Processes of the DDP group on this machine (torchrun's ``LOCAL_WORLD_SIZE``); 1 outside one."""
    if dist_info()[1] == 1:
        return 1
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


__all__ = ["dist_info", "ranks_on_this_machine"]
