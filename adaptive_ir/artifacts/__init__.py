"""What a run leaves on disk and what is read back: checkpoints and the one way a saved policy becomes an agent
(``checkpoint``: save, read, the fit check, ``load_agent``, the config a policy is applied elsewhere with), a
policy exported on its own as safetensors + spec + model card, and the policies shipped with the package
(``export``), and a policy's spec and data identity with the check that it fits a setup (``spec``)."""

from adaptive_ir.artifacts.checkpoint import (
    CHECKPOINT_FORMAT,
    PRETRAINED_SPLIT_SEED,
    SavedPolicy,
    describe_origin,
    init_policy_path,
    load_agent,
    load_checkpoint,
    load_compatible,
    pretrained_config,
    resolve_policy,
    save_checkpoint,
)
from adaptive_ir.artifacts.export import SHIPPED_DIR, export_policy, read_export, shipped_policies
from adaptive_ir.artifacts.spec import check_fits, data_identity, policy_spec

__all__ = ["CHECKPOINT_FORMAT", "PRETRAINED_SPLIT_SEED", "SHIPPED_DIR", "SavedPolicy", "check_fits", "data_identity",
           "describe_origin", "export_policy", "init_policy_path", "load_agent", "load_checkpoint", "load_compatible",
           "policy_spec", "pretrained_config", "read_export", "resolve_policy", "save_checkpoint",
           "shipped_policies"]
