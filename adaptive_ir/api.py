"""The Python API: what ``adaptive-ir train``, ``evaluate`` and ``export`` do, from Python, with the same run folders.

    import adaptive_ir
    result = adaptive_ir.train("quickstart", test=True, **{"training.num_epochs": 2})
    result.best_checkpoint, result.test["agent"]["R@40"]
    adaptive_ir.evaluate(result.best_checkpoint, split="dev")      # the config stored in the checkpoint
    adaptive_ir.export(result.best_checkpoint, "my-policy")        # safetensors + spec + model card
    adaptive_ir.evaluate_pretrained("nfcorpus-seed-1", "path/to/beir-folder")   # a shipped policy, no training

Overrides are config keys, ``section.key`` (in a dict: ``**{"training.num_epochs": 2}``) or ``section__key``
(``training__num_epochs=2``), with the values ``--set`` takes.

The stages are imported inside the functions, so that ``import adaptive_ir`` stays light.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adaptive_ir.config import Config, build_config, config_from_dict, config_to_dict, dotted_keys, load_config

if TYPE_CHECKING:
    from adaptive_ir.artifacts.checkpoint import SavedPolicy


@dataclass
class TrainResult:
    """What a training run left: its folder (run.json, checkpoints, logs) and its outcome."""

    run_id: str
    output_dir: Path
    config: Config
    updates: int
    best_dev: float
    """The dev selection metric of the best checkpoint (-1 without a dev split)."""
    best_update: int
    interrupted: bool
    test: dict[str, dict[str, float]] | None
    """{method: {metric: value}} on the test split when ``test=True``, else None."""

    @property
    def best_checkpoint(self) -> Path:
        return self.config.training.checkpoint_path_dir / "best.pt"

    @property
    def last_checkpoint(self) -> Path:
        return self.config.training.checkpoint_path_dir / "last.pt"


def _config(config: str | Path | Config, overrides: dict[str, Any]) -> Config:
    return _with(config, overrides) if isinstance(config, Config) else load_config(str(config), overrides)


def _with(cfg: Config, overrides: dict[str, Any]) -> Config:
    """``cfg`` with dotted overrides applied and validated (as ``--set`` does)."""
    return build_config(config_to_dict(cfg), cfg.source, overrides)


def train(config: str | Path | Config = "quickstart", *, test: bool = False, resume: bool = False,
          checkpoint: str | Path | None = None, overwrite: bool = False, progress: bool = False,
          policy: type | None = None, **overrides: Any) -> TrainResult:
    """Train as ``adaptive-ir train`` does: a config name, YAML path or Config, overrides as config keys; the run
    gets its folder (the config's own numbered when taken, as on the command line, unless
    ``training.output_dir`` is given), run.json, checkpoints and logs. ``resume`` / ``checkpoint`` /
    ``overwrite``: as the flags of the same names. ``test``: evaluate the best checkpoint on test afterwards.
    ``policy``: a network class of one's own (``rl_agent.policy``: it must be importable by that name to load the
    checkpoints later)."""
    from adaptive_ir.rl.policy import policy_name
    from adaptive_ir.training.run import names_folders, run_training

    overrides = dotted_keys(overrides)
    if policy is not None:
        overrides["rl_agent.policy"] = policy_name(policy)
    trained = run_training(_config(config, overrides), resume=resume, checkpoint=checkpoint, overwrite=overwrite,
                           numbered=not names_folders(overrides), progress=progress, test=test)
    run, r = trained.run, trained.result
    assert run is not None  # None only on the ranks other than 0 of a torchrun
    return TrainResult(run.record["id"], Path(trained.cfg.training.output_dir), trained.cfg, r["updates"],
                       r["best_dev"], r["best_update"], r["interrupted"], trained.test)


def evaluate(checkpoint: str | Path | None = None, config: str | Path | Config | None = None, *,
             split: str = "test", baselines: bool = True, oracle: bool = False, run_dir: str | Path | None = None,
             progress: bool = False, **overrides: Any) -> dict[str, dict[str, float]]:
    """{method: {metric: value}} on ``split``, as ``adaptive-ir evaluate`` computes it: the agent of
    ``checkpoint`` (checked to fit), with BM25 / RM3 (``baselines``) and the qrels ``oracle``. Without ``config``
    the checkpoint's own config is used (overrides such as ``data.data_dir`` apply to it)."""
    from adaptive_ir.artifacts.checkpoint import SavedPolicy

    overrides = dotted_keys(overrides)
    saved = None if checkpoint is None else SavedPolicy.read(checkpoint)
    if config is None:
        if saved is None:
            raise ValueError("evaluate needs a checkpoint, a config, or both")
        cfg = checkpoint_config(saved, overrides)
    else:
        cfg = _config(config, overrides)
    return evaluate_config(cfg, saved, split, baselines, oracle, run_dir, progress)[0]


def checkpoint_config(saved: SavedPolicy, overrides: dict[str, Any]) -> Config:
    """The config a checkpoint was trained with, ``overrides`` (dotted keys) applied: what evaluating it without a
    config uses, in Python and on the command line."""
    return _with(config_from_dict(saved.state["config"]), dotted_keys(overrides))


