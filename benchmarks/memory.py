"""Rollout buffer memory: ours (ids and scalars) vs a buffer of copied candidate embeddings.

Ours is a real ``RolloutBuffer`` allocated for the config (``episodes_per_update`` × ``max_steps`` transitions,
M candidates) and for the seed project's ``buffer_size`` of 50,000 transitions; ``nbytes`` counts its tensors.
The embedding-copy buffer is what the earlier project stored per transition: M candidate embeddings of
``--copy-dim`` fp32 values (50,000 × 50 × 500 × 4 B ≈ 5 GB); it is computed, not allocated.

    python benchmarks/memory.py --config scifact --json benchmarks/results/memory.json
"""

from __future__ import annotations

import math

import _common as common
import torch

from adaptive_ir.config import load_config
from adaptive_ir.rl.buffer import RolloutBuffer

SEED_TRANSITIONS = 50_000


def buffer_bytes(transitions: int, steps: int, candidates: int) -> int:
    """nbytes of a RolloutBuffer holding at least ``transitions`` transitions (whole episodes of ``steps``)."""
    return RolloutBuffer(steps, math.ceil(transitions / steps), candidates, "cpu").nbytes


def main() -> None:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--copy-dim", type=int, default=500, help="embedding width of the copying buffer")
    p.add_argument("--transitions", type=int, default=SEED_TRANSITIONS)
    args = p.parse_args()
    device = common.setup(args)
    cfg = load_config(args.config)
    steps, m = cfg.rl_agent.max_steps_per_episode, cfg.candidate_mining.max_candidates
    configured = cfg.training.episodes_per_update * steps
    ours = {"configured": buffer_bytes(configured, steps, m), "seed_capacity": buffer_bytes(args.transitions, steps, m)}
    copy_bytes = {"configured": configured * m * args.copy_dim * 4, "seed_capacity": args.transitions * m * args.copy_dim * 4}
    payload = {
        "benchmark": "memory", "machine": common.machine(device),
        "settings": {"config": args.config, "max_steps": steps, "max_candidates": m,
                     "configured_transitions": configured, "seed_transitions": args.transitions,
                     "copy_dim": args.copy_dim, "quick": args.quick},
        "buffer_bytes": ours["seed_capacity"],
        "embedding_copy_bytes": copy_bytes["seed_capacity"],
        "ratio": copy_bytes["seed_capacity"] / ours["seed_capacity"],
        "per_capacity": {k: {"buffer_bytes": ours[k], "embedding_copy_bytes": copy_bytes[k],
                             "ratio": copy_bytes[k] / ours[k]} for k in ours},
        "per_transition_bytes": {"ours": ours["seed_capacity"] / args.transitions, "embedding_copy": m * args.copy_dim * 4},
    }
    fig, ax = common.figure()
    labels = [f"{k}\n({configured if k == 'configured' else args.transitions:,} transitions)" for k in ours]
    x = torch.arange(len(labels)).tolist()
    ax.bar([i - 0.2 for i in x], [ours[k] / 2**20 for k in ours], 0.4, label="ours (ids + scalars)")
    ax.bar([i + 0.2 for i in x], [copy_bytes[k] / 2**20 for k in ours], 0.4, label=f"embedding copies (fp32 ×{args.copy_dim})")
    ax.set(xticks=x, xticklabels=labels, yscale="log", ylabel="MiB (log)", title=f"Rollout buffer memory — {args.config}")
    ax.legend()
    payload["plot"] = common.save_plot(fig, args, "memory")
    common.write_json(args.json, payload)


if __name__ == "__main__":
    main()
