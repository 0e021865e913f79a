"""The training loop on the embedded default collection, kept tiny: reproducibility, exact resume (after a real
SIGINT), learning, incompatible checkpoints, and the ``--test`` evaluation."""

from __future__ import annotations

import json
import signal

import pytest
import torch

from adaptive_ir.checkpoint import load_checkpoint
from adaptive_ir.cli import main
from adaptive_ir.errors import CheckpointError, ConfigError
from adaptive_ir.evaluate import METRIC_NAMES, bm25_run, evaluate_run
from adaptive_ir.monitor import read_metrics
from adaptive_ir.trainer import Trainer

from helpers import default_collection, tiny_config

# wall-clock rates differ between runs that compute the same thing
VOLATILE = {"charts/SPS", "charts/episodes_per_s"}


def rows(cfg) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE}
            for r in read_metrics(cfg.training.log_path_dir / "metrics.jsonl")]


def state(trainer: Trainer) -> dict[str, torch.Tensor]:
    return trainer.agent.core.state_dict()


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_same_seed_same_run(tmp_path):
    runs = []
    for name in ("a", "b"):
        cfg = tiny_config(tmp_path / name, **{"training.num_epochs": 2, "training.eval_every": 2})
        trainer = Trainer(cfg, progress=False, collection=default_collection())
        initial = {k: v.clone() for k, v in state(trainer).items()}
        trainer.train()
        runs.append((rows(cfg), state(trainer), trainer))
    (rows_a, state_a, tr_a), (rows_b, state_b, tr_b) = runs
    assert len(rows_a) >= 2 and any("dev/R@40" in r for r in rows_a)
    assert rows_a == rows_b
    assert_same_state(state_a, state_b)
    assert torch.equal(tr_a.buf.actions, tr_b.buf.actions)
    # training moved the weights, so the equality above is not that of two untouched models
    assert not all(torch.equal(initial[k], v) for k, v in state_b.items())


def test_resume_is_bit_exact(tmp_path):
    overrides = {"training.num_epochs": 4, "training.eval_every": 1}
    full_cfg = tiny_config(tmp_path / "full", **overrides)
    full = Trainer(full_cfg, progress=False, collection=default_collection())
    assert full.total_updates == 4
    full.train()

    cfg = tiny_config(tmp_path / "cut", **overrides)
    first = Trainer(cfg, progress=False, collection=default_collection())
    collect = first._collect
    calls = []

    def collect_then_interrupt():
        calls.append(1)
        if len(calls) == 2:  # a real SIGINT in the middle of update 2: it finishes, checkpoints, stops
            signal.raise_signal(signal.SIGINT)
        return collect()

    first._collect = collect_then_interrupt
    out = first.train()
    assert out["interrupted"] and out["updates"] == 2
    assert load_checkpoint(cfg.training.checkpoint_path_dir / "last.pt")["counters"]["update"] == 2

    resumed = Trainer(cfg, resume=cfg.training.checkpoint_path_dir / "last.pt", progress=False,
                      collection=default_collection())
    assert resumed.update == 2
    out = resumed.train()
    assert out["updates"] == 4 and not out["interrupted"]
    assert_same_state(state(full), state(resumed))
    assert rows(full_cfg) == rows(cfg)  # losses, returns and dev metrics of all 4 updates
    assert_same_state(full.optimizer.state_dict()["state"][0], resumed.optimizer.state_dict()["state"][0])


def test_ppo_learns_on_the_default_collection(tmp_path):
    cfg = tiny_config(tmp_path, **{"training.num_epochs": 6, "data.max_train_queries": 128,
                                   "training.eval_every": 1000, "training.learning_rate": 3e-3})
    trainer = Trainer(cfg, progress=False, collection=default_collection())
    trainer.train()
    returns = [r["charts/episodic_return"] for r in rows(cfg) if "charts/episodic_return" in r]
    assert len(returns) >= 8
    third = len(returns) // 3
    assert sum(returns[-third:]) / third > sum(returns[:third]) / third
    dev = [r for r in rows(cfg) if "dev/R@40" in r][-1]
    qids, texts, qrels = trainer.ws.collection.split("dev")
    bm25 = evaluate_run(qrels, bm25_run(trainer.ws.retriever, qids, texts, k=100))
    assert dev["dev/R@40"] > bm25["R@40"]


