"""What every env front end is built from: the trainer's own config, workspace, query set and batched env.

``EnvSource.build`` loads a config exactly as ``adaptive-ir train`` does (a shipped name or a YAML path, the data
folder, dotted overrides), builds the ``Workspace`` (index, candidates, embeddings, each from the same caches a
training run uses) and the split's ``QuerySet``, and wraps ``rl.env.ReformulationEnv`` over ``num_envs`` rows. The
front ends (``gym.py``, ``torchrl.py``) only translate: rewards, candidates and features are the engine's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from adaptive_ir.config import Config, dotted_keys, load_config
from adaptive_ir.rl.env import QuerySet, ReformulationEnv
from adaptive_ir.rl.factory import make_env
from adaptive_ir.rl.workspace import Tables, Workspace


@dataclass
class EnvSource:
    """The engine's pieces for one split, and the batched env over them."""

    cfg: Config
    split: str
    ws: Workspace
    qs: QuerySet
    tables: Tables
    env: ReformulationEnv

    @classmethod
    def build(cls, config: str | Config = "quickstart", data_dir: str | None = None, split: str = "train",
              device: str | None = None, **overrides: object) -> EnvSource:
        """``config``: a shipped name, a YAML path or a ``Config``; ``data_dir``: the collection (the config's
        own when None; the quick start's embedded one needs none); ``split``: whose queries the episodes start
        from (train skips queries with no relevant document, as training does); ``device``: cpu, cuda or auto
        (default: the config's ``system.device``); other keywords: config keys (``config.dotted_keys``)."""
        sets = dotted_keys(overrides)
        if data_dir is not None:
            sets["data.data_dir"] = data_dir
        if device is not None:
            sets["system.device"] = device
        cfg = load_config(config, sets) if isinstance(config, str) else config
        dev = cfg.system.device
        torch_device = torch.device("cuda" if dev == "auto" and torch.cuda.is_available() else
                                    "cpu" if dev == "auto" else dev)
        ws = Workspace(cfg, torch_device, progress=False, splits=(split,))
        qs, tables = ws.split(split, cfg.data.max_train_queries if split == "train" else None,
                              judged_only=split == "train")
        return cls(cfg, split, ws, qs, tables, make_env(cfg, ws, qs))

    @property
    def num_actions(self) -> int:
        """M·L + 1: every candidate at every weight, and STOP (the last); M·L + 2 with a choice of start
        (``retrieval.start: choose``: the switch to RM3 is action M·L)."""
        return self.env.stop + 1

    def observe(self, rows: bool = False) -> dict[str, torch.Tensor]:
        """The current observation of every row, as fresh device tensors (``gym_env`` names each). ``rows``: the
        query's and the candidates' rows in ``tables`` (``query_row``, ``candidate_rows``) in place of their
        embeddings: 16 bytes a candidate where an embedding takes 4·D (a policy looks them up itself)."""
        env, qs, qidx = self.env, self.qs, self.env.qidx
        if rows:
            ids = {"query_row": qs.q_rows[qidx], "candidate_rows": qs.cand_rows[qidx]}
        else:
            ids = {"query": self.tables.query[qs.q_rows[qidx]], "candidates": self.tables.term[qs.cand_rows[qidx]]}
        choice = ({"query_features": qs.query_feats[qidx], "switched": env.started.clone()}
                  if env.choice and qs.query_feats is not None else {})
        return {**ids, "features": qs.cand_feats[qidx], "valid": qs.cand_valid[qidx], "chosen": env.chosen.clone(),
                "step": env.steps.clone(), "action_mask": env.legal(), **choice}

    def legalize(self, actions: torch.Tensor) -> torch.Tensor:
        """``actions`` with every one the mask forbids replaced by STOP: an illegal action ends the episode."""
        return torch.where(self.env.is_legal(actions), actions, self.env.stop)


__all__ = ["EnvSource"]
