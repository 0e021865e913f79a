"""The self-describing checkpoint: the policy spec and the data identity it records, the one check (``check_fits``)
that resume, evaluate, ``init_from`` and reformulate go through, exports (safetensors + spec + card) and the NFCorpus
policies shipped inside the package."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import tiny_config
from test_cli_errors import assert_clean_error, run_cli
from test_reliability import write_beir_from_default

from adaptive_ir.artifacts.checkpoint import SavedPolicy, init_policy_path, load_checkpoint
from adaptive_ir.artifacts.export import RELEASE_DIR, SHIPPED_DIR, read_export, shipped_policies
from adaptive_ir.artifacts.spec import CONFIG_KEYS, check_fits, saved_spec
from adaptive_ir.cli import main
from adaptive_ir.common.errors import CheckpointError
from adaptive_ir.config import config_to_dict, load_config
from adaptive_ir.mining.candidates import QUERY_FEATURES
from adaptive_ir.training.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]

TINY_SET = ["--set", "data.max_train_queries=64", "--set", "rl_agent.hidden_dim=32", "--set", "rl_agent.num_heads=2",
            "--device", "cpu", "--no-progress"]
"""The settings of ``tiny_config`` as flags, so the CLI rebuilds the policy the trainer saved."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One update of the tiny quickstart run (stem variants off, three miner methods): its last.pt."""
    out = tmp_path_factory.mktemp("spec")
    cfg = tiny_config(out, **{"training.num_epochs": 1})
    trainer = Trainer(cfg, progress=False)  # the collection the commands load (helpers' default one differs)
    trainer.train()
    return trainer, cfg.training.checkpoint_path_dir / "last.pt"


def test_checkpoint_records_spec_and_data_identity(trained):
    trainer, ckpt = trained
    s = load_checkpoint(ckpt)
    spec, data = s["spec"], s["data"]
    assert spec["features"] == ["tfidf", "bm25_contrib", "rm3", "mean_score", "log_df", "fb_doc_fraction",
                                "cooc_mean", "cooc_min", "cooc_cover", "fb_rank_weighted", "fb_score_weighted",
                                "fb_df_ratio"]
    assert spec["agent_features"] == [*spec["features"], *("z:" + f for f in spec["features"]), "chosen",
                                      "step_fraction", "cos_q0", "cos_current", "rank"]
    assert spec["levels"] == [1.0] and spec["rl_agent.ignore_features"] == []
    assert spec["candidate_mining.stem_variants"] is False and spec["embedding_dim"] == trainer.ws.embedder.dim
    assert spec["embedder"] == trainer.ws.embedder.identity and spec["rl_agent.hidden_dim"] == 32
    assert set(CONFIG_KEYS) <= spec.keys()
    meta = trainer.ws.retriever.index.meta
    assert data == {"corpus_sha256": meta["corpus_sha256"], "analyzer": meta["analyzer"]}


@pytest.mark.parametrize("flag, named", [("candidate_mining.stem_variants=true", "candidate_mining.stem_variants"),
                                         ("candidate_mining.methods=[tfidf,rm3]", "candidate_mining.methods"),
                                         ("candidate_mining.effect_preview=true",
                                          "only this setup has [preview_enter_w1, preview_enter10_w1, preview_match_w1]")])
def test_evaluate_with_another_feature_set_exits_2_in_one_line(trained, capsys, flag, named):
    _, ckpt = trained
    rc, err = run_cli(capsys, "evaluate", "--config", "quickstart", "--checkpoint", str(ckpt), "--split", "dev",
                      *TINY_SET, "--set", flag)
    assert_clean_error(rc, err, str(ckpt), "does not fit this setup", named, "features:")


