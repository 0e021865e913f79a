"""A trained policy applied to a collection with no training: ``evaluate --policy``, ``reformulate --policy`` and
``Reformulator.from_pretrained``, with a shipped policy on the embedded collection (which it never saw)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
from test_cli_errors import assert_clean_error, run_cli
from test_reliability import write_beir_from_default

from adaptive_ir.api import evaluate_pretrained
from adaptive_ir.artifacts.export import SHIPPED_DIR
from adaptive_ir.cli import main
from adaptive_ir.inference.reformulate import Reformulator

POLICY = "general"
REPLICAS = Path(__file__).resolve().parents[1] / "release" / "policies"
"""The policies kept in the repository, not shipped (named by path: a test runs in a folder of its own)."""
FAST = ["--set", "candidate_mining.feedback=bm25"]
"""BM25 feedback documents instead of the policy's semantic ones (not part of a policy's spec): encoding the
collection's 2,000 documents for the semantic rerank would take the test minutes on 2 cores."""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One working directory for the module: the collection is indexed, mined and embedded once, then cached."""
    return tmp_path_factory.mktemp("pretrained")


def test_a_shipped_policy_evaluates_zero_shot_on_a_collection_it_never_saw(workdir, capsys, monkeypatch):
    monkeypatch.chdir(workdir)
    out = workdir / "scores.json"
    assert main(["evaluate", "--policy", POLICY, "--split", "test", "--baselines", "--device", "cpu",
                 "--no-progress", "--json", str(out), "--run-dir", "runs", *FAST]) == 0
    printed = capsys.readouterr().out
    assert f"exported policy {SHIPPED_DIR / POLICY}" in printed  # where the weights came from
    results = json.loads(out.read_text())
    assert {"bm25", "rm3", "agent"} <= results.keys()
    # and how many queries it helps and hurts against each baseline, per metric, with TRisk
    risk = json.loads(out.with_suffix(".risk.json").read_text())
    assert {"bm25", "rm3", "bm25-anserini", "rm3-anserini"} <= risk.keys()
    assert "| agent against | R@40 helped | R@40 hurt | R@40 TRisk |" in printed
    # the policy rewrites: its ranked lists are not BM25's
    assert (workdir / "runs" / "test.agent.trec").read_text() != (workdir / "runs" / "test.bm25.trec").read_text()
    assert any((workdir / "runs" / "pretrained" / "cache").glob("candidates-test-*"))  # cached for the next call
    # the Python API gives the same figures (greedy, deterministic), from the caches
    again = evaluate_pretrained(POLICY, split="test", system__device="cpu", candidate_mining__feedback="bm25")
    assert again["agent"] == results["agent"]


