"""Each benchmark script runs end to end with --quick and writes the JSON keys the README and the lead rely on.

Speed is not asserted here (it lives in the scripts' output); what is asserted is that the figures exist, are
positive, and that the search engines agree on the top-k.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adaptive_ir.data.synthetic import SyntheticSettings, write_synthetic_beir

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / f"{script}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), "--quick", "--json", str(out),
                           "--plot", str(tmp_path / f"{script}.png"), "--threads", "1", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / f"{script}.png").stat().st_size > 0
    payload = json.loads(out.read_text())
    for key in ("machine", "settings"):
        assert key in payload
    assert payload["machine"]["cpu_count"] >= 1 and payload["machine"]["torch"]
    return payload


def test_rollout(tmp_path):
    d = run("rollout", tmp_path)
    assert d["sequential_episodes_per_s"] > 0
    assert [r["B"] for r in d["batched"]] == [1, 8]
    for r in d["batched"]:
        assert r["episodes_per_s"] > 0
        assert r["steps_per_s"] == pytest.approx(r["steps"] / r["seconds"])
        assert r["speedup"] == pytest.approx(r["episodes_per_s"] / d["sequential_episodes_per_s"])
        assert sum(r["breakdown"].values()) == pytest.approx(1.0)
    assert "policy_forward" in d["breakdown"]["sequential"] and "reward_metric" in d["breakdown"]["sequential"]
    # the fixed-shape engine (what an accelerator runs) makes no host sync; the counts are per lockstep step
    assert d["syncs_per_step"] == 0 and d["ops_per_step"] > 0
    assert d["per_step_counts"]["fixed_shape"]["sync_kinds"] == []
    if "compact" in d["per_step_counts"]:  # the CPU's own mode reads counts on purpose
        assert d["per_step_counts"]["compact"]["syncs_per_step"] > 0
        assert all(r["fixed_shape"]["episodes_per_s"] > 0 for r in d["batched"])


def test_search(tmp_path):
    d = run("search", tmp_path)
    q = d["queries_per_s"]
    assert q["ours"] > 0 and q["rank_bm25"] > 0 and q["bm25s"] > 0
    assert q["bm25s"] == q["bm25s_threads"]["single"]
    # the three engines rank the same documents
    assert d["topk_identical"] is True


def test_ppo_update(tmp_path):
    d = run("ppo_update", tmp_path)
    assert d["samples_per_s"]["fp32"] > 0 and d["samples_per_s"]["amp"] > 0
    assert d["settings"]["transitions"] > 0
    assert d["per_minibatch_counts"]["syncs_per_minibatch"] == 0 and d["per_minibatch_counts"]["ops_per_minibatch"] > 0
    # DataParallel's overhead needs two GPUs: no figure is made up without them
    assert d["data_parallel"] == {"ms_per_forward": None, "reason": "needs >= 2 CUDA devices"}


def test_memory(tmp_path):
    d = run("memory", tmp_path, "--config", "scifact")
    # 50,000 transitions × 50 candidates × 500 fp32 ≈ 5 GB for the copying buffer; ours stores ids
    assert d["embedding_copy_bytes"] == 50_000 * 50 * 500 * 4
    assert 0 < d["buffer_bytes"] < d["embedding_copy_bytes"] / 100


def _no_test_split(folder: Path) -> Path:
    """A small synthetic BEIR folder with train and dev splits only (as WikiCAR, whose test split is held back)."""
    write_synthetic_beir(folder, SyntheticSettings(1500, vocab=5000, train_queries=60, test_queries=20, seed=5))
    (folder / "qrels" / "test.tsv").rename(folder / "qrels" / "dev.tsv")
    return folder


def test_scale(tmp_path):
    real = _no_test_split(tmp_path / "tiny-real")
    d = run("scale", tmp_path, "--real", str(real), "--max-train-queries", "20")
    syn, row = d["rows"]
    assert d["settings"]["sizes"] == [3000] and d["settings"]["real"] == [str(real)]
    assert (syn["corpus"], syn["kind"], syn["num_docs"]) == ("synthetic-3000", "synthetic", 3000)
    assert (row["corpus"], row["kind"], row["num_docs"]) == ("tiny-real", "real", 1500)
    for side in ("ours", "bm25s"):
        r = syn[side]
        assert r["build_s"] > 0 and r["queries_per_s"] > 0
        assert r["peak_rss_build_search"] >= r["peak_rss_build"] >= r["rss_loaded"] > 0
        assert (r["search_split"], r["search_queries"]) == ("test", 32)
        # no test split: both engines search the dev queries
        assert (row[side]["search_split"], row[side]["search_queries"]) == ("dev", 20)
    assert syn["ours"]["postings"] > 0 and syn["ours"]["index_bytes"] > 0
    for r in (syn, row):
        assert r["topk_identical"] is True  # our index ranks what bm25s (its own tokenizer and index) ranks
        assert set(r["goals"]) == {"peak_rss_le_bm25s", "build_time_le_bm25s"}
        o = r["rollout"]
        assert o["train_queries"] == 20  # --max-train-queries: 51 and 60 train queries, 20 mined and rolled out
        assert o["episodes_per_s"] > 0 and o["mining_s"] > 0
        assert o["seconds_per_step"] == pytest.approx(1 / o["steps_per_s"])
        ppo = o["ppo"]
        assert o["ppo_samples_per_s"] == ppo["samples_per_s"] > 0
        assert ppo["episodes"] == 128 and ppo["samples"] == ppo["transitions"] * ppo["ppo_epochs"] > 0
        assert o["postings_per_step"] > 0 and o["query_postings_per_episode"] > 0 and 0 < o["expanding_fraction"] <= 1
        assert o["lanes_bytes"] == 16 * r["num_docs"] * 4  # a float32 score lane per episode of a B=16 round
        assert o["peak_rss"] >= o["peak_rss_rollout"] > 0


def test_scale_peak_rss_is_the_workers_own():
    """A worker's peak RSS is its own: ``ru_maxrss`` of a child started by a big parent reports the parent's."""
    import numpy as np

    ballast = np.ones(2 ** 27)  # 1 GiB, touched: this process is now bigger than a worker ever gets here
    code = "import sys; sys.path.insert(0, 'benchmarks'); import scale; print(scale._peak_rss())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 0 < int(proc.stdout) < ballast.nbytes


def test_precompute(tmp_path):
    d = run("precompute", tmp_path)
    phases = d["phases_s"]
    assert {"load collection", "index", "embedding model", "mine train", "embed train", "mine dev",
            "embed dev"} <= set(phases) and all(v >= 0 for v in phases.values())
    assert d["peak_rss_gib"] > 0 and d["total_s"] >= max(phases.values())
    assert d["splits"]["train"]["queries"] == 32 and d["splits"]["dev"]["queries"] > 0
    assert 0 < d["splits"]["train"]["feedback_search_thread_s"]


@pytest.mark.parametrize("start, j0", [("query", "bm25"), ("rm3", "rm3-feedback")])
def test_fixed_rules_script_adds_the_first_candidates_to_where_the_agent_starts(tmp_path, start, j0):
    # j = 0 must be the rewrites' start: BM25 itself, or RM3 over the agent's feedback documents (quickstart: BM25's
    # top 20, evaluate's rm3-feedback), on the same split; j = 2 adds terms, so it ranks differently
    out, base = tmp_path / "rules.json", tmp_path / "base.json"
    common = ["--config", "quickstart", "--output-dir", str(tmp_path / "runs"), "--set", f"retrieval.start={start}"]
    for cmd in ([sys.executable, str(ROOT / "scripts" / "fixed_rules.py"), *common, "--data-dir", "unused",
                 "--set", "retrieval.expansion_weights=[0.5,2.0]", "--top-j", "0,2", "--json", str(out)],
                [sys.executable, "-m", "adaptive_ir.cli", "evaluate", *common, "--split", "dev", "--baselines",
                 "--json", str(base)]):
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    every, baselines = json.loads(out.read_text()), json.loads(base.read_text())
    # the config's own first stage first (quickstart's is the default one), then Anserini's, its start the same
    # baseline over that index
    assert [r["first_stage"] for r in every] == ["default"] * 4 + ["anserini"] * 4
    field = [r for r in every if r["first_stage"] == "anserini"]
    field_j0 = baselines["bm25-anserini" if j0 == "bm25" else f"{j0}-anserini"]
    assert field[0]["R@40"] == pytest.approx(field_j0["R@40"], abs=1e-4)
    rows, bm25 = every[:4], baselines[j0]
    # the weights default to the config's action space
    assert [(r["w"], r["top_j"]) for r in rows] == [(0.5, 0), (0.5, 2), (2.0, 0), (2.0, 2)]
    assert rows[0]["R@40"] == pytest.approx(bm25["R@40"], abs=1e-4) and rows[2]["R@40"] == rows[0]["R@40"]
    assert rows[0]["nDCG@10"] == pytest.approx(bm25["nDCG@10"], abs=1e-4)
    assert rows[1]["R@40"] != rows[0]["R@40"] and rows[3]["R@40"] != rows[1]["R@40"]


def test_fixed_rules_script_tests_the_agent_runs_against_each_rule(tmp_path):
    # BM25's own TREC run as "the agent": against j = 0 (BM25) every query ties and the difference is 0
    common = ["--config", "quickstart", "--output-dir", str(tmp_path / "runs")]
    proc = subprocess.run([sys.executable, "-m", "adaptive_ir.cli", "evaluate", *common, "--split", "dev",
                           "--baselines", "--run-dir", str(tmp_path / "trec")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bm25 = tmp_path / "trec" / "dev.bm25.trec"
    out = tmp_path / "rules.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "fixed_rules.py"), *common, "--data-dir", "unused",
                           "--weights", "0.5", "--top-j", "0,3", "--first-stages", "own", "--against", str(bm25),
                           str(bm25), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    same, other = json.loads(out.read_text())
    for m in ("R@40", "nDCG@10"):
        assert same["agent_vs_rule"][m]["delta"] == pytest.approx(0, abs=1e-9)
        assert same["agent_vs_rule"][m]["losses"] == same["agent_vs_rule"][m]["wins"] == 0
        assert other["agent_vs_rule"][m]["mean_b"] == pytest.approx(other[m], abs=1e-4)
    assert other["agent_vs_rule"]["R@40"]["delta"] != 0


def test_paired_runs_script_tests_the_first_run_against_each_other(tmp_path):
    # BM25 against itself ties on every query; against RM3 its mean is the one `evaluate` reports
    from test_reliability import write_beir_from_default

    folder = write_beir_from_default(tmp_path / "beir")
    common = ["--config", "quickstart", "--data-dir", str(folder), "--output-dir", str(tmp_path / "runs")]
    proc = subprocess.run([sys.executable, "-m", "adaptive_ir.cli", "evaluate", *common, "--split", "test",
                           "--baselines", "--run-dir", str(tmp_path / "trec"), "--json", str(tmp_path / "m.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bm25, rm3 = tmp_path / "trec" / "test.bm25.trec", tmp_path / "trec" / "test.rm3.trec"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "paired_runs.py"), "--data-dir", str(folder),
                           str(bm25), str(bm25), str(rm3), f"{bm25},{rm3}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    same, other, mean = (json.loads(line) for line in proc.stdout.splitlines())
    means = json.loads((tmp_path / "m.json").read_text())
    for m in ("R@40", "nDCG@10"):
        assert same[m]["delta"] == 0 and same[m]["wins"] == same[m]["losses"] == 0
        assert other[m]["mean_a"] == pytest.approx(means["bm25"][m], abs=1e-9)
        assert other[m]["mean_b"] == pytest.approx(means["rm3"][m], abs=1e-9)
        # a comma-separated list is one run, its per-query mean (the seeds of one agent)
        assert mean[m]["mean_b"] == pytest.approx((means["bm25"][m] + means["rm3"][m]) / 2, abs=1e-9)
        assert mean[m]["delta"] == pytest.approx(other[m]["delta"] / 2, abs=1e-9)
    assert other["R@40"]["delta"] != 0 and other["R@40"]["n"] == 80


def test_policy_steps_script_accounts_for_every_episode_at_every_step(tmp_path):
    # a shipped policy on the embedded collection: every step's episodes either add a term (at one of the weights)
    # and go on, or stop; the first step has every query
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "policy_steps.py"), "--policy", "general",
                           "--split", "dev", "--set", "candidate_mining.feedback=bm25"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [s["step"] for s in steps] == list(range(len(steps))) and len(steps) >= 2
    assert steps[0]["going"] == steps[0]["queries"] > 0
    for now, after in zip(steps, steps[1:]):
        assert after["going"] == sum(now["added_per_weight"].values()) <= now["going"]
        assert now["going"] == 0 or 0 <= now["p_stop_quartiles"][0] <= now["p_stop_quartiles"][2] <= 1
    assert sum(sum(s["added_per_weight"].values()) for s in steps) > 0


def test_index_build(tmp_path):
    from adaptive_ir.data import make_default
    from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms

    out = tmp_path / "index_build.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "index_build.py"), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(out.read_text())
    assert [r["stage"] for r in d["stages"]] == ["default", "anserini"]
    coll = make_default()
    for row, analyzer in zip(d["stages"], (Analyzer(), Analyzer(kind="lucene", stemmer="porter"))):
        # each stage's figures are of its own analyzer's index of the whole corpus
        corpus = CorpusTerms.build(coll.iter_doc_texts(), analyzer)
        assert (row["num_docs"], row["vocabulary"], row["postings"]) == (coll.num_docs, len(corpus.vocab),
                                                                         corpus.num_postings)
        assert row["docs_per_s"] > 0 and row["peak_rss_gib"] > 0
    assert d["lucene_vs_default_docs_per_s"] == pytest.approx(d["stages"][1]["docs_per_s"] / d["stages"][0]["docs_per_s"],
                                                              abs=1e-3)


def test_run_cost_records_each_logged_phase_and_fits_sizes(tmp_path):
    """run_cost.py run: a command's logged phases (as ``common.progress.Phases`` writes them) with their seconds,
    the collection's size from the index's line, the wall time and peaks; fit: a line per phase group over sizes."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import run_cost

    assert [run_cost.seconds_of(t) for t in ("8.2 s", "8 min 11 s", "1 h 05 min")] == [8.2, 491.0, 3900.0]
    assert [run_cost.group_of(n) for n in ("index", "mine candidates (train, 20000 queries)", "training",
                                           "load collection", "dev selection (whole dev split)")] == [
        "index", "mining", "training", "load", "dev"]
    script = ("import time; print('INFO index: 5000 documents, 10 terms, 99 postings saved', flush=True); "
              "print('INFO phase load collection: 1.5 s (peak RSS 0.10 GiB)', flush=True); time.sleep(1.2); "
              "print('INFO phase index: 1 min 02 s (peak RSS 0.20 GiB)', flush=True)")
    runs = []
    for docs in (5000, 20000):
        out = tmp_path / f"run{docs}.json"
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_cost.py"), "run", "--json", str(out),
                               "--", sys.executable, "-c", script.replace("5000", str(docs))],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        d = json.loads(out.read_text())
        assert d["exit_status"] == 0 and d["num_docs"] == docs and d["wall_s"] >= 1.2
        assert [(p["name"], p["seconds"]) for p in d["phases"]] == [("load collection", 1.5), ("index", 62.0)]
        assert d["max_rss_gib"] > 0 and out.with_suffix(".log").read_text().count("phase") == 2
        runs.append(str(out))
    # a run's first part, known from its stamped log alone, joins the second part at the same size
    part = tmp_path / "part.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_cost.py"), "log",
                    str(Path(runs[1]).with_suffix(".log")), "--json", str(part)], cwd=ROOT, check=True, timeout=120)
    first = json.loads(part.read_text())
    assert first["num_docs"] == 20000 and first["max_rss_gib"] == 0.2 and len(first["phases"]) == 2
    curve = tmp_path / "curve.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_cost.py"), "fit", *runs, str(part),
                           "--json", str(curve), "--plot", str(tmp_path / "curve.png")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(curve.read_text())
    # the part given last repeats every phase of the first: those are its cache reads, left out with their time
    joined = result["runs"][1]
    assert [r["seconds"]["index"] for r in result["runs"]] == [62.0, 62.0]
    assert joined["wall_s"] == pytest.approx(json.loads(Path(runs[1]).read_text())["wall_s"] + first["wall_s"] - 63.5)
    assert result["fits"]["index"]["per_million_docs"] == pytest.approx(0.0)
    assert (tmp_path / "curve.png").stat().st_size > 0
    # a whole train --test: a phase run inside another counts once (the dev split mined within dev selection,
    # within the trainer's account of training); all after training is the test phase, whatever its phases
    stamped = tmp_path / "whole.log"
    stamped.write_text("0 INFO index: 7000 documents, 10 terms, 99 postings saved\n"
                       "1 INFO phase load collection: 1.0 s (peak RSS 0.10 GiB)\n"
                       "3 INFO phase index: 2.0 s (peak RSS 0.20 GiB)\n"
                       "10 INFO phase mine candidates (dev, 5 queries): 1.0 s (peak RSS 0.20 GiB)\n"
                       "11 INFO phase dev selection (whole dev split): 3.0 s (peak RSS 0.20 GiB)\n"
                       "11 INFO adaptive_ir.training.trainer: training 8.0 s (3 updates): collect 5.0 s\n"
                       "15 INFO phase index: 2.0 s (peak RSS 0.30 GiB)\n"
                       "20 done\n")
    whole = tmp_path / "whole.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_cost.py"), "log", str(stamped), "--json",
                    str(whole)], cwd=ROOT, check=True, timeout=120)
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_cost.py"), "fit", str(whole), "--json", str(curve),
                    "--plot", str(tmp_path / "curve.png")], cwd=ROOT, check=True, capture_output=True, timeout=120)
    (only,) = json.loads(curve.read_text())["runs"]
    assert only["seconds"] == {"load": 1.0, "index": 2.0, "embedding model": 0.0, "mining": 0.0, "embedding": 0.0,
                               "training": 8.0, "dev": 0.0, "test": 9.0, "other": 0.0}


