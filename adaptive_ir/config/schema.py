"""The config schema: one typed dataclass per YAML section, a docstring per field.

The schema holds only keys the engine reads. The seed project's other keys (aliases, PPO duplicates, accepted but
unused settings) never reach it: ``legacy.py`` translates them away before the values are built into these classes,
and ``coerce.py`` reads YAML and ``--set`` values into them.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from adaptive_ir.common.errors import ConfigError

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
    """Threads for candidate mining, and processes that tokenize a large corpus for its index (the same index
    whatever the count)."""


@dataclass
class DataConfig:
    dataset_type: Literal["default", "beir", "trec", "msmarco", "msa", "trec_car", "jeopardy",
                          "ir_datasets"] = "default"
    """Collection format; "default" is the embedded collection that needs no download."""
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
    type: Literal["lsa", "sentence-transformers", "static", "legacy"] = "lsa"
    """lsa (trained on the corpus), sentence-transformers, static (a model2vec model: a weighted mean of token
    vectors, no transformer at run time), or legacy (the seed's word2vec pickle)."""
    path: str | None = None
    """sentence-transformers: local model dir or name, None = the packaged all-MiniLM-L6-v2; static: a local
    model2vec folder, None = all-MiniLM-L6-v2 distilled into one under cache_dir (needs adaptive-ir[static]);
    legacy: path of the word2vec pickle; lsa: unused."""
    embedding_dim: Count | None = None
    """lsa: number of components (128 when None); other types: must equal the model's dimension if given."""
    freeze: bool = True
    """Must stay true to mean what it says: the embedding tables are precomputed data shared by train, dev and test,
    never fine-tuned. False (the seed's value) is reported when training starts, and the tables stay fixed."""
    batch_size: Count = 256
    """Texts encoded per batch when precomputing embeddings (on the CPU also at most 2,048 padded tokens a batch:
    faster there)."""
    precision: Literal["auto", "float32", "bfloat16"] = "auto"
    """Arithmetic of the sentence-transformers models (the policy's and the semantic feedback's) on the CPU: bfloat16
    runs their matrix products in bfloat16 under torch.autocast (vectors at cosine 0.9999 to float32's; 2.8x faster
    where the CPU has AVX512-BF16 or AMX, slower where it would emulate it); auto = bfloat16 on such a CPU, else
    float32. Cached vectors are keyed by it. A GPU runs the model in float32 whatever this says."""
    cache_dir: str | None = None
    """On-disk caches (embeddings, candidate terms, semantic-feedback document vectors); None = a ``cache`` folder
    beside output_dir (``runs/quickstart`` → ``runs/cache``), shared by every run there: entries are keyed by
    their content, so runs of one config (or seed) reuse them, and concurrent runs take turns writing them."""


@dataclass
class CandidateConfig:
    max_candidates: Count = 50
    """M, the number of candidate terms per query (the action space is M + STOP)."""
    min_candidates: NonNegInt = 20
    """Candidates kept even when their score is below min_score."""
    min_score: UnitFloat = 0.1
    """Normalized score below which a candidate is dropped unless needed to reach min_candidates."""
    top_k0: Count = 50
    """Feedback documents retrieved for the original query and mined for terms."""
    methods: list[Literal["tfidf", "bm25_contrib", "rm3"]] = field(
        default_factory=lambda: ["tfidf", "bm25_contrib", "rm3"]
    )
    """Term scorers whose rankings are merged into the candidate list."""
    top_k_per_method: Count = 30
    """Terms each method contributes before merging."""
    feedback: Literal["bm25", "semantic"] = "bm25"
    """Feedback documents: bm25 = BM25's top_k0; semantic = BM25's top rerank_depth re-ranked by the model at
    reranker_path (query–document cosine), top_k0 of them."""
    rerank_depth: Count = 1000
    """BM25 documents re-ranked for semantic feedback."""
    reranker_type: Literal["sentence-transformers", "static"] = "sentence-transformers"
    """The semantic feedback's model: sentence-transformers, or static (a model2vec model, as embeddings.type
    static: every document and query vector a mean of token vectors, no transformer at run time)."""
    reranker_path: str | None = None
    """Model folder for semantic feedback (of reranker_type); null = the packaged all-MiniLM-L6-v2 (static: distilled
    from it, as embeddings.type static does)."""
    reranker_query_path: str | None = None
    """A model2vec folder whose vectors live in the re-ranker's space, for the queries' side of semantic feedback
    (documents stay encoded by the re-ranker): a static query encoder trained to match it (scripts/
    distill_query_encoder.py), so that no transformer runs per query; null = the re-ranker encodes queries too."""
    reranker_query_adapt: NonNegInt = 0
    """Word windows (6–60 words) of the collection's documents the query encoder at reranker_query_path is trained
    on further at first use, with the re-ranker's vectors of them as targets (no queries, no judgments read; made
    once into the cache: ~2 min on 2 cores for 20,000); 0 = the encoder as given."""
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


@dataclass
class AgentConfig:
    hidden_dim: Count = 128
    """Width of the policy's transformer layers; must be divisible by num_heads."""
    num_heads: Count = 4
    """Attention heads per layer."""
    num_layers: NonNegInt = 0
    """Transformer layers over [query; candidates]; 0 scores each candidate independently given the query
    context (cheapest; the shipped configs' choice)."""
    max_steps_per_episode: Count = 5
    """T: terms the agent may add to a query; the episode ends after the T-th, a terminal state (no action is left,
    and the step fraction is part of the observation: see rl/env.py), not a truncation."""
    num_query_variants: Count = 1
    """Rewrites per query at evaluation; more than 1 samples that many and fuses their runs with RRF."""
    ignore_features: list[str] = field(default_factory=list)
    """Candidate features the policy is not shown (held at 0), by name (``policy.agent_feature_names``: the miner's
    features, raw and as ``z:<name>``, and the agent's own): for ablations. Part of the policy spec."""
    policy: str = "actor-critic"
    """The network that scores the candidates: actor-critic (``rl.policy.ActorCritic``, the shipped policies'), or
    ``module:Class`` of your own, importable where the policy is trained and loaded, built as ActorCritic is
    (emb_dim, feat_dim, hidden_dim, num_heads, num_layers, levels) and called as it is (docs/guide.md, "A policy of
    your own"). Part of the policy spec."""


@dataclass
class RRFConfig:
    k_constant: NonNegInt = 60
    """k in 1 / (k + rank) of the reciprocal rank fusion of several query variants (rl_agent.num_query_variants
    > 1)."""


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
    """Text → terms. bm25s: lowercase, bm25s' regex tokens (runs of 2+ word characters), bm25s' 33 English stopwords
    (reproduces ../shared/datasets/BASELINES.md). lucene: Lucene's StandardTokenizer (UAX#29 words), possessive 's
    removed, lowercase, the same 33 stopwords: Anserini's default English analyzer, less its stemmer."""
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
    expansion_scale: PosFloat = 1.0
    """Every added term's weight times this where it is searched: a setting a trained policy is applied with (it
    still chooses among the same expansion_weights, its spec's levels), chosen on dev where it is applied unlike it
    was trained (e.g. other feedback documents). The oracle and the fixed rules search the same scaled weights; the
    effect preview, a policy input, stays that of the unscaled ones."""
    expansion_weighting: Literal["uniform", "score"] = "uniform"
    """uniform: every added term weighs expansion_weight; score: expansion_weight × the term's mean normalised
    miner score (in (0, 1]), so strong feedback terms weigh more, as in RM3."""
    start: Literal["query", "rm3", "choose"] = "query"
    """Where every rewrite starts (training, evaluation, the oracle and the fixed rules alike). query: the query's
    own words. rm3: its RM3 expansion over the agent's feedback documents (candidate_mining's top_k0 documents, as
    the rm3-semantic / rm3-feedback baselines; 10 terms, original weight 0.5), scaled so each query word weighs 1:
    the agent adds its terms to that query, and STOP at once is that baseline. choose: per query, the agent's first
    action may replace the query with its RM3 expansion as Anserini computes it over the agent's index
    (``rm3_anserini_expansion``: Pyserini's ``set_rm3()`` on the Lucene-parity first stage, its weights scaled by a
    power of two so that the ranking is the same to the bit and a query word weighs about 1); STOP at once keeps
    the query, the switch then STOP is RM3, and the agent's terms may follow either. PPO rolls out both starts
    equally; which one a query takes is decided by a selector on the query's own features
    (``mining.query_features``), fitted to the policy's outcomes from both starts on train queries at each dev
    evaluation (``rl/selector.py``)."""

    @property
    def action_levels(self) -> tuple[float, ...]:
        """The weights an action chooses among (its second part), as the policy's spec records them."""
        return tuple(self.expansion_weights) if self.expansion_weights else (self.expansion_weight,)

    @property
    def levels(self) -> tuple[float, ...]:
        """The weights an added term is searched with: ``action_levels`` times ``expansion_scale``."""
        return tuple(w * self.expansion_scale for w in self.action_levels)


@dataclass
class TrainingConfig:
    num_epochs: NonNegInt = 20
    """Epochs; an epoch is the episodes that cover the train queries once. 0 (with init_from): no training, the
    starting policy is the run's policy."""
    init_from: str | None = None
    """A policy trained elsewhere to start from (weights only; optimizer, schedule and counters start fresh): a
    checkpoint path, an exported policy folder (``adaptive-ir export``) or, when no such path exists, the name of a
    policy shipped in the package (``adaptive_ir/policies``: general, general-joint) or kept in a repository
    checkout's ``release/policies`` (nfcorpus-seed-1, -2, -3, -42, ...: found from the checkout's root).
    ``{seed}`` stands for system.seed, so that each seed of ``compare`` starts from the same seed of the source run.
    It may come from another collection: its policy spec (embedder, candidate features, M, T, network sizes) must
    equal this config's. None: start from a fresh policy."""
    batch_size: Count = 64
    """PPO minibatch size (transitions per gradient step)."""
    collect_batch_size: Count = 32
    """B: episodes rolled out in lockstep per policy forward (on an accelerator, see accelerator_one_round). The
    DDP ranks of one CPU machine share it: each rolls out collect_batch_size / ranks at a time (their score lanes
    share the machine's memory)."""
    accelerator_one_round: bool = True
    """On an accelerator, roll out each update's episodes_per_update episodes in one lockstep round where their
    score lanes fit (half the free memory), else in rounds of collect_batch_size. A GPU step costs about the same
    at B=32 as at B=256 (it is bound by kernel launches, not arithmetic: docs/benchmarks.md), so one round is
    that much faster; the CPU keeps collect_batch_size. false: collect_batch_size everywhere."""
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
    reward is tried on the env and the expected first-step reward is maximised exactly (adaptive_ir/rl/warmstart.py).
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
    cuda_graph: bool = True
    """On CUDA, replay each PPO update's minibatch step (forward, backward, the Adam step) as one CUDA graph,
    captured once per update: the same result, bit for bit, without the launch cost of its few hundred small
    kernels. Not used under DDP, DataParallel or float16 loss scaling; false: eager, to debug."""
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
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    """BM25 parameters and the reward metric."""
    training: TrainingConfig = field(default_factory=TrainingConfig)
    """PPO, schedule, checkpoints and logs."""
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

    @property
    def reward_terms(self) -> dict[str, float]:
        """The reward's mix, metric -> weight: training.reward_weights, or retrieval.reward_metric alone."""
        # a Literal-keyed dict read as str-keyed: its callers only read the mix
        return cast("dict[str, float]", self.training.reward_weights or {self.retrieval.reward_metric: 1.0})


# each section field's default_factory is its dataclass (`source` alone has a plain default)
SECTIONS: dict[str, type] = {f.name: cast(type, f.default_factory) for f in dataclasses.fields(Config)
                             if f.name != "source"}
"""Section name -> its dataclass (each section field's default_factory)."""


def config_to_dict(cfg: Config) -> dict[str, dict[str, Any]]:
    """The config as plain, JSON-serialisable sections (without `source`), e.g. for checkpoints."""
    return {name: dataclasses.asdict(getattr(cfg, name)) for name in SECTIONS}


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
