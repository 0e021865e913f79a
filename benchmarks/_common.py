"""Shared plumbing of the benchmark scripts: arguments, the workspace they time, machine facts, JSON and plots."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from adaptive_ir.config import load_config
from adaptive_ir.data import load_beir, make_default
from adaptive_ir.rl.workspace import Workspace, seed_everything

RESULTS = Path(__file__).resolve().parent / "results"


def parser(description: str) -> argparse.ArgumentParser:
    """The arguments every script takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", default="quickstart", help="config name or path (sizes the policy and the miner)")
    p.add_argument("--data-dir", default=None, help="a BEIR folder (e.g. ../shared/datasets/scifact); "
                   "default: the embedded default collection")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a tiny budget: checks the script runs, not its speed")
    p.add_argument("--json", default=None, help="write the figures to this JSON file")
    p.add_argument("--plot", default=None, help="PNG path (default: the --json path with .png, "
                   "else benchmarks/results/<script>.png)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config key (repeatable), e.g. candidate_mining.feedback=bm25")
    return p


def setup(args) -> torch.device:
    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    if args.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(args.device)


def load_collection(data_dir: str | None):
    """The real BEIR collection when a folder is given, else the embedded default (no files needed)."""
    return load_beir(data_dir) if data_dir else make_default()


def workspace(args, device: torch.device, collection=None, **overrides) -> Workspace:
    """A Workspace for ``args.config`` with candidate/embedding caches off (a benchmark measures, never reuses);
    its output folder (with the saved index) is removed when the process exits. The policy reads LSA embeddings
    (no model to load), 16-dimensional where the config sets no size: the width the SciFact figures were
    measured at, before its config moved to MiniLM."""
    out = tempfile.mkdtemp(prefix="adaptive-ir-bench-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    sets = {"training.output_dir": out, "embeddings.cache_dir": f"{out}/cache",
            "candidate_mining.cache_enabled": "false", "embeddings.type": "lsa",
            **dict(item.split("=", 1) for item in getattr(args, "set", [])),
            **{k: str(v) for k, v in overrides.items()}}
    cfg = load_config(args.config, sets)
    if cfg.embeddings.embedding_dim is None:
        cfg.embeddings.embedding_dim = 16
    return Workspace(cfg, device, collection=collection or load_collection(args.data_dir), progress=False)


def machine(device: torch.device) -> dict:
    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "device": str(device)}
    try:
        info["load_average"] = os.getloadavg()  # how busy the (possibly shared) machine was
    except OSError:
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """Accumulates wall time per named phase (synchronising CUDA so asynchronous kernels are charged)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.totals: dict[str, float] = {}

    def __call__(self, name: str):
        return _Phase(self, name)


class _Phase:
    def __init__(self, timer: Timer, name: str):
        self.timer, self.name = timer, name

    def __enter__(self):
        sync(self.timer.device)
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        sync(self.timer.device)
        self.timer.totals[self.name] = self.timer.totals.get(self.name, 0.0) + time.perf_counter() - self.t0
        return False


NO_KERNEL_OPS = {
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::_unsafe_view", "aten::as_strided",
    "aten::reshape", "aten::_reshape_alias", "aten::expand", "aten::expand_as", "aten::unsqueeze", "aten::squeeze",
    "aten::select", "aten::slice", "aten::t", "aten::transpose", "aten::permute", "aten::detach", "aten::alias",
    "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg", "aten::narrow", "aten::split", "aten::unbind",
    "aten::chunk", "aten::result_type", "aten::_local_scalar_dense", "aten::to", "aten::_to_copy", "aten::type_as",
    "aten::contiguous", "aten::numpy_T", "aten::split_with_sizes", "aten::view_as", "aten::flatten",
}
"""Operators that only make metadata (views, shapes) or allocate: no kernel runs for them."""


def count_ops(fn, device: torch.device) -> dict[str, int]:
    """Run ``fn`` under torch.profiler and count what launches kernels: the aten operators called from Python
    (outermost aten events) that do some work, i.e. that are not, and do not only call, views or allocations
    (``NO_KERNEL_OPS``; a ``.to()`` that copies counts, one that does not is skipped); on CUDA also the kernel
    launches themselves."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
        sync(device)
    events = prof.events()

    def works(e) -> bool:
        return e.name not in NO_KERNEL_OPS or any(works(c) for c in e.cpu_children if c.name.startswith("aten::"))

    def outermost(e) -> bool:
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                return False
            p = p.cpu_parent
        return True

    out = {"aten_ops": sum(1 for e in events if e.name.startswith("aten::") and outermost(e) and works(e))}
    if device.type == "cuda":
        out["cuda_kernel_launches"] = sum(1 for e in events if e.name in ("cudaLaunchKernel", "cuLaunchKernel",
                                                                          "cudaLaunchKernelExC"))
    return out


def count_syncs(fn) -> list[str]:
    """The host-device synchronisations ``fn`` makes (``adaptive_ir.common.hostsync``; sees them on any device)."""
    from adaptive_ir.common.hostsync import SyncDetector

    with SyncDetector(raise_on_sync=False) as detector:
        fn()
    return detector.events


def count_cuda_syncs(fn, device: torch.device) -> int | None:
    """On CUDA, the synchronising calls CUDA itself reports for ``fn`` (``hostsync.cuda_sync_sites``): a second
    opinion beside ``count_syncs``. None on other devices."""
    from adaptive_ir.common.hostsync import cuda_sync_sites

    return len(cuda_sync_sites(fn)) if device.type == "cuda" else None


def write_json(path: str | None, payload: dict) -> None:
    text = json.dumps(payload, indent=2, default=float)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
    print(text)


def figure():
    """A matplotlib (fig, ax) on the Agg backend: the scripts run headless."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(7, 4.2))


def save_plot(fig, args, name: str) -> str:
    # beside the JSON by default, so a run written elsewhere (--quick, a 5M point) never replaces a tracked plot
    path = Path(args.plot) if args.plot else Path(args.json).with_suffix(".png") if args.json else RESULTS / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path)


def same_topk(docs_a, scores_a, docs_b, scores_b, tol: float = 1e-4) -> tuple[bool, float]:
    """(every query agrees up to ties, fraction of queries with exactly the same ranked doc list).

    Agreement up to ties: the k scores match rank by rank, and the two doc sets differ only in documents
    whose score equals the k-th score (which of several tied documents makes the cut is arbitrary).
    """
    exact, ok = 0, True
    for da, sa, db, sb in zip(docs_a, scores_a, docs_b, scores_b):
        exact += bool(np.array_equal(da, db))
        if not np.allclose(sa, sb, rtol=tol, atol=tol):
            ok = False
            continue
        cut = min(sa[-1], sb[-1]) + tol
        if set(da[sa > cut].tolist()) != set(db[sb > cut].tolist()):
            ok = False
    return ok, exact / max(1, len(docs_a))
