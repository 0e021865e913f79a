"""The learning: a collection made ready for episodes (``workspace``: index, candidates, embeddings, query
tables on the device), the batched env with exact incremental rewards (``env``), the policy (``policy``), the
env and agent a config asks for (``factory``), rollouts (``rollout``), the device-resident buffer with GAE
(``buffer``), the PPO update (``ppo``), the oracle-guided warm start (``warmstart``) and the fitted start
selector of a policy that chooses between the query and RM3 (``selector``)."""

from adaptive_ir.rl.buffer import RolloutBuffer, compute_gae
from adaptive_ir.rl.env import QuerySet, ReformulationEnv
from adaptive_ir.rl.factory import build_agent, make_env
from adaptive_ir.rl.policy import ActorCritic, Agent
from adaptive_ir.rl.ppo import PPOSettings, make_optimizer, ppo_update
from adaptive_ir.rl.rollout import collect, greedy_rewrite
from adaptive_ir.rl.selector import fit_selector
from adaptive_ir.rl.workspace import Tables, Workspace

__all__ = ["ActorCritic", "Agent", "PPOSettings", "QuerySet", "ReformulationEnv", "RolloutBuffer", "Tables",
           "Workspace", "build_agent", "collect", "compute_gae", "fit_selector", "greedy_rewrite", "make_env",
           "make_optimizer", "ppo_update"]