def test_reformulate_with_a_shipped_policy(workdir, capsys, monkeypatch):
    monkeypatch.chdir(workdir)
    ref = Reformulator.from_pretrained(POLICY, device="cpu", candidate_mining__feedback="bm25")
    assert ref.origin.startswith("exported policy")
    queries = ["regox kediz", "tonat kavox zupodot lopelum"]  # the embedded collection's made-up words
    rows = ref.reformulate(queries, top_docs=3)
    assert [r["text"] for r in rows] == queries
    assert all(len(r["top_docs"]) == 3 for r in rows)
    assert any(r["added_terms"] for r in rows)
    assert main(["reformulate", "--policy", POLICY, "--device", "cpu", "--format", "lucene", *FAST, *queries]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [r["lucene_query"] for r in rows]  # the same rewrites, one Lucene query per line
    assert any("^0.5" in line for line in lines)  # the added terms' weight
    # on a BEIR folder: its corpus alone is read (no split asked for)
    beir = write_beir_from_default(workdir / "beir-default")
    assert main(["reformulate", "--policy", POLICY, "--data-dir", str(beir), "--device", "cpu", "--format", "lucene",
                 *FAST, *queries]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == len(queries)


def test_a_policy_that_does_not_fit_is_refused_in_one_line(workdir, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(workdir)
    rc, err = run_cli(capsys, "evaluate", "--policy", POLICY, "--device", "cpu", "--no-progress", *FAST,
                      "--set", "rl_agent.hidden_dim=32")
    assert_clean_error(rc, err, f"policy {SHIPPED_DIR / POLICY}", "does not fit this setup",
                       "rl_agent.hidden_dim: checkpoint 64 vs this setup 32")
    # a policy of an older feature set (its spec edited to say so) is refused by name, not with a traceback
    old = tmp_path / "old-policy"
    shutil.copytree(SHIPPED_DIR / POLICY, old)
    meta = json.loads((old / "policy.json").read_text())
    first_dropped = meta["spec"]["features"][7]
    meta["spec"]["features"] = meta["spec"]["features"][:7]
    meta["spec"]["agent_features"] = 4
    (old / "policy.json").write_text(json.dumps(meta))
    rc, err = run_cli(capsys, "reformulate", "--policy", str(old), "--device", "cpu", *FAST, "q")
    assert_clean_error(rc, err, "does not fit this setup", f"features: only this setup has [{first_dropped}")
    rc, err = run_cli(capsys, "evaluate", "--policy", "no-such-policy")
    assert_clean_error(rc, err, "policy no-such-policy", "shipped: ", POLICY)
    rc, err = run_cli(capsys, "evaluate", "--policy", POLICY, "--config", "quickstart")
    assert_clean_error(rc, err, "--policy", "goes alone")


def test_every_policy_is_scored_on_the_same_dev_carve():
    # a collection without a dev split has one carved from train: which queries must not depend on the seed the
    # policy happened to be trained with (stored in its config), or two policies are scored on different queries
    from adaptive_ir.artifacts.checkpoint import PRETRAINED_SPLIT_SEED, pretrained_config

    cfgs = [pretrained_config(REPLICAS / p, "some/beir-folder")[0] for p in ("nfcorpus-seed-1", "nfcorpus-seed-2")]
    assert [c.system.seed for c in cfgs] == [1, 2]
    assert [c.split_seed for c in cfgs] == [PRETRAINED_SPLIT_SEED] * 2
    assert pretrained_config(POLICY, "some/beir-folder", {"data.split_seed": 7})[0].split_seed == 7


def test_an_ensemble_of_one_policy_acts_as_that_policy_and_members_must_fit(workdir, capsys, monkeypatch):
    """scripts/ensemble_eval.py: a policy averaged with itself takes the policy's own greedy actions (same metrics as
    ``evaluate --policy``); a member with another spec is refused in one line naming it."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "ensemble_eval.py"
    spec = importlib.util.spec_from_file_location("ensemble_eval", path)
    ensemble_eval = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ensemble_eval)
    monkeypatch.chdir(workdir)
    single = evaluate_pretrained(POLICY, split="test", system__device="cpu", candidate_mining__feedback="bm25")["agent"]
    both = ensemble_eval.main(["--policy", POLICY, "--member", POLICY, "--split", "test", *FAST])
    assert both == single
    other = ensemble_eval.main(["--policy", POLICY, "--member", "general-joint", "--split", "test", *FAST])
    assert other != single  # the second member's probabilities count
    capsys.readouterr()
    replica = str(REPLICAS / "nfcorpus-seed-2")
    with pytest.raises(SystemExit) as exit_:
        ensemble_eval.main(["--policy", POLICY, "--member", replica, "--split", "test", *FAST])
    assert_clean_error(exit_.value.code, capsys.readouterr().err, f"--member {replica}", "max_steps_per_episode")


def test_first_stage_auto_runs_the_policy_over_the_stage_it_does_best_on_dev(workdir, capsys, monkeypatch):
    monkeypatch.chdir(workdir)
    assert main(["evaluate", "--policy", POLICY, "--first-stage", "auto", "--split", "test", "--device", "cpu",
                 "--no-progress", *FAST]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    m = re.fullmatch(r"first stage: (\w+), chosen on dev \(agent R@40: default ([\d.]+), anserini ([\d.]+)\)", first)
    assert m, first
    assert m[1] == ("default" if float(m[2]) >= float(m[3]) else "anserini")  # the higher (the first on a tie)
    assert main(["evaluate", "--first-stage", "auto", "--no-progress", "--device", "cpu"]) != 0
    assert "give --policy or --checkpoint" in capsys.readouterr().err


def test_first_stage_auto_keeps_the_policys_stage_on_a_collection_without_dev_queries(monkeypatch):
    from adaptive_ir import api
    from adaptive_ir.common.errors import MissingSplitError
    from adaptive_ir.config import first_stage, load_config
    from adaptive_ir.data.collection import Collection

    # the error names the split it did not find: the choice reads that, not the message
    with pytest.raises(MissingSplitError) as e:
        Collection("c", {}, {"train": {"q": "text"}}, {"train": {}}).split("dev")
    assert e.value.split == "dev"

    cfg = load_config("scifact")
    asked = {"missing": "dev"}

    def evaluate_config(*args, **kwargs):  # the collection lacks the split named in ``asked``
        name = asked["missing"]
        # the other message names dev too, as a message may: the choice must not read it
        available = "train" if name == "dev" else "dev"
        raise MissingSplitError(f"collection 'c' has no '{name}' split (available: {available})", name)

    monkeypatch.setattr(api, "evaluate_config", evaluate_config)
    kept, line = api.choose_first_stage(cfg, None)
    assert kept is cfg
    assert line == (f"first stage: {first_stage(cfg)} (no dev queries to choose by: collection 'c' has no 'dev' "
                    "split (available: train))")
    asked["missing"] = "test"  # another split missing is not the choice's to answer
    with pytest.raises(MissingSplitError):
        api.choose_first_stage(cfg, None)
