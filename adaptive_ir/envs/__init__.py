"""Query reformulation as a standard RL environment: Gymnasium (``gym_env``) and TorchRL (``torchrl_env``) front
ends of the batched env, built from the same config and workspace as the trainer (``source``).

``import adaptive_ir.envs`` registers ``adaptive_ir/Reformulate-v0`` with Gymnasium, so that
``gymnasium.make_vec("adaptive_ir/Reformulate-v0", num_envs=256, data_dir=..., split="train")`` works. Needs the
``envs`` extra (``pip install "adaptive-ir[envs]"``: Gymnasium, TorchRL); ``docs/env.md`` describes the env.
"""

from adaptive_ir.envs.gym_env import ENV_ID, ReformulateEnv, ReformulateVectorEnv, register
from adaptive_ir.envs.source import EnvSource

register()

__all__ = ["ENV_ID", "EnvSource", "ReformulateEnv", "ReformulateVectorEnv", "register"]
