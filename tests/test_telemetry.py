"""Where a training run's time goes: ``PhaseTimer`` (parts of a phase, nested parts, the rest), the GPU telemetry's
summary over time windows (with a scripted stand-in GPU and a scripted clock: hand-computed means and medians),
nothing at all on a CPU machine, and a real training run whose run.json splits its training phase."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from helpers import TINY_ARGS

from adaptive_ir.common.telemetry import GPUTelemetry, PhaseTimer, describe_time


class ScriptedClock:
    """A clock that returns the times it is given, in order (then stays at the last one)."""

    def __init__(self, times):
        self.times, self.i = list(times), 0

    def __call__(self) -> float:
        t = self.times[min(self.i, len(self.times) - 1)]
        self.i += 1
        return t


class ScriptedGPU:
    """A ``GPUDevice`` whose utilisation follows a script (one value per read) and whose memory grows by 1 GiB per
    read; temperature unsupported (nvitop's NA string)."""

    def __init__(self, utils):
        self.utils, self.reads = list(utils), 0

    def gpu_utilization(self):
        u = self.utils[self.reads]
        self.reads += 1
        return u

    def memory_used(self):
        return self.reads * 2**30

    def memory_total(self):
        return 80 * 2**30

    def temperature(self):
        return "N/A"


def test_summary_over_windows_is_the_hand_computed_mean_and_median():
    # samples at t = 0, 1, ..., 9 with these utilisations (GPU 1: its own script, one read it cannot answer)
    utils0 = [10, 90, 80, 20, 30, 100, 95, 0, 50, 60]
    utils1 = [0, 10, 20, 30, 40, 50, 60, 70, "N/A", 90]
    gpu = GPUTelemetry(0.5, [ScriptedGPU(utils0), ScriptedGPU(utils1)], clock=ScriptedClock(range(10)))
    for _ in range(10):
        gpu.poll()
    assert len(gpu.history()) == 10 and gpu.latest()["gpu/0/util"] == 60.0
    # collect windows [1, 2.5] and [5, 6] (ends included): samples at 1, 2, 5, 6; the training phase [1, 8]
    s = gpu.summary({"training": [(1.0, 8.0)], "collect": [(5.0, 6.0), (1.0, 2.5)], "idle": [(100.0, 200.0)]})
    assert s["samples"] == 10 and s["sample_interval_s"] == 0.5
    g0, g1 = s["gpus"]
    assert g0["gpu"] == 0 and g1["gpu"] == 1
    # GPU 0 collecting: 90, 80, 100, 95 -> mean 91.25, median (90 + 95) / 2
    assert g0["collect"] == {"samples": 4, "util_mean": 91.25, "util_median": 92.5}
    # GPU 0 over training, t = 1..8: 90 80 20 30 100 95 0 50 -> mean 465 / 8, median (50 + 80) / 2
    assert g0["training"] == {"samples": 8, "util_mean": 58.12, "util_median": 65.0}
    assert g0["idle"] == {"samples": 0, "util_mean": None, "util_median": None}
    # GPU 1 collecting: 10, 20, 50, 60; over training its unreadable sample (t = 8) is left out: 10..70
    assert g1["collect"] == {"samples": 4, "util_mean": 35.0, "util_median": 35.0}
    assert g1["training"] == {"samples": 7, "util_mean": 40.0, "util_median": 40.0}
    # memory: 1 GiB more per read, read after the utilisation: the tenth read holds 10 GiB
    assert g0["mem_peak_mib"] == 10 * 1024 and g0["mem_total_mib"] == 80 * 1024
    line = describe_time({"wall_s": 8.0, "updates": 2, "parts_s": {"collect": 3.0, "other": 5.0},
                          "shares": {"collect": 0.375, "other": 0.625}, "gpu": s})
    assert "collect 3.0 s (38%)" in line and "GPU 0: utilisation mean/median 58%/65% over training, 91%/92% collecting" in line


def test_overlapping_windows_count_a_sample_once():
    gpu = GPUTelemetry(1.0, [ScriptedGPU([10, 20, 30, 40])], clock=ScriptedClock([0, 1, 2, 3]))
    for _ in range(4):
        gpu.poll()
    g = gpu.summary({"w": [(0.0, 2.0), (1.0, 3.0), (1.5, 1.6)]})["gpus"][0]
    assert g["w"] == {"samples": 4, "util_mean": 25.0, "util_median": 25.0}


def test_no_gpu_no_summary_and_no_output(capsys, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with GPUTelemetry(interval=0.01) as gpu:
        pass
    assert gpu.summary({"training": [(0.0, 1.0)], "collect": []}) is None
    assert gpu.history() == []
    assert caplog.records == [] and capsys.readouterr() == ("", "")


def test_phase_timer_splits_a_phase_into_parts_and_the_rest():
    # start 0; collect 1-3; update 3-4 with a checkpoint 3.5-3.75 inside; collect 5-6; stop 10
    clock = ScriptedClock([0, 1, 3, 3, 3.5, 3.75, 4, 5, 6, 10])
    syncs = []
    timer = PhaseTimer(["collect", "update", "checkpointing", "warm_start"], lambda: syncs.append(1), clock).start()
    with timer.part("collect"):
        pass
    with timer.part("update"):
        with timer.part("checkpointing"):
            pass
    with timer.part("collect"):
        pass
    s = timer.stop().summary()
    assert len(syncs) == 10  # one per boundary
    assert s["wall_s"] == 10.0
    assert s["parts_s"] == {"collect": 3.0, "update": 0.75, "checkpointing": 0.25, "warm_start": 0.0, "other": 6.0}
    assert s["shares"] == {"collect": 0.3, "update": 0.075, "checkpointing": 0.025, "warm_start": 0.0, "other": 0.6}
    assert timer.windows["collect"] == [(1, 3), (5, 6)] and timer.windows["checkpointing"] == [(3.5, 3.75)]
    line = describe_time(s | {"updates": 2, "gpu": None})
    assert line.startswith("training 10.0 s (2 updates): collect 3.0 s (30%), update 0.8 s (8%)")
    assert "warm start" not in line and "GPU" not in line


def test_a_part_left_on_an_exception_is_timed_without_a_sync():
    syncs = []
    timer = PhaseTimer(["update"], lambda: syncs.append(1), ScriptedClock([0, 1, 2])).start()
    with pytest.raises(RuntimeError), timer.part("update"):
        raise RuntimeError("CUDA error")  # a sync now could raise over it
    assert len(syncs) == 2 and timer.seconds["update"] == 1


def test_a_training_run_writes_its_time_split_to_run_json(tmp_path, caplog):
    from adaptive_ir.cli import main

    caplog.set_level(logging.INFO)
    argv = ["train", *TINY_ARGS, "--output-dir", str(tmp_path), "--device", "cpu", "--epochs", "2"]
    assert main(argv) == 0
    result = json.loads((tmp_path / "run.json").read_text())["result"]
    spent = result["training_time"]
    parts = spent["parts_s"]
    assert set(parts) == {"collect", "update", "dev_evaluation", "checkpointing", "warm_start", "other"}
    assert spent["updates"] == result["updates"] == 4
    # 4 updates, evaluated every 2 and saved after each: every part but the warm start took time
    assert all(parts[p] > 0 for p in ("collect", "update", "dev_evaluation", "checkpointing"))
    assert parts["warm_start"] == 0.0
    assert sum(parts.values()) == pytest.approx(spent["wall_s"], abs=0.01)
    assert sum(spent["shares"].values()) == pytest.approx(1.0, abs=0.002)
    # the training phase holds the updates timed per update ("training" in phases_s) and the dev evaluations
    phases = result["phases_s"]
    assert spent["wall_s"] >= phases["training"] + phases["dev evaluation"] - 0.05
    assert parts["collect"] + parts["update"] == pytest.approx(phases["training"], abs=0.05)
    assert spent["gpu"] is None  # a CPU run: no GPU block, and no error
    last = [r.getMessage() for r in caplog.records if r.name == "adaptive_ir.training.trainer"][-1]
    assert last.startswith("training ") and "collect" in last and "GPU" not in last


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_training_time_on_cuda(tmp_path, monkeypatch):
    # on a GPU: the phase split as on the CPU, plus the GPU block (torch's peak memory; with nvitop, per GPU the
    # utilisation over the training phase and the collect windows)
    from helpers import default_collection, tiny_config

    from adaptive_ir.common.telemetry import discover_devices
    from adaptive_ir.training import trainer as trainer_module
    from adaptive_ir.training.trainer import Trainer

    # this run's collect windows last milliseconds on a GPU: sample often enough to land in them
    monkeypatch.setattr(trainer_module, "GPU_SAMPLE_INTERVAL_S", 0.01)

    cfg = tiny_config(tmp_path, **{"system.device": "cuda", "training.num_epochs": 2, "training.eval_every": 1})
    spent = Trainer(cfg, progress=False, collection=default_collection()).train()["training_time"]
    assert sum(spent["parts_s"].values()) == pytest.approx(spent["wall_s"], abs=0.01)
    gpu = spent["gpu"]
    assert gpu["torch_peak_allocated_mib"] > 0
    assert len(gpu["gpus"]) == len(discover_devices())
    for g in gpu["gpus"]:
        assert g["training"]["samples"] >= g["collect"]["samples"] > 0  # sampled while episodes were collected
        assert g["mem_peak_mib"] is None or g["mem_peak_mib"] > 0
    print("training_time on cuda:", json.dumps(spent))
