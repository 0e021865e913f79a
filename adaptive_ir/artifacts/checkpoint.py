"""Checkpoints on disk: save, load, the compatibility check, and an agent rebuilt from one for inference.

A checkpoint is one ``torch.save`` dict (model, optimizer, scheduler, AMP scaler, random generators, sampler,
counters, the full config, the policy's ``spec`` and the ``data`` identity of its collection (``spec.py``), and
``run``: the identity of the run that wrote it, see ``rundir.py``) written atomically, plus a ``<name>.json`` sidecar
holding its sha256. Files written before run identities or specs were recorded have no ``run`` / ``spec`` key and
still load (checked by the config keys they store).

The trainer (the loop) and the reformulator (inference) both import from here, never from each other.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch

from adaptive_ir.artifacts.export import SHIPPED_DIR, SPEC, WEIGHTS, read_export, shipped_policies
from adaptive_ir.artifacts.spec import check_fits, data_identity, policy_spec
from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.errors import CheckpointError
from adaptive_ir.common.io import atomic_write_bytes, atomic_write_json, sha256
from adaptive_ir.config import Config, build_config, config_from_dict, resolve_device
from adaptive_ir.rl.factory import build_agent
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.workspace import Workspace

CHECKPOINT_FORMAT = 1


def save_checkpoint(path: str | Path, state: dict) -> None:
    """torch.save into memory, then an atomic write plus a sha256 sidecar checked on load.

    The sidecar goes first and also names the digest of the file it replaces, so a run killed between the two
    writes leaves the previous checkpoint loadable (the new sidecar accepts it), never a checksum mismatch."""
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    run = state.get("run") or {}
    side = Path(str(path) + ".json")
    previous = _sidecar(side).get("sha256") if Path(path).is_file() else None
    atomic_write_json(side, {"sha256": sha256(data), "previous_sha256": previous, "format": CHECKPOINT_FORMAT,
                             "update": state["counters"]["update"], "run": run.get("id")})
    atomic_write_bytes(path, data)


def _sidecar(side: Path) -> dict:
    """A checkpoint's sidecar (empty when absent or unreadable: the checksum is then not checked)."""
    try:
        return json.loads(side.read_text())
    except (OSError, ValueError):
        return {}


RESUME_ADVICE = ("use the config it was trained with (its own is stored in it: adaptive-ir reformulate reads it), "
                 "or start a new run")


def load_compatible(path: str | Path, cfg: Config, ws: Workspace) -> dict:
    """A checkpoint whose policy spec and data identity fit ``cfg`` over ``ws`` (resume, evaluate, test), else
    CheckpointError naming every key that differs (``spec.check_fits``)."""
    s = load_checkpoint(path)
    check_fits(str(path), s, policy_spec(cfg, ws), data_identity(ws), RESUME_ADVICE)
    return s


def init_policy_path(cfg: Config) -> Path:
    """training.init_from with ``{seed}`` replaced by system.seed: a checkpoint, an exported policy folder, or, when
    no such path exists, the name of a policy shipped with the package (``adaptive_ir/policies/<name>``)."""
    return resolve_policy(cfg.training.init_from.replace("{seed}", str(cfg.system.seed)))


def resolve_policy(value: str | Path) -> Path:
    """``value`` as a path, or, when no such path exists, the shipped policy of that name if there is one."""
    path = Path(value)
    if not path.exists() and len(path.parts) == 1 and (SHIPPED_DIR / str(value) / SPEC).is_file():
        return SHIPPED_DIR / str(value)
    return path


def policy_path(value: str | Path) -> Path:
    """A policy named on the command line: a checkpoint, an exported policy folder, or the name of a shipped one."""
    path = resolve_policy(value)
    if not path.exists():
        raise CheckpointError(f"policy {value}: no such checkpoint or exported policy folder, and no shipped policy "
                              f"has that name (shipped: {', '.join(shipped_policies()) or 'none'})")
    return path


PRETRAINED_SPLIT_SEED = 42
"""The seed that carves dev from train on a collection a policy is applied to (``--set data.split_seed`` changes
it): fixed, so that every policy is scored on the same queries, which the training seed stored in each policy's
config would otherwise choose; 42 is the shipped configs' seed, so the carve is that of their training runs."""


def pretrained_config(policy: str | Path, data_dir: str | None = None,
                      overrides: dict[str, object] | None = None) -> tuple[Config, Path, dict]:
    """(config, path, policy) to apply a trained policy to a collection it may never have seen: the policy's own
    config (index, miner, embedder, network: what its weights mean), its data section replaced by ``data_dir``
    (a BEIR folder; None: the embedded default collection; dev carved with PRETRAINED_SPLIT_SEED), caches under
    ``runs/pretrained/<collection>``, then the settings the policy is applied with (an export's ``apply``), then
    ``overrides`` (``--set``). The collection is indexed, mined and embedded on first use, and cached."""

    path = policy_path(policy)
    state, _ = read_policy(path)
    raw = json.loads(json.dumps(state["config"]))  # a copy
    raw["data"] = {"dataset_type": "beir" if data_dir else "default", "data_dir": data_dir,
                   "split_seed": PRETRAINED_SPLIT_SEED}
    raw["training"].update(output_dir=f"runs/pretrained/{Path(data_dir).name if data_dir else 'default'}",
                           init_from=None, log_dir=None, checkpoint_dir=None)
    raw["embeddings"]["cache_dir"] = None
    cfg = build_config(raw, f"policy {path}", {**state.get("apply", {}), **(overrides or {})})
    return cfg, path, state


