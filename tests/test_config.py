"""Config loading: the seed file, precedence rules, validation messages, overrides and round trips."""

from __future__ import annotations

import json
import logging
import textwrap
from pathlib import Path

import pytest
import yaml

from adaptive_ir.artifacts.spec import _config_part
from adaptive_ir.common.errors import ConfigError
from adaptive_ir.config import (
    CONFIG_DIR,
    FIRST_STAGES,
    Config,
    config_from_dict,
    config_to_dict,
    first_stage,
    load_config,
    on_first_stage,
    resolve_device,
)

SEED = CONFIG_DIR / "msa_optimized_gpu.yaml"


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def error_of(path: str, overrides: dict | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


# --- the seed config -----------------------------------------------------------------------------------------


# the seed's keys that are not ours: each is mapped onto one of ours, or dropped (SEED_DROPPED)
SEED_NAMES = {
    "candidate_mining.top_k_docs": "candidate_mining.top_k0",
    "rl_agent.num_attention_heads": "rl_agent.num_heads",
    "rl_agent.num_encoder_layers": "rl_agent.num_layers",
    "rl_agent.embedding_dim": "embeddings.embedding_dim",
    "rl_agent.embedding_type": "embeddings.type",
    **{f"rl_agent.{key}": f"training.{key}" for key in ("learning_rate", "gamma", "gae_lambda", "clip_epsilon",
                                                         "entropy_coef", "value_loss_coef", "max_grad_norm")},
    "rl_agent.num_ppo_epochs": "training.ppo_epochs",
    "rl_agent.mini_batch_size": "training.batch_size",
}
SEED_DROPPED = {"candidate_mining.enabled", "candidate_mining.cache_size", "rl_agent.enabled", "rl_agent.dropout",
                "rl_agent.use_pretrained_embeddings", "rrf_fusion.enabled", "rrf_fusion.method", "training.pin_memory",
                "training.prefetch_factor", "training.embedding_cache_size", "training.search_cache_size",
                "evaluation.metrics", *(f"bert_reranker.{key}" for key in ("enabled", "model_name", "batch_size",
                                                                           "max_length", "top_k_rerank", "use_fp16"))}
"""Accepted (checked, and reported where they ask for what this engine does not do), then left out of the Config."""


def assert_lands(cfg: Config, dotted: str, value) -> None:
    """The seed's ``dotted: value`` is in ``cfg`` under our name, or dropped from it."""
    if dotted in SEED_DROPPED:
        section, key = dotted.split(".")
        assert key not in config_to_dict(cfg).get(section, {}), dotted
        return
    section, key = SEED_NAMES.get(dotted, dotted).split(".")
    got = getattr(getattr(cfg, section), key)
    if dotted == "candidate_mining.methods":
        assert got == ["bm25_contrib" if m == "bm25" else m for m in value]
    else:
        assert got == value, dotted


def test_seed_config_every_key_lands_in_the_dataclass():
    cfg = load_config(str(SEED))
    raw = yaml.safe_load(SEED.read_text())
    for section, body in raw.items():
        for key, value in body.items():
            assert_lands(cfg, f"{section}.{key}", value)


def test_the_schema_holds_none_of_the_seeds_keys():
    ours = {f"{section}.{key}" for section, keys in config_to_dict(Config()).items() for key in keys}
    assert not ours & (set(SEED_NAMES) | SEED_DROPPED)


def test_seed_config_spot_values():
    cfg = load_config(str(SEED))
    assert cfg.system.device == "cuda" and cfg.system.num_workers == 8
    assert cfg.data.dataset_type == "msa" and cfg.data.data_dir == "../Query Reformulator"
    assert cfg.embeddings.type == "legacy" and cfg.embeddings.embedding_dim == 500 and cfg.embeddings.freeze is False
    assert cfg.candidate_mining.methods == ["tfidf", "bm25_contrib"]
    assert cfg.rl_agent.hidden_dim == 256 and cfg.rl_agent.num_layers == 2
    assert "dropout" not in config_to_dict(cfg)["rl_agent"]  # reported as not applied, then dropped
    assert cfg.rl_agent.num_query_variants == 4
    assert cfg.retrieval.bm25_k1 == 0.9 and cfg.retrieval.bm25_b == 0.4
    assert cfg.training.reward_weights == {"recall": 0.7, "mrr": 0.3}
    assert cfg.training.num_epochs == 50 and cfg.training.learning_rate == pytest.approx(3e-4)
    assert cfg.training.checkpoint_path_dir == Path("./checkpoints_msa_optimized")
    assert cfg.training.log_path_dir == Path("./logs_msa_optimized")
    assert cfg.source == str(SEED)


def test_seed_config_warns_about_unused_keys(caplog):
    with caplog.at_level(logging.WARNING):
        load_config(str(SEED))
    text = caplog.text
    assert "bert_reranker.enabled: the cross-encoder reranker is not available offline" in text
    assert str(SEED) in text
    assert text.count("training.pin_memory/prefetch_factor: not used") == 1


@pytest.mark.parametrize("name", ["msa_config", "msa_quick_test"])
def test_seed_other_configs_every_key_is_used_or_mapped(name, caplog):
    path = CONFIG_DIR / f"{name}.yaml"
    with caplog.at_level(logging.WARNING):
        cfg = load_config(name)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    for section, body in raw.items():
        for key, value in body.items():
            assert_lands(cfg, f"{section}.{key}", value)
    assert "evaluation.metrics: not used" in caplog.text and f"{path}:" in caplog.text
    assert "recall@20 (R@20)" in caplog.text and "recall@10 (R@10)" not in caplog.text


def test_seed_msa_config_spot_values_and_warnings(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = load_config("msa_config")
    assert cfg.candidate_mining.methods == ["tfidf", "bm25_contrib"]
    assert "'bm25' is read as 'bm25_contrib'" in caplog.text
    assert "map (AP), precision@10 (P@10)" in caplog.text and "'R@20 R@50 AP P@10'" in caplog.text
    quick = load_config("msa_quick_test")
    assert (quick.candidate_mining.top_k0, quick.rl_agent.num_heads, quick.rl_agent.num_layers) == (5, 2, 1)
    assert quick.rl_agent.hidden_dim == 128 and quick.rl_agent.max_steps_per_episode == 3


def test_seed_spellings(tmp_path, caplog):
    cfg = load_config(write(tmp_path, "data: {dataset_type: trec-car}\ncandidate_mining: {methods: [bm25, tfidf]}\n"))
    assert cfg.data.dataset_type == "trec_car" and cfg.candidate_mining.methods == ["bm25_contrib", "tfidf"]
    both = load_config(write(tmp_path, "candidate_mining: {methods: [bm25, bm25_contrib]}\n"))
    assert both.candidate_mining.methods == ["bm25_contrib"]


@pytest.mark.parametrize("text,alias,name", [
    ("rl_agent: {num_heads: 4, num_attention_heads: 2}", "rl_agent.num_attention_heads", "rl_agent.num_heads=4"),
    ("rl_agent: {num_layers: 2, num_encoder_layers: 1}", "rl_agent.num_encoder_layers", "rl_agent.num_layers=2"),
    ("candidate_mining: {top_k0: 10, top_k_docs: 5}", "candidate_mining.top_k_docs", "candidate_mining.top_k0=10"),
])
def test_seed_aliases_must_agree(tmp_path, text, alias, name):
    message = error_of(write(tmp_path, text + "\n"))
    assert alias in message and name in message and "same setting" in message
    agreeing = text.replace(": 2}", ": 4}").replace(": 1}", ": 2}").replace(": 5}", ": 10}")
    load_config(write(tmp_path, agreeing + "\n"))


def test_seed_metric_names_are_checked(tmp_path):
    message = error_of(write(tmp_path, "evaluation:\n  metrics: [recall@10, bleu]\n"))
    assert f"{tmp_path / 'c.yaml'}:2" in message and "evaluation.metrics" in message and "'bleu'" in message


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_loads(path):
    cfg = load_config(str(path))
    assert isinstance(cfg, Config) and cfg.source == str(path)


def test_shipped_configs_do_not_warn_except_the_seed(caplog):
    with caplog.at_level(logging.WARNING):
        for name in ("quickstart", "scifact", "cranfield", "cisi", "nfcorpus", "scifact-anserini", "cranfield-anserini",
                     "cisi-anserini", "nfcorpus-anserini", "wikicar", "wikicar-anserini"):
            load_config(name)
    assert caplog.records == []


def test_beir_configs():
    for name in ("scifact", "cranfield", "cisi", "nfcorpus"):
        cfg = load_config(name)
        assert cfg.data.dataset_type == "beir" and cfg.data.data_dir == f"data/{name}"
        assert (cfg.retrieval.bm25_k1, cfg.retrieval.bm25_b, cfg.retrieval.idf) == (1.5, 0.75, "lucene")
        assert cfg.training.output_dir == f"runs/{name}"


@pytest.mark.parametrize("index", ["", "-anserini"])
def test_small_collections_start_from_the_nfcorpus_policy_they_fit(index):
    source = load_config(f"nfcorpus{index}")
    policy = lambda c: _config_part(config_to_dict(c))  # noqa: E731  (the keys a policy's spec records)
    for name in ("scifact", "cranfield", "cisi"):
        cfg = load_config(f"{name}{index}")
        assert cfg.training.init_from == f"nfcorpus{index}-seed-{{seed}}"  # in the repository's release/policies
        assert policy(cfg) == policy(source)


ANSERINI_PARITY = {"retrieval.analyzer": "lucene", "retrieval.stemmer": "porter", "retrieval.bm25_scoring": "lucene",
                   "retrieval.bm25_k1": 0.9, "retrieval.bm25_b": 0.4, "retrieval.idf": "lucene",
                   "retrieval.top_k": 1000, "candidate_mining.stem_variants": False}
"""Anserini's BEIR flat BM25 (configs/scifact-anserini.yaml reproduces its SciFact figures), runs of 1,000
documents, and no stem variants (the index's terms are stems)."""
ANSERINI_CHOSEN_ON_DEV: dict[str, set[str]] = {"cranfield": {"training.num_epochs"}}
"""Keys an -anserini config sets apart from its bm25s twin because dev chose them on the parity index."""
ANSERINI_NOT_REMADE = {"rl_agent.max_steps_per_episode"}
"""Keys the bm25s configs changed after the -anserini policies were made (10 steps, not 5): part of a policy's spec,
so the parity index keeps the earlier value until its policies are re-made with the new one."""
ANSERINI_NOT_RERUN: dict[str, set[str]] = {"nfcorpus": {"retrieval.start"}}
"""Keys a bm25s config changed on its own dev runs after the -anserini policies were made, not run on the parity
index (NFCorpus's RM3 start)."""


def flat_keys(cfg: Config) -> dict:
    return {f"{section}.{key}": value for section, keys in config_to_dict(cfg).items() for key, value in keys.items()}


@pytest.mark.parametrize("name", ["nfcorpus", "scifact", "cranfield", "cisi", "wikicar"])
def test_anserini_configs_are_the_old_ones_on_the_parity_index(name):
    old, new = flat_keys(load_config(name)), flat_keys(load_config(f"{name}-anserini"))
    parity = {**ANSERINI_PARITY, "retrieval.top_k": 100} if name == "wikicar" else ANSERINI_PARITY  # dev's depth
    assert {key: new[key] for key in parity} == parity
    assert first_stage(load_config(name)) == "default" and first_stage(load_config(f"{name}-anserini")) == "anserini"
    assert (old["retrieval.analyzer"], old["retrieval.stemmer"], old["retrieval.bm25_k1"]) == ("bm25s", "none", 1.5)
    assert new["training.output_dir"] == f"runs/{name}-anserini"
    moved = {"training.output_dir"} | ({"training.init_from"} if name != "nfcorpus" else set())
    changed = {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}
    if name == "wikicar":  # made for the first-stage choice: nothing else changed
        assert changed - set(parity) == {"training.output_dir"}
        return
    assert changed - set(ANSERINI_PARITY) == (moved | ANSERINI_CHOSEN_ON_DEV.get(name, set()) | ANSERINI_NOT_REMADE
                                              | ANSERINI_NOT_RERUN.get(name, set()))


# --- PPO precedence and aliases ------------------------------------------------------------------------------


def test_training_wins_over_rl_agent_with_warning(tmp_path, caplog):
    path = write(tmp_path, """
        rl_agent: {learning_rate: 0.001, num_ppo_epochs: 8}
        training: {learning_rate: 0.0003, ppo_epochs: 4}
    """)
    with caplog.at_level(logging.WARNING):
        cfg = load_config(path)
    assert cfg.training.learning_rate == pytest.approx(3e-4) and cfg.training.ppo_epochs == 4
    assert "learning_rate" not in config_to_dict(cfg)["rl_agent"]  # one copy after loading: training's
    assert "rl_agent.learning_rate=0.001" in caplog.text and "training.learning_rate=0.0003" in caplog.text
    assert "rl_agent.num_ppo_epochs=8" in caplog.text and "training.ppo_epochs=4" in caplog.text
    assert path in caplog.text


def test_rl_agent_used_when_training_is_silent(tmp_path, caplog):
    path = write(tmp_path, """
        rl_agent: {gamma: 0.9, mini_batch_size: 16, num_ppo_epochs: 2}
    """)
    with caplog.at_level(logging.WARNING):
        cfg = load_config(path)
    assert (cfg.training.gamma, cfg.training.batch_size, cfg.training.ppo_epochs) == (0.9, 16, 2)
    assert caplog.records == []


def test_equal_duplicates_do_not_warn(tmp_path, caplog):
    path = write(tmp_path, "rl_agent: {clip_epsilon: 0.1}\ntraining: {clip_epsilon: 0.1}\n")
    with caplog.at_level(logging.WARNING):
        assert load_config(path).training.clip_epsilon == 0.1
    assert caplog.records == []


def test_embedding_aliases(tmp_path):
    cfg = load_config(write(tmp_path, "rl_agent: {embedding_dim: 32, embedding_type: sentence-transformers}\n"))
    assert cfg.embeddings.embedding_dim == 32 and cfg.embeddings.type == "sentence-transformers"
    message = error_of(write(tmp_path, "embeddings: {embedding_dim: 64}\nrl_agent: {embedding_dim: 32}\n"))
    assert "rl_agent.embedding_dim" in message and "embeddings.embedding_dim=64" in message
    message = error_of(write(tmp_path, "embeddings: {type: lsa}\nrl_agent: {embedding_type: legacy}\n"))
    assert "rl_agent.embedding_type" in message and "'lsa'" in message


# --- errors that name the file, line and key -----------------------------------------------------------------


def test_unknown_key_names_key_file_line_and_suggestion(tmp_path):
    path = write(tmp_path, "training:\n  num_epochs: 3\n  bach_size: 64\n")
    message = error_of(path)
    assert f"{path}:3" in message and "bach_size" in message and "did you mean 'batch_size'?" in message


def test_misspelled_section(tmp_path):
    path = write(tmp_path, "trainig:\n  num_epochs: 3\n")
    message = error_of(path)
    assert f"{path}:1" in message and "unknown section 'trainig'" in message and "did you mean 'training'?" in message


def test_mistyped_value_names_key_value_and_type(tmp_path):
    path = write(tmp_path, "training:\n  batch_size: lots\n")
    message = error_of(path)
    assert path in message and "training.batch_size" in message and "'lots'" in message and "integer" in message


def test_exponent_without_dot_is_a_float(tmp_path):
    # PyYAML reads 3e-4 as the string "3e-4".
    cfg = load_config(write(tmp_path, "training:\n  learning_rate: 3e-4\nrl_agent:\n  gamma: '0.5'\n"))
    assert cfg.training.learning_rate == pytest.approx(3e-4) and isinstance(cfg.training.learning_rate, float)
    assert cfg.training.gamma == 0.5


def test_int_accepted_for_float_but_not_float_for_int(tmp_path):
    assert load_config(write(tmp_path, "retrieval: {bm25_k1: 2}\n")).retrieval.bm25_k1 == 2.0
    assert "training.num_epochs" in error_of(write(tmp_path, "training: {num_epochs: 2.5}\n"))


@pytest.mark.parametrize("text", [
    "training: {batch_size: true}",
    "system: {seed: false}",
    "retrieval: {bm25_k1: true}",
    "system: {num_workers: true}",
    "candidate_mining: {methods: tfidf}",
    "data: {data_dir: 3}",
])
def test_wrong_types_rejected(tmp_path, text):
    message = error_of(write(tmp_path, text + "\n"))
    assert "expected" in message


@pytest.mark.parametrize("key,value", [
    ("training.batch_size", 0),
    ("training.collect_batch_size", -1),
    ("training.num_epochs", 0),
    ("training.save_freq", 0),
    ("training.eval_every", 0),
    ("training.log_freq", 0),
    ("training.early_stopping_patience", -1),
    ("training.search_cache_size", -1),
    ("rl_agent.hidden_dim", 0),
    ("rl_agent.max_steps_per_episode", 0),
    ("candidate_mining.max_candidates", 0),
    ("retrieval.top_k", -5),
    ("embeddings.embedding_dim", 0),
    ("rl_agent.dropout", 1.0),
    ("data.dev_fraction", 0.0),
    ("data.dev_fraction", 1.0),
    ("training.gamma", 1.5),
    ("training.gae_lambda", -0.1),
    ("training.clip_epsilon", 0.0),
    ("training.learning_rate", 0),
])
def test_out_of_range_rejected(tmp_path, key, value):
    section, name = key.split(".")
    message = error_of(write(tmp_path, f"{section}:\n  {name}: {value}\n"))
    assert key in message and str(value) in message


def test_zero_allowed_where_it_means_off(tmp_path):
    cfg = load_config(write(tmp_path, "training: {early_stopping_patience: 0, search_cache_size: 0}\n"))
    assert cfg.training.early_stopping_patience == 0 and "search_cache_size" not in config_to_dict(cfg)["training"]


@pytest.mark.parametrize("text,key", [
    ("retrieval: {idf: bm42}", "retrieval.idf"),
    ("data: {dataset_type: csv}", "data.dataset_type"),
    ("embeddings: {type: glove}", "embeddings.type"),
    ("candidate_mining: {methods: [tfidf, kl]}", "candidate_mining.methods"),
    ("rrf_fusion: {method: combsum}", "rrf_fusion.method"),
    ("system: {device: gpu}", "system.device"),
    ("training: {reward_weights: {recall: 1, ndcg: 1}}", "training.reward_weights"),
    ("training: {reward_weights: {recall: 0, mrr: 0}}", "training.reward_weights"),
])
def test_enumerations_validated(tmp_path, text, key):
    assert key in error_of(write(tmp_path, text + "\n"))


def test_disabling_required_components_is_explained(tmp_path):
    message = error_of(write(tmp_path, "candidate_mining: {enabled: false}\n"))
    assert "candidate_mining.enabled" in message and "candidate terms" in message
    assert "rl_agent.enabled" in error_of(write(tmp_path, "rl_agent: {enabled: false}\n"))


def test_buffer_too_small_says_what_to_lower(tmp_path):
    path = write(tmp_path, """
        training: {episodes_per_update: 256, buffer_size: 1000}
        rl_agent: {max_steps_per_episode: 5}
    """)
    message = error_of(path)
    assert "training.buffer_size" in message and "1280" in message and "episodes_per_update" in message


def test_an_update_rolls_out_whole_rounds_and_the_buffer_check_counts_them(tmp_path, caplog):
    # 100 episodes in rounds of 64 are 128: the trainer rolls out 128 × 5 = 640 transitions, which 500 cannot hold
    path = write(tmp_path, """
        training: {episodes_per_update: 100, collect_batch_size: 64, buffer_size: 500}
        rl_agent: {max_steps_per_episode: 5}
    """)
    assert "640" in error_of(path)
    assert "each update rolls out 128 episodes" in caplog.text
    ok = write(tmp_path, """
        training: {episodes_per_update: 100, collect_batch_size: 64, buffer_size: 640}
        rl_agent: {max_steps_per_episode: 5}
    """)
    assert load_config(str(ok)).training.episodes_per_update == 100


def test_cross_field_checks(tmp_path):
    assert "num_heads" in error_of(write(tmp_path, "rl_agent: {hidden_dim: 30, num_heads: 4}\n"))
    assert "min_candidates" in error_of(write(tmp_path, "candidate_mining: {min_candidates: 60}\n"))
    fused_off = write(tmp_path, "rl_agent: {num_query_variants: 2}\nrrf_fusion: {enabled: false}\n")
    assert "rrf_fusion.enabled" in error_of(fused_off)


def test_malformed_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "training:\n  batch_size: 64\n bad_indent: 1\n  num_epochs: 2\n")
    message = error_of(path)
    assert "malformed YAML" in message and f"{path}:3:" in message


def test_duplicate_key_rejected(tmp_path):
    path = write(tmp_path, "training:\n  batch_size: 64\n  batch_size: 32\n")
    assert f"{path}:3" in error_of(path) and "duplicate" in error_of(path)


def test_empty_file_gives_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == Config()


# --- finding files -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["msa_optimized_gpu.yaml", "msa_optimized_gpu", "quickstart", "scifact"])
def test_bare_name_resolves_against_configs(name):
    assert Path(load_config(name).source).parent == CONFIG_DIR


def test_missing_config_lists_available():
    message = error_of("no_such_config")
    assert "no_such_config" in message and "quickstart" in message and "msa_optimized_gpu" in message


# --- overrides -----------------------------------------------------------------------------------------------


def test_overrides_are_coerced_from_cli_strings():
    cfg = load_config("quickstart", {
        "training.batch_size": "32",
        "training.use_amp": "false",
        "training.learning_rate": "3e-4",
        "training.target_kl": "0.02",
        "data.max_train_queries": "null",
        "data.data_dir": "2024",
        "candidate_mining.methods": "[tfidf, rm3]",
        "system.seed": 7,
    })
    assert cfg.training.batch_size == 32 and cfg.training.use_amp is False
    assert cfg.training.learning_rate == pytest.approx(3e-4) and cfg.training.target_kl == 0.02
    assert cfg.data.max_train_queries is None and cfg.data.data_dir == "2024"
    assert cfg.candidate_mining.methods == ["tfidf", "rm3"] and cfg.system.seed == 7


def test_override_errors_name_the_flag():
    message = error_of("quickstart", {"training.batch_size": "many"})
    assert "--set training.batch_size=many" in message and "integer" in message
    message = error_of("quickstart", {"training.bach_size": "8"})
    assert "--set training.bach_size=8" in message and "did you mean 'batch_size'?" in message
    assert "--set trainig.batch_size=8" in error_of("quickstart", {"trainig.batch_size": "8"})
    assert "section.key" in error_of("quickstart", {"batch_size": "8"})


def test_override_of_training_key_beats_rl_agent(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = load_config("quickstart", {"rl_agent.gamma": "0.5", "training.gamma": "0.8"})
    assert cfg.training.gamma == 0.8 and "rl_agent.gamma=0.5" in caplog.text


# --- serialisation and checkpoint compatibility --------------------------------------------------------------


@pytest.mark.parametrize("name", ["msa_optimized_gpu", "msa_config", "msa_quick_test", "quickstart"])
def test_dict_round_trip(name, caplog):
    cfg = load_config(name)
    d = json.loads(json.dumps(config_to_dict(cfg)))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = config_from_dict(d)
    assert again == cfg and config_to_dict(again) == d
    assert caplog.records == []  # warnings were shown when the file was loaded


@pytest.mark.parametrize("policy", sorted((CONFIG_DIR.parent / "policies").glob("*/policy.json")),
                         ids=lambda p: p.parent.name)
def test_stored_configs_holding_the_seeds_keys_load_silently(policy, caplog):
    # written when the schema still held the seed's aliases, PPO duplicates and unused keys
    stored = json.loads(policy.read_text(encoding="utf-8"))["config"]
    with caplog.at_level(logging.WARNING):
        cfg = config_from_dict(stored)
    assert caplog.records == []
    assert all(stored[section][key] == value for section, keys in config_to_dict(cfg).items()
               for key, value in keys.items() if key in stored.get(section, {}))


def test_dict_round_trip_is_validated():
    d = config_to_dict(load_config("quickstart"))
    d["training"]["batch_size"] = 0
    with pytest.raises(ConfigError, match="training.batch_size"):
        config_from_dict(d)


def test_derived_paths_default_under_output_dir():
    cfg = load_config("quickstart")
    assert cfg.training.checkpoint_path_dir == Path("runs/quickstart/checkpoints")
    assert cfg.training.log_path_dir == Path("runs/quickstart/logs")
    # the caches are shared by the runs beside each other (runs/quickstart, runs/quickstart_2, runs/scifact ...)
    assert cfg.cache_path_dir == Path("runs/cache")
    assert load_config("quickstart", {"embeddings.cache_dir": "/c"}).cache_path_dir == Path("/c")


# --- devices -------------------------------------------------------------------------------------------------


def test_resolve_device():
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match="system.device"):
        resolve_device("gpu")
    pytest.importorskip("torch")
    assert resolve_device("auto") in {"cuda", "mps", "cpu"}


def test_use_pretrained_embeddings_false_is_rejected_clearly(tmp_path):
    message = error_of(write(tmp_path, "rl_agent: {use_pretrained_embeddings: false}\n"))
    assert "rl_agent.use_pretrained_embeddings" in message and "set it to true" in message


def test_seed_candidate_cache_size_is_reported_as_unused(caplog):
    load_config("msa_optimized_gpu")
    assert "candidate_mining.cache_size: not used" in caplog.text


def test_seed_reward_cache_and_dropout_are_reported_as_not_applied(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = load_config("msa_optimized_gpu")
    assert "msa_optimized_gpu.yaml:98: training.search_cache_size: not used" in caplog.text
    assert "msa_optimized_gpu.yaml:39: rl_agent.dropout: 0.1 is not applied" in caplog.text
    stored = config_to_dict(cfg)
    assert "search_cache_size" not in stored["training"] and "dropout" not in stored["rl_agent"]
    assert cfg.training.compile is False
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_config("quickstart")  # dropout 0.0, no cache key: nothing to report
    assert "dropout" not in caplog.text and "search_cache_size" not in caplog.text


def test_reward_terms_are_the_weights_or_the_reward_metric_alone():
    assert load_config("msa_optimized_gpu").reward_terms == {"recall": 0.7, "mrr": 0.3}
    assert load_config("quickstart", {"retrieval.reward_metric": "mrr"}).reward_terms == {"mrr": 1.0}


def test_expansion_weights_are_the_action_space_and_may_not_repeat():
    cfg = load_config("quickstart", {"retrieval.expansion_weights": "[0.5, 1, 2]"})
    assert cfg.retrieval.levels == (0.5, 1.0, 2.0)
    assert load_config("quickstart", {"retrieval.expansion_weight": "0.3"}).retrieval.levels == (0.3,)
    with pytest.raises(ConfigError, match=r"retrieval.expansion_weights.*repeats a weight"):
        load_config("quickstart", {"retrieval.expansion_weights": "[0.5, 0.5]"})
    with pytest.raises(ConfigError, match="retrieval.expansion_weights"):
        load_config("quickstart", {"retrieval.expansion_weights": "[0.5, -1]"})


def test_unknown_ignored_feature_is_named_with_the_valid_ones(tmp_path):
    from helpers import tiny_config

    from adaptive_ir.training.trainer import Trainer

    cfg = tiny_config(tmp_path, **{"rl_agent.ignore_features": "[cooc_mean, no_such_feature]"})
    with pytest.raises(ConfigError, match=r"rl_agent.ignore_features: \['no_such_feature'\] not among.*z:cooc_mean"):
        Trainer(cfg, progress=False)


# --- first stages ----------------------------------------------------------------------------------------------


def test_first_stage_names_the_settings_and_on_first_stage_moves_a_config_onto_them():
    quick = load_config("quickstart")
    assert first_stage(quick) == "default"
    assert first_stage(load_config("quickstart", {"retrieval.bm25_k1": "1.2"})) is None
    moved = on_first_stage(quick, "anserini")
    assert first_stage(moved) == "anserini" and moved.candidate_mining.stem_variants is False
    before, after = flat_keys(quick), flat_keys(moved)
    assert {k for k in before if before[k] != after[k]} <= {f"retrieval.{k}" for k in FIRST_STAGES["anserini"]} | {
        "candidate_mining.stem_variants"}
    assert first_stage(quick) == "default"  # a copy: the config itself is unchanged
    back = on_first_stage(moved, "default")
    assert flat_keys(back) == {**before, "candidate_mining.stem_variants": False}


def test_cli_first_stage_sets_the_retrieval_keys_under_set():
    from adaptive_ir.cli import build_parser, config_overrides

    args = build_parser().parse_args(["evaluate", "--first-stage", "anserini", "--set", "retrieval.bm25_k1=1.2"])
    cfg = load_config("quickstart", config_overrides(args))
    assert (cfg.retrieval.analyzer, cfg.retrieval.stemmer, cfg.retrieval.bm25_b) == ("lucene", "porter", 0.4)
    assert cfg.retrieval.bm25_k1 == 1.2 and cfg.candidate_mining.stem_variants is False
    plain = build_parser().parse_args(["evaluate"])
    assert config_overrides(plain) == {}
