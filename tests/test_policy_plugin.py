"""A policy network of one's own, by name in the config or passed to ``adaptive_ir.train``: trained, saved under its
name, loaded back as that class; a name that does not resolve is refused in one line naming the key."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import adaptive_ir
from adaptive_ir.common.errors import ConfigError
from adaptive_ir.rl.policy import ActorCritic, policy_class, policy_name


class MeanScorer(nn.Module):
    """The smallest network with ActorCritic's interface: each candidate scored from its features alone."""

    def __init__(self, emb_dim: int, feat_dim: int, hidden_dim: int, num_heads: int, num_layers: int, levels: int):
        super().__init__()
        self.levels = levels
        self.score = nn.Linear(feat_dim, levels)
        self.stop = nn.Linear(2 * emb_dim + 1, 1)
        self.value = nn.Linear(2 * emb_dim + 1, 1)

    calls = 0
    """Forwards of any instance: an evaluation that loads the saved policy runs this class."""

    def forward(self, q0, cur, step, cand, feats, legal):
        MeanScorer.calls += 1
        ctx = torch.cat([q0, cur, step[:, None]], 1)
        logits = torch.cat([self.score(feats).flatten(1), self.stop(ctx)], 1)
        return logits.masked_fill(~legal, torch.finfo(logits.dtype).min), self.value(ctx).squeeze(1)


def test_names_resolve_both_ways():
    assert policy_class("actor-critic") is ActorCritic and policy_name(ActorCritic) == "actor-critic"
    assert policy_class(policy_name(MeanScorer)) is MeanScorer
    for bad in ("no_such_module:X", "torch:no_such_class", "math:pi", "plain"):
        with pytest.raises(ConfigError, match="rl_agent.policy"):
            policy_class(bad)


def test_a_network_of_ones_own_trains_saves_and_loads(tmp_path):
    out = tmp_path / "run"
    result = adaptive_ir.train("quickstart", policy=MeanScorer, **{
        "training.output_dir": str(out), "training.num_epochs": 2, "data.max_train_queries": 32,
        "training.episodes_per_update": 16, "training.collect_batch_size": 16, "training.batch_size": 32})
    assert result.config.rl_agent.policy == f"{__name__}:MeanScorer"
    saved = torch.load(result.last_checkpoint, map_location="cpu", weights_only=False)
    assert saved["spec"]["rl_agent.policy"] == f"{__name__}:MeanScorer"
    assert set(saved["model"]) == {f"{n}.{p}" for n in ("score", "stop", "value") for p in ("weight", "bias")}
    before = MeanScorer.calls
    metrics = adaptive_ir.evaluate(result.last_checkpoint, split="dev")
    assert MeanScorer.calls > before and 0 <= metrics["agent"]["R@40"] <= 1
