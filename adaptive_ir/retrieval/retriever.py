"""The retrieval system the agent acts on: analyzer + analyzed corpus + BM25 index + document ids.

Built by streaming the collection's documents (``Collection.iter_doc_texts``) once, and kept on disk: one folder
``index-<key>/`` under the cache directory holds the BM25 arrays, the forward index and the vocabulary as ``.npy`` +
JSON, ``params.json`` and ``sha256.json`` (the sha256 of every other file) written last, in a temporary folder
renamed into place under the cache's lock (``index-<key>.lock`` beside it, ``io.file_lock``). The key covers the
corpus content (a sha256 streamed over every document text), the analyzer and the BM25 parameters, so later runs,
``adaptive-ir evaluate`` and the other DDP ranks memory-map the saved arrays instead of rebuilding them, once their
checksums are verified: a damaged copy is rebuilt, never used.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from adaptive_ir.common.errors import ConfigError, DataError
from adaptive_ir.common.io import checksum_problem, file_lock, fingerprint, write_checksums
from adaptive_ir.common.memory import available_memory, mappings, release_pages, trim_heap
from adaptive_ir.common.progress import Progress
from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms
from adaptive_ir.retrieval.index import BM25Index, key_docs, key_scores

if TYPE_CHECKING:
    from adaptive_ir.data import Collection

log = logging.getLogger(__name__)
CHUNK_DOCS = 2048
"""Documents per chunk read from the collection while indexing (the chunk's tokens are its working memory)."""
FIRST_PASS_DEPTH = 100
"""How deep the BM25 ranking of a whole query set is computed and kept (``Retriever.rankings``): BM25's own row,
RM3's feedback documents (10), the miner's (5) and Anserini's RM3 first pass (50) are its prefixes."""
FIRST_PASS_QUERIES = 512
"""Fewest queries whose ranking is kept (a miner's chunks and single queries are searched as asked)."""
BUILD_BYTES_PER_POSTING = 26
"""Resident bytes an index build holds per posting at its peak, over what the process held before: the forward
index and the impacts it keeps (16) and the build's own temporaries (10); measured at 1.09M, 3M and 8.8M documents
with both analyzers (``benchmarks/cost_curve.py``, docs/benchmarks.md)."""


class Retriever:
    """Everything needed to turn query text into term ids and term ids into ranked documents."""

    def __init__(self, doc_ids: list[str], analyzer: Analyzer, corpus: CorpusTerms, index: BM25Index,
                 doc_texts: Callable[[Iterable[int]], list[str]] | None = None):
        self.doc_ids = doc_ids
        self.analyzer = analyzer
        self.corpus = corpus
        self.index = index
        self.doc_texts = doc_texts
        """Texts of documents by corpus position (``Collection.doc_texts_at``), when the corpus is at hand."""
        self._first_pass: tuple[tuple[tuple[int, ...], ...], torch.Tensor] | None = None
        """The last query set's BM25 ranking keys, ``FIRST_PASS_DEPTH`` deep (``rankings``)."""

    @classmethod
    def build(cls, collection: Collection, k1: float = 1.5, b: float = 0.75, idf: str = "lucene",
              device: str | torch.device = "cpu", progress: bool = False, analyzer: Analyzer | None = None,
              scoring: str = "bm25s", workers: int = 1) -> Retriever:
        """Index every document of the collection (never only the judged ones), in memory. ``analyzer``: the
        default ``Analyzer()`` when None; ``scoring``: see ``BM25Index.build``; ``workers``: processes that
        tokenize a large corpus (``CorpusTerms.build``; the same index)."""
        analyzer, digest = analyzer or Analyzer(), hashlib.sha256()
        chunks = _hashing(collection.iter_doc_texts(CHUNK_DOCS), digest)
        first = next(chunks, None)
        if first:
            require_build_fits(CorpusTerms.build([first], analyzer).num_postings, len(first), collection.num_docs)
            chunks = itertools.chain([first], chunks)
        corpus = CorpusTerms.build(chunks, analyzer, collection.num_docs, progress, workers)
        index = BM25Index.build(corpus, k1=k1, b=b, idf=idf, progress=progress, scoring=scoring)
        index.meta.update(corpus_sha256=digest.hexdigest(), analyzer=fingerprint(analyzer.identity))
        if analyzer.settings != Analyzer().settings:
            index.meta["analyzer_settings"] = analyzer.settings
        return cls(collection.doc_ids, analyzer, corpus, index.to(device), collection.doc_texts_at)

    @classmethod
    def cached(cls, collection: Collection, cache_dir: str | Path, k1: float = 1.5, b: float = 0.75,
               idf: str = "lucene", device: str | torch.device = "cpu", progress: bool = False,
               analyzer: Analyzer | None = None, scoring: str = "bm25s", workers: int = 1) -> Retriever:
        """The collection's index from ``<cache_dir>/index-<key>/``, memory-mapped; built and saved there first
        when absent (or damaged). A cache hit costs a read of the corpus (to hash it; once per corpus object) and of
        the index files (to check their checksums): no tokenising, no scoring."""
        analyzer = analyzer or Analyzer()
        corpus = collection.corpus
        if corpus.content_sha256 is None:
            digest = hashlib.sha256()
            with Progress(collection.num_docs, "index: hash corpus", "doc", progress) as bar:
                for chunk in _hashing(collection.iter_doc_texts(CHUNK_DOCS), digest):
                    bar.update(len(chunk))
            corpus.content_sha256 = digest.hexdigest()
        folder = index_folder(cache_dir, corpus.content_sha256, k1, b, idf, analyzer, scoring)
        retriever = cls._saved(folder, collection, device)
        if retriever is not None:
            return retriever
        # one process builds (the ranks of a torchrun node, runs sharing a cache); the others wait here, then map
        # the copy it saved instead of each holding a build of their own
        with file_lock(folder.with_name(f"{folder.name}.build.lock")):
            retriever = cls._saved(folder, collection, device, quiet=True)
            if retriever is not None:
                return retriever
            retriever = cls.build(collection, k1, b, idf, "cpu", progress, analyzer, scoring, workers)
            retriever.save(folder)
            log.info("index: %d documents, %d terms, %d postings saved to %s", retriever.index.num_docs,
                     retriever.index.vocab_size, retriever.corpus.num_postings, folder)
        del retriever  # the saved copy replaces the built one: memory-mapped, as every later run uses it
        # and the build's freed arrays go back to the system now: otherwise they stay in the allocator's arenas for
        # the rest of the run (WikiCAR: 0.29 GiB; at 8.8M documents about 2 GiB, beside training's score lanes)
        gc.collect()
        trim_heap()
        return cls.load(folder, collection.doc_ids, device, doc_texts=collection.doc_texts_at)

    @classmethod
    def _saved(cls, folder: Path, collection: Collection, device: str | torch.device,
               quiet: bool = False) -> Retriever | None:
        """The index saved in ``folder``, memory-mapped, or None when there is none or it is damaged (said once,
        unless ``quiet``)."""
        if not (folder / "params.json").is_file():
            return None
        try:
            with file_lock(_lock_path(folder), shared=True):  # not while a writer replaces the folder
                problem = checksum_problem(folder)
                if problem:
                    raise DataError(problem)
                retriever = cls.load(folder, collection.doc_ids, device, doc_texts=collection.doc_texts_at)
            log.info("index: memory-mapped from %s", folder)
            return retriever
        except (DataError, OSError, ValueError, KeyError) as e:
            if not quiet:
                log.warning("index cache %s is damaged (%s); building it again", folder, e)
            return None

    def save(self, folder: str | Path) -> None:
        """Every array (the vocabulary's too) into a temporary folder (``params.json`` and ``sha256.json`` last), renamed
        to ``folder`` under the cache's exclusive lock; an intact copy saved meanwhile by another process is kept."""
        folder = Path(folder)
        tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self.corpus.save(tmp)
            self.index.save(tmp)
            write_checksums(tmp)
            with file_lock(_lock_path(folder)):
                if (folder / "params.json").is_file() and checksum_problem(folder) is None:
                    log.info("index %s was saved meanwhile by another process; using that one", folder)
                    return
                shutil.rmtree(folder, ignore_errors=True)  # a damaged earlier copy
                os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def load(cls, folder: str | Path, doc_ids: list[str], device: str | torch.device = "cpu",
             mmap: bool = True, doc_texts: Callable[[Iterable[int]], list[str]] | None = None) -> Retriever:
        """A saved index (memory-mapped unless ``mmap`` is False) for a collection with these ``doc_ids``;
        ``doc_texts`` as in the constructor."""
        folder = Path(folder)
        index = BM25Index.load(folder, mmap=mmap)
        corpus = CorpusTerms.load(folder, mmap=mmap)
        meta = index.meta
        checks = [("documents", len(doc_ids), meta["num_docs"]), ("doc_len", len(corpus.doc_len), meta["num_docs"]),
                  ("vocabulary", len(corpus.vocab), meta["vocab_size"]), ("postings", len(index.data), meta["postings"]),
                  ("forward postings", corpus.num_postings, meta["postings"])]
        bad = [f"{name} {got} vs {want}" for name, got, want in checks if got != want]
        if bad:
            raise DataError(f"{folder}: the index arrays do not match params.json ({', '.join(bad)}); "
                            "delete the folder to rebuild it")
        return cls(doc_ids, Analyzer(**meta.get("analyzer_settings", {})), corpus, index.to(device), doc_texts)

    def release_pages(self) -> None:
        """Take the pages of a loaded (memory-mapped) index out of resident memory until they are read again
        (``common.memory.release_pages``); an index built in memory keeps its pages."""
        c = self.corpus
        release_pages(self.index.mapped + mappings(c.doc_len, c.indptr, c.terms, c.tf, c.first))

    @property
    def vocab(self):
        return self.corpus.vocab

    @property
    def corpus_sha256(self) -> str:
        """sha256 of every indexed document text (corpus order), the identity of the corpus for caches."""
        return self.index.meta["corpus_sha256"]

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Query texts → term ids (with repeats, as BM25 counts them); unknown words dropped."""
        return self.vocab.encode_many([self.analyzer.tokenize(t) for t in texts])

    def first_occurrences(self, doc_lists: Sequence[Sequence[int] | np.ndarray]) -> list[list[int]]:
        """For each list of documents, the distinct term ids of those documents (read in the given order), in order
        of first appearance: from the index's first positions (``CorpusTerms.first``) or, for an index saved
        without them, from the texts read again, every document once, in one call to ``doc_texts`` (a gzipped corpus
        is decompressed once for the whole batch, not once per list)."""
        lists = [np.asarray(docs, dtype=np.int64).ravel() for docs in doc_lists]
        if self.corpus.first is not None:
            return self.corpus.first_occurrences(lists)
        if self.doc_texts is None:
            raise ValueError("this Retriever was built without access to the document texts")
        wanted = np.unique(np.concatenate(lists)) if lists else np.zeros(0, np.int64)
        terms = dict(zip(wanted.tolist(), self.encode(self.doc_texts(wanted.tolist()))))
        out = []
        for docs in lists:
            seen: dict[int, None] = {}
            for d in docs.tolist():
                seen.update(dict.fromkeys(terms[d]))
            out.append(list(seen))
        return out

    def rankings(self, queries: list[list[int]], k: int) -> torch.Tensor:
        """Each query's BM25 top k as (Q, k) ranking keys (``index.ranking_keys``, -1 padded) on the CPU. The
        ranking of a whole query set is kept ``FIRST_PASS_DEPTH`` deep: the baselines and the fixed rules of one
        split ask for its prefixes again and again (a prefix of a top k is the top of that length)."""
        many = len(queries) >= FIRST_PASS_QUERIES
        key = tuple(map(tuple, queries)) if many else ()
        kept = self._first_pass
        if many and kept is not None and kept[0] == key and kept[1].shape[1] >= min(k, self.index.num_docs):
            return kept[1][:, :k]
        ids, _ = self.index.pad(queries)
        keys = self.index.topk_keys(ids, None, max(k, FIRST_PASS_DEPTH) if many else k).cpu()
        if many:
            self._first_pass = (key, keys)
        return keys[:, :k]

    def search(self, queries: list[list[int]], weights: list[list[float]] | None = None,
               k: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, doc indices) as numpy arrays for lists of term ids, in one batched call (unweighted:
        ``rankings``)."""
        if weights is None:
            keys = self.rankings(queries, k)
            return key_scores(keys).numpy(), key_docs(keys).numpy()
        ids, w = self.index.pad(queries, weights)
        scores, idx = self.index.search(ids, w, k=k)
        return scores.cpu().numpy(), idx.cpu().numpy()

    def search_prefixes(self, start: list[list[int]], start_weights: list[list[float]], added: list[list[int]],
                        added_weight: float, marks: list[int], k: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, doc indices), each (B, len(marks), k), of every query ``start[i]`` (its weights) plus the
        terms of ``added[i][:j]`` at ``added_weight`` > 0, for each j of ``marks``: ``search`` of each of those
        queries, in one pass over each query's postings (``BM25Index.prefix_topk_keys``). A term of ``added``
        that is the index's pad id adds nothing but still counts as a slot."""
        ids, w = self.index.pad(start, start_weights)
        width = max(1, max((len(a) for a in added), default=1), max(marks, default=0))
        extra = torch.full((len(added), width), self.index.pad_id, dtype=torch.long)
        for i, a in enumerate(added):
            if a:
                extra[i, :len(a)] = torch.as_tensor(a, dtype=torch.long)
        terms = torch.cat([ids, extra.to(ids.device)], 1)
        weights = torch.cat([w, torch.full(extra.shape, added_weight, dtype=torch.float32, device=w.device)], 1)
        keys = self.index.prefix_topk_keys(terms, weights, ids.shape[1], marks, k)
        return key_scores(keys).cpu().numpy(), key_docs(keys).cpu().numpy()


def index_folder(cache_dir: str | Path, corpus_sha256: str, k1: float = 1.5, b: float = 0.75, idf: str = "lucene",
                 analyzer: Analyzer | None = None, scoring: str = "bm25s") -> Path:
    """Where the index of a corpus (by content) with these settings is kept under ``cache_dir`` (the default
    scoring adds nothing to the key, so the folders of indexes built before it was a setting stay valid)."""
    identity = (analyzer or Analyzer()).identity
    settings = (k1, b, idf) if scoring == "bm25s" else (k1, b, idf, scoring)
    return Path(cache_dir) / f"index-{fingerprint('index', corpus_sha256, identity, *settings)}"


def _lock_path(folder: Path) -> Path:
    """The lock of an index folder: beside it, since the folder itself is replaced by a rename."""
    return folder.with_name(f"{folder.name}.lock")


def require_build_fits(sample_postings: int, sample_docs: int, num_docs: int, available: int | None = None) -> None:
    """Raise ConfigError, in one line, when building the index of ``num_docs`` documents would need more memory
    than is available (``available`` bytes; default ``MemAvailable``): estimated from the postings of the first
    ``sample_docs`` documents, before minutes of analysing end in an out-of-memory kill. Only a build is checked:
    a saved index is memory-mapped, and a run that maps one needs a fraction of this."""
    free = available_memory() if available is None else available
    postings = sample_postings / max(sample_docs, 1) * num_docs
    need = BUILD_BYTES_PER_POSTING * postings
    if free is None or need <= free:
        return
    raise ConfigError(f"embeddings.cache_dir: building the index of {num_docs:,} documents needs about "
                      f"{need / 2**30:.1f} GiB ({BUILD_BYTES_PER_POSTING} bytes for each of about {postings / 1e6:,.0f}M "
                      f"postings, estimated from the first {sample_docs:,} documents) and {free / 2**30:.1f} GiB are "
                      f"available; free memory, or build it once on a machine with more and point "
                      f"embeddings.cache_dir at that cache (runs memory-map a saved index)")


def _hashing(chunks: Iterable[list[str]], digest) -> Iterator[list[str]]:
    """Pass chunks through, feeding every text (NUL-terminated, UTF-8) to ``digest``: chunking does not matter."""
    for chunk in chunks:
        digest.update(("\x00".join(chunk) + "\x00").encode("utf-8", "surrogatepass"))
        yield chunk
