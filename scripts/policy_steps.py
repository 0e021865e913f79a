"""What a trained policy does step by step when it rewrites a split greedily: at each step, how many episodes are
still going, the quartiles of P(STOP) over them, and how many added a term at each expansion weight. Answers "does
the policy stop early, or spend its whole step budget?", and "which weights does it use?".

    python scripts/policy_steps.py --policy general-joint --data-dir ../shared/datasets/cisi --split train
    python scripts/policy_steps.py --checkpoint runs/wikicar/checkpoints/best.pt --split dev

A policy is applied as `adaptive-ir evaluate --policy` applies it (its own config, the collection's dev carved with
seed 42); a checkpoint with its own config and collection (`--data-dir` if it moved). Prints one JSON line per step.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from adaptive_ir.artifacts.checkpoint import load_agent, pretrained_config
from adaptive_ir.inference.reformulate import Reformulator
from adaptive_ir.rl.factory import make_env
from adaptive_ir.rl.rollout import greedy_actions, step_counters
from adaptive_ir.rl.workspace import Workspace


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--policy", help="a shipped policy's name, an exported folder or a checkpoint, applied to --data-dir")
    src.add_argument("--checkpoint", help="a training checkpoint, on the collection it was trained on")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--split", default="dev")
    p.add_argument("--max-queries", type=int, default=None, help="the split's first N queries only")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="with --policy: change a setting, as `evaluate --policy --set` does")
    args = p.parse_args()
    if args.set and not args.policy:
        p.error("--set goes with --policy (a checkpoint is read with its own config)")
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if args.policy:
        cfg, saved = pretrained_config(args.policy, args.data_dir, dict(a.split("=", 1) for a in args.set))
        ws = Workspace(cfg, device, progress=False, splits=(args.split,))
        agent = load_agent(saved, cfg, ws, device, portable=True)[0]
    else:
        ref = Reformulator.load(args.checkpoint, "cpu", args.data_dir)
        cfg, ws, agent = ref.cfg, ref.ws, ref.agent
        ws.load_split(args.split)
    qids, texts, _ = ws.collection.split(args.split)
    qids, texts = qids[: args.max_queries], texts[: args.max_queries]
    qs, tables = ws.query_set(args.split, qids, texts, None)  # no judgments: the policy never sees them
    agent.use_tables(tables)
    agent.eval()
    env = make_env(cfg, ws, qs, scored=False)
    env.reset(torch.arange(len(qs)))
    ep = agent.episode_inputs(qs, env.qidx)
    with torch.no_grad():
        for t, step in enumerate(step_counters(env, len(qs))):
            logits, _ = agent(ep, env.chosen, step)
            logp = torch.log_softmax(logits.float(), dim=1)
            actions = greedy_actions(logp)
            alive = env.alive
            added = actions[alive & (actions < env.stop)]
            p_stop = logp[alive, -1].exp().numpy()
            print(json.dumps({
                "step": t, "going": int(alive.sum()), "queries": len(qs),
                "p_stop_quartiles": np.round(np.quantile(p_stop, [0.25, 0.5, 0.75]), 4).tolist() if p_stop.size else None,
                "added_per_weight": dict(zip(map(str, env.levels), (added % env.L).bincount(minlength=env.L).tolist())),
            }), flush=True)
            env.step(actions)


if __name__ == "__main__":
    main()
