"""A policy on its own: ``policy.safetensors`` (the network's weights, no pickle) + ``policy.json`` (its spec, the
identity of the data it was trained on, the sha256 of the weights file, where it came from and the config it was
trained with) + ``README.md`` (a short model card). ``adaptive-ir export`` writes one from a checkpoint;
``training.init_from`` reads one (a folder path, or the name of a policy shipped in ``adaptive_ir/policies`` or kept
in the repository's ``release/policies``).
"""

from __future__ import annotations

import json
from pathlib import Path

from adaptive_ir.artifacts.spec import SPEC_FORMAT
from adaptive_ir.common.errors import CheckpointError
from adaptive_ir.common.io import atomic_write_bytes, atomic_write_json, sha256
from adaptive_ir.config import Config, config_to_dict
from adaptive_ir.config.stages import STAGE_DESCRIPTIONS, stage_named

WEIGHTS, SPEC, CARD = "policy.safetensors", "policy.json", "README.md"
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "policies"
"""Policies shipped inside the package: the ones a user picks (``policies/README.md`` says when)."""
RELEASE_DIR = Path("release") / "policies"
"""Policies kept in the repository, not in the wheel (a release asset): the replicas the tables were made with
(the NFCorpus policies of every seed the small collections' configs start from, ...). Found by name from a
checkout's root or beside the package's own checkout; elsewhere rebuilt by the command their cards name."""


def shipped_policies() -> list[str]:
    return sorted(p.name for p in SHIPPED_DIR.glob("*") if (p / SPEC).is_file())


def release_dirs() -> list[Path]:
    """Where policies named but not shipped are looked for: ``release/policies`` under the working directory, then
    under the checkout the package runs from (an editable install)."""
    return list(dict.fromkeys([Path.cwd() / RELEASE_DIR, Path(__file__).resolve().parents[2] / RELEASE_DIR]))


def export_policy(state: dict, spec: dict, data: dict, folder: str | Path, source: str,
                  apply: dict[str, str] | None = None) -> Path:
    """Write ``state``'s weights with ``spec`` and ``data`` (checked against the state by the caller) into
    ``folder``; ``source``: the checkpoint it came from (named in the card). ``apply``: settings (``--set`` form)
    the policy is applied with on a collection (``checkpoint.pretrained_config``), over its training config."""
    from safetensors.torch import save

    folder = Path(folder)
    weights = save({k: v.detach().cpu().contiguous() for k, v in state["model"].items()},
                   metadata={"format": SPEC_FORMAT})
    counters, config = state.get("counters", {}), state["config"]
    origin = state.get("origin") or {  # an export written again keeps where it came from
        "checkpoint": Path(source).name, "update": counters.get("update"), "dev_selection": counters.get("best"),
        "run": state.get("run"), "init_from_sha256": state.get("init_from_sha256"),
        "command": run_command(state.get("run"))}
    meta = {"format": SPEC_FORMAT, "sha256": sha256(weights), "spec": spec, "data": data,
            "also_data": state.get("also_data", []), "config": config, "apply": dict(apply or {}), "origin": origin}
    # the spec (it holds the weights' sha256) is the commit mark: removed first and written last, so an export
    # killed midway leaves a folder that is refused as incomplete, never old weights under a new spec or the reverse
    (folder / SPEC).unlink(missing_ok=True)
    atomic_write_bytes(folder / WEIGHTS, weights)
    atomic_write_bytes(folder / CARD, model_card(meta).encode("utf-8"))
    atomic_write_json(folder / SPEC, meta)
    return folder


