"""Typed configuration: one dataclass per YAML section, loaded and checked once, then trusted.

The seed project's ``msa_optimized_gpu.yaml`` loads unchanged: every key of it is either used or rejected
with a message naming the file, line and key. Unknown keys are errors, never silently ignored.

PPO precedence. The seed repeats the PPO hyper-parameters in ``rl_agent`` (``learning_rate``, ``gamma``,
``gae_lambda``, ``clip_epsilon``, ``entropy_coef``, ``value_loss_coef``, ``max_grad_norm``,
``num_ppo_epochs`` and ``mini_batch_size``) and in ``training`` (where the last two are ``ppo_epochs`` and
``batch_size``). The ``training`` section is authoritative: an ``rl_agent`` value is used only when
``training`` does not set that key; when both set it to different values a warning names both keys, the
file and the value used. After loading, code reads only ``cfg.training.*`` (the ``rl_agent`` copies are
then either None or equal to the value used). Likewise ``rl_agent.embedding_dim`` / ``embedding_type`` are
aliases of ``embeddings.embedding_dim`` / ``type``: code reads ``cfg.embeddings.*``.

The seed's other configs, ``msa_config.yaml`` and ``msa_quick_test.yaml``, load unchanged too: their names
``candidate_mining.top_k_docs``, ``rl_agent.num_attention_heads`` / ``num_encoder_layers`` are aliases of
``top_k0``, ``num_heads`` / ``num_layers`` (an error when both names are set to different values), the method
``bm25`` is read as ``bm25_contrib`` and the type ``trec-car`` as ``trec_car``; their ``evaluation.metrics``
list is accepted and reported as unused.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from adaptive_ir.common.errors import ConfigError, where

log = logging.getLogger(__name__)

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
"""The shipped configs, inside the package (a checkout's top-level ``configs/`` links here); a bare name given to
`load_config` is looked up here."""


@dataclass(frozen=True)
class Range:
    """Bounds a number must respect, attached to a field's type with ``Annotated``."""

    lo: float | None = None
    """Lower bound; None for none."""
    hi: float | None = None
    """Upper bound; None for none."""
    lo_open: bool = False
    """Exclude the lower bound itself."""
    hi_open: bool = False
    """Exclude the upper bound itself."""

    def admits(self, x: float) -> bool:
        if self.lo is not None and not (x > self.lo if self.lo_open else x >= self.lo):
            return False
        return self.hi is None or (x < self.hi if self.hi_open else x <= self.hi)

    def describe(self) -> str:
        if self.hi is None:
            return f"{'>' if self.lo_open else '≥'} {self.lo:g}"
        return f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"


Count = Annotated[int, Range(1)]
NonNegInt = Annotated[int, Range(0)]
PosFloat = Annotated[float, Range(0, lo_open=True)]
NonNegFloat = Annotated[float, Range(0)]
UnitFloat = Annotated[float, Range(0, 1)]

DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


@dataclass
class SystemConfig:
    device: str = "auto"
    """auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps."""
    seed: NonNegInt = 42
    """Seed of every random generator (python, numpy, torch)."""
    num_workers: Count = 2
    """Threads for candidate mining."""


@dataclass
class DataConfig:
    dataset_type: Literal["default", "beir", "trec", "msmarco", "msa", "trec_car", "trec-car", "jeopardy",
                          "ir_datasets"] = "default"
    """Collection format; "default" is the embedded collection that needs no download. The seed's spelling
    "trec-car" is read as "trec_car"."""
    data_dir: str | None = None
    """Folder (or BEIR zip) of the collection; required by every type but default and ir_datasets."""
    dev_fraction: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] = 0.2
    """Share of train queries carved into dev when the collection has no dev split."""
    split_seed: NonNegInt | None = None
    """Seed of that carving (which train queries become dev); None = system.seed. ``compare`` pins it so every
    training seed trains and is selected on the same queries."""
    ir_datasets_id: str | None = None
    """Dataset id when dataset_type is ir_datasets (needs network on first use)."""
    max_train_queries: Count | None = None
    """Cap on train queries, for quick runs; None uses them all."""
    exclude_query_title: bool | None = None
    """Drop the document whose title is the query from every ranked list (agent, BM25, RM3, oracle) before
    scoring, as Nogueira & Cho do (MS Academic queries are paper titles; the match ignores case and
    punctuation); None: on for msa, trec_car and jeopardy, off for the other types."""
    also_train_on: list[str] = field(default_factory=list)
    """Folders of more collections (read as dataset_type) whose train queries, all of them, join data_dir's in
    training (max_train_queries caps data_dir's alone): each PPO update rolls out on one collection, drawn per
    update. Dev evaluation, the checkpoint pick and test stay on data_dir. The policy's inputs must mean the same
    on every collection, so not with LSA embeddings (fitted on one corpus)."""
    also_train_share: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] | None = None
    """Share of the updates rolled out on the also_train_on collections (split between them by their train-query
    counts); None: each collection by its train-query count. num_epochs counts passes over every train query."""


