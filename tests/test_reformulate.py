"""Inference and the upper bound: RRF, query variants, the Reformulator API, the CLI, and the qrels oracle."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import default_collection, reference_metric, reference_topk, relevant_sets, tiny_config

from adaptive_ir.cli import main
from adaptive_ir.evaluation.agent import agent_run, rrf
from adaptive_ir.evaluation.methods import evaluate_split
from adaptive_ir.evaluation.oracle import oracle_rewrite
from adaptive_ir.inference.reformulate import Reformulator
from adaptive_ir.retrieval import kernels
from adaptive_ir.rl.factory import make_env
from adaptive_ir.rl.rollout import greedy_actions, greedy_rewrite
from adaptive_ir.rl.workspace import Workspace
from adaptive_ir.training.trainer import Trainer


def test_rrf_matches_hand_computation():
    a = {"q": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}
    b = {"q": {"d3": 9.0, "d1": 5.0}}
    fused = rrf([a, b], k=60, depth=10)["q"]
    assert fused["d1"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["d3"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["d2"] == pytest.approx(1 / 62)
    assert list(fused) == ["d1", "d3", "d2"]  # best first
    assert list(rrf([a, b], k=60, depth=2)["q"]) == ["d1", "d3"]


def test_greedy_decides_stop_versus_continue_first():
    # P(STOP) = 0.3 is the largest single probability, but continuing (0.7) is likelier: take the best term
    probs = torch.tensor([[0.25, 0.25, 0.2, 0.3],   # continue → term 0 (first of the tied best)
                          [0.1, 0.3, 0.0, 0.6],     # P(STOP) > 1/2 → STOP (index M = 3)
                          [0.0, 0.0, 0.0, 1.0]])    # nothing legal but STOP
    assert greedy_actions(probs.log()).tolist() == [0, 3, 3]
    # with a choice of start (the switch at index 3, STOP at 4): the switch when above 1/2, then STOP against terms
    probs = torch.tensor([[0.1, 0.1, 0.1, 0.2, 0.5],     # STOP 0.5 > terms 0.3 → STOP
                          [0.3, 0.05, 0.05, 0.25, 0.35],  # terms 0.4 > STOP 0.35 although STOP is the top action
                          [0.05, 0.05, 0.05, 0.55, 0.3],  # the switch above 1/2
                          [0.1, 0.1, 0.05, 0.45, 0.3]])   # the switch the top action, below 1/2: STOP 0.3 > terms
    assert greedy_actions(probs.log(), switch=3).tolist() == [4, 0, 3, 4]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    cfg = tiny_config(out, **{"training.num_epochs": 2})
    # the collection the config names (Reformulator.load reads it again, and checks it is the one trained on)
    trainer = Trainer(cfg, progress=False)
    trainer.train()
    return cfg, trainer


def test_query_variants_are_fused_and_reproducible(trained):
    cfg, trainer = trained
    qids, texts, qrels = trainer.ws.collection.split("dev")
    qs, tables = trainer.ws.query_set("dev", qids, texts, None)
    greedy, added = agent_run(cfg, trainer.ws, trainer.agent, trainer.amp, qs, tables)
    cfg.rl_agent.num_query_variants = 3
    try:
        fused1, _ = agent_run(cfg, trainer.ws, trainer.agent, trainer.amp, qs, tables, seed=5)
        fused2, _ = agent_run(cfg, trainer.ws, trainer.agent, trainer.amp, qs, tables, seed=5)
    finally:
        cfg.rl_agent.num_query_variants = 1
    assert fused1 == fused2  # sampled variants come from a seeded generator
    assert fused1 != greedy  # fusion changes the scores (RRF, not BM25)
    first = next(iter(fused1.values()))
    assert all(0 < s <= 3 / (cfg.rrf_fusion.k_constant + 1) + 1e-9 for s in first.values())
    assert len(added) == len(qids) and all(isinstance(t, list) for t in added)


def test_unscored_rewrites_search_nothing_and_match_scored_ones(trained, monkeypatch):
    cfg, trainer = trained
    qids, texts, qrels = trainer.ws.collection.split("dev")
    qs, tables = trainer.ws.query_set("dev", qids, texts, qrels)
    trainer.agent.use_tables(tables)
    qidx = torch.arange(len(qs))
    searches = []
    for name in ("lanes_fill", "lanes_add"):  # every scoring the env does goes through these kernels
        kernel = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _k=kernel: searches.append(1) or _k(*a))
    scored, unscored = make_env(cfg, trainer.ws, qs), make_env(cfg, trainer.ws, qs, scored=False)
    terms, weights = greedy_rewrite(trainer.agent, trainer.amp, scored, qidx)
    n_scored = len(searches)
    terms2, weights2 = greedy_rewrite(trainer.agent, trainer.amp, unscored, qidx)
    assert torch.equal(terms, terms2) and torch.equal(weights, weights2)
    assert n_scored > 0 and len(searches) == n_scored and unscored.lanes is None


def test_reformulator_api_and_cli(trained, capsys):
    cfg, trainer = trained
    ckpt = cfg.training.checkpoint_path_dir / "best.pt"
    ref = Reformulator.load(ckpt, device="cpu")
    _, texts, _ = ref.ws.collection.split("test")
    out = ref.reformulate(texts[:5], top_docs=3)
    assert [r["text"] for r in out] == texts[:5] and [r["id"] for r in out] == ["1", "2", "3", "4", "5"]
    for r in out:
        assert r["rewritten"].split()[: len(r["text"].split())] == r["text"].split()
        assert len(r["added_terms"]) <= cfg.rl_agent.max_steps_per_episode
        assert all(d["score"] > 0 for d in r["top_docs"]) and len(r["top_docs"]) <= 3
    assert ref.origin.startswith(f"checkpoint {ckpt}: update ") and "no run record" in ref.origin  # Trainer API
    assert main(["reformulate", "--checkpoint", str(ckpt), "--json", texts[0]]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # stdout holds the JSON alone; where the checkpoint came from is on stderr
    assert printed[0]["text"] == texts[0] and printed[0]["added_terms"] == out[0]["added_terms"]
    assert ref.origin in captured.err


def test_a_rewrite_started_from_rm3_shows_and_searches_the_rm3_terms(trained):
    # retrieval.start = rm3: the same agent rewrites from each query's RM3 expansion; the result names the terms RM3
    # added, and its Lucene query carries them at their weights (the query's words at 1 or more)
    import dataclasses

    from adaptive_ir.retrieval.rm3 import rm3_expansion

    cfg, trainer = trained
    cfg = dataclasses.replace(cfg, retrieval=dataclasses.replace(cfg.retrieval, start="rm3"))
    ws = Workspace(cfg, torch.device("cpu"), progress=False)
    _, texts, _ = ws.collection.split("test")
    out = Reformulator(cfg, ws, trainer.agent, trainer.amp).reformulate(texts[:4], top_docs=3)
    terms, weights = rm3_expansion(ws.retriever, ws.retriever.encode(texts[:4]), cfg.candidate_mining.top_k0,
                                   unit_query=True)
    vocab = ws.retriever.vocab.surface
    for r, t, w in zip(out, terms, weights):
        own = ws.retriever.encode([r["text"]])[0]
        start, added = [x["term"] for x in r["start_terms"]], [x["term"] for x in r["added_terms"]]
        assert start == [vocab[i] for i in t if i not in own] and start
        assert r["rewritten"].split() == r["text"].split() + start + added
        lucene = dict(x.split("^") if "^" in x else (x, "1") for x in r["lucene_query"].split())
        for i, wi in zip(t, w):
            if vocab[i] not in added:
                assert float(lucene[vocab[i]]) == pytest.approx(wi, rel=1e-3)


def test_expansion_scale_searches_every_added_term_scaled_under_the_same_spec(trained):
    # an application setting: the policy chooses among its levels as trained; what is searched (and written in the
    # rewrite's Lucene form) is each level times the scale
    import dataclasses

    from adaptive_ir.artifacts.spec import policy_spec

    cfg, trainer = trained
    scaled = dataclasses.replace(cfg, retrieval=dataclasses.replace(cfg.retrieval, expansion_scale=1.5))
    assert scaled.retrieval.levels == tuple(1.5 * w for w in cfg.retrieval.levels) != cfg.retrieval.levels
    ws = Workspace(scaled, torch.device("cpu"), progress=False)
    assert policy_spec(scaled, ws) == policy_spec(cfg, ws)
    _, texts, _ = ws.collection.split("test")
    out = Reformulator(scaled, ws, trainer.agent, trainer.amp).reformulate(texts[:8], top_docs=0)
    added = [(x["term"], x["weight"]) for r in out for x in r["added_terms"]]
    assert added and all(any(w == pytest.approx(1.5 * level) for level in cfg.retrieval.levels) for _, w in added)
    for r in out:
        for x in r["added_terms"]:
            if x["term"] not in r["text"].split():
                assert f"{x['term']}^1.5" in r["lucene_query"].split()


def test_oracle_never_lowers_the_reward_and_bounds_the_agent(trained):
    cfg, trainer = trained
    ws = Workspace(cfg, torch.device("cpu"), progress=False)  # the collection the agent was trained on
    qids, texts, qrels = ws.collection.split("test")
    qs, _ = ws.query_set("test", qids, texts, qrels)
    weights = {"recall": 1.0}
    terms, wts = oracle_rewrite(qs, ws.retriever.index, 5, 40, weights)
    index, relevant = ws.retriever.index, relevant_sets(qs)
    final = reference_metric(reference_topk(index, terms, wts, 40), relevant, weights)
    start = reference_metric(reference_topk(index, qs.terms, (qs.terms != index.pad_id).float(), 40), relevant,
                             weights)
    assert torch.all(final >= start - 1e-6)
    assert final.mean() > start.mean() + 0.1  # the default collection has real vocabulary mismatch
    results = evaluate_split(cfg, ws, trainer.agent, trainer.amp, "test", baselines=True, oracle=True)
    assert results["oracle"]["R@40"] >= results["agent"]["R@40"] - 0.02
    assert results["oracle"]["R@40"] > results["bm25"]["R@40"]


@pytest.mark.parametrize("weighting", ["uniform", "score"])
def test_expansion_weighting_gives_each_added_term_its_weight(tmp_path, weighting):
    cfg = tiny_config(tmp_path, **{"retrieval.expansion_weighting": weighting, "retrieval.expansion_weight": 0.3})
    ws = Workspace(cfg, torch.device("cpu"), collection=default_collection(), progress=False)
    qids, texts, qrels = ws.collection.split("test")
    qs, _ = ws.query_set("test", qids, texts, qrels)
    mean_score = qs.cand_feats[:, 0, ws.miner.feature_names.index("mean_score")]
    expected = 0.3 * (mean_score if weighting == "score" else torch.ones_like(mean_score))
    assert weighting == "uniform" or mean_score[qs.cand_valid[:, 0]].min() < 1  # "score" really differs
    env = make_env(cfg, ws, qs)
    qidx = torch.arange(len(qs))
    env.reset(qidx)
    first = torch.where(qs.cand_valid[:, 0], 0, env.stop)  # the first candidate, or STOP where there is none
    reward, _ = env.step(first)
    l0 = qs.terms.shape[1]
    added = qs.cand_valid[:, 0]
    assert added.any() and torch.allclose(env.weights[added, l0], expected[added])
    # the incremental reward is the whole rewritten query's metric minus the original query's
    index, mix, relevant = ws.retriever.index, {"recall": 1.0}, relevant_sets(qs)
    start = reference_metric(reference_topk(index, qs.terms, (qs.terms != index.pad_id).float(), 40), relevant, mix)
    final = reference_metric(reference_topk(index, env.terms, env.weights, 40), relevant, mix)
    assert torch.allclose(reward, final - start, atol=1e-6)
