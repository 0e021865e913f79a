"""The training loop on the embedded default collection, kept tiny: reproducibility, exact resume (after a real
SIGINT), learning, incompatible checkpoints, and the ``--test`` evaluation."""

from __future__ import annotations

import json
import signal

import pytest
import torch
from helpers import collection_as_beir, default_collection, tiny_config

from adaptive_ir.artifacts.checkpoint import load_checkpoint
from adaptive_ir.cli import main
from adaptive_ir.common.errors import CheckpointError, ConfigError
from adaptive_ir.evaluation.metrics import METRIC_NAMES, bm25_run, evaluate_run
from adaptive_ir.training.monitor import Monitor, read_metrics
from adaptive_ir.training.trainer import Trainer

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


@pytest.mark.parametrize("cadence", [
    {"training.eval_every": 1},
    # evaluations counted in episodes on a dev sample, patience in episodes, the final pick on the whole dev split
    {"training.eval_every_episodes": 64, "training.dev_subsample": 16, "training.early_stopping_patience_episodes": 1000},
], ids=["updates", "episodes"])
def test_resume_is_bit_exact(tmp_path, cadence):
    overrides = {"training.num_epochs": 4, **cadence}
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
    best = [load_checkpoint(c.training.checkpoint_path_dir / "best.pt") for c in (full_cfg, cfg)]
    assert best[0]["counters"] == best[1]["counters"]
    assert_same_state(best[0]["model"], best[1]["model"])


def test_the_whole_dev_split_scores_an_earlier_sample_best_checkpoint(tmp_path):
    # when the sample's best is not the last model, its best.pt is loaded (spec-checked) and scored on all of dev
    cfg = tiny_config(tmp_path / "a", **{"training.num_epochs": 2, "training.episodes_per_update": 32,
                                         "training.eval_every_episodes": 32, "training.dev_subsample": 20})
    trainer = Trainer(cfg, progress=False, collection=default_collection())
    trainer.train()
    qs, tables = trainer.ws.split("dev")
    core, best_path = trainer.agent.core, cfg.training.checkpoint_path_dir / "best.pt"
    last_model = {k: v.clone() for k, v in core.state_dict().items()}
    last_score = trainer._dev_score(qs, tables)[1]
    # as if the sample had picked an earlier update, one that surely scores otherwise: a policy that always stops
    core.load_state_dict({**last_model, "stop_bias": torch.tensor(1e4)})
    trainer.save(best_path)
    stop_score = trainer._dev_score(qs, tables)[1]
    assert stop_score != last_score  # the two candidates are told apart
    core.load_state_dict(last_model)
    trainer.selection.best_update = trainer.update - 1
    monitor = Monitor(tmp_path / "logs", None)
    trainer._pick_on_full_dev(monitor)
    monitor.close()
    assert_same_state(core.state_dict(), last_model)  # left at the last model
    assert trainer.full_dev["sample_best"] == stop_score and trainer.full_dev["last"] == last_score
    better_is_last = last_score > stop_score
    assert trainer.full_dev["chosen"] == ("last" if better_is_last else "sample_best")
    picked = load_checkpoint(best_path)["model"]["stop_bias"]
    assert (picked == last_model["stop_bias"]).item() is better_is_last


