"""The Python API: what ``adaptive-ir train`` and ``adaptive-ir evaluate`` do, from Python, with the same run folders.

    import adaptive_ir
    result = adaptive_ir.train("quickstart", test=True, **{"training.num_epochs": 2})
    result.best_checkpoint, result.test["agent"]["R@40"]
    adaptive_ir.evaluate(result.best_checkpoint, split="dev")      # the config stored in the checkpoint
    adaptive_ir.api.export(result.best_checkpoint, "my-policy")    # safetensors + spec + model card
    adaptive_ir.evaluate_pretrained("nfcorpus-seed-1", "path/to/beir-folder")   # a shipped policy, no training

Overrides are config keys, ``section.key`` (in a dict: ``**{"training.num_epochs": 2}``) or ``section__key``
(``training__num_epochs=2``), with the values ``--set`` takes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaptive_ir.config import Config, build_config, config_from_dict, config_to_dict, load_config


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


def _overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("__", "."): v for k, v in overrides.items()}


def _config(config: str | Path | Config, overrides: dict[str, Any]) -> Config:
    return _with(config, overrides) if isinstance(config, Config) else load_config(str(config), overrides)


def _with(cfg: Config, overrides: dict[str, Any]) -> Config:
    """``cfg`` with dotted overrides applied and validated (as ``--set`` does)."""
    return build_config(config_to_dict(cfg), cfg.source, overrides)


def train(config: str | Path | Config = "quickstart", *, test: bool = False, resume: bool = False,
          checkpoint: str | Path | None = None, overwrite: bool = False, progress: bool = False,
          **overrides: Any) -> TrainResult:
    """Train as ``adaptive-ir train`` does: a config name, YAML path or Config, overrides as config keys; the run
    gets its folder (the config's own numbered when taken, as on the command line, unless
    ``training.output_dir`` is given), run.json, checkpoints and logs. ``resume`` / ``checkpoint`` /
    ``overwrite``: as the flags of the same names. ``test``: evaluate the best checkpoint on test afterwards."""
    from adaptive_ir.training.rundir import LOCATION_KEYS, start_run
    from adaptive_ir.training.trainer import Trainer

    overrides = _overrides(overrides)
    cfg = _config(config, overrides)
    named = any(k in overrides for k in (f"training.{k}" for k in LOCATION_KEYS))
    run = start_run(cfg, resume=resume, checkpoint=checkpoint, overwrite=overwrite, numbered=not named)
    try:
        trainer = Trainer(run.cfg, resume=run.resume_from, progress=progress, run=run.identity)
        result = trainer.train()
        results = trainer.test() if test and not result["interrupted"] else None
    except BaseException as e:
        run.finish_raised(e)
        raise
    run.finish_trained(result, trainer.stop_signal)
    return TrainResult(run.record["id"], Path(run.cfg.training.output_dir), run.cfg, result["updates"],
                       result["best_dev"], result["best_update"], result["interrupted"], results)


def evaluate(checkpoint: str | Path | None = None, config: str | Path | Config | None = None, *,
             split: str = "test", baselines: bool = True, oracle: bool = False, run_dir: str | Path | None = None,
             progress: bool = False, **overrides: Any) -> dict[str, dict[str, float]]:
    """{method: {metric: value}} on ``split``, as ``adaptive-ir evaluate`` computes it: the agent of
    ``checkpoint`` (checked to fit), with BM25 / RM3 (``baselines``) and the qrels ``oracle``. Without ``config``
    the checkpoint's own config is used (overrides such as ``data.data_dir`` apply to it)."""
    overrides = _overrides(overrides)
    if config is None:
        if checkpoint is None:
            raise ValueError("evaluate needs a checkpoint, a config, or both")
        cfg = checkpoint_config(checkpoint, overrides)
    else:
        cfg = _config(config, overrides)
    return evaluate_config(cfg, checkpoint, split, baselines, oracle, run_dir, progress)[0]


def checkpoint_config(checkpoint: str | Path, overrides: dict[str, Any]) -> Config:
    """The config a checkpoint was trained with, ``overrides`` (dotted keys) applied: what evaluating it without a
    config uses, in Python and on the command line."""
    from adaptive_ir.artifacts.checkpoint import load_checkpoint

    return _with(config_from_dict(load_checkpoint(checkpoint)["config"]), _overrides(overrides))


