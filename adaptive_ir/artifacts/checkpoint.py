"""Checkpoints on disk, and the one way a saved policy becomes an agent.

A checkpoint is one ``torch.save`` dict (model, optimizer, scheduler, AMP scaler, random generators, sampler,
counters, the full config, the policy's ``spec`` and the ``data`` identity of its collection (``spec.py``), and
``run``: the identity of the run that wrote it, see ``rundir.py``) written atomically, plus a ``<name>.json`` sidecar
holding its sha256. Files written before run identities or specs were recorded have no ``run`` / ``spec`` key and
still load (checked by the config keys they store).

* writing: ``save_checkpoint``;
* reading: ``SavedPolicy.read`` (a checkpoint or an exported folder with its sha256, read and checked once, then
  passed along), ``load_checkpoint`` (a checkpoint file's state), ``resolve_policy`` (a path, or a shipped policy's
  name), ``describe_origin`` (where it came from);
* loading: ``load_compatible`` (a checkpoint checked to fit a config and collection: resume, test) and
  ``load_agent`` (the agent of a checkpoint or, ``portable``, of a policy applied elsewhere: evaluate, reformulate,
  compare, the scripts), with ``pretrained_config`` (the config a policy is applied to a collection with);
* ``training.init_from``: ``init_policy_path``, ``require_init_policy``, ``load_policy_from``.

The trainer (the loop) and the reformulator (inference) both import from here, never from each other.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from adaptive_ir.artifacts.export import RELEASE_DIR, SHIPPED_DIR, SPEC, read_export, release_dirs, shipped_policies
from adaptive_ir.artifacts.spec import check_fits, data_identity, policy_spec
from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.errors import CheckpointError
from adaptive_ir.common.io import atomic_write_bytes, atomic_write_json, sha256
from adaptive_ir.config import Config, build_config
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
"""How each refusal of ``check_fits`` ends: a checkpoint under another config (resume, evaluate, compare), ..."""
DATA_DIR_ADVICE = "pass --data-dir with the collection it was trained on"
"""... a checkpoint under its own config (reformulate, export): only its collection can differ, ..."""
POLICY_ADVICE = "the policy's own config sets them (adaptive-ir evaluate --policy uses it): drop those --set flags"
"""... a policy applied to another collection (evaluate / reformulate --policy), ..."""
INIT_ADVICE = "set those keys as the source policy had them, or start from a fresh policy (training.init_from: null)"
"""... and the policy a run starts from (training.init_from)."""


# ---------------------------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class SavedPolicy:
    """A checkpoint (``.pt``) or an exported policy folder, read and checked once: what loading, evaluating and
    exporting pass along instead of a path, so that no step reads and hashes the file again."""

    path: Path
    state: dict
    """``model``, ``config``, ``spec``, ``data``, ... (an export's ``policy.json`` with its weights as ``model``)."""
    sha256: str
    """Of the file the weights were read from, checked against the one recorded beside it."""

    @classmethod
    def read(cls, source: str | Path | SavedPolicy) -> SavedPolicy:
        """``source`` read (a SavedPolicy is returned as it is)."""
        if isinstance(source, SavedPolicy):
            return source
        path = Path(source)
        state, digest = read_export(path) if path.is_dir() else _read_checkpoint(path)
        return cls(path, state, digest)


def load_checkpoint(path: str | Path) -> dict:
    """A checkpoint file's state (what resuming reads; ``SavedPolicy.read`` takes exported folders too)."""
    return _read_checkpoint(Path(path))[0]


def _read_checkpoint(path: Path) -> tuple[dict, str]:
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


def resolve_policy(value: str | Path, *, must_exist: bool = False) -> Path:
    """``value`` as a path, or, when no such path exists, the policy of that name shipped in the package, or else kept
    in the repository (``export.release_dirs``). ``must_exist``: CheckpointError, naming the shipped policies, when
    none exists (a policy named by the user)."""
    path = Path(value)
    if not path.exists() and len(path.parts) == 1:
        for folder in (SHIPPED_DIR, *release_dirs()):
            if (folder / str(value) / SPEC).is_file():
                return folder / str(value)
    if must_exist and not path.exists():
        raise CheckpointError(f"policy {value}: no such checkpoint or exported policy folder, and no shipped policy "
                              f"has that name (shipped: {', '.join(shipped_policies()) or 'none'}; the replicas our "
                              f"tables were made with are in the repository's {RELEASE_DIR})")
    return path


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


# ---------------------------------------------------------------------------------------------- loading an agent
def load_compatible(source: str | Path | SavedPolicy, cfg: Config, ws: Workspace,
                    advice: str = RESUME_ADVICE) -> dict:
    """A checkpoint whose policy spec and data identity fit ``cfg`` over ``ws`` (resume, evaluate, test), else
    CheckpointError naming every key that differs (``spec.check_fits``) and ending with ``advice``."""
    saved = SavedPolicy.read(source)
    check_fits(str(saved.path), saved.state, policy_spec(cfg, ws), data_identity(ws), advice)
    return saved.state


def load_agent(source: str | Path | SavedPolicy, cfg: Config, ws: Workspace, device: torch.device, *,
               portable: bool = False, advice: str | None = None) -> tuple[Agent, AmpContext, str]:
    """(agent, its AMP context, where its weights came from as one line) of ``source``, in eval mode: what
    evaluate, reformulate, compare and the scripts run.

    By default ``source`` is a checkpoint checked to fit ``cfg`` over ``ws``, its collection included
    (``load_compatible``; ``advice`` defaults to RESUME_ADVICE). ``portable``: a policy applied to a collection it
    may never have seen (``pretrained_config``), a checkpoint or an exported folder, checked by its spec alone
    (``advice`` defaults to POLICY_ADVICE)."""
    saved = SavedPolicy.read(source)
    if portable:
        check_fits(f"policy {saved.path}", saved.state, policy_spec(cfg, ws), None, advice or POLICY_ADVICE)
    else:
        load_compatible(saved, cfg, ws, advice or RESUME_ADVICE)
    agent = build_agent(cfg, ws, device)
    agent.core.load_state_dict(saved.state["model"])
    agent.eval()
    return agent, AmpContext.of(device, cfg.training), describe_origin(saved.path, saved.state)


PRETRAINED_SPLIT_SEED = 42
"""The seed that carves dev from train on a collection a policy is applied to (``--set data.split_seed`` changes
it): fixed, so that every policy is scored on the same queries, which the training seed stored in each policy's
config would otherwise choose; 42 is the shipped configs' seed, so the carve is that of their training runs."""


def pretrained_config(policy: str | Path, data_dir: str | None = None,
                      overrides: Mapping[str, object] | None = None) -> tuple[Config, SavedPolicy]:
    """(config, the policy read) to apply a trained policy (a shipped policy's name, an exported folder or a
    checkpoint) to a collection it may never have seen: the policy's own config (index, miner, embedder, network:
    what its weights mean), its data section replaced by ``data_dir`` (a BEIR folder; None: the embedded default
    collection; dev carved with PRETRAINED_SPLIT_SEED), caches under ``runs/pretrained/<collection>``, then the
    settings the policy is applied with (an export's ``apply``), then ``overrides`` (``--set``). The collection is
    indexed, mined and embedded on first use, and cached. ``load_agent(saved, ..., portable=True)`` loads the
    policy."""
    saved = SavedPolicy.read(resolve_policy(policy, must_exist=True))
    raw = json.loads(json.dumps(saved.state["config"]))  # a copy
    raw["data"] = {"dataset_type": "beir" if data_dir else "default", "data_dir": data_dir,
                   "split_seed": PRETRAINED_SPLIT_SEED}
    raw["training"].update(output_dir=f"runs/pretrained/{Path(data_dir).name if data_dir else 'default'}",
                           init_from=None, log_dir=None, checkpoint_dir=None)
    raw["embeddings"]["cache_dir"] = None
    cfg = build_config(raw, f"policy {saved.path}", {**saved.state.get("apply", {}), **(overrides or {})})
    return cfg, saved


# ---------------------------------------------------------------------------------------------- training.init_from
def init_policy_path(cfg: Config) -> Path:
    """training.init_from with ``{seed}`` replaced by system.seed: a checkpoint, an exported policy folder, or, when
    no such path exists, the name of a policy shipped with the package or kept in the repository
    (``resolve_policy``)."""
    init_from = cfg.training.init_from
    assert init_from is not None, "called only when training.init_from is set"
    return resolve_policy(init_from.replace("{seed}", str(cfg.system.seed)))


def require_init_policy(cfg: Config) -> Path:
    """The training.init_from path, or CheckpointError when there is none (checked before any precompute)."""
    path = init_policy_path(cfg)
    if not path.exists():
        raise CheckpointError(f"training.init_from: {path} not found, and no shipped policy has that name (shipped: "
                              f"{', '.join(shipped_policies()) or 'none'}), nor {RELEASE_DIR} of a repository "
                              "checkout (run from its root); train the source run first (e.g. "
                              f"adaptive-ir compare --config <source> --seeds {cfg.system.seed}), or point init_from "
                              "at a checkpoint or an exported policy folder")
    return path


def load_policy_from(cfg: Config, ws: Workspace) -> tuple[dict, str]:
    """The policy of ``training.init_from`` and the sha256 of the bytes it was read from, checked to fit ``cfg``'s
    policy over ``ws`` (the collection may differ: the embeddings, the candidate features and the network sizes may
    not)."""
    saved = SavedPolicy.read(require_init_policy(cfg))
    check_fits(f"training.init_from: {saved.path}", saved.state, policy_spec(cfg, ws), None, INIT_ADVICE)
    return saved.state, saved.sha256


__all__ = ["CHECKPOINT_FORMAT", "DATA_DIR_ADVICE", "PRETRAINED_SPLIT_SEED", "SavedPolicy", "describe_origin",
           "init_policy_path", "load_agent", "load_checkpoint", "load_compatible", "load_policy_from",
           "pretrained_config", "require_init_policy", "resolve_policy", "save_checkpoint"]
