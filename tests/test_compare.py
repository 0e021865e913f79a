"""``adaptive-ir compare``: one run per seed on the embedded default collection, the TREC run files it keeps, the
table's means, spreads and p-values recomputed from those files, reuse and resume of seed runs, and the report's
labels (small split, best fixed rule)."""

from __future__ import annotations

import gc
import json
import weakref

import ir_measures
import numpy as np
import pytest
from helpers import tiny_config

from adaptive_ir import compare as cmp
from adaptive_ir.cli import main
from adaptive_ir.common.errors import ConfigError
from adaptive_ir.data import make_default
from adaptive_ir.evaluation import stats
from adaptive_ir.evaluation.methods import Method
from adaptive_ir.evaluation.metrics import METRIC_NAMES, bm25_run, evaluate_run, per_query
from adaptive_ir.retrieval.retriever import Retriever
from adaptive_ir.training import run as run_mod

SEEDS = [1, 2]
PERMUTATIONS = 2000


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    cfg = tiny_config(root)
    report, text = cmp.compare(cfg, SEEDS, "test", progress=False, n_permutations=PERMUTATIONS)
    return cfg, root, report, text


def read_run(path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for r in ir_measures.read_trec_run(str(path)):
        run.setdefault(r.query_id, {})[r.doc_id] = r.score
    return run


def test_every_method_and_seed_keeps_its_run_file_and_the_table_follows_from_them(compared):
    cfg, root, report, text = compared
    coll = make_default()  # what the quickstart config loads
    qids, texts, qrels = coll.split("test")
    assert report["queries"] == len(qids) == 80 and report["small_split"] and report["seeds"] == SEEDS
    # BM25 feedback, top_k0 20: RM3 over the agent's own feedback documents is rm3-feedback (no semantic feedback);
    # the field's BM25 and RM3 (Anserini's) and the same fixed rules over that first stage; then the best fixed rule
    # of the agent's action space on this split over either first stage
    methods = list(report["methods"])
    rule, dev_chosen = methods[6:8]
    assert methods[:6] + methods[8:] == ["bm25", "bm25-anserini", "rm3", "rm3-feedback", "rm3-anserini",
                                         "rm3-feedback-anserini", "agent", "oracle"]
    assert rule.startswith("rule-w") and rule.split("-j")[0] == f"rule-w{cfg.retrieval.expansion_weight:g}"
    files = {m: s["run_files"] for m, s in report["methods"].items()}
    assert files["agent"] == [str(root / f"seed-{s}" / "runs" / "test.agent.trec") for s in SEEDS]
    assert files["bm25"] == [str(root / "runs" / "test.bm25.trec")]
    values = {m: [per_query(qrels, read_run(f), qids=qids) for f in paths] for m, paths in files.items()}
    for m, s in report["methods"].items():
        for k in METRIC_NAMES:
            per_seed = [v[k].mean() for v in values[m]]
            assert s["mean"][k] == pytest.approx(np.mean(per_seed), abs=1e-6), (m, k)
            if m == "agent":
                assert s["std"][k] == pytest.approx(np.std(per_seed, ddof=1), abs=1e-6)
                assert [s["per_seed"][str(x)][k] for x in SEEDS] == pytest.approx(per_seed, abs=1e-6)
            else:
                assert s["deterministic"] and s["std"][k] == 0.0
    assert read_run(files["agent"][0]) != read_run(files["agent"][1])  # two seeds, two policies
    # BM25 as evaluate computes it on its own
    bm25 = evaluate_run(qrels, bm25_run(Retriever.build(coll), qids, texts, cfg.retrieval.top_k), qids=qids)
    assert report["methods"]["bm25"]["mean"] == pytest.approx(bm25, abs=1e-9)
    # the rule is the best of the action space's rules on this split (j within the step budget), over both first
    # stages
    import torch

    from adaptive_ir.evaluation.methods import DEV_CHOSEN, fixed_rule_runs, rule_runs
    from adaptive_ir.rl.workspace import Workspace

    ws = Workspace(cfg, torch.device("cpu"), collection=coll, progress=False)
    r40 = {wj: evaluate_run(qrels, run, qids=qids)["R@40"] for wj, run in rule_runs(cfg, ws, "test", qids, texts).items()}
    with ws.on_stage("anserini") as field:
        assert field.cfg.retrieval.stemmer == "porter"
        with field.on_stage("anserini") as same:
            assert same is field
        r40_field = {wj: evaluate_run(qrels, run, qids=qids)["R@40"]
                     for wj, run in rule_runs(field.cfg, field, "test", qids, texts).items()}
    assert {j for _, j in r40} == {j for j in (1, 2, 3, 5, 8, 10) if j <= cfg.rl_agent.max_steps_per_episode}
    assert set(r40_field) == set(r40)
    assert report["methods"][rule]["mean"]["R@40"] == pytest.approx(max([*r40.values(), *r40_field.values()]),
                                                                     abs=1e-9)
    # the fixed rule chosen on dev: the best on dev of every fixed rule, its run on this split
    dqids, dtexts, dqrels = coll.split("dev")
    fixed, _ = fixed_rule_runs(cfg, ws, {"test": (qids, texts), "dev": (dqids, dtexts)})
    on_dev = {m: evaluate_run(dqrels, run, qids=dqids)["R@40"] for m, run in fixed["dev"].items()}
    assert set(on_dev) == ({"rm3", "rm3-feedback", "rm3-anserini", "rm3-feedback-anserini"}
                           | {f"rule-w{w:g}-j{j}{stage}" for w, j in r40 for stage in ("", "-anserini")})
    assert dev_chosen == DEV_CHOSEN + max(on_dev, key=on_dev.get)
    name = dev_chosen.removeprefix(DEV_CHOSEN)
    on_test = fixed["test"][name]
    kept = read_run(files[dev_chosen][0])
    assert {q: list(d) for q, d in kept.items()} == {q: list(d) for q, d in on_test.items()}  # the same rankings
    # paired tests: the agent's per-query mean over seeds against BM25, the best baseline, the best fixed rule and
    # the one chosen on dev
    r40_of = lambda m: report["methods"][m]["mean"]["R@40"]  # noqa: E731
    best = max(["rm3", "rm3-feedback", "rm3-anserini", "rm3-feedback-anserini", rule], key=r40_of)
    baseline = max(["bm25", "bm25-anserini", "rm3", "rm3-anserini"], key=r40_of)
    assert report["best_fixed_rule"] == best and report["dev_chosen_rule"] == dev_chosen
    assert report["best_baseline"] == baseline
    assert list(report["tests"]) == list(dict.fromkeys(["bm25", baseline, best, dev_chosen]))
    for other, rows in report["tests"].items():
        for row in rows:
            k = row["metric"]
            agent = np.mean([v[k] for v in values["agent"]], axis=0)
            base = values[other][0][k]
            assert row["p_randomization"] == pytest.approx(stats.randomization_p(agent, base, PERMUTATIONS),
                                                           abs=1e-12)
            assert row["p_t"] == pytest.approx(stats.t_test_p(agent, base), rel=1e-6)
            assert (row["wins"], row["ties"], row["losses"]) == stats.wins_ties_losses(agent, base)
            assert row["mde"] == pytest.approx(stats.min_detectable_effect(agent, base), rel=1e-9)
    assert json.loads((root / "compare-test.json").read_text()) == json.loads(json.dumps(report))
    assert (root / "compare-test.md").read_text() == text + "\n"
    assert "| agent | " in text and " ± " in text and "| bm25 | R@40 |" in text


def test_seeds_share_the_caches_and_keep_their_own_folders(compared):
    cfg, root, report, _ = compared
    assert (root / "cache").is_dir()
    for s in SEEDS:
        folder = root / f"seed-{s}"
        assert (folder / "checkpoints" / "best.pt").is_file() and (folder / "logs" / "metrics.jsonl").is_file()
        assert not (folder / "cache").exists()
        done = json.loads((folder / cmp.DONE_FILE).read_text())
        assert done["config"]["system"]["seed"] == s
        assert done["config"]["data"]["split_seed"] == cfg.system.seed  # one dev carving for every seed
        run = json.loads((folder / "run.json").read_text())  # each seed's folder is a run folder of its own
        assert run["status"] == "completed" and run["seed"] == s


def test_a_second_run_reuses_finished_seeds_and_resumes_unfinished_ones(compared, monkeypatch):
    cfg, root, report, _ = compared
    resumed = []

    class RecordingTrainer(run_mod.Trainer):
        def __init__(self, c, resume=None, progress=True, run=None):
            resumed.append((c.system.seed, resume))
            super().__init__(c, resume=resume, progress=progress, run=run)

    monkeypatch.setattr(run_mod, "Trainer", RecordingTrainer)
    (root / "seed-2" / cmp.DONE_FILE).unlink()  # as if seed 2 had been interrupted after its last checkpoint
    again, _ = cmp.compare(cfg, SEEDS, "test", progress=False, n_permutations=PERMUTATIONS)
    assert resumed == [(2, root / "seed-2" / "checkpoints" / "last.pt")]  # seed 1 is finished: not trained
    assert again["methods"] == report["methods"] and again["tests"] == report["tests"]
    skipped, _ = cmp.compare(cfg, SEEDS, "test", skip_train=True, progress=False, n_permutations=PERMUTATIONS)
    assert skipped["methods"] == report["methods"] and len(resumed) == 1
    changed = tiny_config(root, **{"training.learning_rate": "0.5"})
    with pytest.raises(ConfigError, match="training.learning_rate: 0.001 there, 0.5 now"):
        cmp.compare(changed, SEEDS, "test", progress=False)


def test_report_labels_small_splits_and_picks_the_better_fixed_rule():
    rng = np.random.default_rng(0)
    n = 12

    def method(r40: float) -> dict[str, np.ndarray]:
        return {k: np.clip(r40 + 0.1 * rng.standard_normal(n), 0, 1) for k in METRIC_NAMES}

    values = {"bm25": [method(0.3)], "rm3": [method(0.35)], "rm3-semantic": [method(0.45)],
              "agent": [method(0.5)]}
    ev = cmp.Evaluated("tiny", "test", [f"q{i}" for i in range(n)], [7], values, {})
    report = cmp.build_report(ev, n_permutations=500)
    assert report["best_fixed_rule"] == "rm3-semantic" and report["best_baseline"] == "rm3"  # RM3 is both
    assert list(report["tests"]) == ["bm25", "rm3", "rm3-semantic"]
    assert report["small_split"] and report["methods"]["agent"]["std"]["R@40"] is None  # one seed: no spread
    text = cmp.format_report(report)
    assert "**small split** (n = 12 < 100" in text
    assert "| agent | " + f"{values['agent'][0]['R@10'].mean():.4f} ± – |" in text
    r40 = next(t for t in report["tests"]["rm3-semantic"] if t["metric"] == "R@40")
    assert r40["delta"] == pytest.approx(values["agent"][0]["R@40"].mean() - values["rm3-semantic"][0]["R@40"].mean())


@pytest.mark.parametrize("flags, fragment", [
    (["--seeds", "1,x"], "comma-separated integers"),
    (["--seeds", "2,2"], "distinct"),
    (["--permutations", "0"], "--permutations 0"),
])
def test_bad_compare_flags(capsys, flags, fragment):
    assert main(["compare", *flags, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err


def test_skip_train_needs_every_seed_checkpoint(tmp_path, capsys):
    rc = main(["compare", "--output-dir", str(tmp_path), "--seeds", "3,4", "--skip-train", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "seed-3" in err and "seed-4" in err and "without --skip-train" in err


def test_the_dev_carving_follows_split_seed_not_the_training_seed(tmp_path):
    import torch

    from adaptive_ir.config import load_config
    from adaptive_ir.rl.workspace import Workspace

    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"word{i} common"}) + "\n"
                                                   for i in range(20)))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"word{i}"}) + "\n"
                                                    for i in range(20)))
    (tmp_path / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                  + "".join(f"q{i}\td{i}\t1\n" for i in range(20)))

    def dev(**over):
        cfg = load_config("quickstart", {"data.dataset_type": "beir", "data.data_dir": str(tmp_path),
                                         "training.output_dir": str(tmp_path / "out"), **over})
        return set(Workspace(cfg, torch.device("cpu"), progress=False).collection.queries["dev"])

    assert load_config("quickstart", {"system.seed": "7"}).split_seed == 7  # unset: the training seed
    pinned = dev(**{"system.seed": "1", "data.split_seed": "42"})
    assert pinned == dev(**{"system.seed": "2", "data.split_seed": "42"}) == dev(**{"system.seed": "42"})
    assert any(dev(**{"system.seed": str(s)}) != pinned for s in (1, 2, 3))