def test_dev_evaluated_every_so_many_episodes_on_a_fixed_sample_and_picked_on_the_whole_split(tmp_path):
    cfg = tiny_config(tmp_path / "a", **{"training.num_epochs": 4, "training.episodes_per_update": 32,
                                         "training.eval_every_episodes": 96, "training.dev_subsample": 20})
    trainer = Trainer(cfg, progress=False, collection=default_collection())
    assert trainer.total_updates == 8  # 64 train queries x 4 epochs / 32 episodes per update
    dev_qids = trainer.ws.collection.split("dev")[0]
    assert len(trainer.dev_qs) == 20 < len(dev_qids)
    assert trainer.dev_qs.qids == [q for q in dev_qids if q in set(trainer.dev_qs.qids)]  # in split order
    result = trainer.train()
    logged = rows(cfg)
    # the episode count crosses 96 after updates 3 and 6; the last update is always evaluated
    assert [r["update"] for r in logged if "dev/R@40" in r] == [3, 6, 8]
    full = result["dev_full"]
    assert full["queries"] == len(dev_qids) and full["last_update"] == 8
    assert [r for r in logged if "dev_full/last" in r] == [
        {"update": 8, "global_step": trainer.steps, "episodes": trainer.episodes,
         "dev_full/sample_best": full["sample_best"], "dev_full/last": full["last"]}]
    # the figures are the whole dev split's: the last model (the trainer's, last.pt) scores `last` there
    qs, tables = trainer.ws.split("dev")
    assert trainer._dev_score(qs, tables)[1] == full["last"]
    best, last = (load_checkpoint(cfg.training.checkpoint_path_dir / f"{n}.pt") for n in ("best", "last"))
    assert_same_state(last["model"], state(trainer))
    same = all(torch.equal(best["model"][k], v) for k, v in last["model"].items())
    assert full["chosen"] == ("last" if full["last"] > full["sample_best"] + 1e-9 else "sample_best")
    assert same == (full["chosen"] == "last" or full["sample_best_update"] == 8)
    assert set(result["phases_s"]) >= {"load collection", "index", "embedding model", "mine train", "embed train",
                                       "mine dev", "embed dev", "training", "dev evaluation", "dev selection"}
    assert result["peak_rss_gib"] > 0
    # another training seed scores the same dev sample (drawn with data.split_seed)
    other = Trainer(tiny_config(tmp_path / "b", **{"system.seed": 7, "data.split_seed": cfg.split_seed,
                                                   "training.dev_subsample": 20}),
                    progress=False, collection=default_collection())
    assert other.dev_qs.qids == trainer.dev_qs.qids


def test_patience_counted_in_episodes(tmp_path, monkeypatch):
    scores = iter([0.5, 0.6, 0.55, 0.58, 0.59, 0.61, 0.2, 0.2])  # dev scores of the successive evaluations
    monkeypatch.setattr(Trainer, "_dev_score", lambda self, qs, tables: ({}, next(scores)))
    cfg = tiny_config(tmp_path, **{"training.num_epochs": 4, "training.episodes_per_update": 32,
                                   "training.eval_every_episodes": 32, "training.early_stopping_patience": 1,
                                   "training.early_stopping_patience_episodes": 96})
    result = Trainer(cfg, progress=False, collection=default_collection()).train()
    # best at update 2 (64 episodes); updates 3-4 do not improve, update 5 is 96 episodes on: stop there
    assert result["updates"] == 5 and result["best_update"] == 2 and result["best_dev"] == 0.6


def test_ppo_learns_on_the_default_collection(tmp_path):
    cfg = tiny_config(tmp_path, **{"training.num_epochs": 6, "data.max_train_queries": 128,
                                   "training.eval_every": 1000, "training.learning_rate": 3e-3})
    trainer = Trainer(cfg, progress=False, collection=default_collection())
    # the train queries it does not train on leave its workspace's collection, not the caller's
    assert list(trainer.ws.collection.queries["train"]) == trainer.train_qs.qids and len(trainer.train_qs) == 128
    assert len(default_collection().queries["train"]) == 250
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
    # run.json says how long each phase took and the peak memory (the README quotes them)
    result = json.loads((tmp_path / "run.json").read_text())["result"]
    assert set(result["phases_s"]) >= {"load collection", "index", "embedding model", "mine train", "embed train",
                                       "mine dev", "embed dev", "training", "dev evaluation"}
    assert all(v >= 0 for v in result["phases_s"].values()) and 0 < result["peak_rss_gib"] < 64
    assert result["updates"] == 1 and result["dev_full"] is None  # no dev sample, no final pick


def test_first_step_gains_are_the_rewards_of_those_first_steps(tmp_path):
    from adaptive_ir.rl.warmstart import first_step_gains

    trainer = Trainer(tiny_config(tmp_path), progress=False, collection=default_collection())
    env, qidx = trainer.env, torch.arange(10)
    gains = first_step_gains(env, qidx, 4)  # batches smaller than the query list
    for j in (0, 3, 7):
        env.reset(qidx)
        reward, _ = env.step(torch.full((10,), j))
        torch.testing.assert_close(gains[:, j], reward * trainer.train_qs.cand_valid[qidx, j], atol=0, rtol=0)
    assert (gains > 0).any() and (gains < 0).any()  # terms that help and terms that hurt
    assert (gains[~trainer.train_qs.cand_valid[qidx]] == 0).all()


