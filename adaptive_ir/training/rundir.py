"""One run, one directory: the lock a run holds on its folders, the rule for folders that already hold a run, and
``run.json``, which says what produced a directory.

**Folders.** A run writes ``training.output_dir`` (run.json, test results, TREC runs) and, under it by default,
``checkpoints/`` and ``logs/``; a ``checkpoint_dir`` or ``log_dir`` configured elsewhere is one more folder of the
run. The caches are not: they live beside the run folders (``Config.cache_path_dir``) and are shared.

**Lock.** For its whole life a run holds an exclusive ``flock`` on ``<folder>/.lock`` of each of its folders. The
OS releases it when the process ends in any way (``kill -9`` included), so a crashed run never leaves a stale lock;
the file stays, holding the last holder's pid, host, start time and command for the message that turns a second
run away. Only the lock decides, never the file's existence. Under torchrun, rank 0 alone takes it.

**Occupied folders.** Folders hold a run when they have its checkpoints (``*.pt``), logs (``metrics.jsonl``,
TensorBoard events) or test results (a run.json alone, from an attempt that failed before writing anything, does
not count). A new run refuses them unless told what to do, as Hugging Face's ``--overwrite_output_dir`` asks:

* ``--resume`` continues the run from its ``checkpoints/last.pt`` (so does ``--checkpoint`` naming a file in it);
* ``--overwrite`` moves the old run aside, whole, to ``<folder>.replaced-<UTC time>``, and starts afresh (nothing
  is deleted: remove that folder when you no longer want it);
* folders the user did not name fall back to numbering, as Stable-Baselines3 numbers its log folders: when no
  ``--output-dir`` (nor ``--set`` of an output folder) is given and the config's own folders are taken, the run
  goes to the first free ``<folder>_2``, ``<folder>_3``, ... (the same suffix on every folder of the run). So the
  same command run twice keeps both results. A folder the user named is taken as is, or refused.

**run.json** (in output_dir, written atomically at the start and again at the end): the run's ``id``, ``status``
(running, completed, interrupted, failed; a ``running`` run whose lock is free ended without recording it:
``kill -9``, out of memory, power loss, and is listed as ``killed`` once resumed), ``exit_code``,
``error``, ``started`` / ``ended`` (UTC), the ``command`` line of the process, ``cwd``, ``host``, ``pid``, ``seed``,
``config_fingerprint`` (a hash of the config without its output folders: equal means the same experiment) and the
full ``config``, ``git`` (commit and whether the checkout had changes, when the code runs from a git checkout),
package ``versions``, the ``device``, ``resumed_from`` / ``parent_run`` when it started from a checkpoint, and
``replaced`` (where ``--overwrite`` moved the old run), ``previous``: the records of the earlier sessions of a
resumed run (without their config), and once training has ended, ``result``: updates, best dev score, the final
pick on the whole dev split (``dev_full``, with a dev sample), the wall time of each phase (``phases_s``: load
collection, index, embedding model; per split mining, embeddings and the rest of its query set; training, dev
evaluation, dev selection), the peak memory (``peak_rss_gib``) and ``training_time``: the training phase split into
collect, update, dev evaluation, checkpointing, warm start and the rest, with the GPU's utilisation and memory on a
GPU (``Trainer._time_split``). Checkpoints carry the ``identity`` part.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.common.io import atomic_write_json, fingerprint, try_lock
from adaptive_ir.config import Config, config_to_dict, resolve_device

RUN_FILE = "run.json"
LOCK_FILE = ".lock"
IDENTITY_KEYS = ("id", "dir", "started", "seed", "config_fingerprint", "git_commit", "git_dirty")
"""The part of run.json a checkpoint carries (``describe_origin`` prints it)."""
LOCATION_KEYS = ("output_dir", "checkpoint_dir", "log_dir")
"""training.* keys that say where a run writes (left out of the config fingerprint)."""


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run_folders(cfg: Config) -> list[Path]:
    """The folders a run writes: output_dir, and the checkpoint and log folders that lie outside it."""
    tc = cfg.training
    out = Path(tc.output_dir)
    extra = [p for p in (tc.checkpoint_path_dir, tc.log_path_dir) if not _inside(p, out)]
    return [out, *dict.fromkeys(extra)]


def run_outputs(cfg: Config) -> list[Path]:
    """The files showing that a run already wrote into cfg's folders (empty when they hold none)."""
    tc = cfg.training
    found = sorted(tc.checkpoint_path_dir.glob("*.pt"))
    found += [p for p in (tc.log_path_dir / "metrics.jsonl", Path(tc.output_dir) / "test_metrics.json") if p.is_file()]
    return found + sorted(tc.log_path_dir.glob("events.out.tfevents.*"))


