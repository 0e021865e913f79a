"""The seed project's configs, translated to ours before the schema sees them.

The seed's ``msa_optimized_gpu.yaml``, ``msa_config.yaml`` and ``msa_quick_test.yaml`` load unchanged: every key
of theirs is either one of ours, or one that `translate` maps onto ours or drops (with a warning where the key
asks for something this engine does not do), or an error naming the file, line and key. The same translation,
silent, reads configs stored by versions whose schema still held these keys (checkpoints, shipped policies).

* Aliases: ``rl_agent.embedding_dim`` / ``embedding_type`` of ``embeddings.embedding_dim`` / ``type``, and the
  other configs' ``candidate_mining.top_k_docs``, ``rl_agent.num_attention_heads`` / ``num_encoder_layers`` of
  ``top_k0``, ``num_heads`` / ``num_layers``: an error when both names are set to different values.
* PPO duplicates: the seed repeats the PPO hyper-parameters in ``rl_agent`` (``learning_rate``, ``gamma``,
  ``gae_lambda``, ``clip_epsilon``, ``entropy_coef``, ``value_loss_coef``, ``max_grad_norm``, ``num_ppo_epochs``
  and ``mini_batch_size``) and in ``training`` (where the last two are ``ppo_epochs`` and ``batch_size``). The
  ``training`` section is authoritative: an ``rl_agent`` value is used only when ``training`` does not set that key;
  when both set it to different values a warning names both keys, the file and the value used.
* Spellings: the method ``bm25`` is read as ``bm25_contrib`` (with a warning) and the type ``trec-car`` as
  ``trec_car``.
* Keys accepted and dropped: switches that must be on (an error says why when one is off), settings of parts this
  engine does not have (the cross-encoder reranker, caches and loader settings it does not need, dropout) and the
  ``evaluation.metrics`` list (a warning names what reports hold instead).
"""

from __future__ import annotations

import logging
import re
import types
from typing import Annotated, Any, Literal, cast, get_args, get_origin, get_type_hints

from adaptive_ir.common.errors import ConfigError
from adaptive_ir.common.measures import METRIC_NAMES
from adaptive_ir.config.origins import Origins
from adaptive_ir.config.schema import SECTIONS, AgentConfig, Count, NonNegInt, Range

log = logging.getLogger(__name__)

PPO_DUPLICATES = {
    "learning_rate": "learning_rate",
    "gamma": "gamma",
    "gae_lambda": "gae_lambda",
    "clip_epsilon": "clip_epsilon",
    "entropy_coef": "entropy_coef",
    "value_loss_coef": "value_loss_coef",
    "max_grad_norm": "max_grad_norm",
    "num_ppo_epochs": "ppo_epochs",
    "mini_batch_size": "batch_size",
}
"""rl_agent key -> the training key it duplicates."""

ALIASES = {
    "rl_agent.embedding_dim": "embeddings.embedding_dim",
    "rl_agent.embedding_type": "embeddings.type",
    "candidate_mining.top_k_docs": "candidate_mining.top_k0",
    "rl_agent.num_attention_heads": "rl_agent.num_heads",
    "rl_agent.num_encoder_layers": "rl_agent.num_layers",
}
"""The seed's name -> ours, for settings it names differently (the first two it sets in both places)."""

SPELLINGS = {
    "data.dataset_type": {"trec-car": "trec_car"},
    "candidate_mining.methods": {"bm25": "bm25_contrib"},
}
"""Values the seed spells differently -> ours, per key; a list's items are read one by one."""

MUST_BE_TRUE = {
    "candidate_mining.enabled": "false is not supported: the agent's actions are the mined candidate terms, so there "
                                "is nothing to act on without them; set enabled: true",
    "rl_agent.use_pretrained_embeddings": "false is not supported: the agent reads precomputed embedding tables of "
                                          "the embeddings section (lsa needs no model at all); set it to true",
    "rl_agent.enabled": "false is not supported: the trainer trains this agent and reformulation runs it; set "
                        "enabled: true",
}
"""Switches of the seed that this engine has always on: false is an error saying why."""

