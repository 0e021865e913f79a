"""Precompute once, reuse everywhere: collection → index → candidates → embeddings → QuerySets on the device.

Only the splits asked for are touched: training builds train and dev, and the test split (its queries and
qrels) is loaded only by evaluation.
"""

from __future__ import annotations

import gc
import logging
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from adaptive_ir.common.errors import ConfigError, DataError
from adaptive_ir.common.io import fingerprint, load_or_compute_rows, sha256
from adaptive_ir.common.memory import trim_heap
from adaptive_ir.common.progress import Phases
from adaptive_ir.config import Config
from adaptive_ir.config.stages import first_stage, on_first_stage
from adaptive_ir.data import Collection, load_collection
from adaptive_ir.mining.candidates import CandidateMiner, CandidateSet, mine_cached
from adaptive_ir.mining.embeddings import (
    EmbeddingCache,
    StaticEmbedder,
    encode_corpus,
    make_embedder,
    make_reranker,
)
from adaptive_ir.mining.query_encoder import adapted_query_encoder
from adaptive_ir.mining.query_features import OVERLAP_DEPTH, QUERY_FEATURES, query_features
from adaptive_ir.retrieval.analyzer import Analyzer
from adaptive_ir.retrieval.feedback import SemanticFeedback
from adaptive_ir.retrieval.index import key_docs, key_scores
from adaptive_ir.retrieval.retriever import Retriever
from adaptive_ir.retrieval.rm3 import RM3_CHUNK, RM3_ORIG_WEIGHT, rm3_anserini_expansion, rm3_expansion
from adaptive_ir.rl.env import QuerySet, require_lanes_fit

log = logging.getLogger(__name__)


def rm3_start_cached(retriever: Retriever, terms: list[list[int]], fb_docs: int, feedback: SemanticFeedback | None,
                     query_vectors: np.ndarray | None, cache_dir: Path | None
                     ) -> tuple[list[list[int]], list[list[float]]]:
    """``rm3_expansion`` with each query word weighing 1 (``retrieval.start: rm3``), computed once: later runs load
    ``<cache_dir>/start-rm3-<key>/`` (ragged arrays: lengths, term ids, weights). A feedback search and RM1 per
    query cost 4-9 ms, minutes at 100k+ train queries. The key covers the index, the feedback model and depth, and
    the query terms (and vectors), so any change recomputes; a damaged entry fails its checksum and is rebuilt."""
    if cache_dir is None:
        return rm3_expansion(retriever, terms, fb_docs, feedback=feedback, query_vectors=query_vectors,
                             unit_query=True)
    vectors = None if query_vectors is None else sha256(np.ascontiguousarray(query_vectors).tobytes())
    fb = None if feedback is None else [feedback.identity, feedback.depth]
    meta = {"key": fingerprint("rm3-start", retriever.index.meta, fb_docs, fb, terms, vectors, "v2")}

    def expand(lo: int, hi: int) -> dict[str, np.ndarray]:
        return _flat(*rm3_expansion(retriever, terms[lo:hi], fb_docs, feedback=feedback, unit_query=True,
                                    query_vectors=None if query_vectors is None else query_vectors[lo:hi]))

    # saved a chunk of queries at a time: an interrupted run resumes at the first chunk not saved
    arrays, _ = load_or_compute_rows(Path(cache_dir) / f"start-rm3-{meta['key']}", meta, len(terms), RM3_CHUNK,
                                     expand, "RM3 start")
    return _ragged(arrays)


def _ragged(arrays: dict[str, np.ndarray]) -> tuple[list[list[int]], list[list[float]]]:
    """Rows of (term ids, weights) from ``lengths`` and the flat ``terms`` and ``weights``."""
    bounds = np.concatenate([[0], np.cumsum(arrays["lengths"])]).tolist()
    flat_t, flat_w = arrays["terms"].tolist(), arrays["weights"].tolist()
    return ([flat_t[a:b] for a, b in zip(bounds, bounds[1:])], [flat_w[a:b] for a, b in zip(bounds, bounds[1:])])


def _flat(terms: list[list[int]], weights: list[list[float]]) -> dict[str, np.ndarray]:
    lengths = np.fromiter(map(len, terms), np.int64, len(terms))
    return {"lengths": lengths, "terms": np.fromiter((t for q in terms for t in q), np.int64, lengths.sum()),
            "weights": np.fromiter((w for q in weights for w in q), np.float64, lengths.sum())}


