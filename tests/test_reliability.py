"""Reliability: interruption and exact resume through the CLI, crash-safe writes, damaged checkpoints and caches,
non-finite losses, and the leakage guards (every document indexed; test qrels unread while training and by
``compare --split dev``).

Training runs here are tiny (32 train queries, 16 episodes per update) so the whole file stays well under a
minute of CPU time; the engine-level resume tests via the Trainer API live beside the trainer's own tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TINY_ARGS as TINY

from adaptive_ir.artifacts.checkpoint import load_checkpoint, save_checkpoint
from adaptive_ir.cli import main
from adaptive_ir.common import io as aio
from adaptive_ir.common.errors import CheckpointError
from adaptive_ir.config import load_config
from adaptive_ir.data import make_default
from adaptive_ir.mining.embeddings import EmbeddingCache
from adaptive_ir.rl.workspace import Workspace
from adaptive_ir.training.monitor import read_metrics
from adaptive_ir.training.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
EPOCHS = 5
"""10 updates: a signal sent once the first is logged must reach the run before its last (with 4, a fast CPU
sometimes finished first)."""
TIMING = ("charts/SPS", "charts/episodes_per_s")


def tiny_overrides(out: Path, **extra: str) -> dict[str, str]:
    """TINY as load_config overrides (for in-process Trainer runs)."""
    o = {"data.max_train_queries": "32", "training.episodes_per_update": "16", "training.collect_batch_size": "16",
         "training.batch_size": "32", "training.ppo_epochs": "2", "training.eval_every": "2",
         "training.save_freq": "1", "training.early_stopping_patience": "0", "training.output_dir": str(out)}
    return o | extra


def train_args(out: Path, *extra: str) -> list[str]:
    return [*TINY, "--epochs", str(EPOCHS), "--output-dir", str(out), *extra]


def _child(out: Path, *extra: str) -> subprocess.Popen:
    # every run of the comparison is a fresh process with the same environment: a run in this process would sum
    # floats with whatever thread counts earlier test modules left behind
    return subprocess.Popen([sys.executable, str(REPO / "train_optimized.py"), *train_args(out, *extra)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_to_end(out: Path, *extra: str) -> str:
    """A whole run through the CLI in a child process; returns its stderr (the log)."""
    stdout, stderr = _child(out, *extra).communicate(timeout=600)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert (out / "checkpoints" / "last.pt").is_file(), stderr[-3000:]
    return stderr


def interrupt_after_first_update(out: Path, sig: int) -> subprocess.CompletedProcess:
    """Start a run, wait until training has logged its first update, then send ``sig``."""
    proc = _child(out)
    metrics = out / "logs" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.is_file() and metrics.read_text().strip()):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "training never logged an update"
        time.sleep(0.1)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def model_of(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def update_rows(out: Path) -> dict[int, dict]:
    """metrics.jsonl training rows by update, without wall-clock figures."""
    rows = {}
    for r in read_metrics(out / "logs" / "metrics.jsonl"):
        if "charts/episodic_return" in r:
            rows[r["update"]] = {k: v for k, v in r.items() if k not in TIMING and not k.startswith("gpu/")}
    return rows


# ------------------------------------------------------------------------------------ interruption and resume


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    """The same tiny run, never interrupted, with caches of its own (``<folder>/cache``), as the runs it is compared
    with have: each run builds its index, candidates and embeddings, and the comparison covers that too."""
    out = tmp_path_factory.mktemp("reference") / "run"
    run_to_end(out)
    return out


def test_sigint_checkpoints_and_resume_matches_an_uninterrupted_run(tmp_path, reference_run):
    out = tmp_path / "run"
    stopped = interrupt_after_first_update(out, signal.SIGINT)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    last = out / "checkpoints" / "last.pt"
    assert f"resume with --checkpoint {last}" in stopped.stdout
    at = json.loads(Path(str(last) + ".json").read_text())["update"]
    total = max(update_rows(reference_run))
    assert 1 <= at < total  # stopped part-way, after the update in flight
    stopped_run = json.loads((out / "run.json").read_text())
    assert (stopped_run["status"], stopped_run["exit_code"]) == ("interrupted", 130)

    log = run_to_end(out, "--checkpoint", str(last))
    assert f"resumed from {last} at update {at}" in log
    resumed_run = json.loads((out / "run.json").read_text())  # the same run, gone on to the end
    assert resumed_run["id"] == stopped_run["id"] and resumed_run["status"] == "completed"
    assert [p["status"] for p in resumed_run["previous"]] == ["interrupted"]
    rows, ref = update_rows(out), update_rows(reference_run)
    assert sorted(rows) == list(range(1, total + 1))  # each update logged once: resume picked up at `at + 1`
    # bit-for-bit on the CPU: same losses and returns after the restart, same final parameters
    assert rows == ref
    final, expected = model_of(last), model_of(reference_run / "checkpoints" / "last.pt")
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[k], expected[k]) for k in final)
    assert load_checkpoint(last)["counters"]["update"] == total


def test_sigterm_checkpoints_and_exits_zero(tmp_path, monkeypatch, capsys):
    # in this process: SIGTERM is sent to ourselves once the first update is logged (the trainer's handler
    # catches it; a SIGTERM outside train() would end pytest, so the run must already be in its loop)
    from adaptive_ir.training.monitor import Monitor

    real_log = Monitor.log

    def log_then_terminate(monitor, update, scalars, *counts):
        real_log(monitor, update, scalars, *counts)
        if update == 1 and "charts/episodic_return" in scalars:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Monitor, "log", log_then_terminate)
    out = tmp_path / "run"
    assert main(["train", *train_args(out)]) == 0
    assert load_checkpoint(out / "checkpoints" / "last.pt")["counters"]["update"] == 1
    assert "interrupted: resume with --checkpoint" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the trainer put the old handler back


# ------------------------------------------------------------------------------------ crash-safe writes

_WRITER = """
import sys
from adaptive_ir.common.io import atomic_write_bytes
path, size = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
i = 0
while True:
    i += 1
    atomic_write_bytes(path, bytes([i % 251]) * size)