def test_effect_preview_benchmark_checks_both_readings_agree(tmp_path):
    out = tmp_path / "effect_preview.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "effect_preview.py"), "--quick", "--threads", "1",
                           "--set", "candidate_mining.effect_preview=true", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["equal"] and d["settings"]["queries"] > 0 and d["mine_bounded_s"] > 0 and d["mine_every_posting_s"] > 0


def test_select_after_training_script_fits_on_train_and_judges_dev(tmp_path):
    # the agent's and RM3's columns are the means `evaluate` reports for the same runs; a selector's choice per query
    # lies between the two runs, so its mean is at most the per-query better's
    from test_reliability import write_beir_from_default

    folders = [write_beir_from_default(tmp_path / name) for name in ("one", "two")]
    runs, means = tmp_path / "runs", {}
    for folder in folders:
        for split in ("train", "dev"):
            out = runs / f"{folder.name}-{split}"
            proc = subprocess.run([sys.executable, "-m", "adaptive_ir.cli", "evaluate", "--policy", "general",
                                   "--data-dir", str(folder), "--split", split, "--baselines", "--device", "cpu",
                                   "--no-progress", "--run-dir", str(out), "--json", f"{out}.json"],
                                  cwd=tmp_path, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr[-3000:]
            means[f"{folder.name} {split}"] = json.loads(Path(f"{out}.json").read_text())
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "select_after_training.py"), "--policy", "general",
                           "--runs", str(runs), *map(str, folders)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.strip("|").split("|") for line in proc.stdout.splitlines()[2:]]
    assert len(rows) == 4
    for name, agent, rm3, best, pooled, left_out in rows:
        expect = means[name.strip().rsplit(" (", 1)[0]]
        assert float(agent) == pytest.approx(expect["agent"]["R@40"], abs=1e-4)
        assert float(rm3) == pytest.approx(expect["rm3-anserini"]["R@40"], abs=1e-4)
        assert float(best) >= max(float(agent), float(rm3)) - 1e-9
        for chosen in (pooled, left_out):
            assert float(chosen.split()[0]) <= float(best) + 1e-9
