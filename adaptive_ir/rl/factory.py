"""The env and the agent a config asks for over a workspace: one place that sizes both from the config."""

from __future__ import annotations

import torch

from adaptive_ir.common.errors import ConfigError
from adaptive_ir.config import Config
from adaptive_ir.mining.query_features import QUERY_FEATURES
from adaptive_ir.rl.env import QuerySet, ReformulationEnv
from adaptive_ir.rl.policy import Agent, agent_feature_names, policy_class
from adaptive_ir.rl.workspace import Workspace


def make_env(cfg: Config, ws: Workspace, qs: QuerySet, scored: bool = True) -> ReformulationEnv:
    rc = cfg.retrieval
    weights = cfg.reward_terms
    return ReformulationEnv(qs, ws.retriever.index, cfg.rl_agent.max_steps_per_episode, rc.reward_k, weights,
                            rc.levels, scored=scored)


def build_agent(cfg: Config, ws: Workspace, device: torch.device) -> Agent:
    a = cfg.rl_agent
    names = agent_feature_names(ws.miner.feature_names)
    unknown = [n for n in a.ignore_features if n not in names]
    if unknown:
        raise ConfigError(f"rl_agent.ignore_features: {unknown} not among the policy's inputs for this config: "
                          f"{', '.join(names)}")
    mask = torch.tensor([n not in a.ignore_features for n in names])
    levels = len(cfg.retrieval.levels)
    query_dim = len(QUERY_FEATURES) if cfg.retrieval.start == "choose" else None
    agent = Agent(ws.embedder.dim, ws.feature_dim, a.max_steps_per_episode, a.hidden_dim, a.num_heads,
                  a.num_layers, levels, mask, policy_class(a.policy), query_dim)
    init_stop_prior = getattr(agent.core, "init_stop_prior", None)  # a network of one's own may have none
    if callable(init_stop_prior):
        init_stop_prior(cfg.candidate_mining.max_candidates * levels)
    return agent.to(device)


__all__ = ["build_agent", "make_env"]