@dataclass
class EmbeddingsConfig:
    type: Literal["lsa", "sentence-transformers", "legacy"] = "lsa"
    """lsa (trained on the corpus), sentence-transformers, or legacy (the seed's word2vec pickle)."""
    path: str | None = None
    """sentence-transformers: local model dir or name, None = the packaged all-MiniLM-L6-v2;
    legacy: path of the word2vec pickle; lsa: unused."""
    embedding_dim: Count | None = None
    """lsa: number of components (128 when None); other types: must equal the model's dimension if given."""
    freeze: bool = True
    """Keep the embedding tables fixed; False fine-tunes them with the policy."""
    batch_size: Count = 256
    """Texts encoded per batch when precomputing embeddings."""
    cache_dir: str | None = None
    """On-disk caches (embeddings, candidate terms, semantic-feedback document vectors); None = a ``cache`` folder
    beside output_dir (``runs/quickstart`` → ``runs/cache``), shared by every run there: entries are keyed by
    their content, so runs of one config (or seed) reuse them, and concurrent runs take turns writing them."""


@dataclass
class CandidateConfig:
    enabled: bool = True
    """Must be true: the agent's actions are the mined candidate terms."""
    max_candidates: Count = 50
    """M, the number of candidate terms per query (the action space is M + STOP)."""
    min_candidates: NonNegInt = 20
    """Candidates kept even when their score is below min_score."""
    min_score: UnitFloat = 0.1
    """Normalized score below which a candidate is dropped unless needed to reach min_candidates."""
    top_k0: Count = 50
    """Feedback documents retrieved for the original query and mined for terms."""
    top_k_docs: Count | None = None
    """Alias of top_k0 (the seed's msa_quick_test.yaml name); they must agree when both are set."""
    methods: list[Literal["tfidf", "bm25_contrib", "rm3", "bm25"]] = field(
        default_factory=lambda: ["tfidf", "bm25_contrib", "rm3"]
    )
    """Term scorers whose rankings are merged into the candidate list; "bm25" (the seed's msa_config.yaml) is
    read as bm25_contrib, with a warning."""
    top_k_per_method: Count = 30
    """Terms each method contributes before merging."""
    feedback: Literal["bm25", "semantic"] = "bm25"
    """Feedback documents: bm25 = BM25's top_k0; semantic = BM25's top rerank_depth re-ranked by the
    sentence-transformers model at reranker_path (query–document cosine), top_k0 of them."""
    rerank_depth: Count = 1000
    """BM25 documents re-ranked for semantic feedback."""
    reranker_path: str | None = None
    """Sentence-transformers model folder for semantic feedback; null = the packaged all-MiniLM-L6-v2."""
    rerank_max_tokens: Count | None = None
    """Tokens of each document the semantic-feedback model reads (null: the model's own limit, 256 for
    all-MiniLM-L6-v2). Encoding the corpus is most of a first run's time (compute-bound: SciFact's 5,183 documents
    take 7 min on 2 cores at 256, half that at 128); queries are read whole."""
    effect_preview: bool = False
    """Add an effect preview per candidate and expansion weight to its features: how many documents adding it would
    bring into the query's top reward_k and top 10, and how well those match the query alone (no qrels read)."""
    stem_variants: bool = False
    """Also offer every corpus word sharing a (Snowball) stem with a query word, flagged by a feature."""
    cache_enabled: bool = True
    """Keep mined candidates in an on-disk cache reused across epochs and runs."""
    cache_size: Count = 10000
    """Accepted from the seed, unused (a warning says so): every query's candidates are cached on disk."""


@dataclass
class AgentConfig:
    enabled: bool = True
    """Must be true: the trainer trains this agent."""
    embedding_dim: Count | None = None
    """Alias of embeddings.embedding_dim (the seed sets both); they must agree when both are set."""
    hidden_dim: Count = 128
    """Width of the policy's transformer layers; must be divisible by num_heads."""
    num_heads: Count = 4
    """Attention heads per layer."""
    num_attention_heads: Count | None = None
    """Alias of num_heads (the name the seed's agent reads); they must agree when both are set."""
    num_layers: NonNegInt = 0
    """Transformer layers over [query; candidates]; 0 scores each candidate independently given the query
    context (cheapest; the shipped configs' choice)."""
    num_encoder_layers: NonNegInt | None = None
    """Alias of num_layers (the name the seed's agent reads); they must agree when both are set."""
    dropout: Annotated[float, Range(0, 1, hi_open=True)] = 0.0
    """Accepted from the seed, not applied (a warning says so when > 0): PPO's probability ratio needs the
    update's forward to be the network the rollout sampled from, so the policy never runs dropout."""
    max_steps_per_episode: Count = 5
    """T: terms the agent may add to a query before the episode is truncated."""
    num_query_variants: Count = 1
    """Rewrites per query at evaluation; more than 1 samples that many and fuses their runs with RRF."""
    ignore_features: list[str] = field(default_factory=list)
    """Candidate features the policy is not shown (held at 0), by name (``policy.agent_feature_names``: the miner's
    features, raw and as ``z:<name>``, and the agent's own): for ablations. Part of the policy spec."""
    use_pretrained_embeddings: bool = True
    """Must be true: the agent reads the embeddings section's precomputed tables (lsa needs no model)."""
    embedding_type: Literal["lsa", "sentence-transformers", "legacy"] | None = None
    """Alias of embeddings.type (the seed sets 'legacy'); they must agree when both are set."""
    # PPO duplicates from the seed; training.* wins (see the module docstring).
    learning_rate: PosFloat | None = None
    """Used only when training.learning_rate is not set."""
    gamma: UnitFloat | None = None
    """Used only when training.gamma is not set."""
    gae_lambda: UnitFloat | None = None
    """Used only when training.gae_lambda is not set."""
    clip_epsilon: PosFloat | None = None
    """Used only when training.clip_epsilon is not set."""
    entropy_coef: NonNegFloat | None = None
    """Used only when training.entropy_coef is not set."""
    value_loss_coef: NonNegFloat | None = None
    """Used only when training.value_loss_coef is not set."""
    max_grad_norm: PosFloat | None = None
    """Used only when training.max_grad_norm is not set."""
    num_ppo_epochs: Count | None = None
    """Used only when training.ppo_epochs is not set."""
    mini_batch_size: Count | None = None
    """Used only when training.batch_size is not set."""