"""


def test_kill_9_mid_write_leaves_a_whole_file(tmp_path):
    target = tmp_path / "last.pt"
    size = 32 << 20  # big enough that most kills land mid-write
    aio.atomic_write_bytes(target, b"\x00" * size)
    for delay in (0.05, 0.2, 0.4):
        child = subprocess.Popen([sys.executable, "-c", _WRITER, str(target), str(size)], stdout=subprocess.PIPE,
                                 cwd=REPO)
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        child.kill()
        child.wait()
        data = target.read_bytes()
        assert len(data) == size and data == data[:1] * size  # one complete payload, never a mix
    # what a kill leaves behind is a hidden temporary file beside the target, never the target itself
    assert all(p.name.startswith(".last.pt.") and p.name.endswith(".tmp")
               for p in tmp_path.iterdir() if p != target)


def test_failed_replace_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "best.pt"
    aio.atomic_write_bytes(target, b"old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(aio.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        aio.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]


@pytest.mark.parametrize("crash_in", ["atomic_write_json", "atomic_write_bytes"])
def test_a_run_killed_between_checkpoint_and_sidecar_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch,
                                                                                            crash_in):
    # the checkpoint and its sha256 sidecar are two files: whichever write a kill lands between, the previous
    # checkpoint must still load (a checksum mismatch would leave --resume nothing to resume from)
    from adaptive_ir.artifacts import checkpoint as ckmod

    path = tmp_path / "last.pt"
    save_checkpoint(path, {"format": 1, "counters": {"update": 7}, "w": torch.arange(10.0)})

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckmod, crash_in, killed)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"format": 1, "counters": {"update": 8}, "w": torch.arange(10.0) + 1})
    monkeypatch.undo()
    assert load_checkpoint(path)["counters"]["update"] == 7
    save_checkpoint(path, {"format": 1, "counters": {"update": 9}, "w": torch.zeros(3)})
    assert load_checkpoint(path)["counters"]["update"] == 9


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_checkpoint_is_rejected_by_its_checksum(tmp_path, damage):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"format": 1, "counters": {"update": 7}, "w": torch.arange(1000.0)})
    assert load_checkpoint(path)["counters"]["update"] == 7
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        del data[len(data) // 2:]
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(path)


CACHE_PROBE = """
import hashlib, sys, torch
from pathlib import Path
sys.path.insert(0, "tests")
from helpers import tiny_config
from adaptive_ir.rl.workspace import Workspace
torch.set_num_threads(int(sys.argv[1]))
out = Path(sys.argv[3])
cfg = tiny_config(out, **{"system.num_workers": sys.argv[2], "embeddings.cache_dir": str(out / "cache")})
ws = Workspace(cfg, torch.device("cpu"), progress=False)
for split in ("train", "dev"):
    ws.query_set(split, *ws.collection.split(split))
for f in sorted((out / "cache").rglob("*")):
    if f.is_file():
        print(hashlib.sha256(f.read_bytes()).hexdigest(), f.relative_to(out))