def agent_from_policy(path: str | Path, state: dict, cfg: Config, ws: Workspace, device: torch.device) -> Agent:
    """The agent of a policy (checkpoint or export), checked to fit ``cfg`` over ``ws`` by its spec only: a policy
    may move between collections (``spec.py``)."""
    check_fits(f"policy {path}", state, policy_spec(cfg, ws), None,
               "the policy's own config sets them (adaptive-ir evaluate --policy uses it): drop those --set flags")
    agent = build_agent(cfg, ws, device)
    agent.core.load_state_dict(state["model"])
    agent.eval()
    return agent


def require_init_policy(cfg: Config) -> Path:
    """The training.init_from path, or CheckpointError when there is none (checked before any precompute)."""
    path = init_policy_path(cfg)
    if not path.exists():
        raise CheckpointError(f"training.init_from: {path} not found, and no shipped policy has that name (shipped: "
                              f"{', '.join(shipped_policies()) or 'none'}); train the source run first (e.g. "
                              f"adaptive-ir compare --config <source> --seeds {cfg.system.seed}), or point init_from "
                              "at a checkpoint or an exported policy folder")
    return path


def read_policy(path: str | Path) -> tuple[dict, str]:
    """A checkpoint (``.pt``) or an exported policy folder, and the sha256 of the file its weights were read from."""
    path = Path(path)
    return read_export(path) if path.is_dir() else read_checkpoint(path)


def init_policy_sha256(cfg: Config) -> str | None:
    """sha256 of the training.init_from weights as they are now (None without init_from, or when it is missing): a
    run records the one it started from, and ``compare`` refuses to reuse a seed that started from another."""
    path = init_policy_path(cfg) if cfg.training.init_from else None
    if path is None or not path.exists():
        return None
    return sha256(((path / WEIGHTS) if path.is_dir() else path).read_bytes())


def load_policy_from(cfg: Config, ws: Workspace) -> tuple[dict, str]:
    """The policy of ``training.init_from`` and the sha256 of the bytes it was read from, checked to fit ``cfg``'s
    policy over ``ws`` (the collection may differ: the embeddings, the candidate features and the network sizes may
    not)."""
    path = require_init_policy(cfg)
    s, digest = read_policy(path)
    check_fits(f"training.init_from: {path}", s, policy_spec(cfg, ws), None,
               "set those keys as the source policy had them, or start from a fresh policy (training.init_from: null)")
    return s, digest


def load_checkpoint(path: str | Path) -> dict:
    return read_checkpoint(path)[0]


def read_checkpoint(path: str | Path) -> tuple[dict, str]:
    """A checkpoint and the sha256 of the bytes it was read from (checked against its sidecar when there is one)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path.resolve()}")
    data = path.read_bytes()
    digest = sha256(data)
    side = _sidecar(Path(str(path) + ".json"))
    if side.get("sha256"):
        if digest not in (side["sha256"], side.get("previous_sha256")):
            raise CheckpointError(f"{path}: checksum mismatch (the file is damaged or was partly written); "
                                  "use another checkpoint (last.pt / best.pt) or retrain")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise CheckpointError(f"{path}: not a readable adaptive-ir checkpoint ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not an adaptive-ir checkpoint of format {CHECKPOINT_FORMAT}")
    return state, digest


def describe_origin(path: str | Path, state: dict) -> str:
    """One line saying which run wrote a checkpoint and at which update (printed by evaluate and reformulate)."""
    if "origin" in state:  # an exported policy
        origin = state["origin"]
        run_id, seed = (origin.get("run") or {}).get("id"), state["config"]["system"]["seed"]
        return (f"exported policy {path} (sha256 {state['sha256'][:12]}): from {origin['checkpoint']} at update "
                f"{origin['update']} of run {run_id}, seed {seed}")
    update = state.get("counters", {}).get("update")
    run = state.get("run")
    if not run:
        return f"checkpoint {path}: update {update}; no run record (written by a Trainer outside the command " \
               "line, or before runs were recorded)"
    commit = (run.get("git_commit") or "unknown")[:12] + ("+changes" if run.get("git_dirty") else "")
    return (f"checkpoint {path}: run {run['id']} in {run['dir']} (started {run['started']}, seed {run['seed']}, "
            f"config {run['config_fingerprint']}, code {commit}), update {update}")


def load_for_inference(checkpoint: str | Path, device: str = "auto", data_dir: str | None = None):
    """(config, workspace, agent, amp, state) rebuilt from a checkpoint, ready to reformulate; ``state`` is the
    checkpoint itself (its ``run`` and ``counters`` say where it came from)."""
    state = load_checkpoint(checkpoint)
    cfg = config_from_dict(state["config"])
    cfg.system.device = device
    if data_dir:
        cfg.data.data_dir = data_dir
    dev = torch.device(resolve_device(device))
    ws = Workspace(cfg, dev, progress=False)
    check_fits(str(checkpoint), state, policy_spec(cfg, ws), data_identity(ws),
               "pass --data-dir with the collection it was trained on")
    agent = build_agent(cfg, ws, dev)
    agent.core.load_state_dict(state["model"])
    agent.eval()
    return cfg, ws, agent, AmpContext.of(dev, cfg.training), state