def run_command(run: dict | None) -> str | None:
    """The command line that made the run, read from its folder's ``run.json`` while that folder still holds this
    run (None otherwise): the program's own name (``adaptive-ir`` for ``python -m adaptive_ir.cli``), then its
    arguments."""
    if run is None:
        return None
    try:
        record = json.loads((Path(run["dir"]) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    argv = record.get("command") or []
    if record.get("id") != run.get("id") or not argv:
        return None
    program = Path(argv[0])
    name = "adaptive-ir" if (program.name, program.parent.name) == ("cli.py", "adaptive_ir") else program.name
    return " ".join([name, *argv[1:]])


def model_card(meta: dict) -> str:
    spec, data, origin, cfg = meta["spec"], meta["data"], meta["origin"], meta["config"]
    run = origin.get("run") or {}
    name = Path(cfg["data"].get("data_dir") or cfg["data"]["dataset_type"]).name
    also = meta.get("also_data") or []
    trained_on = f"`{name}`" + "".join(f" and `{a['name']}`" for a in also)
    if also:
        share = cfg["data"].get("also_train_share")
        trained_on += (f" ({share:g} of the updates on the latter)" if share is not None
                       else " (each by its number of train queries)")
    dev = origin.get("dev_selection")
    # sorted: policy.json stores its keys sorted, and a card written again from it must read the same
    rows = "\n".join(f"| `{k}` | `{json.dumps(v, sort_keys=True)}` |" for k, v in sorted(spec.items()) if k != "format")
    k = cfg["retrieval"]["reward_k"]
    weights = cfg["training"]["reward_weights"] or {cfg["retrieval"]["reward_metric"]: 1.0}
    reward = " + ".join(f"{w:g} × Δ{'Recall' if m == 'recall' else 'RR'}@{k}"
                        for m, w in sorted(weights.items(), key=lambda mw: (-mw[1], mw[0])) if w)
    levels = spec.get("levels") or [cfg["retrieval"]["expansion_weight"]]
    weighting = (f"each at weight {levels[0]:g}" if len(levels) == 1
                 else f"each at the weight it chooses among {', '.join(f'{w:g}' for w in levels)}")
    start = cfg["training"].get("init_from")
    started = (f"\n- **Started from**: policy `{start}` (weights sha256 `{origin.get('init_from_sha256')}`), then trained on "
               f"{trained_on}: what it learnt there comes on top of what that policy learnt on its own data." if start else "")
    limits = f"trained on {trained_on}, selected on `{name}`" + (f", starting from `{start}`" if start else "")
    command = origin.get("command")
    also_ids = "".join(f"; `{a['name']}`: corpus sha256 `{a.get('corpus_sha256')}`" for a in also)
    made = f"\n- **Command** (from the run's folder `{run.get('dir')}`): `{command}`" if command else ""
    notes = []
    defaults = config_to_dict(Config())  # what a key newer than the stored config was trained with
    for key, value in (meta.get("apply") or {}).items():
        section, setting = key.split(".", 1)
        trained = cfg.get(section, {}).get(setting, defaults.get(section, {}).get(setting))
        notes.append(f"`{key}={value}` " + (f"(trained with `{trained}`)" if trained is not None else "(unset in training)"))
    applied_with = ("\n- **Applied with**: " + ", ".join(notes) + " wherever it is applied (`evaluate`/`reformulate "
                    "--policy`, `Reformulator.from_pretrained`); `--set` the trained value to apply it as it was trained."
                    if notes else "")
    stage = stage_named(cfg["retrieval"])
    first = (f"`{stage}`: {STAGE_DESCRIPTIONS[stage]}" if stage else
             "its own BM25 settings (`retrieval` in the config below)")
    return f"""# adaptive-ir query-reformulation policy ({name}, seed {cfg['system']['seed']})

A PPO policy that rewrites a query by appending up to {spec['rl_agent.max_steps_per_episode']} of the
{spec['candidate_mining.max_candidates']} candidate terms mined from its feedback documents (Nogueira & Cho 2017),
{weighting} (the query's own words weigh 1), trained by [adaptive-ir](https://pypi.org/project/adaptive-ir/) on {trained_on} with the reward {reward}.

- **Files**: `{WEIGHTS}` (weights, safetensors, sha256 `{meta['sha256']}`), `{SPEC}` (the spec below, the training
  data's identity, the full training config), this card.
- **Origin**: checkpoint `{origin['checkpoint']}` at update {origin['update']}, run `{run.get('id')}`, code
  `{run.get('git_commit')}`; dev selection metric {'n/a' if dev is None or dev < 0 else f'{dev:.4f}'}.{made}{started}{applied_with}
- **First stage**: {first}: the index it was trained over, which its config applies it with.
- **Training data**: corpus sha256 `{data.get('corpus_sha256')}`, analyzer `{data.get('analyzer')}`{also_ids}.
- **Use**: on any collection, as it is: `adaptive-ir evaluate --policy <this folder> --data-dir <BEIR folder>
  --baselines`, `adaptive-ir reformulate --policy <this folder> --data-dir <BEIR folder> "query"`; fine-tune it
  with `--set training.init_from=<this folder>`. The config must match the spec: adaptive-ir checks it and names any key
  that differs. Its features are per-query normalised miner scores and the embeddings of the model in `embedder`,
  so it moves to other collections embedded by that model.
- **Limits**: {limits}; its effect elsewhere must be measured (`adaptive-ir
  compare`). It adds terms, it never removes or reweights the user's words.
- **License**: MIT, as adaptive-ir.

| spec key | value |
|---|---|
{rows}
"""


def read_export(folder: str | Path) -> tuple[dict, str]:
    """An exported policy as a checkpoint-like dict (``model``, ``spec``, ``data``, ``config``, ``origin``) and
    the sha256 of its weights file (checked against the one it records)."""
    from safetensors.torch import load

    folder = Path(folder)
    try:
        meta = json.loads((folder / SPEC).read_text(encoding="utf-8"))
        weights = (folder / WEIGHTS).read_bytes()
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{folder}: not a readable exported policy ({type(e).__name__}: {e}); export it "
                              "again (adaptive-ir export)") from e
    digest = sha256(weights)
    if meta.get("format") != SPEC_FORMAT or meta.get("sha256") != digest:
        raise CheckpointError(f"{folder / WEIGHTS}: checksum mismatch or unknown format (the file is damaged or "
                              f"not a {SPEC_FORMAT} export); export it again")
    return {**meta, "model": load(weights)}, digest


__all__ = ["export_policy", "read_export", "release_dirs", "shipped_policies", "model_card", "RELEASE_DIR",
           "SHIPPED_DIR"]
