"""Typed configuration: one dataclass per YAML section, loaded and checked once, then trusted.

``schema`` holds the dataclasses (only keys the engine reads, a docstring per field), ``coerce`` reads YAML files
and ``--set`` values into them with errors that name the file, line and key, and ``seed`` translates the seed
project's configs (aliases, PPO duplicates, accepted but unused keys) to ours before they are built.
"""

from adaptive_ir.common.errors import ConfigError
from adaptive_ir.config.coerce import build_config, config_from_dict, dotted_keys, load_config
from adaptive_ir.config.schema import (
    CONFIG_DIR,
    SECTIONS,
    AgentConfig,
    CandidateConfig,
    Config,
    DataConfig,
    EmbeddingsConfig,
    RetrievalConfig,
    RRFConfig,
    SystemConfig,
    TrainingConfig,
    config_to_dict,
    resolve_device,
)
from adaptive_ir.config.stages import (
    ANSERINI_STAGE,
    DEFAULT_STAGE,
    FIRST_STAGES,
    STAGE_DESCRIPTIONS,
    first_stage,
    on_first_stage,
    stage_named,
    stage_settings,
)

__all__ = ["ANSERINI_STAGE", "CONFIG_DIR", "DEFAULT_STAGE", "FIRST_STAGES", "SECTIONS", "STAGE_DESCRIPTIONS",
           "AgentConfig", "CandidateConfig", "Config", "ConfigError", "DataConfig", "EmbeddingsConfig", "RRFConfig",
           "RetrievalConfig", "SystemConfig", "TrainingConfig", "build_config", "config_from_dict", "config_to_dict",
           "dotted_keys", "first_stage", "load_config", "on_first_stage", "resolve_device", "stage_named",
           "stage_settings"]