def rm3_choice(retriever: Retriever, texts: list[str], terms: list[list[int]]) -> dict[str, np.ndarray]:
    """The other start of ``retrieval.start: choose`` and what the choice is made from, for each query: its RM3
    expansion as Anserini computes it (``rm3_anserini_expansion``), every weight multiplied by the power of two
    nearest to 1 / (the weight RM3 gives one query word, ``orig_weight`` / its token count): a query word then
    weighs about 1, like the agent's own, and float32 scores scale exactly, so the ranking is RM3's to the bit; and
    the query features (``mining.query_features``) over its first ranking and RM3's. Ragged arrays (lengths, term
    ids, weights) and ``features`` (Q, G)."""
    exp_t, exp_w = rm3_anserini_expansion(retriever, texts)
    scale = [2.0 ** round(np.log2(max(len(retriever.analyzer.tokenize(t)), 1) / RM3_ORIG_WEIGHT)) for t in texts]
    exp_w = [[float(np.float32(w * s)) for w in row] for row, s in zip(exp_w, scale)]
    first = retriever.rankings(terms, OVERLAP_DEPTH)
    index = retriever.index
    alt = index.topk_keys(*index.pad(exp_t, exp_w), OVERLAP_DEPTH).cpu()
    feats = query_features(index, terms, exp_t, exp_w, key_docs(first).numpy(), key_scores(first).numpy(),
                           torch.where(alt >= 0, key_docs(alt), -1).numpy())
    return {**_flat(exp_t, exp_w), "features": feats}


def rm3_choice_cached(retriever: Retriever, texts: list[str], terms: list[list[int]], cache_dir: Path | None
                      ) -> tuple[tuple[list[list[int]], list[list[float]]], np.ndarray]:
    """``rm3_choice`` computed once per index and query texts (``<cache_dir>/choice-rm3-<key>/``, in chunks an
    interrupted run resumes from): ((term ids, weights) per query, features (Q, G))."""
    if cache_dir is None:
        arrays = rm3_choice(retriever, texts, terms)
    else:
        meta = {"key": fingerprint("rm3-choice", retriever.index.meta, texts, QUERY_FEATURES, "v1")}
        arrays, _ = load_or_compute_rows(Path(cache_dir) / f"choice-rm3-{meta['key']}", meta, len(texts),
                                         RM3_CHUNK, lambda lo, hi: rm3_choice(retriever, texts[lo:hi], terms[lo:hi]),
                                         "RM3 choice")
    return _ragged(arrays), arrays["features"].astype(np.float32).reshape(len(texts), len(QUERY_FEATURES))


def configured_retriever(cfg: Config, collection: Collection, device: torch.device,
                         progress: bool = False) -> Retriever:
    """The collection's index with ``cfg.retrieval``'s analyzer and BM25 settings, cached under the config's cache."""
    rc = cfg.retrieval
    return Retriever.cached(collection, cfg.cache_path_dir, rc.bm25_k1, rc.bm25_b, rc.idf, device=device,
                            progress=progress, analyzer=Analyzer(kind=rc.analyzer, stemmer=rc.stemmer),
                            scoring=rc.bm25_scoring, workers=cfg.system.num_workers)


def configured_embedder(cfg: Config, retriever: Retriever, device: torch.device):
    """``cfg.embeddings``' provider over ``retriever``'s corpus (an LSA fit is cached; nothing is encoded yet)."""
    ec = cfg.embeddings
    return make_embedder(ec.type, ec.path, retriever.corpus, retriever.analyzer, ec.embedding_dim, cfg.system.seed,
                         ec.batch_size, "cuda" if device.type == "cuda" else "cpu", cache_dir=cfg.cache_path_dir,
                         corpus_key=retriever.corpus_sha256, precision=ec.precision)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Tables:
    """Embedding tables of one QuerySet: one row per query, one per distinct candidate term (+ a zero row)."""

    query: torch.Tensor
    term: torch.Tensor
    term_texts: list[str]


