"""Several devices on a CPU machine: the DataParallel routing (a batch-splitting stand-in; the update alone, with
autocast inside the replicas), DDP under torchrun with the gloo backend (equal parameters *and* optimizer states
across ranks after uneven shards and after a non-finite minibatch on one rank), GPU telemetry (silent without a
GPU; sampled from fake devices) and the CUDA OOM message."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch
from helpers import default_collection, tiny_config
from torch import nn

import adaptive_ir.training.run as run_mod
import adaptive_ir.training.trainer as trainer_mod
from adaptive_ir import cli
from adaptive_ir.artifacts.checkpoint import load_checkpoint
from adaptive_ir.common.amp import AmpContext, Autocast
from adaptive_ir.common.telemetry import GPUTelemetry, discover_devices, sample
from adaptive_ir.training.monitor import read_metrics
from adaptive_ir.training.trainer import Trainer, parallel_wrapper

REPO = Path(__file__).resolve().parents[1]


class SplittingWrapper(nn.Module):
    """DataParallel stand-in: scatters every input along the batch in two chunks, runs the core on each and
    gathers the outputs, recording (grad enabled, batch size) per call."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        self.calls: list[tuple[bool, int]] = []

    def forward(self, *inputs):
        b = inputs[0].shape[0]
        self.calls.append((torch.is_grad_enabled(), b))
        half = (b + 1) // 2
        chunks = [s for s in (slice(0, half), slice(half, b)) if s.stop > s.start]
        outs = [self.module(*(x[s] for x in inputs)) for s in chunks]
        return tuple(torch.cat(parts) for parts in zip(*outs))


class FakeDevice:
    """An nvitop.Device look-alike: fixed readings, nvitop's NA string for an unsupported field, and an event
    set once it has been read ``wait_reads`` times."""

    def __init__(self, util=87, used=3 * 2**30, total=16 * 2**30, temperature="N/A", wait_reads=2):
        self.values = {"util": util, "used": used, "total": total, "temperature": temperature}
        self.reads = 0
        self.read_enough = threading.Event()
        self.wait_reads = wait_reads

    def gpu_utilization(self):
        self.reads += 1
        if self.reads >= self.wait_reads:
            self.read_enough.set()
        return self.values["util"]

    def memory_used(self):
        return self.values["used"]

    def memory_total(self):
        return self.values["total"]

    def temperature(self):
        return self.values["temperature"]


# ---------------------------------------------------------------------------------------------- DataParallel
def test_dataparallel_chosen_only_with_several_gpus_and_large_minibatches(monkeypatch):
    monkeypatch.setattr(torch.nn, "DataParallel", SplittingWrapper)
    core = nn.Linear(2, 2)
    amp = AmpContext(torch.device("cpu"), False)
    big, small = trainer_mod.DATA_PARALLEL_MIN_BATCH, trainer_mod.DATA_PARALLEL_MIN_BATCH - 1
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for device in ("cuda", "cuda:0"):
        wrapper = parallel_wrapper(core, torch.device(device), amp, big)
        assert isinstance(wrapper, SplittingWrapper) and isinstance(wrapper.module, Autocast)
        assert wrapper.module.module is core
    assert parallel_wrapper(core, torch.device("cuda"), amp, small) is None  # small minibatches: one GPU pays
    assert parallel_wrapper(core, torch.device("cuda:1"), amp, big) is None  # an explicit other GPU: that one
    assert parallel_wrapper(core, torch.device("cpu"), amp, big) is None
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert parallel_wrapper(core, torch.device("cuda"), amp, big) is None


def test_autocast_is_applied_inside_each_replica():
    # DataParallel's worker threads enter autocast with the device's default dtype (fp16 on CUDA); the wrapper
    # must restore the configured one inside the replica. Stand-in on the CPU: a thread entering fp16 autocast.
    amp = AmpContext(torch.device("cpu"), True, "bfloat16")
    layer = nn.Linear(4, 4)
    out = {}

    def replica(name, module):
        with torch.autocast("cpu", dtype=torch.float16):
            out[name] = module(torch.randn(2, 4)).dtype

    for name, module in (("bare", layer), ("wrapped", Autocast(layer, amp))):
        thread = threading.Thread(target=replica, args=(name, module))
        thread.start()
        thread.join()
    assert out == {"bare": torch.float16, "wrapped": torch.bfloat16}


