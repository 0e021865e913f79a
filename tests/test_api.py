"""The Python API (``adaptive_ir.train`` / ``evaluate`` / ``export``) does what the commands do, with the same run
folders; ``reformulate --format lucene`` prints weighted queries in Lucene's query syntax."""

from __future__ import annotations

import json

import pytest

import adaptive_ir
from adaptive_ir.api import export
from adaptive_ir.cli import main
from adaptive_ir.inference.reformulate import lucene_escape, lucene_query

SMALL = {"data.max_train_queries": 32, "training.episodes_per_update": 16, "training.collect_batch_size": 16,
         "training.batch_size": 32, "training.ppo_epochs": 1, "training.num_epochs": 1, "training.eval_every": 1,
         "rl_agent.hidden_dim": 32, "rl_agent.num_heads": 2, "system.device": "cpu", "retrieval.expansion_weight": 0.5}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "run"
    return adaptive_ir.train("quickstart", test=True, **{"training.output_dir": str(out)}, **SMALL)


def test_train_returns_the_run_and_writes_its_folder(result):
    assert result.updates == 2 and not result.interrupted and result.best_update >= 1
    assert result.best_checkpoint.is_file() and result.last_checkpoint.is_file()
    record = json.loads((result.output_dir / "run.json").read_text())
    assert record["id"] == result.run_id and record["status"] == "completed" and record["exit_code"] == 0
    # what the command line records too: the trainer's result, with its phases and peak memory
    assert record["result"]["updates"] == 2 and "training" in record["result"]["phases_s"]
    assert json.loads((result.output_dir / "test_metrics.json").read_text()) == result.test
    assert set(result.test) >= {"bm25", "rm3", "agent"}


def test_a_second_train_of_the_config_is_numbered_as_on_the_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = adaptive_ir.train("quickstart", training__num_epochs=1, **{k: v for k, v in SMALL.items()
                                                                         if k != "training.num_epochs"})
    second = adaptive_ir.train("quickstart", **SMALL)
    assert (first.output_dir.as_posix(), second.output_dir.as_posix()) == ("runs/quickstart", "runs/quickstart_2")


def test_evaluate_matches_the_command(result, tmp_path, capsys):
    ours = adaptive_ir.evaluate(result.best_checkpoint, split="dev")  # the config stored in the checkpoint
    assert main(["evaluate", "--config", "quickstart", "--checkpoint", str(result.best_checkpoint), "--split", "dev",
                 "--baselines", "--json", str(tmp_path / "e.json"), "--no-progress", "--output-dir",
                 str(result.output_dir),  # its caches: those of the run, as the checkpoint's own config says
                 *[a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]]) == 0
    assert ours == json.loads((tmp_path / "e.json").read_text())
    assert ours["agent"]["R@40"] == pytest.approx(result.best_dev)  # the dev score that selected it


def test_evaluate_without_a_config_uses_the_checkpoints_own_on_the_command_line_too(result, tmp_path):
    # the run was trained with a 32-wide policy: quickstart (64 wide) would be refused by the spec check
    assert main(["evaluate", "--checkpoint", str(result.best_checkpoint), "--split", "dev", "--json",
                 str(tmp_path / "e.json"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "e.json").read_text()) == adaptive_ir.evaluate(result.best_checkpoint, split="dev",
                                                                                  baselines=False)


def test_export_from_python(result, tmp_path):
    folder = export(result.best_checkpoint, tmp_path / "p")
    spec = json.loads((folder / "policy.json").read_text())
    assert spec["origin"]["update"] == result.best_update and spec["spec"]["rl_agent.hidden_dim"] == 32



def test_the_package_face_is_the_api_and_stays_so():
    import subprocess
    import sys

    # a fresh interpreter: the submodules imported here must not rebind the package's names
    code = ("import adaptive_ir, adaptive_ir.evaluation.metrics, adaptive_ir.api, adaptive_ir.artifacts.export, "
            "adaptive_ir.inference.reformulate, sys\n"
            "from adaptive_ir import api\n"
            "assert type(adaptive_ir) is type(sys), type(adaptive_ir)\n"
            "assert [getattr(adaptive_ir, n) for n in ('train', 'evaluate', 'evaluate_pretrained', 'export')] == "
            "[api.train, api.evaluate, api.evaluate_pretrained, api.export]\n"
            "from adaptive_ir.inference.reformulate import Reformulator\n"
            "assert adaptive_ir.Reformulator is Reformulator and adaptive_ir.TrainResult is api.TrainResult\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert set(adaptive_ir.__all__) == {"train", "evaluate", "evaluate_pretrained", "export", "Reformulator",
                                        "TrainResult", "__version__"}
    # `import adaptive_ir` does not import the inference stage (Reformulator comes on first use)
    light = subprocess.run([sys.executable, "-c", "import adaptive_ir, sys; "
                            "print(any(m.startswith('adaptive_ir.inference') for m in sys.modules))"],
                           capture_output=True, text=True, check=True)
    assert light.stdout.strip() == "False"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        adaptive_ir.nothing  # noqa: B018


def test_lucene_query_syntax():
    assert lucene_query([("hubble", 1.0), ("space", 1.0), ("orbit", 0.5)]) == "hubble space orbit^0.5"
    assert lucene_query([("a1", 1.0), ("a1", 1.0), ("x", 0.25)]) == "a1^2 x^0.25"  # a repeated word: summed
    assert lucene_escape('c++:(a)"b"') == 'c\\+\\+\\:\\(a\\)\\"b\\"'
    assert lucene_escape("a&&b||c!d^e~f*g?h/i\\j{k}[l]-m") == \
        "a\\&\\&b\\|\\|c\\!d\\^e\\~f\\*g\\?h\\/i\\\\j\\{k\\}\\[l\\]\\-m"


def test_reformulate_prints_the_searched_rewrite_as_a_lucene_query(result, capsys):
    from adaptive_ir.inference.reformulate import Reformulator

    ref = Reformulator.load(result.best_checkpoint, device="cpu")
    queries = ref.ws.collection.split("dev")[1][:8]
    out = ref.reformulate(queries)
    assert any(r["added_terms"] for r in out), "a policy that adds nothing would check no weight"
    assert main(["reformulate", "--checkpoint", str(result.best_checkpoint), "--device", "cpu", "--format",
                 "lucene", *queries]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert lines == [r["lucene_query"] for r in out]
    vocab = ref.ws.retriever.vocab.terms
    for line, text, r in zip(lines, queries, out):
        original = list(dict.fromkeys(vocab[t] for t in ref.ws.retriever.encode([text])[0]))
        added = [t["term"] for t in r["added_terms"]]
        assert line.split() == original + [f"{t}^0.5" for t in added if t not in original]
