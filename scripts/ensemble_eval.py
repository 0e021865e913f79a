"""Evaluate several trained policies as one: at every step each member scores the actions and the ensemble acts on
the mean of their action probabilities (greedy as `evaluate` is: STOP when its mean probability is above ½, else the
most probable term). Answers "do the training seeds of one recipe, applied together, beat one of them?".

    python scripts/ensemble_eval.py --policy general-joint --member runs/general-joint-s1/checkpoints/best.pt \
        --member runs/general-joint-s2/checkpoints/best.pt --data-dir ../shared/datasets/cisi --split train \
        --set data.split_seed=42 --run-dir runs/ensemble-cisi

The first policy's config (as `evaluate --policy` applies it, with `--set`) indexes, mines and embeds the collection;
every member must fit that policy's spec (same inputs, same network sizes). Prints the ensemble's metrics as JSON
and, with --run-dir, writes its TREC run (`<split>.agent.trec`) for `scripts/paired_runs.py`.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path

import torch
from torch import nn

from adaptive_ir.artifacts.checkpoint import SavedPolicy, load_agent, pretrained_config, resolve_policy
from adaptive_ir.artifacts.spec import check_fits, policy_spec
from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.evaluation.methods import evaluate_split
from adaptive_ir.rl.workspace import Workspace


class MeanProbabilities(nn.Module):
    """The members' cores as one: logits = log of the mean of their action probabilities, value = their mean."""

    def __init__(self, cores: list[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(cores)

    def forward(self, *inputs):
        outs = [m(*inputs) for m in self.members]
        logp = torch.stack([torch.log_softmax(logits.float(), dim=1) for logits, _ in outs])
        values = torch.stack([v.float() for _, v in outs])
        return torch.logsumexp(logp, 0) - math.log(len(outs)), values.mean(0)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Prints and returns the ensemble's metrics; a problem the user can fix (a member that does not fit, a missing
    file) exits with its one-line message, as the CLI does."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", required=True, help="the first member: a shipped policy's name, an exported folder or a "
                   "checkpoint; its config is the one applied")
    p.add_argument("--member", action="append", default=[],
                   help="another member: a checkpoint, an exported folder or a shipped policy's name (repeatable)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--split", default="dev")
    p.add_argument("--run-dir", default=None)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="change a setting, as `evaluate --policy --set` does")
    args = p.parse_args(argv)
    try:
        return evaluate_ensemble(args)
    except AdaptiveIRError as e:
        p.exit(2, f"error: {e}\n")


def evaluate_ensemble(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(1)
    device = torch.device("cpu")
    cfg, saved = pretrained_config(args.policy, args.data_dir, dict(a.split("=", 1) for a in args.set))
    ws = Workspace(cfg, device, progress=False, splits=(args.split,))
    agent, amp, _ = load_agent(saved, cfg, ws, device, portable=True)
    cores = [agent.core]
    for member in args.member:
        member_state = SavedPolicy.read(resolve_policy(member, must_exist=True)).state
        check_fits(f"--member {member}", member_state, policy_spec(cfg, ws), None,
                   "every member must have the first policy's inputs and network sizes")
        core = copy.deepcopy(agent.core)
        core.load_state_dict(member_state["model"])
        cores.append(core.eval())
    ensemble = MeanProbabilities(cores).eval()
    agent.core = ensemble
    object.__setattr__(agent, "_local", ensemble)  # the rollout's forward (see Agent.compile_local)
    results = evaluate_split(cfg, ws, agent, amp, args.split, baselines=False,
                             run_dir=Path(args.run_dir) if args.run_dir else None)
    print(json.dumps({"members": [str(saved.path), *args.member], "split": args.split, **results["agent"]}))
    return results["agent"]


if __name__ == "__main__":
    main()