@dataclass
class RRFConfig:
    enabled: bool = True
    """Fuse the runs of several query variants (rl_agent.num_query_variants > 1) with reciprocal rank fusion."""
    k_constant: NonNegInt = 60
    """k in 1 / (k + rank)."""
    method: Literal["rrf"] = "rrf"
    """Fusion method; only rrf is supported."""


@dataclass
class RerankerConfig:
    enabled: bool = False
    """Not implemented (no offline cross-encoder); true only triggers a warning."""
    model_name: str = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    """Cross-encoder the seed would have used."""
    batch_size: Count = 256
    """Pairs per reranker batch."""
    max_length: Count = 256
    """Token limit per (query, document) pair."""
    top_k_rerank: Count = 50
    """Documents reranked per query."""
    use_fp16: bool = True
    """Half precision for the reranker."""


@dataclass
class RetrievalConfig:
    top_k: Count = 100
    """Depth of the ranked lists written to runs and evaluated."""
    bm25_k1: NonNegFloat = 1.5
    """BM25 term-frequency saturation."""
    bm25_b: UnitFloat = 0.75
    """BM25 document-length normalisation."""
    idf: Literal["lucene", "okapi"] = "lucene"
    """IDF variant: lucene (always positive) or okapi (rank-bm25's, with its epsilon floor)."""
    analyzer: Literal["bm25s", "lucene"] = "bm25s"
    """Text → terms. bm25s: lowercase, bm25s' regex tokens (runs of 2+ word characters), bm25s' 33 English stopwords (reproduces
    ../shared/datasets/BASELINES.md). lucene: Lucene's StandardTokenizer (UAX#29 words), possessive 's removed,
    lowercase, the same 33 stopwords: Anserini's default English analyzer, less its stemmer."""
    stemmer: Literal["none", "porter"] = "none"
    """porter: index stems made by Lucene's PorterStemFilter (Martin Porter's reference algorithm, not Snowball's);
    embeddings and displays then show each stem as its most frequent word in the corpus."""
    bm25_scoring: Literal["bm25s", "lucene"] = "bm25s"
    """bm25s: bm25s' impacts bit for bit (exact document lengths, float64 length norm). lucene: Lucene 9's
    BM25Similarity as Anserini's -bm25 runs it (float32, document length stored in one byte, N = documents with a
    token); needs idf: lucene."""
    reward_metric: Literal["recall", "mrr"] = "recall"
    """Reward metric when training.reward_weights is None."""
    reward_k: Count = 40
    """Cutoff of the reward metric (Recall@k, RR@k)."""
    expansion_weight: PosFloat = 1.0
    """Weight of each added term in the rewritten query's BM25 score; the original terms weigh 1."""
    expansion_weights: list[PosFloat] | None = None
    """Weights the agent chooses among for each term it adds: an action is (candidate, weight), so a strong term
    can go in at a high weight and a risky one at a low weight. None: expansion_weight for every term. The baselines
    (oracle, fixed rules) search the same (candidate, weight) space."""
    expansion_weighting: Literal["uniform", "score"] = "uniform"
    """uniform: every added term weighs expansion_weight; score: expansion_weight × the term's mean normalised
    miner score (in (0, 1]), so strong feedback terms weigh more, as in RM3."""
    start: Literal["query", "rm3"] = "query"
    """Where every rewrite starts (training, evaluation, the oracle and the fixed rules alike). query: the query's
    own words. rm3: its RM3 expansion over the agent's feedback documents (candidate_mining's top_k0 documents, as
    the rm3-semantic / rm3-feedback baselines; 10 terms, original weight 0.5), scaled so each query word weighs 1:
    the agent adds its terms to that query, and STOP at once is that baseline."""

    @property
    def levels(self) -> tuple[float, ...]:
        """The weights an added term may take (the action's second part)."""
        return tuple(self.expansion_weights) if self.expansion_weights else (self.expansion_weight,)


