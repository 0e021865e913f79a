"""The Kaggle notebook runs top to bottom on the CPU with a tiny run injected into its parameter cell, in this
process and as DDP under torchrun (two gloo processes standing in for the two T4s), and leaves the learning-curve
plot and the ours-vs-BM25-vs-RM3 table behind; re-run on an OUTPUT_DIR that holds an earlier run, it writes beside
it and leaves that run as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("jupyter_client.kernelspec")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "kaggle_2xT4.ipynb"
TINY = {"data.max_train_queries": 64, "training.episodes_per_update": 64, "training.collect_batch_size": 32,
        "training.batch_size": 128, "training.ppo_epochs": 2, "training.eval_every": 1,
        "rl_agent.hidden_dim": 32, "rl_agent.num_heads": 2}


def python_kernel() -> str:
    """A Python kernel spec to run the notebook with (the test environment's, installed if missing)."""
    specs = kernelspec.KernelSpecManager().find_kernel_specs()
    if "python3" not in specs:
        ipykernel = pytest.importorskip("ipykernel.kernelspec")
        ipykernel.install(user=True)
    return "python3"


def run_files(folder: Path) -> dict[Path, bytes]:
    """Every file of a run folder with its contents, but the lock file (which a run that looked in leaves)."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("multi_gpu", ["single", "ddp"])
def test_notebook_runs_on_cpu_and_reports(tmp_path, monkeypatch, multi_gpu):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert "parameters" in nb.cells[1].metadata.get("tags", [])
    assert 'MULTI_GPU = "ddp"' in nb.cells[1].source  # DDP is what a 2-GPU box gets by default
    earlier = tmp_path / "run"  # what a previous execution of the notebook left in OUTPUT_DIR
    (earlier / "checkpoints").mkdir(parents=True)
    (earlier / "checkpoints" / "best.pt").write_bytes(b"the model of an earlier run")
    (earlier / "logs").mkdir()
    (earlier / "logs" / "metrics.jsonl").write_text('{"step": 1}\n')
    before = run_files(earlier)
    out = tmp_path / "run_2"
    nb.cells[1].source = "\n".join([
        f"REPO_DIR = {str(REPO)!r}", "DATA_DIR = None", 'DATASET_TYPE = "beir"', 'CONFIG = "quickstart"',
        f"OUTPUT_DIR = {str(earlier)!r}", "RESUME = False", "EPOCHS = 2", 'DEVICE = "cpu"', "INSTALL = False", f"OVERRIDES = {TINY!r}",
        f"MULTI_GPU = {multi_gpu!r}", f"PROCESSES = {2 if multi_gpu == 'ddp' else None}"])
    # the kernel and the DDP processes it starts import this checkout, one thread each
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    client = nbclient.NotebookClient(nb, kernel_name=python_kernel(), timeout=600,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()

    def text(cell) -> str:
        return "".join(o.get("text", "") + "".join(o.get("data", {}).get("text/plain", ""))
                       for o in cell.get("outputs", []))

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the learning curves, inline
    assert "using the embedded default collection" not in text(nb.cells[5])  # DATA_DIR None: no warning
    if multi_gpu == "ddp":
        assert "DDP over 2 processes" in text(nb.cells[7])
        assert "DistributedDataParallel: 2 processes" in text(nb.cells[9])  # the processes' log, streamed
    else:
        assert "policy forwards through ActorCritic" in text(nb.cells[7])  # one CPU: no wrapper
        assert f"writing to {out} ({earlier} holds a run" in text(nb.cells[7])
    assert run_files(earlier) == before
    assert json.loads((out / "run.json").read_text())["status"] == "completed"

    table = text(nb.cells[-1])
    assert "default / test" in table and "| method | R@10 | R@40 |" in table
    for method in ("bm25", "rm3", "agent"):
        assert f"| {method} |" in table
    results = json.loads((out / "test_metrics.json").read_text())
    assert {"bm25", "rm3", "agent"} <= set(results) and 0.0 <= results["agent"]["R@40"] <= 1.0
    assert (out / "learning_curves.png").stat().st_size > 0
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert any("dev/R@40" in r for r in rows) and not any(k.startswith("gpu/") for r in rows for k in r)