_SEED_METRIC = re.compile(r"(recall|mrr|ndcg|map|precision)(?:@(\d+))?", re.IGNORECASE)
_IR_MEASURES_NAME = {"recall": "R", "mrr": "RR", "ndcg": "nDCG", "map": "AP", "precision": "P"}


def _ours(dotted: str) -> Any:
    """The schema's type of one of our keys."""
    section, _, key = dotted.partition(".")
    return get_type_hints(SECTIONS[section], include_extras=True)[key]


# Each seed-only key with its type: a value is checked as strictly as ours before it is mapped or dropped. Aliases
# and duplicates take the type of the key they stand for; None means unset (stored configs hold None for them).
SEED_KEYS: dict[str, dict[str, Any]] = {
    "candidate_mining": {"enabled": bool, "top_k_docs": _ours(ALIASES["candidate_mining.top_k_docs"]) | None,
                         "cache_size": Count},
    "rl_agent": {
        "enabled": bool,
        "use_pretrained_embeddings": bool,
        "dropout": Annotated[float, Range(0, 1, hi_open=True)],
        **{dotted.partition(".")[2]: _ours(ours) | None for dotted, ours in ALIASES.items()
           if dotted.startswith("rl_agent.")},
        **{key: _ours(f"training.{ours}") | None for key, ours in PPO_DUPLICATES.items()},
    },
    "rrf_fusion": {"enabled": bool, "method": Literal["rrf"]},
    "bert_reranker": {"enabled": bool, "model_name": str, "batch_size": Count, "max_length": Count,
                      "top_k_rerank": Count, "use_fp16": bool},
    "training": {"pin_memory": bool, "prefetch_factor": Count, "embedding_cache_size": Count,
                 "search_cache_size": NonNegInt},
    "evaluation": {"metrics": list[str] | None},
}
"""Section -> key -> type of every key the seed's configs may set that is not ours."""


def spelled(dotted: str, hint: Any) -> Any:
    """``hint``, the type of one of our keys, widened to admit the seed's spellings of its values."""
    extra = tuple(SPELLINGS.get(dotted, ()))
    if not extra:
        return hint
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return Literal[(*args, *extra)]
    if origin is list:
        return types.GenericAlias(list, (spelled(dotted, args[0]),))  # list[...] of a type found at run time
    return hint


def seed_metric(name: str) -> str | None:
    """The ir-measures name of a metric named as in the seed's configs ('mrr@10' -> 'RR@10'); None if unknown."""
    match = _SEED_METRIC.fullmatch(name.strip())
    if match is None:
        return None
    return _IR_MEASURES_NAME[match[1].lower()] + (f"@{match[2]}" if match[2] else "")


def translate(values: dict[str, dict[str, Any]], origins: Origins, warn: bool) -> dict[str, dict[str, Any]]:
    """``values`` (section -> key -> value, each already of its type; ours and the seed's keys) as our keys alone,
    every seed key mapped onto ours or dropped; ``warn``: report what differs (done once, when a file is first
    loaded; `warn_unused` reports the rest once the config is valid). Errors name where the key was set
    (``origins``)."""
    values = {section: dict(body) for section, body in values.items()}
    agent, training = values["rl_agent"], values["training"]

    # training is authoritative: rl_agent's copy only fills a key training leaves unset.
    for a_key, t_key in PPO_DUPLICATES.items():
        a_val = agent.get(a_key)
        if a_val is None:
            continue
        if f"training.{t_key}" not in origins.given:
            training[t_key] = a_val
        elif a_val != training[t_key] and warn:
            used = training[t_key]
            log.warning(
                "%s: rl_agent.%s=%r and training.%s=%r differ; using training.%s=%r (training is authoritative)",
                origins.source, a_key, a_val, t_key, used, t_key, used,
            )

    for alias, name in ALIASES.items():
        (a_section, a_key), (section, key) = alias.split("."), name.split(".")
        value = values[a_section].get(a_key)
        if value is None:
            continue
        ours = values[section].get(key)
        if name in origins.given and ours is not None and ours != value:
            raise ConfigError(f"{origins(alias)}: {value!r} differs from {name}={ours!r}; they are the same setting, "
                              f"make them equal or drop {alias}")
        values[section][key] = value

    if warn and "bm25" in values["candidate_mining"].get("methods", ()):
        log.warning("%s: candidate_mining.methods: 'bm25' is read as 'bm25_contrib' (the BM25-contribution scorer; "
                    "the seed's miner knew only that name and skipped 'bm25'); write bm25_contrib to silence this",
                    origins.line("candidate_mining.methods"))
    for dotted, ours in SPELLINGS.items():
        section, _, key = dotted.partition(".")
        value = values[section].get(key)
        if isinstance(value, list) and any(v in ours for v in value):
            values[section][key] = list(dict.fromkeys(ours.get(v, v) for v in value))
        elif isinstance(value, str) and value in ours:
            values[section][key] = ours[value]

    for dotted, message in MUST_BE_TRUE.items():
        section, _, key = dotted.partition(".")
        if values[section].get(key) is False:
            raise ConfigError(f"{origins(dotted)}: {message}")
    variants = agent.get("num_query_variants", AgentConfig.num_query_variants)
    if variants > 1 and values["rrf_fusion"].get("enabled") is False:
        raise ConfigError(f"{origins('rl_agent.num_query_variants')}: more than 1 variant needs rrf_fusion.enabled: "
                          "true to fuse them")
    for name in values["evaluation"].get("metrics") or []:
        if seed_metric(name) is None:
            raise ConfigError(f"{origins('evaluation.metrics')}: {name!r} is not a metric name of the seed's configs; "
                              "use recall@k, mrr@k, ndcg@k, map or precision@k (or drop the evaluation section: it "
                              "is not used)")
    return {section: {key: value for key, value in values[section].items() if key not in SEED_KEYS.get(section, ())}
            for section in SECTIONS}