"""


def test_cached_tables_do_not_depend_on_the_thread_count(tmp_path):
    """Cache keys hold no thread count: the index, the candidate tables, the LSA fit and the embedding tables
    must then be the same bytes whichever torch thread count and miner worker count computed them."""
    def cache_files(threads: int, workers: int) -> list[str]:
        proc = subprocess.run([sys.executable, "-c", CACHE_PROBE, str(threads), str(workers),
                               str(tmp_path / f"t{threads}-w{workers}")], cwd=REPO, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.splitlines()

    one = cache_files(1, 1)
    assert any("candidates-train" in f for f in one) and any("/table-" in f for f in one)
    assert any("lsa-" in f for f in one) and any("index-" in f for f in one)
    assert cache_files(2, 3) == one


# ------------------------------------------------------------------------------------ damaged caches


@pytest.fixture(scope="module")
def small_workspace(tmp_path_factory):
    out = tmp_path_factory.mktemp("ws")
    cfg = load_config("quickstart", {"training.output_dir": str(out)})
    return Workspace(cfg, torch.device("cpu"), progress=False)


def _flip_last_byte(path: Path) -> None:
    """A damaged copy in the file's place (the arrays read from it before are maps of the old file, which stays
    as it was: what a disk error under a new write would leave)."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # inside the array data, so numpy would still load it
    path.with_suffix(".tmp").write_bytes(bytes(data))
    path.with_suffix(".tmp").replace(path)


def test_damaged_candidate_cache_is_rebuilt_not_used(small_workspace, caplog):
    ws = small_workspace
    texts = ws.collection.split("dev")[1][:12]
    terms = ws.retriever.encode(texts)
    first = ws.candidates("reliability", texts, terms)
    (entry,) = ws.cfg.cache_path_dir.glob("candidates-reliability-*")
    _flip_last_byte(entry / "features.npy")
    caplog.set_level("WARNING")
    again = ws.candidates("reliability", texts, terms)
    assert "is damaged, incomplete or of an older format; computing it again" in caplog.text
    np.testing.assert_array_equal(again.terms, first.terms)
    np.testing.assert_array_equal(again.features, first.features)
    caplog.clear()
    ws.candidates("reliability", texts, terms)  # the rebuilt entry is whole again: loaded, no warning
    assert "damaged" not in caplog.text


def test_a_folder_is_written_whole_or_not_at_all(tmp_path):
    folder = tmp_path / "cache" / "model"

    def interrupted(tmp):
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        aio.atomic_write_folder(folder, interrupted)
    assert not folder.exists() and os.listdir(folder.parent) == []  # no temporary folder left either

    def write(text):
        def into(tmp):
            tmp.mkdir()
            (tmp / "config.json").write_text(text)
        return into

    aio.atomic_write_folder(folder, write("first"))
    aio.atomic_write_folder(folder, write("another run's"), replace=False)  # an entry made meanwhile is kept
    assert (folder / "config.json").read_text() == "first" and os.listdir(folder.parent) == ["model"]
    aio.atomic_write_folder(folder, write("second"))
    assert (folder / "config.json").read_text() == "second" and os.listdir(folder.parent) == ["model"]


def test_a_run_whose_parts_a_concurrent_run_removed_takes_that_runs_entry(tmp_path, monkeypatch):
    # two evaluations of one query set side by side: the first to finish saves the whole entry and removes the
    # parts, one of which the other has just written and is about to read back
    entry, meta = tmp_path / "candidates-x", {"k": 1}
    whole = {"a": np.arange(10, dtype=np.int64)}
    save = aio.save_arrays

    def save_then_the_other_run_finishes(folder, arrays, meta_):
        save(folder, arrays, meta_)
        if Path(folder).parent.name == "parts":
            save(entry, whole, meta)
            shutil.rmtree(entry / "parts")

    monkeypatch.setattr(aio, "save_arrays", save_then_the_other_run_finishes)
    arrays, hit = aio.load_or_compute_rows(entry, meta, 10, 4, lambda lo, hi: {"a": np.arange(lo, hi)}, "x")
    np.testing.assert_array_equal(arrays["a"], whole["a"])
    assert not hit and (entry / "meta.json").exists() and not (entry / "parts").exists()
    monkeypatch.setattr(aio, "save_arrays", save)
    np.testing.assert_array_equal(aio.load_or_compute_rows(entry, meta, 10, 4, None, "x")[0]["a"], whole["a"])


class CountingEmbedder:
    """Wraps an embedder and counts the texts it really encodes."""

    def __init__(self, inner):
        self.inner, self.encoded = inner, 0
        self.dim, self.identity = inner.dim, inner.identity

    def encode(self, texts):
        self.encoded += len(texts)
        return self.inner.encode(texts)