@pytest.mark.parametrize("n, small", [(99, True), (100, False)])
def test_small_split_threshold(n, small):
    values = {m: [{k: np.full(n, 0.5) for k in METRIC_NAMES}] for m in ("bm25", "rm3", "agent")}
    report = cmp.build_report(cmp.Evaluated("t", "test", [f"q{i}" for i in range(n)], [7], values, {}),
                              n_permutations=10)
    assert report["small_split"] is small and ("**small split**" in cmp.format_report(report)) is small


def test_seeds_started_from_another_run_are_reused_only_while_that_policy_is_unchanged(compared, tmp_path):
    _, source_root, _, _ = compared
    template = str(source_root / "seed-{seed}" / "checkpoints" / "best.pt")
    cfg = tiny_config(tmp_path, **{"training.num_epochs": 0, "training.init_from": template})
    first, _ = cmp.compare(cfg, SEEDS, "test", progress=False, n_permutations=PERMUTATIONS)
    # 0 epochs: each seed's agent is its source seed's policy, so its runs equal the source's
    for s in SEEDS:
        ours = read_run(tmp_path / f"seed-{s}" / "runs" / "test.agent.trec")
        assert ours == read_run(source_root / f"seed-{s}" / "runs" / "test.agent.trec")
    again, _ = cmp.compare(cfg, SEEDS, "test", progress=False, n_permutations=PERMUTATIONS)
    assert again["methods"] == first["methods"]
    # the source of seed 2 trained again (here: another file in its place) → seed 2 is stale
    source2 = source_root / "seed-2" / "checkpoints"
    (source2 / "best.pt").rename(source2 / "best.pt.orig")
    (source2 / "best.pt.json").rename(source2 / "best.pt.json.orig")
    try:
        (source2 / "best.pt").write_bytes((source_root / "seed-1" / "checkpoints" / "best.pt").read_bytes())
        with pytest.raises(ConfigError, match="seed-2.*trained from another policy"):
            cmp.compare(cfg, SEEDS, "test", progress=False, n_permutations=PERMUTATIONS)
    finally:
        (source2 / "best.pt.orig").replace(source2 / "best.pt")
        (source2 / "best.pt.json.orig").replace(source2 / "best.pt.json")


