"""Runs never overwrite each other: one run per folder (an OS lock that a second process, and a killed one, cannot
leave stuck), no silent replacement of a finished run (--resume, --overwrite, numbered default folders), run.json
and the run a checkpoint came from; and caches that concurrent runs share without damage.

Where the contract is about processes (two at once, kill -9) the runs are real child processes; the others call
the command line in this process. Every run is the tiny one of ``helpers.TINY_ARGS`` (a few seconds).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import TINY_ARGS

from adaptive_ir.artifacts.checkpoint import load_checkpoint
from adaptive_ir.cli import main
from adaptive_ir.common import io as aio
from adaptive_ir.config import load_config
from adaptive_ir.training.monitor import read_metrics
from adaptive_ir.training.rundir import config_fingerprint, start_run

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def train_argv(out: Path | None, *extra: str, epochs: int = 1) -> list[str]:
    return ["train", *TINY_ARGS, "--epochs", str(epochs), *(["--output-dir", str(out)] if out else []), *extra]


def child(out: Path, *extra: str, epochs: int = 1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "adaptive_ir.cli", *train_argv(out, *extra, epochs=epochs)],
                            cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 300
    while not condition():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"the run never {what}"
        time.sleep(0.05)


def record(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def claimed_by(out: Path, pid: int) -> bool:
    try:
        return record(out)["pid"] == pid
    except (OSError, ValueError):  # not written yet
        return False


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(out: Path) -> dict[str, str]:
    """sha256 of every file a run wrote (not the lock file, which a run that only looked in may create)."""
    return {str(p.relative_to(out)): sha(p) for p in sorted(out.rglob("*")) if p.is_file() and p.name != ".lock"}


def update_steps(out: Path) -> list[int]:
    return [r["update"] for r in read_metrics(out / "logs" / "metrics.jsonl") if "charts/episodic_return" in r]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A finished run (seed 42) and the sha256 of each of its files; tests copy it before changing it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(train_argv(out)) == 0
    return out, snapshot(out)


# ---------------------------------------------------------------------------------------------- one run, one folder
def test_a_second_process_on_the_same_folder_is_refused_and_the_first_finishes_intact(tmp_path, capsys):
    out = tmp_path / "X"
    first = child(out)
    wait_for(lambda: claimed_by(out, first.pid), first, "claimed its folder")
    os.kill(first.pid, signal.SIGSTOP)  # the first run is surely still working while the second one starts
    try:
        rc, _, err = cli(capsys, *train_argv(out))  # the second process: this one
    finally:
        os.kill(first.pid, signal.SIGCONT)
    stdout, stderr = first.communicate(timeout=300)

    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {out} is in use by another run: pid {first.pid} on ")
    assert record(out)["id"] in err and "train" in err  # the holder's run and command
    assert "wait for it to end" in err and "--output-dir" in err

    assert first.returncode == 0, stderr[-3000:]
    assert update_steps(out) == [1, 2]  # one writer: every update once, not 1,1,2,2
    assert len(list((out / "logs").glob("events.out.tfevents.*"))) == 1
    rec = record(out)
    assert rec["status"] == "completed" and rec["exit_code"] == 0 and rec["pid"] == first.pid
    assert load_checkpoint(out / "checkpoints" / "best.pt")["run"]["id"] == rec["id"]


def test_kill_9_leaves_no_lock_behind(tmp_path, capsys, caplog):
    out = tmp_path / "X"
    proc = child(out, epochs=5)  # 10 updates: the kill lands before the end even on a fast CPU
    # last.pt itself (its sidecar is written first): renamed into place whole, so a checkpoint exists to resume
    wait_for(lambda: (out / "checkpoints" / "last.pt").is_file(), proc, "wrote a checkpoint")
    proc.kill()
    proc.wait()
    lock = aio.try_lock(out / ".lock")  # at once: the OS released the dead process's lock
    assert lock is not None
    lock.close()
    killed = record(out)
    assert killed["status"] == "running"  # it never recorded its end...

    rc, stdout, err = cli(capsys, *train_argv(out))  # ...so a new run names it as killed, not as in use
    assert rc == 2 and "in use" not in err
    assert "stopped without finishing (killed or crashed)" in err and "--resume" in err

    caplog.set_level("INFO")
    rc, stdout, err = cli(capsys, *train_argv(out, "--resume", epochs=5))
    assert rc == 0, err
    at = load_checkpoint(out / "checkpoints" / "last.pt")["counters"]["update"]
    assert f"resumed from {out / 'checkpoints' / 'last.pt'}" in caplog.text
    assert f"(resuming from {out / 'checkpoints' / 'last.pt'})" in stdout
    assert at == 10
    rec = record(out)
    assert rec["id"] == killed["id"] and rec["status"] == "completed"  # the same run, gone on
    assert [p["status"] for p in rec["previous"]] == ["killed"] and rec["previous"][0]["pid"] == proc.pid


# ---------------------------------------------------------------------------------------------- no silent replacement
def test_a_finished_run_is_not_touched_by_a_new_one(finished, capsys):
    out, files = finished
    rc, stdout, err = cli(capsys, *train_argv(out, "--seed", "7"))
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {out} already holds a run (status completed, started ")
    for hint in ("checkpoints/best.pt", "logs/metrics.jsonl", "--resume", str(out / "checkpoints" / "last.pt"),
                 "--overwrite", f"{out.name}.replaced-<time>", "another --output-dir"):
        assert hint in err, hint
    assert snapshot(out) == files  # best.pt, metrics.jsonl, run.json: byte for byte


def test_overwrite_moves_the_old_run_aside_whole(finished, tmp_path, capsys):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished[0], out)
    old = record(out)
    rc, stdout, err = cli(capsys, *train_argv(out, "--overwrite", "--seed", "7"))
    assert rc == 0, err
    (aside,) = tmp_path.glob("run.replaced-*")
    assert snapshot(aside) == finished[1]  # the old run, every file as it was
    new = record(out)
    assert new["id"] != old["id"] and new["seed"] == 7 and new["replaced"] == [str(aside)]
    assert f"the run that was there moved to {aside}" in stdout
    assert update_steps(out) == [1, 2]  # the new run's rows only
    assert sha(out / "checkpoints" / "best.pt") != finished[1]["checkpoints/best.pt"]


def test_resume_and_overwrite_refusals(tmp_path, capsys):
    rc, _, err = cli(capsys, *train_argv(tmp_path / "empty", "--resume"))
    assert rc == 2 and "holds no run to resume" in err and "without --resume" in err
    rc, _, err = cli(capsys, *train_argv(tmp_path / "x", "--resume", "--overwrite"))
    assert rc == 2 and "exclude each other" in err


def test_checkpoint_from_another_run_into_an_occupied_folder_is_refused(finished, tmp_path, capsys):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished[0], out)
    elsewhere = finished[0] / "checkpoints" / "last.pt"
    rc, _, err = cli(capsys, *train_argv(out, "--checkpoint", str(elsewhere)))
    assert rc == 2 and "would mix two runs' logs" in err
    # into a fresh folder it starts a new run from that checkpoint, and says where it came from
    rc, stdout, err = cli(capsys, *train_argv(tmp_path / "fresh", "--checkpoint", str(elsewhere), epochs=2))
    assert rc == 0, err
    child_run = record(tmp_path / "fresh")
    assert child_run["parent_run"] == record(finished[0])["id"] and child_run["resumed_from"] == str(elsewhere)


def test_the_default_command_twice_keeps_both_runs(tmp_path, monkeypatch, capsys, caplog):
    # the README's `train_optimized.py --config quickstart --test`, shrunk, in a fresh folder, twice
    monkeypatch.chdir(tmp_path)
    argv = [*train_argv(None), "--test"]
    rc, first_out, err = cli(capsys, *argv)
    assert rc == 0, err
    first = tmp_path / "runs" / "quickstart"
    files = snapshot(first)
    assert first_out.startswith(f"run {record(first)['id']}: writing to runs/quickstart\n")
    caplog.set_level("INFO")
    rc, second_out, err = cli(capsys, *argv)
    assert rc == 0, err
    second = tmp_path / "runs" / "quickstart_2"
    assert second_out.startswith(f"run {record(second)['id']}: writing to runs/quickstart_2 "
                                 "(runs/quickstart holds a run; --output-dir names the folder)\n")
    assert "results in runs/quickstart_2" in second_out.splitlines()[-1]
    assert snapshot(first) == files
    assert (second / "test_metrics.json").is_file() and record(second)["status"] == "completed"
    assert record(first)["config_fingerprint"] == record(second)["config_fingerprint"]  # same setup, two runs
    # the caches sit beside the runs and serve both: the second run mined and embedded nothing
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["cache", "quickstart", "quickstart_2"]
    assert "candidates for train: loaded from cache runs/cache/" in caplog.text
    assert "embedding cache: 0 hits" not in caplog.text

    # a checkpoint of the numbered run continues that run, in its own folder
    rc, stdout, err = cli(capsys, "train", *TINY_ARGS, "--epochs", "1", "--checkpoint",
                          "runs/quickstart_2/checkpoints/last.pt")
    assert rc == 0, err
    assert stdout.startswith(f"run {record(second)['id']}: writing to runs/quickstart_2 (resuming from ")
    assert not (tmp_path / "runs" / "quickstart_3").exists()


# ---------------------------------------------------------------------------------------------- run identity
def test_run_json_and_the_checkpoint_say_what_produced_them(finished, capsys):
    out, _ = finished
    rec = record(out)
    assert rec["status"] == "completed" and rec["exit_code"] == 0 and rec["error"] is None
    assert rec["started"] <= rec["ended"] and rec["dir"] == str(out.resolve())
    assert rec["seed"] == 42 and rec["pid"] == os.getpid() and rec["command"] == sys.argv
    assert rec["config"]["training"]["num_epochs"] == 1
    assert rec["config_fingerprint"] == config_fingerprint(load_config("quickstart", {
        "training.output_dir": "elsewhere", "training.num_epochs": "1", "data.max_train_queries": "32",
        "training.episodes_per_update": "16", "training.collect_batch_size": "16", "training.batch_size": "32",
        "training.ppo_epochs": "2", "training.eval_every": "2", "training.save_freq": "1",
        "training.early_stopping_patience": "0"}))  # where a run writes is not part of what it ran
    assert {"python", "torch", "numpy", "bm25s", "adaptive-ir"} <= set(rec["versions"])
    assert rec["versions"]["torch"] and rec["device"]["device"] == "cpu"
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if git.returncode == 0:
        assert rec["git_commit"] == git.stdout.strip() and isinstance(rec["git_dirty"], bool)
    state = load_checkpoint(out / "checkpoints" / "best.pt")
    assert state["run"] == {k: rec[k] for k in ("id", "dir", "started", "seed", "config_fingerprint",
                                                "git_commit", "git_dirty")}

    best = out / "checkpoints" / "best.pt"
    rc, stdout, err = cli(capsys, "evaluate", "--config", "quickstart", "--checkpoint", str(best), "--no-progress")
    assert rc == 0, err
    assert stdout.startswith(f"checkpoint {best}: run {rec['id']} in {rec['dir']} (started {rec['started']}, "
                             f"seed 42, config {rec['config_fingerprint']}, code ")
    assert f"update {state['counters']['update']}" in stdout.splitlines()[0]


def test_a_failed_run_records_why_and_does_not_occupy_its_folder(tmp_path, capsys):
    out = tmp_path / "run"
    rc, _, err = cli(capsys, *train_argv(out, "--set", "data.dataset_type=beir", "--data-dir",
                                         str(tmp_path / "missing")))
    assert rc == 2
    rec = record(out)
    assert rec["status"] == "failed" and rec["exit_code"] == 2 and "does not exist" in rec["error"]
    run = start_run(load_config("quickstart", {"training.output_dir": str(out)}))  # nothing to lose: free
    assert run.record["id"] != rec["id"]
    run.finish("completed", 0)


def test_numbering_skips_a_folder_in_use(tmp_path):
    cfg = load_config("quickstart", {"training.output_dir": str(tmp_path / "q")})
    first = start_run(cfg, numbered=True)
    second = start_run(cfg, numbered=True)  # the first holds its folder, though it has written nothing yet
    assert first.cfg.training.output_dir == str(tmp_path / "q")
    assert second.cfg.training.output_dir == str(tmp_path / "q_2")
    assert cfg.training.output_dir == str(tmp_path / "q")  # the caller's config is left as it was
    assert f"{tmp_path / 'q'} is in use" in second.note
    second.finish("completed", 0)
    first.finish("completed", 0)
    assert start_run(cfg).cfg.training.output_dir == str(tmp_path / "q")  # free again, and holds no run


# ---------------------------------------------------------------------------------------------- shared caches
_TABLES = """
import sys
import numpy as np
from adaptive_ir.mining.embeddings import EmbeddingCache