@dataclass
class TrainingConfig:
    num_epochs: NonNegInt = 20
    """Epochs; an epoch is the episodes that cover the train queries once. 0 (with init_from): no training, the
    starting policy is the run's policy."""
    init_from: str | None = None
    """A policy trained elsewhere to start from (weights only; optimizer, schedule and counters start fresh): a
    checkpoint path, an exported policy folder (``adaptive-ir export``) or, when no such path exists, the name of a
    policy shipped in the package (``adaptive_ir/policies``: nfcorpus-seed-1, -2, -3, -42). ``{seed}`` stands for
    system.seed, so that each seed of ``compare`` starts from the same seed of the source run. It may come from
    another collection: its policy spec (embedder, candidate features, M, T, network sizes) must equal this
    config's. None: start from a fresh policy."""
    batch_size: Count = 64
    """PPO minibatch size (transitions per gradient step)."""
    collect_batch_size: Count = 32
    """B: episodes rolled out in lockstep per policy forward."""
    episodes_per_update: Count = 256
    """Episodes collected before each PPO update, rounded up to whole rounds of collect_batch_size (with a
    warning)."""
    ppo_epochs: Count = 4
    """Passes over the collected rollout per update."""
    learning_rate: PosFloat = 3e-4
    """Adam learning rate."""
    gamma: UnitFloat = 0.99
    """Discount factor."""
    gae_lambda: UnitFloat = 0.95
    """GAE lambda."""
    clip_epsilon: PosFloat = 0.2
    """PPO ratio clipping range."""
    value_loss_coef: NonNegFloat = 0.5
    """Weight of the value loss."""
    entropy_coef: NonNegFloat = 0.01
    """Weight of the entropy bonus (the schedule's start value)."""
    warm_start_queries: NonNegInt = 0
    """Before PPO, fit the policy's first action on this many train queries (a seeded sample): every candidate's
    reward is tried on the env and the expected first-step reward is maximised exactly (adaptive_ir/warmstart.py).
    0: off (PPO from the start)."""
    warm_start_epochs: Count = 4
    """Passes over the warm-start queries (minibatches of training.batch_size)."""
    entropy_coef_final: NonNegFloat | None = None
    """End value of a linear entropy schedule over training; None keeps entropy_coef constant."""
    max_grad_norm: PosFloat = 0.5
    """Gradient clipping norm."""
    target_kl: PosFloat | None = None
    """Stop an update's epochs early when the approximate KL exceeds this; None never stops."""
    use_amp: bool = True
    """Mixed precision (torch.amp) for rollout and update forwards; --no-amp turns it off."""
    amp_dtype: Literal["auto", "float16", "bfloat16"] = "auto"
    """auto: bf16 on CUDA devices that support it, else fp16 with a GradScaler; on the CPU auto means fp32
    (CPU autocast is slower than fp32 on most CPUs) and bfloat16 opts in."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the planned updates."""
    pin_memory: bool = True
    """Accepted from the seed, unused: the rollout buffer lives on the training device."""
    prefetch_factor: Count = 4
    """Accepted from the seed, unused: there is no DataLoader."""
    reward_weights: dict[Literal["recall", "mrr"], NonNegFloat] | None = None
    """Reward as a weighted mix, e.g. {recall: 0.7, mrr: 0.3} (at retrieval.reward_k); None uses
    retrieval.reward_metric alone."""
    output_dir: str = "runs/default"
    """Folder for everything one run writes (run.json, checkpoints, logs, test results); it holds one run only.
    `train` refuses a folder that holds another run (see --resume / --overwrite), except that a config's own
    output_dir, when occupied, is numbered instead: runs/quickstart, then runs/quickstart_2, ..."""
    checkpoint_dir: str | None = None
    """Checkpoint folder; None = <output_dir>/checkpoints."""
    save_freq: Count = 5
    """Checkpoint every N updates."""
    eval_every: Count = 5
    """Evaluate on dev every N updates (unless eval_every_episodes is set)."""
    eval_every_episodes: Count | None = None
    """Evaluate on dev each time this many more training episodes (over all processes) have been collected, and
    after the last update; None: every eval_every updates. Episodes, unlike updates, mean the same work whatever
    episodes_per_update is."""
    dev_subsample: Count | None = None
    """Dev queries scored by the evaluations during training: a fixed sample drawn with data.split_seed (the same
    for every training seed); None: the whole dev split. With a sample, after the last update the sample's best
    checkpoint and the last model are scored on the whole dev split and the better is kept as best.pt (both
    figures go to the log and the trainer's result). For large dev splits (WikiCAR: 4,194 queries)."""
    early_stopping_patience: NonNegInt = 10
    """Stop after this many dev evaluations without improvement; 0 disables early stopping. Not used when
    early_stopping_patience_episodes is set."""
    early_stopping_patience_episodes: Count | None = None
    """Stop at the first dev evaluation that comes this many training episodes or more after the best one so
    far; None: early_stopping_patience counts evaluations instead."""
    log_dir: str | None = None
    """JSONL and TensorBoard logs; None = <output_dir>/logs."""
    log_freq: Count = 10
    """Log every N updates."""
    buffer_size: Count = 50000
    """Most transitions the rollout buffer may hold (a memory guard: the buffer is sized to an update's episodes ×
    max_steps_per_episode, which must fit)."""
    embedding_cache_size: Count = 200000
    """Accepted from the seed, unused (a warning says so): the embedding cache keeps whole tables (a split's
    queries, its candidate terms), keyed by their texts, and drops none, so a run never re-encodes what it
    needs."""
    search_cache_size: NonNegInt = 10000
    """Accepted from the seed, unused (a warning says so): rewards are computed on the device at every step
    (incrementally, see adaptive_ir/env.py); a host-side cache would need a device read per step."""
    compile: bool = False
    """torch.compile the policy forward and the env step as whole graphs (``mode="reduce-overhead"``, i.e. CUDA
    graphs, on CUDA). Pays on a GPU, where a step is many small kernels; the first steps are slow (compiling)."""

    @property
    def checkpoint_path_dir(self) -> Path:
        """checkpoint_dir, or its default under output_dir."""
        return Path(self.checkpoint_dir) if self.checkpoint_dir else Path(self.output_dir) / "checkpoints"

    @property
    def log_path_dir(self) -> Path:
        """log_dir, or its default under output_dir."""
        return Path(self.log_dir) if self.log_dir else Path(self.output_dir) / "logs"