@pytest.mark.parametrize("damage", ["vectors", "meta", "shape"])
def test_damaged_embedding_cache_is_rebuilt_not_used(small_workspace, tmp_path, caplog, damage):
    emb = CountingEmbedder(small_workspace.embedder)
    texts = small_workspace.collection.split("dev")[1][:20]
    cache = EmbeddingCache(tmp_path, emb.identity)
    expected = cache.encode(emb, texts)
    assert emb.encoded == 20
    np.testing.assert_array_equal(EmbeddingCache(tmp_path, emb.identity).encode(emb, texts), expected)
    assert emb.encoded == 20  # a whole table is reused
    (entry,) = cache.folder.glob("table-*")
    if damage == "vectors":
        _flip_last_byte(entry / "vectors.npy")
    elif damage == "meta":  # the entry claims other texts
        meta = json.loads((entry / "meta.json").read_text())
        meta["texts"] = meta["texts"][::-1]
        (entry / "meta.json").write_text(json.dumps(meta))
    else:  # intact, but vectors of another shape (another model wrote it under this identity)
        meta = json.loads((entry / "meta.json").read_text())
        aio.save_arrays(entry, {"vectors": np.zeros((20, emb.dim + 1), np.float32)},
                        {k: v for k, v in meta.items() if k != "sha256"})
    caplog.set_level("WARNING")
    got = EmbeddingCache(tmp_path, emb.identity).encode(emb, texts)
    assert "embeddings: cache" in caplog.text and "computing it again" in caplog.text
    assert emb.encoded == 40  # encoded again, not read from the damaged entry
    np.testing.assert_array_equal(got, expected)
    caplog.clear()
    np.testing.assert_array_equal(EmbeddingCache(tmp_path, emb.identity).encode(emb, texts), expected)
    assert emb.encoded == 40 and "rebuilding" not in caplog.text  # the rebuilt entry is whole again


# ------------------------------------------------------------------------------------ numerical faults


class NaNInjector:
    """Makes the value head return NaN on chosen PPO-update forwards (the update's; rollouts are clean)."""

    def __init__(self, monkeypatch, every: int):
        from adaptive_ir.rl.policy import Agent

        self.every, self.calls, self.injected = every, 0, 0
        original = Agent.forward

        def forward(agent, *args, **kwargs):
            logits, values = original(agent, *args, **kwargs)
            if kwargs.get("parallel"):
                self.calls += 1
                if self.calls % self.every == 0:
                    self.injected += 1
                    values = values * float("nan")
            return logits, values

        monkeypatch.setattr(Agent, "forward", forward)


AMP = ["--set", "training.use_amp=true", "--set", "training.amp_dtype=bfloat16"]  # CPU autocast, opted in