def test_only_update_forwards_run_through_the_wrapper(tmp_path, monkeypatch):
    wrappers: list[SplittingWrapper] = []

    def wrap(core, device, amp, minibatch_size):
        wrappers.append(SplittingWrapper(core))
        return wrappers[-1]

    monkeypatch.setattr(trainer_mod, "parallel_wrapper", wrap)
    # the trainer's telemetry reads a fake GPU, so the logged rows must carry its numbers
    monkeypatch.setattr(trainer_mod, "GPUTelemetry", lambda interval: GPUTelemetry(interval, [FakeDevice()]))
    # minibatches smaller than one update's transitions (episodes are short under the STOP prior)
    cfg = tiny_config(tmp_path, **{"training.eval_every": 1, "training.num_epochs": 2, "training.batch_size": 32})
    t = Trainer(cfg, progress=False, collection=default_collection())
    keys = list(t.agent.state_dict())
    assert t.agent._runner is wrappers[0] and not any("module" in k for k in keys)
    t.train()

    calls = wrappers[0].calls
    # rollouts and the dev evaluation use the bare core on one device; the update's minibatches, the wrapper
    assert calls and all(grad and b == cfg.training.batch_size for grad, b in calls)
    logged = read_metrics(tmp_path / "logs" / "metrics.jsonl")
    assert t.update == 2 and any(r.get("dev/R@40") is not None for r in logged)  # dev was evaluated
    assert list(t.agent.state_dict()) == keys
    ckpt = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert list(ckpt["model"]) == list(t.agent.core.state_dict())

    rows = [r for r in read_metrics(tmp_path / "logs" / "metrics.jsonl") if "charts/episodic_return" in r]
    assert rows and all(r["gpu/0/util"] == 87.0 and r["gpu/0/mem_used_mib"] == 3072.0 for r in rows)
    assert all("gpu/0/temperature" not in r for r in rows)  # NA readings are left out, not logged as 0


# ---------------------------------------------------------------------------------------------- DDP
WORKER = """
import hashlib, json, os, sys
import torch
import adaptive_ir.training.trainer as T
from adaptive_ir import cli

train, collect = T.Trainer.train, T.Trainer._collect


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(torch.as_tensor(t).detach().cpu().double().numpy().tobytes())
    return h.hexdigest()


def collect_and_count(self):
    out = collect(self)
    self.transitions = getattr(self, "transitions", []) + [int(self.buf.alive.sum())]
    return out


def train_and_record(self):
    poison = int(os.environ.get("POISON_CALL", "0"))
    if poison and self.rank == 1:  # one non-finite minibatch on one rank only
        core, calls = self.agent.core, []
        plain = core.forward

        def forward(*args):
            logits, values = plain(*args)
            if torch.is_grad_enabled():
                calls.append(1)
                if len(calls) == poison:
                    values = values * float("nan")
            return logits, values

        core.forward = forward
    out = train(self)
    opt = self.optimizer.state_dict()["state"]
    with open(os.path.join(sys.argv[-1], f"rank{self.rank}.json"), "w") as f:
        json.dump({"params": digest(self.agent.core.state_dict().values()),
                   "adam_steps": [float(opt[i]["step"]) for i in sorted(opt)],
                   "adam_moments": digest([opt[i][k] for i in sorted(opt) for k in ("exp_avg", "exp_avg_sq")]),
                   "transitions": self.transitions, "shard": self.shard.tolist(), "updates": out["updates"],
                   "nonfinite_total": self.nonfinite_total, "world": self.world,
                   "runner": type(self.agent._runner).__name__}, f)
    return out

T.Trainer.train, T.Trainer._collect = train_and_record, collect_and_count
sys.exit(cli.main(["train", *sys.argv[1:-1]]))
"""


def run_ddp(tmp_path: Path, poison_call: int = 0, **extra) -> tuple[list[dict], subprocess.CompletedProcess, Path]:
    """Two gloo ranks under torchrun on the tiny default-collection run; each rank's record (worker above)."""
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    out = tmp_path / "run"
    sets = {"training.episodes_per_update": 32, "training.collect_batch_size": 16, "training.batch_size": 16,
            "training.ppo_epochs": 2, "training.num_epochs": 2, "training.eval_every": 2, "data.max_train_queries": 64,
            "rl_agent.hidden_dim": 32, "rl_agent.num_heads": 2, **extra}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker),
           "--config", "quickstart", "--output-dir", str(out), "--no-progress", "--test",
           *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")], str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "POISON_CALL": str(poison_call)}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "terminate called without an active exception" in proc.stderr:
        # seen once in ~20 runs on a 2-core machine: a rank aborted inside gloo's C++ threads, before any of our
        # checks; the run is repeated once, from an empty folder, and a second failure (or any other) fails the test
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)], proc, out