def config_fingerprint(cfg: Config) -> str:
    """Hash of the whole config except where the run writes: runs with equal fingerprints ran the same setup."""
    d = config_to_dict(cfg)
    d["training"] = {k: v for k, v in d["training"].items() if k not in LOCATION_KEYS}
    d["embeddings"] = {k: v for k, v in d["embeddings"].items() if k != "cache_dir"}
    return fingerprint(d)


class RunDir:
    """The folders of one run, locked by this process until ``finish``, and the run.json that describes it."""

    def __init__(self, cfg: Config, locks: list[BinaryIO], record: dict, resume_from: Path | None, note: str):
        self.cfg, self._locks, self.record = cfg, locks, record
        """cfg: the config of the run, its folders set to the ones claimed (numbered ones included)."""
        self.resume_from = resume_from
        """The checkpoint this run continues from (``--resume`` / ``--checkpoint``), or None for a fresh start."""
        self.note = note
        """One line for the user: where this run writes, and why there."""
        self.path = Path(cfg.training.output_dir) / RUN_FILE

    @property
    def identity(self) -> dict:
        """What a checkpoint records about the run that wrote it."""
        return {k: self.record[k] for k in IDENTITY_KEYS}

    def finish(self, status: str, exit_code: int | None, error: str | None = None, result: dict | None = None
               ) -> None:
        """Record how the run ended (completed / interrupted / failed), with the trainer's ``result`` (updates,
        best dev score, time per phase, peak memory) when there is one, and release the folders."""
        if not self._locks:
            return
        if result is not None:
            self.record["result"] = result
        self.record.update(status=status, exit_code=exit_code, error=error, ended=utc_now())
        try:
            atomic_write_json(self.path, self.record)
        finally:
            _release(self._locks)
            self._locks = []

    def finish_raised(self, e: BaseException) -> None:
        """Record a run ended by an exception: interrupted (Ctrl-C: exit code 130) or failed (2 for a user error,
        an AdaptiveIRError; 1 otherwise), with the error's text."""
        interrupted = isinstance(e, KeyboardInterrupt)
        self.finish("interrupted" if interrupted else "failed",
                    130 if interrupted else 2 if isinstance(e, AdaptiveIRError) else 1,
                    None if interrupted else f"{type(e).__name__}: {e}")

    def finish_trained(self, result: dict, stop_signal: int | None) -> int:
        """Record a run whose training returned, with its result: completed, or stopped by a signal (SIGINT: exit
        code 130; SIGTERM, a scheduler's stop: 0). Returns the exit code."""
        if not result["interrupted"]:
            self.finish("completed", 0, result=result)
            return 0
        code = 130 if stop_signal == signal.SIGINT else 0
        self.finish("interrupted", code, result=result)
        return code