def test_resume_and_reformulate_go_through_the_same_check(trained, tmp_path):
    _, ckpt = trained
    flipped = tiny_config(tmp_path / "r", **{"candidate_mining.stem_variants": "true"})
    with pytest.raises(CheckpointError, match="does not fit this setup: candidate_mining.stem_variants: checkpoint "
                                              "False vs this setup True; features: only this setup has "
                                              r"\[stem_variant\]; use the config"):
        Trainer(flipped, resume=ckpt, progress=False)
    # a checkpoint edited to claim other data is refused by reformulate (its config is its own)
    state = load_checkpoint(ckpt)
    state["data"]["corpus_sha256"] = "0" * 64
    from adaptive_ir.artifacts.checkpoint import save_checkpoint

    save_checkpoint(tmp_path / "other.pt", state)
    with pytest.raises(CheckpointError, match="does not fit this setup: corpus_sha256: checkpoint 000000000000… vs "
                                              "this setup [0-9a-f]{12}…; pass --data-dir"):
        main(["reformulate", "--checkpoint", str(tmp_path / "other.pt"), "--device", "cpu", "--debug", "q"])


def test_a_policy_applied_with_scaled_weights_still_fits(trained, capsys):
    # retrieval.expansion_scale changes what is searched, not what the policy chooses among: no spec difference;
    # other weights to choose among are one
    _, ckpt = trained
    rc, _ = run_cli(capsys, "evaluate", "--config", "quickstart", "--checkpoint", str(ckpt), "--split", "dev",
                    *TINY_SET, "--set", "retrieval.expansion_scale=1.5")
    assert rc == 0
    rc, err = run_cli(capsys, "evaluate", "--config", "quickstart", "--checkpoint", str(ckpt), "--split", "dev",
                      *TINY_SET, "--set", "retrieval.expansion_weight=1.5")
    assert_clean_error(rc, err, str(ckpt), "does not fit this setup", "levels: checkpoint [1.0] vs this setup [1.5]")


def test_check_fits_names_every_key_and_skips_what_an_old_checkpoint_lacks():
    spec = {"rl_agent.hidden_dim": 64, "features": ["a", "b"], "embedding_dim": 8}
    with pytest.raises(CheckpointError) as e:
        check_fits("x.pt", {"spec": {"rl_agent.hidden_dim": 32, "features": ["a", "c"], "embedding_dim": 8},
                            "data": {"corpus_sha256": "1" * 64, "analyzer": "a"}},
                   spec, {"corpus_sha256": "2" * 64, "analyzer": "a"}, "do this")
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith("; do this")
    assert "rl_agent.hidden_dim: checkpoint 32 vs this setup 64" in msg and "corpus_sha256" in msg
    assert "features: only the checkpoint has [c], only this setup has [b]" in msg and "analyzer" not in msg
    # without data (init_from) the collection may differ; a checkpoint without a spec is checked by its config
    check_fits("x.pt", {"spec": {"rl_agent.hidden_dim": 64}, "data": {"corpus_sha256": "1"}}, spec, None)
    quick = load_config("quickstart")
    old = {"config": config_to_dict(quick)}  # a checkpoint written before specs were recorded
    now = {"rl_agent.hidden_dim": quick.rl_agent.hidden_dim, "candidate_mining.stem_variants": False}
    check_fits("old.pt", old, now | {"features": ["anything"]})
    with pytest.raises(CheckpointError, match="candidate_mining.stem_variants: checkpoint False vs this setup True"):
        check_fits("old.pt", old, now | {"candidate_mining.stem_variants": True})


def test_moved_data_is_the_same_data_and_changed_data_is_not(tmp_path, capsys):
    home = write_beir_from_default(tmp_path / "data" / "default")
    out = tmp_path / "run"
    flags = ["--set", "data.dataset_type=beir", "--set", "training.episodes_per_update=16", "--set",
             "training.collect_batch_size=16", "--set", "data.max_train_queries=32", "--no-progress"]
    assert main(["train", "--config", "quickstart", "--data-dir", str(home), "--output-dir", str(out), "--epochs",
                 "1", *flags]) == 0
    ckpt = out / "checkpoints" / "best.pt"
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(home, moved)
    shutil.rmtree(home)
    capsys.readouterr()
    assert main(["evaluate", "--config", "quickstart", "--data-dir", str(moved), "--checkpoint", str(ckpt), "--split",
                 "dev", *flags]) == 0
    with (moved / "corpus.jsonl").open("a") as f:
        f.write(json.dumps({"_id": "NEW", "title": "", "text": "one more document"}) + "\n")
    capsys.readouterr()
    rc, err = run_cli(capsys, "evaluate", "--config", "quickstart", "--data-dir", str(moved), "--checkpoint",
                      str(ckpt), "--split", "dev", *flags)
    assert_clean_error(rc, err, "corpus_sha256: checkpoint")