class Embedder:
    dim = 4
    def encode(self, texts):
        return np.array([[len(t), t.count("a"), sum(map(ord, t)) % 7, 1.0] for t in texts], np.float32)

folder, name = sys.argv[1], sys.argv[2]
for i in range(25):
    EmbeddingCache(folder, {"model": "fake"}).encode(Embedder(), [f"shared-{i % 5}-{j}" for j in range(50)])
    EmbeddingCache(folder, {"model": "fake"}).encode(Embedder(), [f"{name}-{i}"])
"""


def test_concurrent_runs_share_embedding_tables_and_every_table_reads_whole(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _TABLES, str(tmp_path), name], cwd=REPO, env=ENV,
                              stderr=subprocess.PIPE, text=True) for name in ("a", "b", "c")]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-3000:]
        assert "damaged" not in p.stderr.read()  # no run ever read half a table
    from adaptive_ir.mining.embeddings import EmbeddingCache

    cache = EmbeddingCache(tmp_path, {"model": "fake"})
    assert len(list(cache.folder.glob("table-*"))) == 5 + 75  # the shared tables once, each run's own
    embedder = type("Never", (), {"dim": 4, "encode": lambda self, texts: pytest.fail(f"re-encoded {texts}")})()
    for i in range(5):
        assert cache.encode(embedder, [f"shared-{i}-{j}" for j in range(50)]).shape == (50, 4)
    for name in "abc":
        for i in range(25):
            assert cache.encode(embedder, [f"{name}-{i}"])[0, 0] == len(f"{name}-{i}")


_WRITER = """
import sys
import numpy as np
from adaptive_ir.common.io import save_arrays
folder, value = sys.argv[1], float(sys.argv[2])
print("ready", flush=True)
for _ in range(150):
    save_arrays(folder, {"x": np.full(20000, value)}, {"key": "k"})