def start_run(cfg: Config, *, resume: bool = False, checkpoint: str | Path | None = None,
              overwrite: bool = False, numbered: bool = False) -> RunDir:
    """Claim the run's folders for this process and write run.json; the rule is in the module docstring.

    ``numbered``: the folders come from the config, not from the user, so an occupied one is numbered instead of
    refused. ``checkpoint`` continues the run it belongs to when it lies in the run's checkpoint folder (numbered
    siblings included), else starts a new run from it. ``cfg`` is left as it is: the returned ``RunDir.cfg`` is a
    copy with the folders claimed. The folders stay locked until ``finish`` (or until the RunDir is dropped, or the
    process ends).
    """
    cfg = copy.deepcopy(cfg)
    if sum(map(bool, (resume, checkpoint, overwrite))) > 1:
        raise AdaptiveIRError("--resume, --checkpoint and --overwrite exclude each other; pass one")
    base = {k: getattr(cfg.training, k) for k in LOCATION_KEYS}
    continuing = resume
    if checkpoint is not None:
        n = _owner(cfg, base, Path(checkpoint), numbered)
        if n is not None:
            _number(cfg, base, n)
            continuing = True
    numbered = numbered and not (continuing or overwrite)
    resume_from = Path(checkpoint) if checkpoint is not None else None
    if resume:
        resume_from = cfg.training.checkpoint_path_dir / "last.pt"
        if not resume_from.is_file():
            raise AdaptiveIRError(f"--resume: {resume_from} not found, so {cfg.training.output_dir} holds no run to "
                                  "resume; start a new run without --resume (--overwrite if the folder holds a run "
                                  "that stopped before its first checkpoint)")
    tried: list[str] = []
    replaced: list[Path] = []
    n = 1
    while True:
        if numbered:
            _number(cfg, base, n)
        folders = run_folders(cfg)
        locks, busy = _lock(folders)
        if busy is not None:
            if numbered:
                tried.append(f"{folders[0]} is in use")
                n += 1
                continue
            raise AdaptiveIRError(f"{busy} is in use by another run: {_holder(busy)}; wait for it to end (or stop "
                                  "it), or pass another --output-dir")
        found = run_outputs(cfg)
        if continuing or not found:
            break
        if overwrite:
            locks, replaced = _move_aside(folders, locks)
            break
        _release(locks)
        if numbered:
            tried.append(f"{folders[0]} holds a run")
            n += 1
            continue
        raise AdaptiveIRError(_occupied_message(cfg, folders[0], found, checkpoint))
    previous = _read_record(folders[0]) if continuing else None
    try:
        record = _new_record(cfg, resume_from, previous, replaced)
        # the lock says who holds it before run.json names the run: whoever reads the record can name its holder
        _write_holder(locks, record)
        atomic_write_json(folders[0] / RUN_FILE, record)
    except BaseException:
        _release(locks)
        raise
    note = f"run {record['id']}: writing to {folders[0]}"
    if tried:
        note += f" ({', '.join(tried)}; --output-dir names the folder)"
    elif continuing:
        note += f" (resuming from {resume_from})"
    elif replaced:
        note += f" (the run that was there moved to {', '.join(map(str, replaced))})"
    return RunDir(cfg, locks, record, resume_from, note)


# ---------------------------------------------------------------------------------------------- folders and locks
def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _number(cfg: Config, base: dict, n: int) -> None:
    """Set cfg's folders to the n-th numbered variant of ``base`` (n = 1: base itself)."""
    for key, value in base.items():
        if value is not None:
            setattr(cfg.training, key, value if n == 1 else f"{value.rstrip('/')}_{n}")


def _owner(cfg: Config, base: dict, checkpoint: Path, numbered: bool) -> int | None:
    """The n of the folders (numbered variants too when ``numbered``) whose checkpoint folder holds
    ``checkpoint``; None when it comes from elsewhere."""
    n = 1
    while True:
        _number(cfg, base, n)
        if _inside(checkpoint, cfg.training.checkpoint_path_dir):
            return n
        if not numbered or not Path(cfg.training.output_dir).exists():
            _number(cfg, base, 1)
            return None
        n += 1


def _lock(folders: list[Path]) -> tuple[list[BinaryIO], Path | None]:
    """Locks on every folder (created when absent), or ([], the first folder another process holds)."""
    locks: list[BinaryIO] = []
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            lock = try_lock(folder / LOCK_FILE)
        except OSError as e:
            _release(locks)
            raise AdaptiveIRError(f"{folder}: cannot create the run folder or its lock ({e.strerror}); pass an "
                                  "--output-dir you can write to") from e
        if lock is None:
            _release(locks)
            return [], folder
        locks.append(lock)
    return locks, None


def _release(locks: list[BinaryIO]) -> None:
    for lock in locks:
        lock.close()


def _write_holder(locks: list[BinaryIO], record: dict) -> None:
    """Who holds the lock, for the message a refused run prints (written into the lock file we hold)."""
    info = json.dumps({k: record[k] for k in ("id", "pid", "host", "started", "command")}).encode("utf-8")
    for lock in locks:
        lock.seek(0)
        lock.truncate()
        lock.write(info)
        lock.flush()


def _holder(folder: Path) -> str:
    try:
        h = json.loads((folder / LOCK_FILE).read_text(encoding="utf-8"))
        return (f"pid {h['pid']} on {h['host']}, started {h['started']} (run {h['id']}: "
                f"{' '.join(h['command'])})")
    except (OSError, ValueError, KeyError, TypeError):  # the holder may be writing it at this very moment
        return "a process that has not said who it is yet"


