"""What a policy is, what it was trained on, and the one check that a saved policy fits the setup it is loaded into.

Every checkpoint and every exported policy records

* ``spec``: what the weights' shapes and meaning depend on, whatever the collection: the embedder (identity and
  dimension), the candidate features (their names, and the config keys that choose them: ``candidate_mining.methods``
  and ``stem_variants``), the policy's inputs made of them (``agent_features``) and those it ignores, the expansion
  weights an action chooses among (``levels``), the query features of a choice of start (``query_features``; none
  without one), M, T and the network sizes;
* ``data``: the identity of the collection it was trained on, as the BM25 index knows it: the sha256 of the corpus
  texts and the analyzer's identity (``Retriever.index.meta``). The path the data was read from is not part of it:
  the same documents moved elsewhere are the same data.

``check_fits`` compares them for resume, evaluate, ``training.init_from`` (the spec only: a policy may move between
collections) and reformulate; every difference is named in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adaptive_ir.common.errors import CheckpointError
from adaptive_ir.mining.candidates import feature_names
from adaptive_ir.mining.query_features import QUERY_FEATURES
from adaptive_ir.retrieval.retriever import Retriever
from adaptive_ir.rl.policy import agent_feature_names

if TYPE_CHECKING:
    from adaptive_ir.config import Config
    from adaptive_ir.rl.workspace import Workspace

SPEC_FORMAT = "adaptive-ir-policy/1"
CONFIG_KEYS = ("embeddings.type", "candidate_mining.methods", "candidate_mining.stem_variants",
               "candidate_mining.max_candidates", "rl_agent.max_steps_per_episode", "rl_agent.hidden_dim",
               "rl_agent.num_heads", "rl_agent.num_layers", "rl_agent.ignore_features", "rl_agent.policy")
"""The config keys in a spec (the rest of it, the embedder and the features, is what they resolved to)."""
DATA_KEYS = ("corpus_sha256", "analyzer")


def _config_part(config: dict) -> dict[str, Any]:
    """The CONFIG_KEYS of a config in ``config_to_dict`` form."""
    return {key: config[key.split(".")[0]].get(key.split(".")[1]) for key in CONFIG_KEYS}


def policy_spec(cfg: Config, ws: Workspace) -> dict[str, Any]:
    """The spec of a policy built for ``cfg`` over ``ws`` (see the module docstring)."""
    return _spec(cfg, ws.embedder)


def _spec(cfg: Config, embedder: Any) -> dict[str, Any]:
    from adaptive_ir.config import config_to_dict

    cm = cfg.candidate_mining
    names = feature_names(cm.methods, cm.stem_variants, cfg.retrieval.action_levels if cm.effect_preview else None)
    return {"format": SPEC_FORMAT, **_config_part(config_to_dict(cfg)), "embedder": embedder.identity,
            "embedding_dim": embedder.dim, "features": names, "agent_features": agent_feature_names(names),
            "levels": list(cfg.retrieval.action_levels),
            "query_features": list(QUERY_FEATURES) if cfg.retrieval.start == "choose" else []}


def data_identity(ws: Workspace | Retriever) -> dict[str, str]:
    """The identity of the collection ``ws`` (or a retriever) indexes: corpus sha256 and analyzer, from the
    index's own meta."""
    retriever = ws if isinstance(ws, Retriever) else ws.retriever
    meta = retriever.index.meta
    return {key: meta[key] for key in DATA_KEYS}


def spec_over_collection(cfg: Config) -> tuple[dict[str, Any], dict[str, str]]:
    """(spec, data identity) of a policy trained with ``cfg`` on ``cfg``'s collection, without a workspace: the
    index (cached, built first if absent) and the embedder (its model, or the cached LSA fit); no candidates are
    mined and nothing is embedded. What exporting a checkpoint written before specs were recorded needs."""
    import torch

    from adaptive_ir.data import load_collection
    from adaptive_ir.rl.workspace import configured_embedder, configured_retriever

    cpu = torch.device("cpu")
    retriever = configured_retriever(cfg, load_collection(cfg.data, cfg.split_seed, ()), cpu)
    return _spec(cfg, configured_embedder(cfg, retriever, cpu)), data_identity(retriever)


SPEC_DEFAULTS: dict[str, Any] = {"rl_agent.policy": "actor-critic", "query_features": []}
"""Spec keys added after policies were saved without them, and what every such policy was."""


def saved_spec(saved: dict) -> dict[str, Any]:
    """The spec a checkpoint (or export) records; for a checkpoint written before specs were, the config keys of
    its stored config (what it can still be checked against); a key added later (``SPEC_DEFAULTS``) as those
    policies were."""
    spec = saved.get("spec") or _config_part(saved["config"])
    return {**SPEC_DEFAULTS, **{k: v for k, v in spec.items() if v is not None or k not in SPEC_DEFAULTS}}


def _show(value: Any) -> str:
    if isinstance(value, list):
        shown = value if len(value) <= 8 else [*value[:6], f"… {len(value)} in all"]
        return "[" + ", ".join(map(str, shown)) + "]"
    if isinstance(value, str) and len(value) > 16:
        return value[:12] + "…"
    return repr(value) if isinstance(value, str) else str(value)


def _difference(key: str, saved: Any, now: Any) -> str:
    if isinstance(saved, list) and isinstance(now, list) and key in ("features", "agent_features"):
        extra, missing = [x for x in saved if x not in now], [x for x in now if x not in saved]
        if extra or missing:
            return f"{key}: " + ", ".join(f"only {side} has {_show(names)}" for side, names in
                                            (("the checkpoint", extra), ("this setup", missing)) if names)
    return f"{key}: checkpoint {_show(saved)} vs this setup {_show(now)}"


def check_fits(source: str, saved: dict, spec: dict, data: dict | None = None, advice: str = "") -> None:
    """Raise CheckpointError naming, in one line, every key where the policy ``saved`` (a checkpoint's state or an
    export's JSON) differs from ``spec`` and, when ``data`` is given, from that collection identity. Keys one side
    does not record (a checkpoint older than the spec) are not compared. ``source`` starts the message (the file,
    or the config key that named it); ``advice`` ends it."""
    theirs = saved_spec(saved)
    differs = {k for k, v in theirs.items() if k != "format" and k in spec and spec[k] != v}
    if "features" in differs:
        differs.discard("agent_features")  # made of the features: their difference says it
    diffs = [_difference(k, v, spec[k]) for k, v in theirs.items() if k in differs]
    recorded = saved.get("data") or {}
    if data is not None:
        diffs += [_difference(k, recorded[k], data[k]) for k in DATA_KEYS
                  if k in recorded and k in data and recorded[k] != data[k]]
    if diffs:
        raise CheckpointError(f"{source}: does not fit this setup: {'; '.join(diffs)}"
                              + (f"; {advice}" if advice else ""))


__all__ = ["SPEC_FORMAT", "policy_spec", "data_identity", "saved_spec", "check_fits", "spec_over_collection"]