@pytest.mark.parametrize("top_k0", [5, 10])
def test_rm3_over_the_agents_own_bm25_feedback_documents_is_a_fixed_rule_when_they_are_not_rm3s(tmp_path, top_k0):
    # with BM25 feedback, the fixed rule over the agent's inputs is RM3 over BM25's top top_k0; at 10 it is rm3
    import torch

    from adaptive_ir.evaluation.methods import split_runs
    from adaptive_ir.evaluation.metrics import rm3_run
    from adaptive_ir.rl.workspace import Workspace

    cfg = tiny_config(tmp_path, **{"candidate_mining.feedback": "bm25", "candidate_mining.top_k0": top_k0})
    ws = Workspace(cfg, torch.device("cpu"), collection=make_default(), progress=False)
    qids, _, all_runs = split_runs(cfg, ws, "dev")
    # the action space's rule and the Anserini first stage's rows: elsewhere
    runs = {m: r for m, r in all_runs.items() if not m.startswith("rule-") and not m.endswith("-anserini")}
    assert {"bm25-anserini", "rm3-anserini"} <= set(all_runs)
    assert Method.of("rm3-feedback").fixed_rule and "rm3-semantic" not in runs
    texts = ws.collection.split("dev")[1]
    if top_k0 == 10:
        assert set(runs) == {"bm25", "rm3"}
    else:
        assert set(runs) == {"bm25", "rm3", "rm3-feedback"}
        assert runs["rm3-feedback"] == rm3_run(ws.retriever, qids, texts, cfg.retrieval.top_k, fb_docs=5)
        assert runs["rm3-feedback"] != runs["rm3"]