@dataclass
class EvaluationConfig:
    metrics: list[str] | None = None
    """Accepted from the seed's msa_config.yaml and msa_quick_test.yaml (recall@k, mrr@k, ndcg@k, map,
    precision@k), not used: reports always hold the same measures; a warning says which of the listed ones they
    include and how to compute the others from the written run files."""


@dataclass
class Config:
    system: SystemConfig = field(default_factory=SystemConfig)
    """Device, seed, threads."""
    data: DataConfig = field(default_factory=DataConfig)
    """Which collection and how to split it."""
    embeddings: EmbeddingsConfig = field(default_factory=EmbeddingsConfig)
    """Where query and term vectors come from."""
    candidate_mining: CandidateConfig = field(default_factory=CandidateConfig)
    """How each query's candidate terms (the actions) are mined."""
    rl_agent: AgentConfig = field(default_factory=AgentConfig)
    """Policy shape and episode length."""
    rrf_fusion: RRFConfig = field(default_factory=RRFConfig)
    """Fusion of several query variants."""
    bert_reranker: RerankerConfig = field(default_factory=RerankerConfig)
    """The seed's reranker: accepted, not implemented."""
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    """BM25 parameters and the reward metric."""
    training: TrainingConfig = field(default_factory=TrainingConfig)
    """PPO, schedule, checkpoints and logs (authoritative for PPO settings)."""
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    """The seed's metric list (accepted, reported as unused)."""
    source: str = field(default="<defaults>", compare=False)
    """The file the config came from (provenance, not a YAML key)."""

    @property
    def cache_path_dir(self) -> Path:
        """embeddings.cache_dir, or its default beside training.output_dir (shared by the runs in that folder)."""
        if self.embeddings.cache_dir:
            return Path(self.embeddings.cache_dir)
        return Path(self.training.output_dir).parent / "cache"

    @property
    def split_seed(self) -> int:
        """The seed that carves dev from train: data.split_seed, or system.seed when that is None."""
        return self.system.seed if self.data.split_seed is None else self.data.split_seed


# Each section field's default_factory is its dataclass.
SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Config) if f.name != "source"}

# (section, the seed's name, ours) of settings the seed's msa_config.yaml / msa_quick_test.yaml spell differently.
SEED_ALIASES = (
    ("candidate_mining", "top_k_docs", "top_k0"),
    ("rl_agent", "num_attention_heads", "num_heads"),
    ("rl_agent", "num_encoder_layers", "num_layers"),
)

# rl_agent key -> the training key it duplicates.
PPO_ALIASES = {
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


def load_config(path_or_name: str, overrides: dict[str, object] | None = None) -> Config:
    """Load a YAML config (a path, or a bare name from `configs/`), apply dotted overrides, validate."""
    path = _find(path_or_name)
    text = path.read_text(encoding="utf-8")
    try:
        # Composing keeps the line of every key so errors can point at it.
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{where(path, mark.line + 1 if mark else None)}: malformed YAML: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where(path)}: expected a mapping of sections (system:, data:, ...), got {raw!r}")
    return _build(raw, _Origins(str(path), _key_lines(root, path)), overrides, warn=True)


def build_config(raw: dict, source: str, overrides: dict[str, object] | None = None, warn: bool = False) -> Config:
    """A Config from plain sections (a stored config, a checkpoint's), dotted ``overrides`` applied (as ``--set``),
    validated; errors name ``source``. ``warn``: report unused and duplicated keys (done once, at first load)."""
    return _build(raw, _Origins(source, {}), overrides, warn)


def config_to_dict(cfg: Config) -> dict[str, dict[str, Any]]:
    """The config as plain, JSON-serialisable sections (without `source`), e.g. for checkpoints."""
    return {name: dataclasses.asdict(getattr(cfg, name)) for name in SECTIONS}


def config_from_dict(d: dict[str, Any], source: str = "<checkpoint>") -> Config:
    """Rebuild and re-validate a config from `config_to_dict` output. Warnings were shown when it was first loaded."""
    return _build(d, _Origins(source, {}), None, warn=False)


