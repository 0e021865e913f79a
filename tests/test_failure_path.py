"""The failure path: an exception inside an update leaves the last consistent checkpoint as it was; a resume cuts the
metrics log and TensorBoard back to its checkpoint, so no row appears twice; the BM25 index cache is checksummed
and written under its lock; the PPO minibatches after a KL stop are not run."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import default_collection, tiny_config
from test_sync_free import (
    agent_env_buffer,
    world,  # noqa: F401 - a fixture
)

from adaptive_ir.artifacts.checkpoint import load_checkpoint
from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.io import file_lock
from adaptive_ir.data import make_default
from adaptive_ir.retrieval.retriever import Retriever, index_folder
from adaptive_ir.rl import ppo as ppo_module
from adaptive_ir.rl.ppo import PPOSettings, make_optimizer, ppo_update
from adaptive_ir.training import trainer as trainer_module
from adaptive_ir.training.monitor import read_metrics
from adaptive_ir.training.trainer import Trainer

VOLATILE = {"charts/SPS", "charts/episodes_per_s"}
RUN = {"training.num_epochs": 4, "training.save_freq": 2, "training.log_freq": 1, "training.eval_every": 2}
"""4 updates, last.pt after updates 2 and 4, every update logged, dev evaluated after 2 and 4."""


def rows(out: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in read_metrics(out / "logs" / "metrics.jsonl")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    Trainer(tiny_config(out, **RUN), progress=False, collection=default_collection()).train()
    return out


def test_an_exception_mid_update_leaves_last_pt_and_resume_logs_each_update_once(tmp_path, monkeypatch,
                                                                                 reference):
    out = tmp_path / "run"
    original, calls, before = ppo_update, [], {}

    def failing_update(*args, **kwargs):
        calls.append(1)
        result = original(*args, **kwargs)  # the weights and the optimizer moved...
        if len(calls) == 4:
            before["last.pt"] = (out / "checkpoints" / "last.pt").read_bytes()
            raise RuntimeError("injected failure after the optimizer steps of update 4")
        return result

    monkeypatch.setattr(trainer_module, "ppo_update", failing_update)
    trainer = Trainer(tiny_config(out, **RUN), progress=False, collection=default_collection())
    with pytest.raises(RuntimeError, match="injected failure"):
        trainer.train()
    last = out / "checkpoints" / "last.pt"
    # ...but last.pt is still the one written after update 2 (update 3 was logged, not saved)
    assert last.read_bytes() == before["last.pt"] and load_checkpoint(last)["counters"]["update"] == 2
    assert [r["update"] for r in rows(out) if "charts/episodic_return" in r] == [1, 2, 3]

    monkeypatch.setattr(trainer_module, "ppo_update", original)
    resumed = Trainer(tiny_config(out, **RUN), resume=last, progress=False, collection=default_collection())
    steps_at_2 = resumed.steps
    resumed.train()
    # update 3 was replayed: its first row was dropped, so the log equals an unbroken run's, row for row
    assert rows(out) == rows(reference)
    assert [r["update"] for r in rows(out) if "charts/episodic_return" in r] == [1, 2, 3, 4]
    # TensorBoard was told to purge what followed the checkpoint's global step
    assert purge_steps(out / "logs") == [steps_at_2 + 1]


def test_a_failed_dev_evaluation_is_redone_on_resume(tmp_path, monkeypatch, reference):
    # the dev evaluation after update 4 fails: last.pt must not be written at update 4 (a resume would skip that
    # evaluation, and with it the last model's chance to be picked); it stays at update 2 and the resumed run's
    # log equals an unbroken run's, dev rows included
    out = tmp_path / "run"
    original, calls = Trainer._evaluate_dev, []

    def failing_eval(self, monitor):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected failure in the dev evaluation of update 4")
        return original(self, monitor)

    monkeypatch.setattr(Trainer, "_evaluate_dev", failing_eval)
    with pytest.raises(RuntimeError, match="injected failure"):
        Trainer(tiny_config(out, **RUN), progress=False, collection=default_collection()).train()
    last = out / "checkpoints" / "last.pt"
    assert load_checkpoint(last)["counters"]["update"] == 2
    monkeypatch.setattr(Trainer, "_evaluate_dev", original)
    Trainer(tiny_config(out, **RUN), resume=last, progress=False, collection=default_collection()).train()
    assert rows(out) == rows(reference)
    assert [r["update"] for r in rows(out) if "dev/R@40" in r] == [2, 4]


def purge_steps(log_dir: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    return [e.step for f in sorted(log_dir.glob("events.out.tfevents.*")) for e in EventFileLoader(str(f)).Load()
            if e.HasField("session_log") and e.session_log.status == SessionLog.START]


def test_rows_carry_update_global_step_and_episodes_and_tensorboard_steps_are_env_steps(reference):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train = [r for r in rows(reference) if "charts/episodic_return" in r]
    assert [r["update"] for r in train] == [1, 2, 3, 4]
    assert [r["episodes"] for r in train] == [64, 128, 192, 256]  # 64 episodes per update
    steps = [r["global_step"] for r in train]
    assert steps == sorted(steps) and steps[0] >= 64 and steps[-1] == load_checkpoint(
        reference / "checkpoints" / "last.pt")["counters"]["steps"]
    acc = EventAccumulator(str(reference / "logs"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("charts/episodic_return")] == steps
    dev = [r for r in rows(reference) if "dev/R@40" in r]
    assert [e.step for e in acc.Scalars("dev/R@40")] == [r["global_step"] for r in dev]


# ------------------------------------------------------------------------------------------ the index cache


@pytest.fixture
def index_cache(tmp_path) -> tuple:
    coll = make_default(42)
    first = Retriever.cached(coll, tmp_path)
    folder = index_folder(tmp_path, first.corpus_sha256)
    return coll, tmp_path, folder, first


def test_the_index_cache_records_a_sha256_per_file(index_cache):
    _, _, folder, _ = index_cache
    import json

    sums = json.loads((folder / "sha256.json").read_text())
    assert {"data.npy", "indices.npy", "indptr.npy", "params.json", "vocab_bytes.npy", "vocab_crc.npy"} <= sums.keys()
    assert all(n in sums for n in (p.name for p in folder.iterdir() if p.name != "sha256.json"))


@pytest.mark.parametrize("name", ["data.npy", "doc_terms.npy", "vocab_bytes.npy"])
def test_a_damaged_index_cache_is_rebuilt_not_used(index_cache, caplog, name):
    coll, cache, folder, first = index_cache
    path = folder / name
    expected = first.index.data.clone()  # memory-mapped: the damage below would show through
    terms = list(first.vocab.terms)  # so would the vocabulary's
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x01  # a flipped bit the sizes cannot see
    path.write_bytes(bytes(raw))
    again = Retriever.cached(coll, cache)
    assert f"{name}: checksum mismatch" in caplog.text and "building it again" in caplog.text
    assert torch.equal(again.index.data, expected) and list(again.vocab.terms) == terms
    assert (folder / name).read_bytes() != bytes(raw)  # the damaged file was replaced


def test_the_index_is_saved_under_the_cache_lock(index_cache, tmp_path):
    coll, _, _, first = index_cache
    target = tmp_path / "other" / "index-x"
    lock = target.with_name("index-x.lock")
    with file_lock(lock):
        saver = threading.Thread(target=first.save, args=(target,))
        saver.start()
        time.sleep(0.5)  # the saver writes its temporary folder, then waits for the lock
        assert not (target / "params.json").exists()
    saver.join(timeout=60)
    assert (target / "params.json").is_file() and (target / "sha256.json").is_file()


# ------------------------------------------------------------------------------------------ PPO and target_kl


def kl_stopped_update(w, monkeypatch, mode: str):
    """One update whose target KL every first step exceeds, with 3 epochs of 4 minibatches: (forwards run,
    statistics, optimizer, parameters, the minibatch generator's state)."""
    from adaptive_ir.rl.buffer import compute_gae
    from adaptive_ir.rl.rollout import collect

    amp = AmpContext(torch.device("cpu"), False)
    agent, env, buf = agent_env_buffer(w, amp)
    collect(agent, amp, w.qs, env, buf, torch.arange(len(w.qs)), 0, torch.Generator().manual_seed(0))
    adv, ret = compute_gae(buf.rewards, buf.values, buf.terminated, buf.alive, 0.99, 0.95)
    samples = int(buf.alive.sum())
    calls = []
    real = ppo_module._losses
    monkeypatch.setattr(ppo_module, "_losses", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    opt = make_optimizer(agent.parameters(), 1e-2)
    gen = torch.Generator().manual_seed(3)
    stats = ppo_update(agent, opt, amp, buf, w.qs, adv, ret,
                       PPOSettings(epochs=3, minibatch_size=-(-samples // 4), target_kl=1e-12), gen, samples,
                       stop_check=mode)
    return len(calls), stats, opt, [p.detach().clone() for p in agent.parameters()], gen.get_state(), samples


def test_minibatches_after_a_kl_stop_are_not_run(world, monkeypatch):  # noqa: F811
    """The stop falls on minibatch 2 of epoch 1 (the first one's KL is 0: the network is the rollout's). The CPU
    reads it after each minibatch: 2 forwards. An accelerator reads it once per epoch (one sync per epoch): epoch 1
    runs its 4 minibatches (masked after the stop), epochs 2 and 3 run none. Both apply the same two optimizer steps
    and leave the generator where a full run would."""
    cpu = kl_stopped_update(world, monkeypatch, "minibatch")
    gpu = kl_stopped_update(world, monkeypatch, "epoch")
    assert (cpu[0], gpu[0]) == (2, 4)  # 12 before: every minibatch of every epoch ran, masked
    for _forwards, stats, opt, _params, gen_state, samples in (cpu, gpu):
        assert stats["minibatches"] == 2 and all(st["step"] == 2 for st in opt.state.values())
        expected = torch.Generator().manual_seed(3)
        for _ in range(3):
            torch.randperm(samples, generator=expected)
        assert torch.equal(gen_state, expected.get_state())
    assert all(torch.equal(a, b) for a, b in zip(cpu[3], gpu[3]))


def test_a_metrics_log_cut_short_by_a_kill_reads_without_its_last_line(reference, tmp_path):
    # a run killed while writing a row, and never resumed: its log still plots, without the half row
    log = tmp_path / "metrics.jsonl"
    whole = (reference / "logs" / "metrics.jsonl").read_text()
    log.write_text(whole + '{"update": 5, "charts/episodic_ret')
    assert read_metrics(log) == read_metrics(reference / "logs" / "metrics.jsonl") and len(read_metrics(log)) > 4