def test_warm_start_raises_the_first_step_reward_and_is_done_once(tmp_path):
    overrides = {"training.warm_start_queries": 48, "training.warm_start_epochs": 40, "training.num_epochs": 2,
                 "training.eval_every": 1, "training.learning_rate": "3e-3"}
    cfg = tiny_config(tmp_path / "a", **overrides)
    trainer = Trainer(cfg, progress=False, collection=default_collection())
    trainer.train()
    (row,) = [r for r in rows(cfg) if "warm_start/expected_after" in r]
    assert row["warm_start/queries"] == 48
    # the term the policy would add earns more, in expectation and its most likely one
    assert row["warm_start/term_expected_after"] > row["warm_start/term_expected_before"] + 0.01
    assert row["warm_start/term_best_after"] > row["warm_start/term_best_before"]
    # the same seed, the same warm start and run; a resume does not warm-start again
    again = tiny_config(tmp_path / "b", **overrides)
    Trainer(again, progress=False, collection=default_collection()).train()
    assert rows(again) == rows(cfg)
    more = tiny_config(tmp_path / "a", **{**overrides, "training.num_epochs": 3})
    resumed = Trainer(more, resume=cfg.training.checkpoint_path_dir / "last.pt", progress=False,
                      collection=default_collection())
    assert resumed.warm_started
    resumed.train()
    assert len([r for r in rows(more) if "warm_start/expected_after" in r]) == 1


def test_training_on_several_collections_draws_each_update_from_one_and_resumes_exactly(tmp_path, monkeypatch):
    # data_dir and a second collection (the default generator with another seed), both as BEIR folders; the
    # sentence model, since LSA would give each corpus its own space
    main_dir = collection_as_beir(default_collection(), tmp_path / "main", max_queries=48)
    other_dir = collection_as_beir(default_collection(seed=7), tmp_path / "other", max_queries=48)
    overrides = {"data.dataset_type": "beir", "data.data_dir": main_dir, "data.also_train_on": f"[{other_dir}]",
                 "data.also_train_share": 0.5, "embeddings.type": "sentence-transformers",
                 "embeddings.embedding_dim": "null", "embeddings.cache_dir": tmp_path / "cache",
                 "training.num_epochs": 4}

    def run(name: str, interrupt_at: int | None = None, resume=None) -> tuple[Trainer, list[str], dict]:
        cfg = tiny_config(tmp_path / name, **overrides)
        t = Trainer(cfg, progress=False, resume=resume)
        collect, used = t._collect, []

        def collect_and_record():
            out = collect()
            used.append(t.source.name)
            if len(used) == interrupt_at:
                signal.raise_signal(signal.SIGINT)
            return out

        t._collect = collect_and_record
        return t, used, t.train()

    full, used, out = run("full")
    assert [len(src.qs) for src in full.sources] == [48, 48]
    assert out["updates"] == full.total_updates == 6  # 4 epochs × 96 train queries / 64 episodes per update
    # every update on one collection, both drawn; each collection's queries walked in its own epoch order
    assert set(used) == {"main", "other"}
    for src in full.sources:
        assert src.sampler.epoch * len(src.qs) + src.sampler.pos == 64 * used.count(src.name)
    cut, used_cut, out = run("cut", interrupt_at=3)
    assert out["interrupted"] and used_cut == used[:3]
    resumed, used_rest, out = run("cut", resume=tmp_path / "cut" / "checkpoints" / "last.pt")
    assert used_cut + used_rest == used and out["updates"] == 6
    assert_same_state(state(full), state(resumed))

    # under torchrun each rank rolls out its own queries, but an update is on one collection on every rank (its
    # gradients are all-reduced): a rank 1 draws what rank 0 drew, from the start and after a resume from rank 0's
    # checkpoint. No process group here: nothing to wrap, nobody to wait for.
    from adaptive_ir.training import trainer as trainer_module

    monkeypatch.setattr(trainer_module, "dist_info", lambda: (1, 2))
    monkeypatch.setattr(trainer_module, "parallel_wrapper", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.distributed, "barrier", lambda *args, **kwargs: None)
    rank1 = Trainer(tiny_config(tmp_path / "rank1", **overrides), progress=False)
    assert rank1.rank == 1 and [len(src.shard) for src in rank1.sources] == [24, 24]  # its half of each
    assert [rank1.sources.draw().name for _ in used] == used
    rank1.load(tmp_path / "cut" / "checkpoints" / "last.pt")
    assert [rank1.sources.draw().name for _ in used_rest] == used_rest


def test_several_collections_need_folders_and_one_embedding_space(tmp_path):
    with pytest.raises(ConfigError, match="data.also_train_on.*sentence-transformers"):
        tiny_config(tmp_path, **{"data.dataset_type": "beir", "data.also_train_on": "[x]"})
    with pytest.raises(ConfigError, match="data.also_train_on.*folder format"):
        tiny_config(tmp_path, **{"data.also_train_on": "[x]", "embeddings.type": "sentence-transformers"})
    with pytest.raises(ConfigError, match="data.also_train_share.*lists no collection"):
        tiny_config(tmp_path, **{"data.also_train_share": 0.3})