"""


def test_a_cache_entry_rewritten_by_two_runs_always_reads_whole(tmp_path):
    folder = tmp_path / "entry"
    aio.save_arrays(folder, {"x": np.full(20000, 0.0)}, {"key": "k"})
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(folder), v], cwd=REPO, env=ENV,
                                stdout=subprocess.PIPE) for v in ("1", "2")]
    for w in writers:
        assert w.stdout.readline().strip() == b"ready"
    seen = set()
    while any(w.poll() is None for w in writers):
        got = aio.load_arrays(folder, {"key": "k"})
        assert got is not None  # the two files of the entry always pair up: never a checksum mismatch
        assert len(np.unique(got["x"])) == 1
        seen.add(float(got["x"][0]))
    assert all(w.wait() == 0 for w in writers)
    assert seen & {1.0, 2.0}


def test_without_flock_nothing_is_locked_and_a_warning_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(aio, "fcntl", None)  # as on Windows
    aio._can_lock.cache_clear()
    try:
        first, second = aio.try_lock(tmp_path / ".lock"), aio.try_lock(tmp_path / ".lock")
        assert first is not None and second is not None
        first.close()
        second.close()
        with aio.file_lock(tmp_path / "entry" / ".lock"):
            pass
        assert caplog.text.count("no flock") == 1
    finally:
        aio._can_lock.cache_clear()