def evaluate_pretrained(policy: str | Path, data_dir: str | None = None, *, split: str = "test",
                        baselines: bool = True, run_dir: str | Path | None = None, progress: bool = False,
                        **overrides: Any) -> dict[str, dict[str, float]]:
    """{method: {metric: value}} of a trained policy applied as it is to a collection (``data_dir``, a BEIR folder;
    None: the embedded one), as ``adaptive-ir evaluate --policy`` computes it: ``policy`` is a shipped policy's name
    (``adaptive_ir/policies``), an exported policy folder or a checkpoint; its own config indexes, mines and embeds
    the collection (cached under ``runs/pretrained/<collection>``)."""
    from adaptive_ir.artifacts.checkpoint import pretrained_config

    cfg, path, state = pretrained_config(policy, data_dir, _overrides(overrides))
    return evaluate_config(cfg, None, split, baselines, False, run_dir, progress, policy=(path, state))[0]


def evaluate_config(cfg: Config, checkpoint: str | Path | None, split: str, baselines: bool, oracle: bool,
                    run_dir: str | Path | None, progress: bool, policy: tuple[Path, dict] | None = None
                    ) -> tuple[dict, str, str | None]:
    """(results, collection name, where the checkpoint came from) of one evaluation; shared by the CLI. ``policy``
    instead of ``checkpoint``: (path, policy) as ``checkpoint.pretrained_config`` read them, a policy applied to
    another collection (checked by its spec, not its data)."""
    import torch

    from adaptive_ir.artifacts.checkpoint import agent_from_policy, describe_origin, load_compatible
    from adaptive_ir.common.amp import AmpContext
    from adaptive_ir.config import resolve_device
    from adaptive_ir.evaluation.methods import evaluate_split
    from adaptive_ir.rl.factory import build_agent
    from adaptive_ir.rl.workspace import Workspace

    device = torch.device(resolve_device(cfg.system.device))
    # only the evaluated split's judgments are read (with split dev the test qrels stay unopened)
    ws = Workspace(cfg, device, progress=progress, splits=(split,))
    agent = amp = origin = None
    if checkpoint is not None:
        state = load_compatible(checkpoint, cfg, ws)
        origin = describe_origin(checkpoint, state)
        agent = build_agent(cfg, ws, device)
        agent.core.load_state_dict(state["model"])
        amp = AmpContext.of(device, cfg.training)
    elif policy is not None:
        path, state = policy
        origin = describe_origin(path, state)
        agent = agent_from_policy(path, state, cfg, ws, device)
        amp = AmpContext.of(device, cfg.training)
    results = evaluate_split(cfg, ws, agent, amp, split, baselines=baselines or agent is None,
                             run_dir=Path(run_dir) if run_dir else None, oracle=oracle)
    return results, ws.collection.name, origin


def export(checkpoint: str | Path, folder: str | Path, data_dir: str | None = None,
           apply: dict[str, str] | None = None) -> Path:
    """Write a checkpoint's policy as ``policy.safetensors`` + ``policy.json`` (spec, data identity, config) +
    ``README.md`` (model card) into ``folder``. A checkpoint written before specs were recorded is read with its
    collection (``data_dir`` if it moved) to work its spec out. ``checkpoint`` may also be an exported policy (a
    folder, or a shipped policy's name): it is written again, byte-identical weights and the same origin, with
    ``apply`` in place of its own. ``apply``: settings (``SECTION.KEY`` → value, as ``--set``) the policy is applied
    with on a collection, over its training config; checked to be valid settings that leave its spec alone."""
    from adaptive_ir.artifacts.checkpoint import load_checkpoint, load_for_inference, resolve_policy
    from adaptive_ir.artifacts.export import export_policy, read_export
    from adaptive_ir.artifacts.spec import data_identity, policy_spec
    from adaptive_ir.common.errors import ConfigError

    source = resolve_policy(checkpoint)
    # an exported policy (or a shipped one's name) keeps its weights and record; only its apply settings change
    state = read_export(source)[0] if source.is_dir() else load_checkpoint(checkpoint)
    if state.get("spec") and state.get("data"):
        spec, data = state["spec"], state["data"]
    else:  # rebuilt over its collection (load_for_inference checks that the weights fit)
        cfg, ws, _, _, state = load_for_inference(checkpoint, "cpu", data_dir)
        spec, data = policy_spec(cfg, ws), data_identity(ws)
    apply = dict(apply or {})
    fixed = sorted(k for k in apply if k in spec)
    if fixed:
        raise ConfigError(f"export --apply {', '.join(fixed)}: part of the policy's spec (its weights were trained "
                          "for the value they have); apply only settings outside the spec")
    build_config(json.loads(json.dumps(state["config"])), f"checkpoint {checkpoint}", apply)
    return export_policy(state, spec, data, folder, str(checkpoint), apply)


__all__ = ["train", "evaluate", "evaluate_pretrained", "export", "TrainResult"]