def test_a_policy_that_chooses_its_start_trains_and_its_rewrites_carry_rm3s_weights(tmp_path):
    # retrieval.start = choose: both starts are tried while training (the warm start leaves the switch to PPO), the
    # checkpoint's spec names the query features, and a rewrite that switched shows RM3's added terms and searches
    # them at RM3's weights (Lucene's form carries the whole rewrite)
    from adaptive_ir.inference.reformulate import Reformulator
    from adaptive_ir.mining.query_features import QUERY_FEATURES
    from adaptive_ir.rl.workspace import rm3_choice_cached

    cfg = tiny_config(tmp_path, **{"retrieval.start": "choose", "training.num_epochs": 2,
                                   "training.warm_start_queries": 32, "training.save_freq": 1,
                                   "training.eval_every": 1})
    trainer = Trainer(cfg, progress=False, collection=default_collection())
    trainer.train()
    switched = [r["charts/switched"] for r in rows(cfg) if "charts/switched" in r]
    assert switched and all(0.3 < s < 0.7 for s in switched)  # the untrained selector: both starts, equally
    fits = [r for r in rows(cfg) if "selector/queries" in r]
    assert fits and all(r["selector/queries"] == 64 for r in fits)  # each dev evaluation fits it
    saved = load_checkpoint(cfg.training.checkpoint_path_dir / "last.pt")
    assert saved["spec"]["query_features"] == list(QUERY_FEATURES)
    # the checkpoint dev picked keeps the selector it was evaluated with; training's own stays untrained
    best = load_checkpoint(cfg.training.checkpoint_path_dir / "best.pt")["model"]
    assert best["selector.linear.weight"].abs().sum() > 0 and saved["model"]["selector.linear.weight"].abs().sum() == 0
    ws = trainer.ws
    qids, texts, _ = ws.collection.split("test")
    # the fixed rules cover both starts: the miner's first j candidates added to the query, or to its RM3
    from adaptive_ir.evaluation.methods import Method, own_fixed_rule_runs

    rules = own_fixed_rule_runs(cfg, ws, "test", qids, texts)
    from_rm3 = [m for m in rules if m.startswith("rule-rm3-")]
    assert from_rm3 and len(from_rm3) == len([m for m in rules if Method.of(m).kind == "rule"]) // 2
    assert all(Method.of(m).kind == "rule" for m in from_rm3)
    assert rules["rule-rm3-w1-j1"] != rules["rule-w1-j1"]
    texts = texts[:6]
    (rm3_terms, rm3_weights), _ = rm3_choice_cached(ws.retriever, texts, ws.retriever.encode(texts), None)
    vocab = ws.retriever.vocab.surface
    for bias, switch in ((30.0, True), (-30.0, False)):
        with torch.no_grad():  # the selector's logit: switch, or keep the query
            trainer.agent.core.selector.linear.bias.fill_(bias)
        out = Reformulator(cfg, ws, trainer.agent, trainer.amp).reformulate(texts)
        for r, t, w in zip(out, rm3_terms, rm3_weights):
            own = ws.retriever.encode([r["text"]])[0]
            start = [x["term"] for x in r["start_terms"]]
            assert start == ([vocab[i] for i in t if i not in own] if switch else [])
            if switch:
                added = {x["term"] for x in r["added_terms"]}
                lucene = dict(x.split("^") if "^" in x else (x, "1") for x in r["lucene_query"].split())
                for i, wi in zip(t, w):
                    if vocab[i] not in added:
                        assert float(lucene[vocab[i]]) == pytest.approx(wi, rel=1e-3)


def test_a_run_whose_lanes_cannot_fit_stops_before_indexing(tmp_path, monkeypatch):
    import adaptive_ir.rl.env as env_module

    monkeypatch.setattr(env_module, "available_memory", lambda device: 64 * 1024)  # 64 KiB free
    cfg = tiny_config(tmp_path / "run", **{"embeddings.cache_dir": str(tmp_path / "cache")})
    with pytest.raises(ConfigError, match=r"^training.collect_batch_size 32: .* set training.collect_batch_size to "
                                          r"\d+ or less$"):
        Trainer(cfg, progress=False, collection=default_collection())
    assert not list(cfg.cache_path_dir.glob("index-*"))  # nothing was indexed