def test_export_round_trip_and_init_from_an_export(trained, tmp_path, capsys):
    trainer, ckpt = trained
    folder = tmp_path / "policy"
    assert main(["export", "--checkpoint", str(ckpt), "--output-dir", str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "policy.json", "policy.safetensors"]
    assert b"pickle" not in (folder / "policy.safetensors").read_bytes()[:200]
    exported, digest = read_export(folder)
    state = load_checkpoint(ckpt)
    assert exported["spec"] == state["spec"] and exported["data"] == state["data"]
    assert all(torch.equal(exported["model"][k], v) for k, v in state["model"].items())
    card = (folder / "README.md").read_text()
    assert digest in card and "training.init_from" in card and "MIT" in card
    assert "- **First stage**: `default`: the engine's default BM25" in card  # the tiny config's index
    assert exported["origin"]["command"] is None and "**Command**" not in card  # a Trainer made in Python: no run
    # a run starts from the export: its weights, and the log names it with its sha256
    cfg = tiny_config(tmp_path / "from-export", **{"training.init_from": str(folder), "training.num_epochs": 0})
    run = Trainer(cfg, progress=False)
    assert run.init_sha256 == digest
    assert all(torch.equal(run.agent.core.state_dict()[k], v) for k, v in state["model"].items())
    # a damaged weights file is refused by its checksum
    data = bytearray((folder / "policy.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (folder / "policy.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        read_export(folder)


def test_a_checkpoint_without_a_spec_exports_the_spec_it_was_trained_with_without_mining(trained, tmp_path,
                                                                                       monkeypatch):
    from adaptive_ir.artifacts.checkpoint import save_checkpoint
    from adaptive_ir.rl import workspace

    _, ckpt = trained
    state = load_checkpoint(ckpt)
    old = tmp_path / "old.pt"  # as written before specs and data identities were recorded
    save_checkpoint(old, {k: v for k, v in state.items() if k not in ("spec", "data")})
    # no workspace is built: its candidates, embeddings and query tables are not what a spec depends on
    monkeypatch.setattr(workspace.Workspace, "__init__", lambda *a, **k: pytest.fail("a workspace was built"))
    assert main(["export", "--checkpoint", str(old), "--output-dir", str(tmp_path / "policy")]) == 0
    exported, _ = read_export(tmp_path / "policy")
    assert exported["spec"] == state["spec"] and exported["data"] == state["data"]


def test_an_export_carries_the_settings_it_is_applied_with(trained, tmp_path, capsys):
    from adaptive_ir.artifacts.checkpoint import pretrained_config

    _, ckpt = trained
    folder = tmp_path / "policy"
    assert main(["export", "--checkpoint", str(ckpt), "--output-dir", str(folder), "--apply",
                 "candidate_mining.feedback=semantic", "--apply", "candidate_mining.rerank_depth=200"]) == 0
    exported, _ = read_export(folder)
    assert exported["apply"] == {"candidate_mining.feedback": "semantic", "candidate_mining.rerank_depth": "200"}
    assert exported["config"]["candidate_mining"]["feedback"] == "bm25"  # the training config is kept as it was
    assert "**Applied with**: `candidate_mining.feedback=semantic` (trained with `bm25`)" in (folder / "README.md").read_text()
    cfg = pretrained_config(folder, "some/beir-folder")[0]
    assert (cfg.candidate_mining.feedback, cfg.candidate_mining.rerank_depth) == ("semantic", 200)
    # the user's --set comes last; a checkpoint carries no such settings
    assert pretrained_config(folder, "x", {"candidate_mining.feedback": "bm25"})[0].candidate_mining.feedback == "bm25"
    assert pretrained_config(ckpt, "x")[0].candidate_mining.feedback == "bm25"
    # a spec key (the weights were trained for its value) and a key that is no setting are refused by name
    for item, message in (("rl_agent.hidden_dim=8", "rl_agent.hidden_dim: part of the policy's spec"),
                          ("candidate_mining.feedbak=semantic", "did you mean 'feedback'")):
        rc, err = run_cli(capsys, "export", "--checkpoint", str(ckpt), "--output-dir", str(tmp_path / "bad"),
                          "--apply", item)
        assert_clean_error(rc, err, message)
    assert not (tmp_path / "bad").exists()


def test_an_export_is_written_again_with_other_settings_and_the_same_weights(tmp_path):
    source = SHIPPED_DIR / "general-joint"
    before, _ = read_export(source)
    folder = tmp_path / "joint"
    # by the shipped policy's name, with its own settings: the same three files, byte for byte
    same = [arg for key, value in before["apply"].items() for arg in ("--apply", f"{key}={value}")]
    assert len(same) >= 2 and main(["export", "--checkpoint", "general-joint", "--output-dir", str(folder), *same]) == 0
    for name in ("policy.safetensors", "policy.json", "README.md"):
        assert (folder / name).read_bytes() == (source / name).read_bytes(), name
    # from its own folder, in place, with other settings: they replace its own; weights and origin stay
    assert main(["export", "--checkpoint", str(folder), "--output-dir", str(folder), "--apply",
                 "candidate_mining.top_k0=3"]) == 0
    after, _ = read_export(folder)
    assert after["apply"] == {"candidate_mining.top_k0": "3"}
    assert after.keys() == before.keys()
    for key in ("sha256", "spec", "data", "also_data", "config", "origin"):
        assert after[key] == before[key], key
    card = (folder / "README.md").read_text()
    assert "**Applied with**: `candidate_mining.top_k0=3` (trained with `5`) wherever" in card
    assert f"at update {before['origin']['update']}" in card


# ------------------------------------------------------------------------------------------ shipped policies


def test_a_card_names_the_command_of_the_run_while_its_folder_still_holds_that_run(tmp_path):
    from adaptive_ir.artifacts.export import run_command

    argv = ["/usr/bin/adaptive-ir", "train", "--config", "wikicar", "--seed", "1"]
    (tmp_path / "run.json").write_text(json.dumps({"id": "r1", "command": argv}))
    assert run_command({"id": "r1", "dir": str(tmp_path)}) == "adaptive-ir train --config wikicar --seed 1"
    assert run_command({"id": "r2", "dir": str(tmp_path)}) is None  # the folder now holds another run
    (tmp_path / "run.json").write_text(json.dumps({"id": "r1", "command": ["/x/adaptive_ir/cli.py", "train"]}))
    assert run_command({"id": "r1", "dir": str(tmp_path)}) == "adaptive-ir train"  # python -m adaptive_ir.cli
    assert run_command({"id": "r1", "dir": str(tmp_path / "gone")}) is None and run_command(None) is None


def test_the_general_policies_share_one_spec_and_say_what_they_were_trained_on():
    general, digest = _read(SHIPPED_DIR / "general")  # checksums verified
    tuned, _ = _read(REPO / RELEASE_DIR / "general-nfcorpus")
    joint, _ = _read(SHIPPED_DIR / "general-joint")
    assert tuned["spec"] == general["spec"] == joint["spec"]
    assert tuned["config"]["training"]["init_from"] == "general" and tuned["origin"]["init_from_sha256"] == digest
    assert tuned["data"] != general["data"]  # WikiCAR, then NFCorpus
    # WikiCAR and NFCorpus at once, over Anserini's first stage (the same corpus, another analyzer): both identities
    # recorded, and the card names both and the first stage
    assert joint["data"]["corpus_sha256"] == general["data"]["corpus_sha256"]
    assert joint["data"]["analyzer"] != general["data"]["analyzer"] and first_stage_of(joint) == "anserini"
    assert [a["name"] for a in joint["also_data"]] == ["nfcorpus"]
    assert joint["also_data"][0]["corpus_sha256"] == tuned["data"]["corpus_sha256"]
    card = (SHIPPED_DIR / "general-joint" / "README.md").read_text()
    assert "on `wikicar` and `nfcorpus`" in card and "- **First stage**: `anserini`" in card


def _read(path: Path) -> tuple[dict, str]:
    saved = SavedPolicy.read(path)  # checksums verified
    return saved.state, saved.sha256


def first_stage_of(policy: dict) -> str | None:
    from adaptive_ir.config import stage_named

    return stage_named(policy["config"]["retrieval"])


@pytest.mark.parametrize("index", ["", "-anserini"])
def test_the_small_collections_start_from_shipped_policies_that_fit_them(index):
    assert shipped_policies() == ["general", "general-joint"]  # what a user picks; the replicas are release assets
    for name in ("scifact", "cranfield", "cisi"):
        cfg = load_config(name + index)
        assert cfg.training.init_from == f"nfcorpus{index}-seed-{{seed}}"
        for seed in (1, 2, 3, 42):
            cfg.system.seed = seed
            path = init_policy_path(cfg)
            assert path == REPO / RELEASE_DIR / f"nfcorpus{index}-seed-{seed}"
            policy, digest = _read(path)  # checksum verified
            spec = saved_spec(policy)
            assert all(spec[k] == v for k, v in _config_keys(cfg).items())
            assert spec["features"] == [*cfg.candidate_mining.methods, "mean_score", "log_df", "fb_doc_fraction",
                                        *(["stem_variant"] if cfg.candidate_mining.stem_variants else []),
                                        *QUERY_FEATURES]
            assert spec["levels"] == list(cfg.retrieval.levels)
            assert spec["embedder"]["provider"] == "sentence-transformers" and spec["embedding_dim"] == 384
            assert policy["config"]["system"]["seed"] == seed and len(digest) == 64
    for folder in [*SHIPPED_DIR.iterdir(), *(REPO / RELEASE_DIR).iterdir()]:  # a few hundred kB each
        if folder.is_dir():
            assert sum(p.stat().st_size for p in folder.iterdir()) < 500_000


def _config_keys(cfg) -> dict:
    from adaptive_ir.artifacts.spec import _config_part

    return _config_part(config_to_dict(cfg))


def test_a_local_path_wins_over_a_shipped_name_and_a_missing_one_fails_before_any_precompute(tmp_path,
                                                                                            monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = load_config("scifact", {"system.seed": "1"})
    assert init_policy_path(cfg) == REPO / RELEASE_DIR / "nfcorpus-seed-1"  # from the checkout's root
    monkeypatch.chdir(tmp_path)
    Path("nfcorpus-seed-1").mkdir()
    assert init_policy_path(cfg) == Path("nfcorpus-seed-1")
    cfg = load_config("scifact", {"system.seed": "7", "data.data_dir": str(tmp_path / "nowhere")})
    with pytest.raises(CheckpointError, match="nfcorpus-seed-7 not found, and no shipped policy has that name "
                                              r"\(shipped: general, general-joint\), nor release/policies"):
        Trainer(cfg, progress=False)  # the data folder does not exist either: the policy is checked first


def test_a_policy_saved_before_the_policy_key_is_the_actor_critic():
    # the shipped policies were saved before rl_agent.policy was part of the spec: they are ActorCritic's weights,
    # and a setup naming another network is told so
    state, _ = _read(REPO / RELEASE_DIR / "nfcorpus-seed-1")
    assert "rl_agent.policy" not in state["spec"] and saved_spec(state)["rl_agent.policy"] == "actor-critic"
    spec = {**saved_spec(state), "rl_agent.policy": "mine:Net"}
    with pytest.raises(CheckpointError, match="rl_agent.policy: checkpoint 'actor-critic' vs this setup 'mine:Net'"):
        check_fits("p", state, spec)
    check_fits("p", state, saved_spec(state))