def _move_aside(folders: list[Path], locks: list[BinaryIO]) -> tuple[list[BinaryIO], list[Path]]:
    """--overwrite: rename each folder that holds anything to ``<folder>.replaced-<UTC time>`` (while still
    holding its lock, so no run is working in it), then lock the fresh, empty folders in their place.
    Returns (the new locks, where the old folders went)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    moved = []
    for folder in folders:
        if not any(p.name != LOCK_FILE for p in folder.iterdir()):
            continue
        dest = folder.with_name(f"{folder.name}.replaced-{stamp}")
        i = 2
        while dest.exists():
            dest, i = folder.with_name(f"{folder.name}.replaced-{stamp}-{i}"), i + 1
        try:
            folder.rename(dest)
        except OSError as e:
            _release(locks)
            raise AdaptiveIRError(f"--overwrite: cannot move {folder} aside to {dest} ({e.strerror}); move or "
                                  "delete it yourself, or pass another --output-dir") from e
        moved.append(dest)
    fresh, busy = _lock(folders)
    _release(locks)
    if busy is not None:
        raise AdaptiveIRError(f"{busy} was taken by another run while the old one was moved aside: "
                              f"{_holder(busy)}; pass another --output-dir")
    return fresh, moved


def _occupied_message(cfg: Config, out: Path, found: list[Path], checkpoint: str | Path | None) -> str:
    prev = _read_record(out) or {}
    what = ", ".join(str(p.relative_to(out)) if _inside(p, out) else str(p) for p in found[:3])
    status = prev.get("status")
    if status == "running":
        status = "stopped without finishing (killed or crashed)"
    said = f"status {status}, started {prev.get('started')}; " if status else ""
    if checkpoint is not None:
        return (f"{out} already holds another run ({said}{what}) and --checkpoint {checkpoint} is not one of its "
                "checkpoints: continuing that run here would mix two runs' logs; pass a new --output-dir")
    return (f"{out} already holds a run ({said}{what}); pass --resume to continue it from "
            f"{cfg.training.checkpoint_path_dir / 'last.pt'}, --overwrite to move it aside to "
            f"{out.name}.replaced-<time> and start over, or another --output-dir")


# ---------------------------------------------------------------------------------------------- run.json
def _read_record(out: Path) -> dict | None:
    try:
        record = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _new_record(cfg: Config, resume_from: Path | None, previous: dict | None,
                replaced: list[Path]) -> dict:
    out = Path(cfg.training.output_dir)
    parent = None
    if resume_from is not None and previous is None:  # a new run that starts from another run's checkpoint
        try:
            parent = json.loads(Path(str(resume_from) + ".json").read_text()).get("run")
        except (OSError, ValueError, AttributeError):
            parent = None
    git = git_state()
    record = {
        "id": (previous or {}).get("id") or f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}",
        "dir": str(out.resolve()), "status": "running", "exit_code": None, "error": None,
        "started": utc_now(), "ended": None,
        "command": list(sys.argv), "cwd": os.getcwd(),  # the process's own command line
        "host": socket.gethostname(), "pid": os.getpid(),
        "seed": cfg.system.seed, "config_fingerprint": config_fingerprint(cfg), "config_source": cfg.source,
        "config": config_to_dict(cfg),
        "git_commit": git[0], "git_dirty": git[1], "versions": package_versions(), "device": device_info(cfg),
        "resumed_from": None if resume_from is None else str(resume_from), "parent_run": parent,
        "replaced": [str(p) for p in replaced], "previous": [],
    }
    if previous is not None:
        if previous.get("status") == "running":  # we hold its lock, so it is not: it ended without a word
            previous["status"] = "killed"
        earlier = previous.pop("previous", [])
        previous.pop("config", None)  # the config of each session would repeat; the latest one is kept
        record["previous"] = [*earlier, previous]
    return record


def git_state() -> tuple[str | None, bool | None]:
    """(commit, has uncommitted changes) of the checkout this package runs from; (None, None) when it is not one
    (an installed wheel, no git): never an error."""
    root = Path(__file__).resolve().parents[2]
    try:
        top, commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"],
                                     capture_output=True, text=True, timeout=10, check=True).stdout.split()
        if Path(top).resolve() != root:  # the package sits inside some other repository (e.g. a venv in one)
            return None, None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, ValueError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("adaptive-ir", "torch", "numpy", "bm25s", "sentence-transformers"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_info(cfg: Config) -> dict:
    import torch

    device = resolve_device(cfg.system.device)
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if device.startswith("cuda") \
        else []
    return {"device": device, "gpus": gpus, "processes": int(os.environ.get("WORLD_SIZE", "1")),
            "platform": platform.platform()}