def warn_unused(values: dict[str, dict[str, Any]], origins: Origins) -> None:
    """Seed keys of ``values`` (as `translate` got them) that are accepted but do nothing: say so rather than ignore
    them silently."""
    if values["bert_reranker"].get("enabled"):
        log.warning(
            "%s: bert_reranker.enabled: the cross-encoder reranker is not available offline and is not part of "
            "this engine; ignored (set enabled: false to silence)",
            origins.line("bert_reranker.enabled"),
        )
    if "candidate_mining.cache_size" in origins.given:
        log.warning(
            "%s: candidate_mining.cache_size: not used — the candidates of every query are mined once and kept on "
            "disk (one checksummed file per split), so no in-memory bound applies",
            origins.line("candidate_mining.cache_size"),
        )
    metrics = values["evaluation"].get("metrics")
    if metrics:
        # translate() refused every name seed_metric does not know, so each ir here is a str
        missing = cast("dict[str, str]", {m: ir for m in metrics if (ir := seed_metric(m)) not in METRIC_NAMES})
        log.warning(
            "%s: evaluation.metrics: not used — every report holds %s%s", origins.line("evaluation.metrics"),
            ", ".join(METRIC_NAMES),
            f"; not among them: {', '.join(f'{m} ({ir})' for m, ir in missing.items())}: compute those from the "
            "run files written under <output_dir>/runs, e.g. `ir_measures <qrels> <run> "
            f"'{' '.join(missing.values())}'`" if missing else "",
        )
    if "training.embedding_cache_size" in origins.given:
        log.warning(
            "%s: training.embedding_cache_size: not used — the embedding cache keeps one table per split's queries "
            "and terms, keyed by their texts, with no row limit (a run never re-encodes what it needs)",
            origins.line("training.embedding_cache_size"),
        )
    if "training.search_cache_size" in origins.given:
        log.warning(
            "%s: training.search_cache_size: not used — rewards are computed on the device at every step "
            "(incremental scoring), no reward cache",
            origins.line("training.search_cache_size"),
        )
    dropout = values["rl_agent"].get("dropout", 0.0)
    if dropout > 0:
        log.warning(
            "%s: rl_agent.dropout: %g is not applied — PPO's probability ratio needs the update to run the same "
            "network the rollout sampled from, so the policy runs without dropout",
            origins.line("rl_agent.dropout"), dropout,
        )
    if {"training.pin_memory", "training.prefetch_factor"} & origins.given.keys():
        log.warning(
            "%s: training.pin_memory/prefetch_factor: not used — the rollout buffer lives on the training device, "
            "no DataLoader",
            origins.source,
        )