class Workspace:
    """The retrieval system, candidate miner and embedder for one config, built once.

    ``embed=False`` leaves the embedder out: a workspace that mines candidates and runs rules, never a policy
    (``on_stage``)."""

    def __init__(self, cfg: Config, device: torch.device, collection: Collection | None = None,
                 progress: bool = True, splits: tuple[str, ...] | None = None, embed: bool = True,
                 lanes: int = 0):
        """``lanes``: the episodes a run will roll out at once (training's collect_batch_size), whose score lanes
        are checked to fit the memory available as soon as the collection is loaded (``require_lanes_fit``)."""
        self.cfg, self.device, self.progress, self.embed = cfg, device, progress, embed
        self.phases = Phases(progress)
        """Wall time of each precompute phase (and of training, which the trainer adds), peak memory."""
        cm, rc = cfg.candidate_mining, cfg.retrieval
        with self.phases("load collection"):
            # a collection handed in stays the caller's: splits this workspace reads later, and the train
            # queries a trainer drops, change its own tables of splits, not the caller's
            self.collection = (load_collection(cfg.data, cfg.split_seed, splits) if collection is None else
                               replace(collection, queries=dict(collection.queries), qrels=dict(collection.qrels),
                                       excluded=dict(collection.excluded)))
        if lanes:
            require_lanes_fit(lanes, self.collection.num_docs, device, "training.collect_batch_size")
        with self.phases("index"):
            self.retriever = configured_retriever(cfg, self.collection, device, progress)
        if embed:
            self._load_embedder()
        self.feedback = self._semantic_feedback() if cm.feedback == "semantic" else None
        self._last_start: tuple[tuple[str, ...], tuple] | None = None
        """The last RM3 start (its query texts, the result): a split's rules, agent and oracle start from it alike."""
        self.miner = CandidateMiner(self.retriever, cm.methods, cm.top_k0, cm.max_candidates, cm.min_candidates,
                                    cm.min_score, cm.top_k_per_method, cfg.system.num_workers,
                                    stem_variants=cm.stem_variants, feedback=self.feedback, progress=progress,
                                    first_k=rc.reward_k + 1,  # the env's starting rankings, the excluded doc too
                                    preview_levels=rc.action_levels if cm.effect_preview else None, preview_k=rc.reward_k,
                                    preview_by_score=rc.expansion_weighting == "score")

    def _load_embedder(self) -> None:
        with self.phases("embedding model"):
            self.embedder = configured_embedder(self.cfg, self.retriever, self.device)
            self.emb_cache = EmbeddingCache(self.cfg.cache_path_dir, self.embedder.cache_key)

    @contextmanager
    def on_stage(self, name: str) -> Iterator[Workspace]:
        """This workspace's miner and rules over the first stage ``name`` (``config.stages``), for the ``with``
        block: itself where its retrieval settings are that stage's, else a workspace over the same collection with
        that stage's index (cached on disk like any index) and no embedder, released when the block ends, so the
        field's rows cost time, not a second index held beside the agent's for the rest of the run."""
        if first_stage(self.cfg) == name:
            yield self
            return
        # this workspace's index pages leave resident memory while the other one is built and read (they come
        # back from the page cache when this one is used again): one index resident at a time
        self.retriever.release_pages()
        trim_heap()
        other = Workspace(on_first_stage(self.cfg, name), self.device, self.collection, self.progress, embed=False)
        try:
            yield other
        finally:
            self.phases.merge(other.phases, f"{name}: ")
            del other
            gc.collect()  # the index build's arrays and the miner's tables go now, not at some later collection
            trim_heap()

    def _semantic_feedback(self) -> SemanticFeedback:
        """The re-ranking model and every document's vector (encoded once into the cache, resumable, see
        ``encode_corpus``)."""
        cm, ec = self.cfg.candidate_mining, self.cfg.embeddings
        if self.embed and ec.type == cm.reranker_type and ec.path == cm.reranker_path:
            self.fb_embedder, self.fb_cache = self.embedder, self.emb_cache
        else:
            with self.phases("feedback re-ranking model"):
                self.fb_embedder = make_reranker(cm.reranker_type, cm.reranker_path, self.cfg.cache_path_dir,
                                                 ec.batch_size, "cuda" if self.device.type == "cuda" else "cpu",
                                                 ec.precision)
            self.fb_cache = EmbeddingCache(self.cfg.cache_path_dir, self.fb_embedder.cache_key)
        # the token limit, where set, is part of the vectors' identity (unset: the keys of caches written before it)
        limit = {} if cm.rerank_max_tokens is None else {"max_tokens": cm.rerank_max_tokens}
        # the queries' side of the feedback, where it has its own model (reranker_query_path); None: the re-ranker
        self.fb_query: tuple[StaticEmbedder, EmbeddingCache] | None = None
        query_model = {}
        if cm.reranker_query_path is not None:
            query_embedder = StaticEmbedder(cm.reranker_query_path, None, key="candidate_mining.reranker_query_path")
            if query_embedder.dim != self.fb_embedder.dim:
                raise ConfigError(
                    f"candidate_mining.reranker_query_path: {cm.reranker_query_path} gives {query_embedder.dim}-"
                    f"dimensional vectors, the re-ranker {self.fb_embedder.dim}; give a query encoder trained for "
                    "the re-ranker (scripts/distill_query_encoder.py), or null")
            if cm.reranker_query_adapt:
                with self.phases("adapt query encoder"):
                    adapted = adapted_query_encoder(query_embedder, self.fb_embedder, self.collection,
                                                    self.retriever.corpus_sha256, self.cfg.cache_path_dir,
                                                    cm.reranker_query_adapt)
                query_embedder = StaticEmbedder(adapted, None, key="candidate_mining.reranker_query_adapt")
            self.fb_query = query_embedder, EmbeddingCache(self.cfg.cache_path_dir, query_embedder.cache_key)
            query_model = {"query_model": query_embedder.cache_key}
        meta = {"model": self.fb_embedder.cache_key, "corpus": self.retriever.corpus_sha256, **limit}
        folder = self.cfg.cache_path_dir / f"doc-vectors-{fingerprint(meta)}"
        with self.phases("encode documents"):
            vectors = encode_corpus(self.fb_embedder, self.collection, folder, meta, progress=self.progress,
                                    max_tokens=cm.rerank_max_tokens)
        # the vectors' identity keys the caches of what they pick (candidates, the RM3 start)
        return SemanticFeedback(vectors, cm.rerank_depth, {**self.fb_embedder.cache_key, **limit, **query_model})

    @property
    def feature_dim(self) -> int:
        return len(self.miner.feature_names)

    def feedback_vectors(self, texts: list[str], store: bool = True) -> np.ndarray:
        """Query vectors of the semantic-feedback model (cached unless ``store`` is False)."""
        embedder, cache = self.fb_query or (self.fb_embedder, self.fb_cache)
        return cache.encode(embedder, list(texts), store)

    def candidates(self, name: str, texts: list[str], query_terms: list[list[int]],
                   cache: bool = True) -> CandidateSet:
        vectors = None
        if self.feedback is not None:
            with self.phases(f"embed {name}", f"embed {len(texts)} queries for the feedback ({name})"):
                vectors = self.feedback_vectors(texts, store=cache)
        cache_dir = self.cfg.cache_path_dir if cache and self.cfg.candidate_mining.cache_enabled else None
        with self.phases(f"mine {name}", f"mine candidates ({name}, {len(query_terms)} queries)"):
            return mine_cached(self.miner, query_terms, cache_dir, name, vectors)

    def start_queries(self, texts: list[str], terms: list[list[int]], store: bool = True
                      ) -> tuple[list[list[int]], list[list[float]] | None]:
        """The queries the rewrites start from (``retrieval.start``), as (term ids, weights): the queries' own
        ``terms`` (weights None: 1 each), or their RM3 expansions over the agent's feedback documents, each query
        word weighing 1."""
        if self.cfg.retrieval.start != "rm3":  # choose: the query; the switch is the QuerySet's other start
            return terms, None
        key = tuple(texts)
        if self._last_start is not None and self._last_start[0] == key:
            return self._last_start[1]
        vectors = None if self.feedback is None else self.feedback_vectors(texts, store=store)
        cm = self.cfg.candidate_mining
        cache = self.cfg.cache_path_dir if store and cm.cache_enabled else None
        with self.phases("rm3 start", f"RM3 start ({len(terms)} queries)"):
            start = rm3_start_cached(self.retriever, terms, cm.top_k0, self.feedback, vectors, cache)
        self._last_start = (key, start)
        return start

    def rm3_choice(self, texts: list[str], terms: list[list[int]], store: bool = True
                   ) -> tuple[list[list[int]], list[list[float]], np.ndarray]:
        """The other start of ``retrieval.start: choose`` for each query, as (term ids, weights, query features)
        (``rm3_choice_cached``; cached unless ``store`` is False)."""
        cm = self.cfg.candidate_mining
        cache = self.cfg.cache_path_dir if store and cm.cache_enabled else None
        with self.phases("rm3 choice", f"RM3 choice ({len(texts)} queries)"):
            (alt_terms, alt_weights), qfeats = rm3_choice_cached(self.retriever, list(texts), terms, cache)
        return alt_terms, alt_weights, qfeats

    def query_set(self, name: str, qids: list[str], texts: list[str], qrels: dict[str, dict[str, int]] | None,
                  cache_candidates: bool = True) -> tuple[QuerySet, Tables]:
        """Terms, candidates, embeddings and qrels of a list of queries, as device tensors.

        ``cache_candidates=False`` for one-off (ad-hoc) queries: a cache entry (candidates, embedding tables) per
        call would only pile up. Besides the mining and embedding phases, the time spent analysing the query texts
        and building the tensors counts as phase ``query set <name>``."""
        start = time.perf_counter()
        terms = self.retriever.encode(texts)
        self.phases.add(f"query set {name}", time.perf_counter() - start)
        cands = self.candidates(name, texts, terms, cache=cache_candidates)
        vocab = self.retriever.vocab.surface  # a stem is embedded (and shown) as its most frequent word
        # rows: the distinct candidate terms 0..U-1 in term-id order, padding → U (the zero row); a mask over the
        # vocabulary, not a sort of all Q × M candidates
        present = np.zeros(len(vocab), bool)
        present[cands.terms[cands.valid]] = True
        term_ids = np.flatnonzero(present)
        term_texts = [vocab[t] for t in term_ids.tolist()]
        rows = np.where(cands.valid, (np.cumsum(present) - 1)[np.where(cands.valid, cands.terms, 0)], len(term_ids))
        with self.phases(f"embed {name}", f"embed {len(texts)} queries + {len(term_texts)} terms ({name})"):
            q_emb = self.emb_cache.encode(self.embedder, list(texts), cache_candidates)
            t_emb = self.emb_cache.encode(self.embedder, term_texts, cache_candidates)
        log.info("embedding cache: %d hits, %d misses", self.emb_cache.hits, self.emb_cache.misses)
        start_terms, start_weights = self.start_queries(texts, terms, cache_candidates)  # a phase of its own
        alt: tuple[list[list[int]], list[list[float]]] | None = None
        qfeats = None
        if self.cfg.retrieval.start == "choose":  # a phase of its own too
            alt_terms, alt_weights, qfeats = self.rm3_choice(texts, terms, cache_candidates)
            alt = (alt_terms, alt_weights)
        start = time.perf_counter()
        t_emb = np.concatenate([t_emb.reshape(-1, self.embedder.dim), np.zeros((1, self.embedder.dim), np.float32)])
        weight = None
        if self.cfg.retrieval.expansion_weighting == "score":
            weight = cands.features[:, :, cands.feature_names.index("mean_score")]
        # Nogueira & Cho's rule (data.exclude_query_title): the document whose title is the query never counts
        excluded = self.collection.excluded_docs(name)
        exclude = self.collection.doc_positions([excluded.get(q, "") for q in qids]) if excluded else None
        qs = QuerySet.build(qids, start_terms, cands, rows, np.arange(len(qids)), qrels, self.collection.doc_positions,
                            self.retriever.index.pad_id, self.device, cand_weight=weight, exclude_docs=exclude,
                            query_weights=start_weights, alt_query=alt, query_feats=qfeats)
        tables = Tables(torch.as_tensor(q_emb.reshape(-1, self.embedder.dim)).to(self.device),
                        torch.as_tensor(t_emb).to(self.device), term_texts)
        self.phases.add(f"query set {name}", time.perf_counter() - start)
        return qs, tables

    def load_split(self, split: str) -> None:
        """Read a split that was left out when the collection was loaded (the test split, after training); the
        corpus already loaded is reused."""
        if split in self.collection.queries:
            return
        extra = load_collection(self.cfg.data, self.cfg.split_seed, (split,), corpus=self.collection.corpus)
        if split in extra.queries:
            self.collection.queries[split] = extra.queries[split]
            self.collection.qrels[split] = extra.qrels[split]
            self.collection.excluded[split] = extra.excluded_docs(split)

    def split(self, split: str, max_queries: int | None = None, judged_only: bool = False,
              sample: int | None = None) -> tuple[QuerySet, Tables]:
        """The QuerySet of a split. ``judged_only`` (training) leaves out queries with no relevant document, which
        evaluation keeps (they score 0) but which would only add zero-reward episodes. ``sample``: that many of
        its queries, drawn with ``data.split_seed`` (so every training seed gets the same ones), in split order."""
        qids, texts, qrels = self.collection.split(split)
        if judged_only:
            keep = [i for i, q in enumerate(qids) if any(g >= 1 for g in qrels.get(q, {}).values())]
            if not keep:
                raise DataError(f"collection '{self.collection.name}': no '{split}' query has a relevant document "
                                "to train on")
            if len(keep) < len(qids):
                log.info("%s: training skips %d queries with no relevant document", split, len(qids) - len(keep))
            qids, texts = [qids[i] for i in keep], [texts[i] for i in keep]
        if max_queries is not None:
            qids, texts = qids[:max_queries], texts[:max_queries]
        if sample is not None and sample < len(qids):
            drawn = np.sort(np.random.default_rng(self.cfg.split_seed).choice(len(qids), sample, replace=False))
            qids, texts = [qids[i] for i in drawn.tolist()], [texts[i] for i in drawn.tolist()]
        return self.query_set(split, qids, texts, qrels)
