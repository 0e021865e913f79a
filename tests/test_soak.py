"""Soak: thousands of small updates on the embedded default collection with flat host memory.

Excluded from the default run (``-m "not slow"``); run with ``python -m pytest tests/test_soak.py -m slow``.
``ADAPTIVE_IR_SOAK_UPDATES`` sets the number of updates (default 2000).
"""

from __future__ import annotations

import os

import pytest

from adaptive_ir.config import load_config
from adaptive_ir.training.monitor import Monitor
from adaptive_ir.training.trainer import Trainer

pytestmark = pytest.mark.slow

UPDATES = int(os.environ.get("ADAPTIVE_IR_SOAK_UPDATES", "2000"))


def rss_mib() -> float:
    """Resident set size of this process (Linux /proc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    pytest.skip("no /proc/self/status on this platform")


def test_memory_stays_flat_over_many_updates(tmp_path, monkeypatch):
    cfg = load_config("quickstart", {
        "training.output_dir": str(tmp_path), "training.episodes_per_update": "16",
        "training.collect_batch_size": "16", "training.batch_size": "64", "training.ppo_epochs": "1",
        "training.eval_every": "250", "training.save_freq": "250", "training.early_stopping_patience": "0",
        "embeddings.cache_dir": str(tmp_path / "cache")})
    trainer = Trainer(cfg, progress=False)
    # about UPDATES updates: total_updates follows from epochs; the loop stops at the count set here
    trainer.total_updates = UPDATES
    samples: list[tuple[int, float]] = []  # (update, RSS MiB)
    every = max(1, UPDATES // 40)
    real_log = Monitor.log

    def log_and_sample(monitor, step, scalars):
        real_log(monitor, step, scalars)
        if "charts/episodic_return" in scalars and step % every == 0:
            samples.append((step, rss_mib()))

    monkeypatch.setattr(Monitor, "log", log_and_sample)
    result = trainer.train()
    assert result["updates"] == UPDATES

    # the on-disk embedding cache holds the run's tables and nothing more: queries and terms of train and dev
    assert len(list(trainer.ws.emb_cache.folder.glob("table-*"))) == 4

    # flat memory: after a warm-up quarter (allocator pools), RSS may wander a little
    # but must not trend upwards; compare the mean of the second quarter with the mean of the last quarter
    q = len(samples) // 4
    early = [r for _, r in samples[q:2 * q]]
    late = [r for _, r in samples[-q:]]
    growth = sum(late) / len(late) - sum(early) / len(early)
    assert growth < 32, f"RSS grew by {growth:.1f} MiB over {UPDATES} updates: {samples}"