def test_ddp_two_processes_gloo_stay_in_sync(tmp_path):
    ranks, proc, out = run_ddp(tmp_path)
    assert all(r["world"] == 2 and r["runner"] == "DistributedDataParallel" for r in ranks)
    assert ranks[0]["params"] == ranks[1]["params"]  # gradients all-reduced: identical replicas
    # the ranks rolled out different numbers of transitions (their own queries), hence would need different
    # numbers of minibatches; they ran the same number, so their optimizers took the same steps
    assert ranks[0]["transitions"] != ranks[1]["transitions"]
    assert ranks[0]["adam_steps"] == ranks[1]["adam_steps"] and ranks[0]["adam_steps"][0] > 0
    assert ranks[0]["adam_moments"] == ranks[1]["adam_moments"]
    assert ranks[0]["updates"] == ranks[1]["updates"] == 2  # 2 epochs × 64 queries / (2 ranks × 32 episodes)
    s0, s1 = set(ranks[0]["shard"]), set(ranks[1]["shard"])
    assert not s0 & s1 and s0 | s1 == set(range(64))  # each rank rolls out its own queries
    assert proc.stdout.count("trained 2 updates") == 1  # rank 0 alone reports and tests
    assert (out / "test_metrics.json").is_file() and (out / "checkpoints" / "best.pt").is_file()
    rows = read_metrics(out / "logs" / "metrics.jsonl")
    assert [r["update"] for r in rows if "charts/episodic_return" in r] == [1, 2]  # one writer, not two
    assert any("dev/R@40" in r for r in rows)
    run = json.loads((out / "run.json").read_text())  # rank 0 claimed the folder for both
    assert run["status"] == "completed" and run["device"]["processes"] == 2

    # the same command again: rank 0 is refused (the folder holds that run) and both ranks leave, none hangs
    # (torchrun itself then reports the failed worker, with its own traceback)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "POISON_CALL": "0"}
    again = subprocess.run(proc.args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode != 0
    assert again.stderr.count(f"error: {out} already holds a run") == 1, again.stderr[-3000:]
    assert json.loads((out / "run.json").read_text()) == run


def test_ddp_nonfinite_minibatch_on_one_rank_is_skipped_on_both(tmp_path):
    # rank 1's third minibatch has a NaN loss: its gradient all-reduce still pairs with rank 0's, and both skip
    # that step (the all-reduced gradients are NaN on both), so optimizers and parameters stay equal
    ranks, _, _ = run_ddp(tmp_path, poison_call=3, **{"training.num_epochs": 1})
    assert ranks[0]["nonfinite_total"] == ranks[1]["nonfinite_total"] == 1
    assert ranks[0]["params"] == ranks[1]["params"]
    assert ranks[0]["adam_steps"] == ranks[1]["adam_steps"]
    assert ranks[0]["adam_moments"] == ranks[1]["adam_moments"]


# ---------------------------------------------------------------------------------------------- telemetry
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU (and likely NVML) is present")
def test_telemetry_is_silent_and_empty_without_a_gpu(capsys, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        with GPUTelemetry(interval=0.01) as gpu:
            assert not gpu.enabled and gpu._thread is None
            assert gpu.latest() == {}
        # torch claims a GPU but NVML is absent here (or nvitop is missing): still nothing, and no output
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert discover_devices() == []
        monkeypatch.setitem(sys.modules, "nvitop", None)
        assert discover_devices() == []
    assert caught == []
    assert caplog.records == []
    assert capsys.readouterr() == ("", "")


def test_sample_converts_and_skips_unreadable_fields():
    broken = FakeDevice(util=50.5)
    broken.memory_total = lambda: (_ for _ in ()).throw(RuntimeError("GPU is lost"))
    got = sample([FakeDevice(temperature=71), broken])
    assert got == {"gpu/0/util": 87.0, "gpu/0/mem_used_mib": 3072.0, "gpu/0/mem_total_mib": 16384.0,
                   "gpu/0/temperature": 71.0, "gpu/1/util": 50.5, "gpu/1/mem_used_mib": 3072.0}


def test_telemetry_thread_samples_in_the_background():
    dev = FakeDevice(wait_reads=3)
    gpu = GPUTelemetry(interval=0.01, devices=[dev]).start()
    try:
        assert gpu.latest()["gpu/0/util"] == 87.0  # start() samples once before returning
        dev.values["util"] = 12
        dev.wait_reads = dev.reads + 2  # two reads that surely follow the change
        dev.read_enough.clear()
        assert dev.read_enough.wait(timeout=30)  # later readings come from the thread
        gpu.stop()
        assert gpu.latest()["gpu/0/util"] == 12.0
        assert gpu._thread is None
    finally:
        gpu.stop()


# ---------------------------------------------------------------------------------------------- OOM
def test_cuda_oom_prints_the_advice_and_exits_2(tmp_path, monkeypatch, capsys):
    class OOMTrainer:
        def __init__(self, *a, **k):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(run_mod, "Trainer", OOMTrainer)
    rc = cli.main(["train", "--config", "quickstart", "--output-dir", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == f"error: {cli.OOM_ADVICE}"
    assert "Traceback" not in err