def evaluate_pretrained(policy: str | Path, data_dir: str | None = None, *, split: str = "test",
                        baselines: bool = True, run_dir: str | Path | None = None, progress: bool = False,
                        **overrides: Any) -> dict[str, dict[str, float]]:
    """{method: {metric: value}} of a trained policy applied as it is to a collection (``data_dir``, a BEIR folder;
    None: the embedded one), as ``adaptive-ir evaluate --policy`` computes it: ``policy`` is a shipped policy's name
    (``adaptive_ir/policies``), an exported policy folder or a checkpoint; its own config indexes, mines and embeds
    the collection (cached under ``runs/pretrained/<collection>``)."""
    from adaptive_ir.artifacts.checkpoint import pretrained_config

    cfg, saved = pretrained_config(policy, data_dir, dotted_keys(overrides))
    return evaluate_config(cfg, saved, split, baselines, False, run_dir, progress, portable=True)[0]


def choose_first_stage(cfg: Config, source: SavedPolicy, progress: bool = False, portable: bool = False
                       ) -> tuple[Config, str]:
    """``cfg`` on the first stage where the policy ``source`` has the higher dev R@40 on ``cfg``'s collection, and a
    line that says which and why. A collection without dev queries keeps the stage ``cfg`` names (the policy's own,
    for a shipped one): there is nothing to choose by without judgments, and the line says so."""
    from adaptive_ir.common.errors import MissingSplitError
    from adaptive_ir.config import FIRST_STAGES, first_stage, on_first_stage
    from adaptive_ir.evaluation.methods import DEV_SPLIT, SELECTION_METRIC

    scores: dict[str, float] = {}
    try:
        for stage in FIRST_STAGES:
            staged = on_first_stage(cfg, stage)
            scores[stage] = evaluate_config(staged, source, DEV_SPLIT, False, False, None, progress,
                                            portable)[0]["agent"][SELECTION_METRIC]
    except MissingSplitError as e:
        if e.split == DEV_SPLIT:
            return cfg, f"first stage: {first_stage(cfg)} (no dev queries to choose by: {e})"
        raise
    best = max(scores, key=scores.__getitem__)
    shown = ", ".join(f"{s} {v:.4f}" for s, v in scores.items())
    return on_first_stage(cfg, best), f"first stage: {best}, chosen on dev (agent {SELECTION_METRIC}: {shown})"


def evaluate_config(cfg: Config, source: SavedPolicy | None, split: str, baselines: bool, oracle: bool,
                    run_dir: str | Path | None, progress: bool, portable: bool = False,
                    risk: dict | None = None) -> tuple[dict, str, str | None]:
    """(results, collection name, where the agent's weights came from) of one evaluation; shared by the CLI.
    ``risk``: filled with the agent's queries helped and hurt against each baseline (``evaluate_split``).
    ``source``: a checkpoint checked to fit ``cfg``'s collection, or with ``portable`` a policy applied to another
    collection (``pretrained_config``'s, checked by its spec alone); None: no agent (``load_agent``)."""
    import torch

    from adaptive_ir.artifacts.checkpoint import load_agent
    from adaptive_ir.config import resolve_device
    from adaptive_ir.evaluation.methods import evaluate_split
    from adaptive_ir.rl.workspace import Workspace

    device = torch.device(resolve_device(cfg.system.device))
    # only the evaluated split's judgments are read (with split dev the test qrels stay unopened); the baselines
    # alone need no embedding model
    ws = Workspace(cfg, device, progress=progress, splits=(split,), embed=source is not None or oracle)
    agent = amp = origin = None
    if source is not None:
        agent, amp, origin = load_agent(source, cfg, ws, device, portable=portable)
    results = evaluate_split(cfg, ws, agent, amp, split, baselines=baselines or agent is None,
                             run_dir=Path(run_dir) if run_dir else None, oracle=oracle, risk=risk)
    return results, ws.collection.name, origin


def export(checkpoint: str | Path, folder: str | Path, data_dir: str | None = None,
           apply: dict[str, str] | None = None) -> Path:
    """Write a checkpoint's policy as ``policy.safetensors`` + ``policy.json`` (spec, data identity, config) +
    ``README.md`` (model card) into ``folder``. A checkpoint written before specs were recorded is read with its
    collection (``data_dir`` if it moved) to work its spec out. ``checkpoint`` may also be an exported policy (a
    folder, or a shipped policy's name): it is written again, byte-identical weights and the same origin, with
    ``apply`` in place of its own. ``apply``: settings (``SECTION.KEY`` → value, as ``--set``) the policy is applied
    with on a collection, over its training config; checked to be valid settings that leave its spec alone."""
    from adaptive_ir.artifacts.checkpoint import SavedPolicy, resolve_policy
    from adaptive_ir.artifacts.export import export_policy
    from adaptive_ir.artifacts.spec import spec_over_collection
    from adaptive_ir.common.errors import ConfigError

    # an exported policy (or a shipped one's name) keeps its weights and record; only its apply settings change
    saved = SavedPolicy.read(resolve_policy(checkpoint))
    state = saved.state
    if state.get("spec") and state.get("data"):
        spec, data = state["spec"], state["data"]
    else:  # worked out from its config over its collection (its index and embedder; nothing mined or embedded)
        spec, data = spec_over_collection(checkpoint_config(saved, {"data.data_dir": data_dir} if data_dir else {}))
    apply = dict(apply or {})
    fixed = sorted(k for k in apply if k in spec)
    if fixed:
        raise ConfigError(f"export --apply {', '.join(fixed)}: part of the policy's spec (its weights were trained "
                          "for the value they have); apply only settings outside the spec")
    build_config(json.loads(json.dumps(state["config"])), f"checkpoint {checkpoint}", apply)
    return export_policy(state, spec, data, folder, str(checkpoint), apply)


__all__ = ["train", "evaluate", "evaluate_pretrained", "export", "TrainResult"]