def test_a_seed_saved_before_the_seed_keys_left_the_schema_is_compared_by_its_settings(tmp_path):
    """A finished seed's stored config from before the seed project's keys left the schema (an evaluation
    section, rl_agent's PPO copies) is read as a config, so the same settings match and another value is named."""
    from adaptive_ir.config import config_to_dict, load_config

    cfg = load_config("quickstart", {"training.output_dir": str(tmp_path / "run")})
    stored = config_to_dict(cfg)
    stored["evaluation"] = {"metrics": []}
    stored["rl_agent"] = {**stored["rl_agent"], "dropout": 0.0, "learning_rate": None, "embedding_dim": None}
    cmp._same_settings(cfg, stored, tmp_path / "trained.json")
    stored["training"] = {**stored["training"], "gamma": 0.5}
    with pytest.raises(ConfigError, match=r"training\.gamma: 0\.5 there, 0\.99 now"):
        cmp._same_settings(cfg, stored, tmp_path / "trained.json")


def test_an_agent_over_anserinis_index_gets_the_default_first_stage_as_the_field_rows(tmp_path):
    # the agent's own rows (bm25, rm3) are Anserini's index now; bm25-anserini is that very run, rm3-anserini is
    # Anserini's own RM3 over it, and the engine's default first stage brings bm25-default, rm3-default and its rules
    import torch

    from adaptive_ir.config import first_stage, on_first_stage
    from adaptive_ir.evaluation.methods import fixed_rule_runs, split_runs
    from adaptive_ir.evaluation.metrics import rm3_anserini_run, rm3_run
    from adaptive_ir.rl.workspace import Workspace

    cfg = on_first_stage(tiny_config(tmp_path, **{"candidate_mining.feedback": "bm25"}), "anserini")
    ws = Workspace(cfg, torch.device("cpu"), collection=make_default(), progress=False)
    qids, texts, qrels = ws.collection.split("dev")
    _, _, runs = split_runs(cfg, ws, "dev")
    assert {"bm25", "rm3", "bm25-anserini", "rm3-anserini", "bm25-default", "rm3-default"} <= set(runs)
    assert runs["bm25-anserini"] == runs["bm25"]
    assert runs["rm3-anserini"] == rm3_anserini_run(ws.retriever, qids, texts, cfg.retrieval.top_k)
    assert runs["rm3-anserini"] != runs["rm3"]  # Anserini's RM3 is not ours, even over the same index
    with ws.on_stage("anserini") as same:
        assert same is ws
    with ws.on_stage("default") as field:
        assert first_stage(field.cfg) == "default" and field.collection.corpus is ws.collection.corpus
        assert not hasattr(field, "embedder")
        default_bm25 = bm25_run(field.retriever, qids, texts, cfg.retrieval.top_k)
        default_rm3 = rm3_run(field.retriever, qids, texts, cfg.retrieval.top_k)
        released = weakref.ref(field.retriever.index)
    del field, same
    gc.collect()
    assert released() is None  # the workspace keeps no other first stage once its block ends
    assert "default: index" in ws.phases.seconds  # and its build counts among the run's phases
    assert runs["bm25-default"] == default_bm25 != runs["bm25"]
    assert runs["rm3-default"] == default_rm3
    fixed = fixed_rule_runs(cfg, ws, {"dev": (qids, texts)})[0]["dev"]
    assert any(m.startswith("rule-") and m.endswith("-default") for m in fixed)
    assert any(m.startswith("rule-") and not m.endswith("-default") for m in fixed)


@pytest.mark.parametrize("name, kind, stage, baseline, fixed_rule", [
    ("bm25", "bm25", None, True, False), ("bm25-anserini", "bm25", "anserini", True, False),
    ("rm3", "rm3", None, True, True), ("rm3-anserini", "rm3", "anserini", True, True),
    ("rm3-default", "rm3", "default", True, True), ("rm3-semantic", "rm3-feedback", None, False, True),
    ("rm3-feedback-anserini", "rm3-feedback", "anserini", False, True), ("rule-w0.5-j3", "rule", None, False, True),
    ("rule-w1-j10-anserini", "rule", "anserini", False, True),
    ("dev-chosen-rule-w1-j2-default", "dev-chosen", "default", False, False),
    ("agent", "agent", None, False, False), ("oracle", "oracle", None, False, False)])
def test_a_method_name_says_its_kind_stage_and_comparisons(name, kind, stage, baseline, fixed_rule):
    method = Method.of(name)
    assert (method.kind, method.stage, method.baseline, method.fixed_rule) == (kind, stage, baseline, fixed_rule)


def test_an_unknown_method_name_is_refused():
    with pytest.raises(ValueError, match="rm4: not a method name"):
        Method.of("rm4")