def test_nonfinite_minibatches_are_skipped_counted_and_training_goes_on(tmp_path, monkeypatch, capsys):
    nan = NaNInjector(monkeypatch, every=3)
    out = tmp_path / "run"
    rc = main(["train", *TINY, *AMP, "--epochs", "1", "--output-dir", str(out)])
    assert rc == 0, capsys.readouterr().err
    rows = update_rows(out)
    assert sorted(rows) == [1, 2]  # every update ran
    assert nan.injected > 0
    assert rows[2]["losses/nonfinite_total"] == nan.injected
    assert sum(r["losses/nonfinite_skipped"] for r in rows.values()) == nan.injected
    state = load_checkpoint(out / "checkpoints" / "last.pt")
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_repeated_nan_stops_with_advice(tmp_path, monkeypatch, capsys):
    nan = NaNInjector(monkeypatch, every=1)
    out = tmp_path / "run"
    # 10 PPO epochs of non-finite minibatches: the update in which the streak reaches 20 is finished (skipping on
    # the device, no host check per minibatch) and then reported with its whole streak
    rc = main(["train", *TINY, *AMP, "--set", "training.ppo_epochs=10", "--epochs", "1", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    assert "not finite" in err and "--no-amp" in err and "learning_rate" in err
    assert nan.injected >= 20 and f"in {nan.injected} minibatches in a row" in err
    assert (out / "checkpoints" / "last.pt").is_file()  # the last good parameters are kept


# ------------------------------------------------------------------------------------ leakage guards


def write_beir_from_default(root: Path) -> Path:
    """The embedded default collection as BEIR files, plus one document no query judges."""
    c = make_default()
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": d, "title": t, "text": x} for d, t, x in zip(c.doc_ids, c.corpus.titles, c.corpus.texts)]
    docs.append({"_id": "UNJUDGED", "title": "", "text": "zyxwvut quorbable flimflammery"})
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = {q: t for split in c.queries.values() for q, t in split.items()}
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    for split, qrels in c.qrels.items():
        lines = [f"{q}\t{d}\t{g}" for q, judged in qrels.items() for d, g in judged.items()]
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def beir_default(tmp_path_factory) -> Path:
    return write_beir_from_default(tmp_path_factory.mktemp("beir") / "default")


def test_every_corpus_document_is_indexed(beir_default, tmp_path):
    cfg = load_config("quickstart", {"data.dataset_type": "beir", "data.data_dir": str(beir_default),
                                     "training.output_dir": str(tmp_path)})
    ws = Workspace(cfg, torch.device("cpu"), progress=False)
    judged = {d for qrels in ws.collection.qrels.values() for judged in qrels.values() for d in judged}
    assert "UNJUDGED" not in judged
    assert len(ws.retriever.doc_ids) == len(ws.collection.doc_ids) == 2001
    scores, idx = ws.retriever.search(ws.retriever.encode(["quorbable flimflammery"]), None, 3)
    assert ws.retriever.doc_ids[int(idx[0][0])] == "UNJUDGED" and scores[0][0] > 0


@pytest.fixture
def opened_qrels(monkeypatch) -> set[str]:
    """Names of the qrels files opened while the test runs (filled as they are opened)."""
    opened: set[str] = set()
    real_open = Path.open

    def recording_open(self, *args, **kwargs):
        if self.parent.name == "qrels":
            opened.add(self.name)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", recording_open)
    return opened


def beir_tiny_config(beir_default: Path, out: Path):
    return load_config("quickstart", tiny_overrides(out, **{
        "data.dataset_type": "beir", "data.data_dir": str(beir_default), "training.num_epochs": "1"}))


def test_training_never_opens_test_qrels(beir_default, tmp_path, opened_qrels):
    trainer = Trainer(beir_tiny_config(beir_default, tmp_path / "out"), progress=False)
    trainer.train()
    assert opened_qrels == {"train.tsv", "dev.tsv"}
    assert "test" not in trainer.ws.collection.queries
    trainer.test()  # evaluation reads the test judgments, on demand
    assert "test.tsv" in opened_qrels
    assert (tmp_path / "out" / "test_metrics.json").is_file()


def test_compare_and_evaluate_on_dev_never_open_test_qrels(beir_default, tmp_path, opened_qrels):
    from adaptive_ir.compare import compare

    cfg = beir_tiny_config(beir_default, tmp_path / "out")
    report, _ = compare(cfg, [1, 2], "dev", progress=False, n_permutations=100)
    again, _ = compare(cfg, [1, 2], "dev", skip_train=True, progress=False, n_permutations=100)
    assert report["split"] == "dev" and report["queries"] > 0 and again["methods"] == report["methods"]
    assert main(["evaluate", "--config", "quickstart", "--set", "data.dataset_type=beir", "--data-dir",
                 str(beir_default), "--output-dir", str(tmp_path / "out"), "--split", "dev", "--no-progress"]) == 0
    assert opened_qrels == {"train.tsv", "dev.tsv"}
    assert not list((tmp_path / "out").rglob("test.*.trec"))


def test_splits_load_on_demand_and_match_a_full_load(beir_default):
    from types import SimpleNamespace

    from adaptive_ir.data import load_collection

    cfg = SimpleNamespace(dataset_type="beir", data_dir=str(beir_default), dev_fraction=0.2, ir_datasets_id=None)
    full = load_collection(cfg, 42)
    training = load_collection(cfg, 42, ("train", "dev"))
    testing = load_collection(cfg, 42, ("test",))
    assert training.splits == ["train", "dev"] and testing.splits == ["test"]
    for split, part in (("train", training), ("dev", training), ("test", testing)):
        assert part.queries[split] == full.queries[split] and part.qrels[split] == full.qrels[split]


def test_atomic_writes_get_the_permissions_open_would_give(tmp_path):
    # mkstemp's 0600 would make a shared run folder or cache unreadable to everyone else
    mask = os.umask(0o022)
    try:
        aio._umask.cache_clear()
        aio.atomic_write_json(tmp_path / "a.json", {"x": 1})
        with open(tmp_path / "b.json", "w"):
            pass
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == stat.S_IMODE((tmp_path / "b.json").stat().st_mode)
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    finally:
        os.umask(mask)
        aio._umask.cache_clear()