def resolve_device(name: str) -> str:
    """Turn system.device into a torch device string; "auto" picks cuda, then mps, then cpu."""
    if not DEVICE_PATTERN.fullmatch(name):
        raise ConfigError(f"system.device: {name!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
    if name == "cpu":
        return name
    import torch  # lazily: loading a config must not pay for importing torch

    mps = torch.backends.mps.is_available()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if mps else "cpu"
    if name == "mps" and not mps:
        raise ConfigError("system.device: mps requested but torch reports it unavailable; use auto or cpu")
    if name.startswith("cuda"):
        index = int(name.partition(":")[2] or 0)
        count = torch.cuda.device_count()
        if index >= count:
            raise ConfigError(f"system.device: {name} requested but torch sees {count} CUDA device(s); use auto or cpu")
    return name


class _Origins:
    """Where each key's value came from (file line or --set flag), so every error points at what to fix."""

    def __init__(self, source: str, lines: dict[str, int]):
        self.source = source
        self.lines = lines
        self.given: dict[str, str] = {}
        """section.key -> location, for every key the file or an override set."""

    def __call__(self, dotted: str) -> str:
        return self.given.get(dotted) or where(self.source, self.lines.get(dotted), dotted)

    def line(self, dotted: str) -> str:
        """``file:line`` of a key, for warnings that name the key themselves."""
        return where(self.source, self.lines.get(dotted))


def _find(path_or_name: str) -> Path:
    path = Path(path_or_name)
    if path.is_file():
        return path
    if len(path.parts) == 1:
        for candidate in (CONFIG_DIR / path, CONFIG_DIR / f"{path_or_name}.yaml"):
            if candidate.is_file():
                return candidate
    available = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))) or "none"
    raise ConfigError(f"{path_or_name}: config file not found (shipped configs in {CONFIG_DIR}: {available})")


def _key_lines(root: yaml.Node | None, path: Path) -> dict[str, int]:
    """1-based line of every section and section.key; PyYAML would silently keep the last of a duplicate key."""
    lines: dict[str, int] = {}

    def add(key: str, node: yaml.Node) -> None:
        line = node.start_mark.line + 1
        if key in lines:
            raise ConfigError(f"{where(path, line, key)}: duplicate key (first set on line {lines[key]})")
        lines[key] = line

    if isinstance(root, yaml.MappingNode):
        for sec_node, body in root.value:
            add(str(sec_node.value), sec_node)
            if isinstance(body, yaml.MappingNode):
                for key_node, _ in body.value:
                    add(f"{sec_node.value}.{key_node.value}", key_node)
    return lines


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f"did you mean '{close[0]}'?" if close else f"expected one of: {', '.join(choices)}"


def _build(raw: dict, origins: _Origins, overrides: dict[str, object] | None, warn: bool) -> Config:
    values: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for section, body in raw.items():
        section = str(section)
        if section not in SECTIONS:
            raise ConfigError(f"{origins(section)}: unknown section '{section}'; {_suggest(section, list(SECTIONS))}")
        if body is None:  # "training:" with nothing under it
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"{origins(section)}: a section must be a mapping of keys, got {body!r}")
        for key, value in body.items():
            dotted = f"{section}.{key}"
            origins.given[dotted] = origins(dotted)
            values[section][str(key)] = _convert_or_raise(value, _hint(dotted, origins(dotted)), origins(dotted))

    for dotted, value in (overrides or {}).items():
        flag = f"--set {dotted}={value}"
        section, _, key = dotted.partition(".")
        if not key:
            raise ConfigError(f"{flag}: expected section.key=value, e.g. training.batch_size=64")
        if section not in SECTIONS:
            raise ConfigError(f"{flag}: unknown section '{section}'; {_suggest(section, list(SECTIONS))}")
        hint = _hint(dotted, flag)
        values[section][key] = _convert_or_raise(_from_cli(value, hint), hint, flag)
        origins.given[dotted] = flag

    cfg = Config(**{name: SECTIONS[name](**values[name]) for name in SECTIONS}, source=origins.source)
    _resolve_aliases(cfg, origins, warn)
    _validate(cfg, origins)
    if warn:
        _warn_unused(cfg, origins)
    return cfg


def _hint(dotted: str, location: str) -> Any:
    """The type annotation of section.key, or a ConfigError naming the unknown key."""
    section, _, key = dotted.partition(".")
    hints = get_type_hints(SECTIONS[section], include_extras=True)
    if key not in hints:
        raise ConfigError(f"{location}: unknown key '{key}' in section '{section}'; {_suggest(key, list(hints))}")
    return hints[key]


def _from_cli(value: object, hint: Any) -> object:
    """Give a command-line string its YAML type ("64" → 64, "true" → True, "null" → None)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    # A string field keeps the text as typed ("--set data.data_dir=2024" names a folder, not a number).
    if parsed is not None and _accepts_str(hint):
        return value
    return parsed


def _accepts_str(hint: Any) -> bool:
    origin = get_origin(hint)
    if origin is Annotated or origin in (Union, types.UnionType):
        return any(_accepts_str(a) for a in get_args(hint))
    return hint is str or (origin is Literal and all(isinstance(a, str) for a in get_args(hint)))


class _Mismatch(Exception):
    """A value does not fit a type hint."""


def _convert_or_raise(value: object, hint: Any, location: str) -> Any:
    try:
        return _convert(value, hint)
    except _Mismatch:
        raise ConfigError(f"{location}: expected {_describe(hint)}, got {value!r}") from None


def _convert(value: object, hint: Any) -> Any:
    """`value` as the type `hint` describes, or _Mismatch."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        value = _convert(value, args[0])
        if not all(rule.admits(value) for rule in args[1:]):
            raise _Mismatch
        return value
    if origin in (Union, types.UnionType):  # only `X | None` is used
        if value is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner)
    if origin is Literal:
        if isinstance(value, str) and value in args:
            return value
    elif origin is list:
        if isinstance(value, list):
            return [_convert(v, args[0]) for v in value]
    elif origin is dict:
        if isinstance(value, dict):
            return {_convert(k, args[0]): _convert(v, args[1]) for k, v in value.items()}
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        # PyYAML reads 3e-4 (no dot) as a string, so numeric strings count as numbers.
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                number = float(value)
            except ValueError:
                raise _Mismatch from None
            if math.isfinite(number):
                return number
    elif hint is str:
        if isinstance(value, str):
            return value
    raise _Mismatch