def test_checkpoint_from_incompatible_config(tmp_path):
    cfg = tiny_config(tmp_path / "a", **{"training.num_epochs": 1})
    trainer = Trainer(cfg, progress=False, collection=default_collection())
    trainer.save(tmp_path / "a.pt")
    other = tiny_config(tmp_path / "b", **{"rl_agent.hidden_dim": 48})
    with pytest.raises(CheckpointError, match="hidden_dim"):
        Trainer(other, resume=tmp_path / "a.pt", progress=False, collection=default_collection())
    # a damaged file is refused by its checksum
    data = bytearray((tmp_path / "a.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "a.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(tmp_path / "a.pt")


def test_init_from_starts_from_the_source_policy_of_the_same_seed(tmp_path):
    source = tiny_config(tmp_path / "src" / "seed-7", **{"system.seed": 7, "training.num_epochs": 1})
    trained = Trainer(source, progress=False, collection=default_collection())
    trained.train()
    template = str(tmp_path / "src" / "seed-{seed}" / "checkpoints" / "best.pt")
    # 0 epochs: the source policy is the run's policy, untouched
    frozen = tiny_config(tmp_path / "zero", **{"system.seed": 7, "training.num_epochs": 0,
                                               "training.init_from": template})
    zero = Trainer(frozen, progress=False, collection=default_collection())
    assert_same_state(state(zero), state(trained))
    assert zero.train()["updates"] == 0
    assert_same_state(load_checkpoint(frozen.training.checkpoint_path_dir / "best.pt")["model"], state(trained))
    # training goes on from the source weights with a fresh optimizer and counters
    tuned = tiny_config(tmp_path / "tuned", **{"system.seed": 7, "training.init_from": template})
    trainer = Trainer(tuned, progress=False, collection=default_collection())
    assert_same_state(state(trainer), state(trained))
    assert trainer.update == 0 and not trainer.optimizer.state
    trainer.train()
    assert trainer.update == trained.update
    assert any(not torch.equal(a, b) for a, b in zip(state(trainer).values(), state(trained).values()))
    # another seed has no source run; another network size does not fit
    with pytest.raises(CheckpointError, match="seed-8.*not found"):
        Trainer(tiny_config(tmp_path / "s8", **{"system.seed": 8, "training.init_from": template}),
                progress=False, collection=default_collection())
    with pytest.raises(CheckpointError, match="does not fit this setup: rl_agent.hidden_dim: checkpoint 32 vs this "
                                              "setup 48"):
        Trainer(tiny_config(tmp_path / "h", **{"system.seed": 7, "training.init_from": template,
                                               "rl_agent.hidden_dim": 48}),
                progress=False, collection=default_collection())


def test_zero_epochs_need_a_policy_to_start_from(tmp_path):
    with pytest.raises(ConfigError, match="training.num_epochs.*init_from"):
        tiny_config(tmp_path, **{"training.num_epochs": 0})


def test_cli_train_test_writes_test_metrics(tmp_path):
    small = ["training.episodes_per_update=64", "training.batch_size=128", "training.ppo_epochs=2",
             "data.max_train_queries=64", "rl_agent.hidden_dim=32", "rl_agent.num_heads=2"]
    argv = ["train", "--config", "quickstart", "--output-dir", str(tmp_path), "--device", "cpu", "--epochs", "1",
            "--test", "--no-progress"] + [a for s in small for a in ("--set", s)]
    assert main(argv) == 0
    results = json.loads((tmp_path / "test_metrics.json").read_text())
    assert {"agent", "bm25", "rm3"} <= set(results)
    for method, metrics in results.items():
        assert set(metrics) == set(METRIC_NAMES), method
        assert all(0.0 <= v <= 1.0 for v in metrics.values())
        assert (tmp_path / "runs" / f"test.{method}.trec").is_file()
    assert results["bm25"] != results["rm3"]
    assert "| agent |" in (tmp_path / "test_metrics.md").read_text()
