"""The DDP process group as the rest of the code sees it: this process's rank and the world size."""

from __future__ import annotations

import torch


def dist_info() -> tuple[int, int]:
    """(rank, world size) of the DDP process group, (0, 1) outside one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


__all__ = ["dist_info"]