def _describe(hint: Any) -> str:
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return " ".join([_describe(args[0]), *(rule.describe() for rule in args[1:])])
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None)) + " or null"
    if origin is Literal:
        return "one of " + ", ".join(args)
    if origin is list:
        return f"a list of ({_describe(args[0])})"
    if origin is dict:
        return f"a mapping of ({_describe(args[0])}): ({_describe(args[1])})"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[hint]


def _resolve_aliases(cfg: Config, origins: _Origins, warn: bool) -> None:
    """Fold rl_agent's duplicates into the sections code reads (see the module docstring)."""
    agent, emb, training = cfg.rl_agent, cfg.embeddings, cfg.training

    # training is authoritative: rl_agent's copy only fills a key training leaves unset.
    for a_key, t_key in PPO_ALIASES.items():
        a_val = getattr(agent, a_key)
        if a_val is None:
            continue
        if f"training.{t_key}" not in origins.given:
            setattr(training, t_key, a_val)
        elif a_val != getattr(training, t_key) and warn:
            used = getattr(training, t_key)
            log.warning(
                "%s: rl_agent.%s=%r and training.%s=%r differ; using training.%s=%r (training is authoritative)",
                origins.source, a_key, a_val, t_key, used, t_key, used,
            )
        setattr(agent, a_key, getattr(training, t_key))

    if agent.embedding_dim is not None and emb.embedding_dim is not None and agent.embedding_dim != emb.embedding_dim:
        raise ConfigError(
            f"{origins('rl_agent.embedding_dim')}: {agent.embedding_dim} differs from embeddings.embedding_dim="
            f"{emb.embedding_dim}; they are the same setting, make them equal or drop rl_agent.embedding_dim"
        )
    emb.embedding_dim = emb.embedding_dim if emb.embedding_dim is not None else agent.embedding_dim
    if agent.embedding_dim is not None:
        agent.embedding_dim = emb.embedding_dim

    if agent.embedding_type is not None:
        if "embeddings.type" in origins.given and agent.embedding_type != emb.type:
            raise ConfigError(
                f"{origins('rl_agent.embedding_type')}: {agent.embedding_type!r} differs from embeddings.type="
                f"{emb.type!r}; they are the same setting, make them equal or drop rl_agent.embedding_type"
            )
        emb.type = agent.embedding_type

    # the seed's other configs name these settings differently
    for section, alias, name in SEED_ALIASES:
        _fold_alias(getattr(cfg, section), section, alias, name, origins)
    if cfg.data.dataset_type == "trec-car":
        cfg.data.dataset_type = "trec_car"
    mining = cfg.candidate_mining
    if "bm25" in mining.methods:
        if warn:
            log.warning("%s: candidate_mining.methods: 'bm25' is read as 'bm25_contrib' (the BM25-contribution "
                        "scorer; the seed's miner knew only that name and skipped 'bm25'); write bm25_contrib to "
                        "silence this", origins.line("candidate_mining.methods"))
        mining.methods = list(dict.fromkeys("bm25_contrib" if m == "bm25" else m for m in mining.methods))


def _fold_alias(obj, section: str, alias: str, name: str, origins: _Origins) -> None:
    """Copy ``section.alias`` into ``section.name``; both set to different values is an error."""
    value = getattr(obj, alias)
    if value is None:
        return
    if f"{section}.{name}" in origins.given and getattr(obj, name) != value:
        raise ConfigError(f"{origins(f'{section}.{alias}')}: {value!r} differs from {section}.{name}="
                          f"{getattr(obj, name)!r}; they are the same setting, make them equal or drop "
                          f"{section}.{alias}")
    setattr(obj, name, value)


