"""Train a policy with TorchRL's PPO loss (``ClipPPOLoss`` + ``GAE``) on the TorchRL env, then measure it greedily.

    python examples/torchrl_ppo.py --config scifact --data-dir ../shared/datasets/scifact --total-steps 200000

The env is ``adaptive_ir.envs.torchrl_env.ReformulateTorchRLEnv`` (batch size ``--num-envs``, partial resets as
episodes end); the policy a small candidate scorer written here, its logits masked by the env's ``action_mask``
(``MaskedCategorical``). Ends by printing one JSON line like ``examples/sb3_maskable_ppo.py``:
``{"split", "env_steps", "agent": {"R@40", "nDCG@10"}, "bm25": {...}}``. Needs ``pip install "adaptive-ir[envs]"``.
"""

from __future__ import annotations

import argparse
import json

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from adaptive_ir.envs.evaluate import learner_report
from adaptive_ir.envs.torchrl_env import ReformulateTorchRLEnv

OBS = ["query", "candidates", "features", "chosen", "step"]


class Scorer(nn.Module):
    """Each candidate scored from its embedding, its features (z-scored over the query's candidates), its cosine
    to the query and whether it was chosen, L logits each; STOP and the value from the query and the step."""

    def __init__(self, dim: int, feats: int, levels: int, max_steps: int, hidden: int = 64, value: bool = False):
        super().__init__()
        self.levels, self.max_steps, self.value = levels, max_steps, value
        self.cand = nn.Sequential(nn.Linear(dim + feats + 2, hidden), nn.Tanh(), nn.Linear(hidden, levels))
        self.ctx = nn.Sequential(nn.Linear(dim + 1, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, query, candidates, features, chosen, step):
        mean, std = features.mean(-2, keepdim=True), features.std(-2, keepdim=True).clamp(min=1e-6)
        cos = (candidates @ query.unsqueeze(-1))
        x = torch.cat([candidates, (features - mean) / std, cos, chosen.float().unsqueeze(-1)], -1)
        frac = (step.float() / self.max_steps).unsqueeze(-1)
        head = self.ctx(torch.cat([query, frac], -1))
        if self.value:
            return head
        return torch.cat([self.cand(x).flatten(-2), head], -1)


def train(env: ReformulateTorchRLEnv, total_steps: int, n_steps: int = 32, epochs: int = 4, minibatch: int = 256
          ) -> tuple[ProbabilisticActor, int]:
    """PPO over ``env`` for at least ``total_steps`` env steps: (the actor, the env steps taken)."""
    src = env.source
    sizes = (src.tables.query.shape[1], src.qs.cand_feats.shape[2], src.env.L, src.env.max_steps)
    actor = ProbabilisticActor(TensorDictModule(Scorer(*sizes), OBS, ["logits"]),
                               in_keys={"logits": "logits", "mask": "action_mask"},
                               distribution_class=MaskedCategorical, return_log_prob=True)
    critic = ValueOperator(Scorer(*sizes, value=True), in_keys=OBS)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=0.01)
    gae = GAE(gamma=1.0, lmbda=0.95, value_network=critic)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    td, steps = env.reset(), 0
    while steps < total_steps:
        frames = []
        with torch.no_grad():
            for _ in range(n_steps):
                td, root = env.step_and_maybe_reset(actor(td))
                frames.append(td)
                td = root
        data = torch.stack(frames, 1)  # (envs, time)
        steps += data.numel()
        with torch.no_grad():
            gae(data)
        flat = data.reshape(-1)
        for _ in range(epochs):
            for idx in torch.randperm(flat.shape[0]).split(minibatch):
                out = loss(flat[idx])
                total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                optim.zero_grad()
                total.backward()
                optim.step()
    return actor, steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="quickstart")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--split", default="dev")
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--n-steps", type=int, default=32)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatch", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--output-dir", default=None,
                   help="training.output_dir: its cache folder (index, candidates, embeddings) is reused by later runs")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    keys = {"training__output_dir": args.output_dir} if args.output_dir else {}
    env = ReformulateTorchRLEnv(args.num_envs, args.config, args.data_dir, "train", "cpu", **keys)
    env.set_seed(args.seed)
    actor, steps = train(env, args.total_steps, args.n_steps, args.epochs, args.minibatch)
    scorer = actor.module[0].module

    def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = scorer(*(obs[k] for k in OBS))
        return logits.masked_fill(~obs["action_mask"], float("-inf")).argmax(-1)

    print(json.dumps(learner_report(args.config, args.data_dir, args.split, act, steps, **keys)))


if __name__ == "__main__":
    main()