def _validate(cfg: Config, origins: _Origins) -> None:
    """Checks that involve more than one field's type."""

    def fail(dotted: str, message: str) -> None:
        raise ConfigError(f"{origins(dotted)}: {message}")

    if not DEVICE_PATTERN.fullmatch(cfg.system.device):
        fail("system.device", f"{cfg.system.device!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
    # data_dir / ir_datasets_id / embeddings.path are checked where they are used (data, embeddings), whose
    # messages say where to get the files.

    data = cfg.data
    if data.also_train_on and data.dataset_type in ("default", "ir_datasets"):
        fail("data.also_train_on", f"lists folders, which dataset_type {data.dataset_type!r} does not read; use "
             "a folder format (beir, trec, msmarco, ...) for data_dir and every folder listed")
    if data.also_train_on and cfg.embeddings.type == "lsa":
        fail("data.also_train_on", "LSA embeddings are fitted on one corpus and mean something else on another; "
             "set embeddings.type: sentence-transformers to train on several collections")
    if data.also_train_share is not None and not data.also_train_on:
        fail("data.also_train_share", "is set but data.also_train_on lists no collection")

    mining = cfg.candidate_mining
    if not mining.enabled:
        fail("candidate_mining.enabled", "false is not supported: the agent's actions are the mined candidate "
             "terms, so there is nothing to act on without them; set enabled: true")
    if not mining.methods:
        fail("candidate_mining.methods", "needs at least one of tfidf, bm25_contrib, rm3")
    if mining.min_candidates > mining.max_candidates:
        fail(
            "candidate_mining.min_candidates", f"{mining.min_candidates} exceeds max_candidates={mining.max_candidates}"
        )

    retrieval = cfg.retrieval
    if retrieval.bm25_scoring == "lucene" and retrieval.idf != "lucene":
        fail("retrieval.idf", f"{retrieval.idf!r} cannot go with bm25_scoring: lucene (Lucene's BM25 has Lucene's "
             "IDF only); set idf: lucene or bm25_scoring: bm25s")
    if mining.stem_variants and retrieval.stemmer != "none":
        fail("candidate_mining.stem_variants", f"the index already stems (retrieval.stemmer: {retrieval.stemmer}): "
             "its terms are stems, so a query word has no variants to add; set stem_variants: false")

    if retrieval.expansion_weights is not None and len(set(retrieval.expansion_weights)) != len(
            retrieval.expansion_weights):
        fail("retrieval.expansion_weights", f"{retrieval.expansion_weights} repeats a weight: two actions would be "
             "the same rewrite; list each weight once")

    agent = cfg.rl_agent
    if not agent.use_pretrained_embeddings:
        fail("rl_agent.use_pretrained_embeddings", "false is not supported: the agent reads precomputed embedding "
             "tables of the embeddings section (lsa needs no model at all); set it to true")
    if not agent.enabled:
        fail("rl_agent.enabled", "false is not supported: the trainer trains this agent and reformulation "
             "runs it; set enabled: true")
    if agent.hidden_dim % agent.num_heads:
        fail("rl_agent.num_heads", f"hidden_dim={agent.hidden_dim} must be divisible by num_heads={agent.num_heads}")
    if agent.num_query_variants > 1 and not cfg.rrf_fusion.enabled:
        fail("rl_agent.num_query_variants", "more than 1 variant needs rrf_fusion.enabled: true to fuse them")

    for name in cfg.evaluation.metrics or []:
        if seed_metric(name) is None:
            fail("evaluation.metrics", f"{name!r} is not a metric name of the seed's configs; use recall@k, "
                 "mrr@k, ndcg@k, map or precision@k (or drop the evaluation section: it is not used)")

    training = cfg.training
    if training.num_epochs == 0 and not training.init_from:
        fail("training.num_epochs", "0 trains nothing; it only makes sense with training.init_from (use a policy "
             "trained elsewhere as it is)")
    if training.reward_weights is not None and not any(training.reward_weights.values()):
        fail("training.reward_weights", "needs at least one positive weight (recall, mrr)")
    episodes = -(-training.episodes_per_update // training.collect_batch_size) * training.collect_batch_size
    if episodes != training.episodes_per_update:
        log.warning("training.episodes_per_update: %d is not a multiple of training.collect_batch_size (%d); each "
                    "update rolls out %d episodes (whole lockstep rounds)", training.episodes_per_update,
                    training.collect_batch_size, episodes)
    needed = episodes * agent.max_steps_per_episode
    if needed > training.buffer_size:
        fail("training.buffer_size", f"{training.buffer_size} cannot hold the {episodes} episodes of an update × "
             f"max_steps_per_episode {agent.max_steps_per_episode} = {needed} transitions; lower "
             "training.episodes_per_update or rl_agent.max_steps_per_episode, or raise training.buffer_size")


_SEED_METRIC = re.compile(r"(recall|mrr|ndcg|map|precision)(?:@(\d+))?", re.IGNORECASE)
_IR_MEASURES_NAME = {"recall": "R", "mrr": "RR", "ndcg": "nDCG", "map": "AP", "precision": "P"}


def seed_metric(name: str) -> str | None:
    """The ir-measures name of a metric named as in the seed's configs ('mrr@10' -> 'RR@10'); None if unknown."""
    match = _SEED_METRIC.fullmatch(name.strip())
    if match is None:
        return None
    return _IR_MEASURES_NAME[match[1].lower()] + (f"@{match[2]}" if match[2] else "")


def _warn_unused(cfg: Config, origins: _Origins) -> None:
    """Seed keys that are accepted but do nothing: say so rather than ignore them silently."""
    if cfg.bert_reranker.enabled:
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
    if cfg.evaluation.metrics:
        from adaptive_ir.evaluation.metrics import (
            METRIC_NAMES,  # only for this warning: the report's measures live there
        )

        missing = {m: ir for m in cfg.evaluation.metrics if (ir := seed_metric(m)) not in METRIC_NAMES}
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
    if cfg.rl_agent.dropout > 0:
        log.warning(
            "%s: rl_agent.dropout: %g is not applied — PPO's probability ratio needs the update to run the same "
            "network the rollout sampled from, so the policy runs without dropout",
            origins.line("rl_agent.dropout"), cfg.rl_agent.dropout,
        )
    if {"training.pin_memory", "training.prefetch_factor"} & origins.given.keys():
        log.warning(
            "%s: training.pin_memory/prefetch_factor: not used — the rollout buffer lives on the training device, "
            "no DataLoader",
            origins.source,
        )
