"""One analyzer and one vocabulary: the same integer term ids in the index, the miner, the env and the policy.

Two analyzers: ``bm25s`` (the default: lowercase, bm25s' regex tokens, its 33 stopwords) and ``lucene`` (Lucene's
English chain as Anserini's default analyzer runs it, ``lucene.py``), either optionally followed by Lucene's
Porter stemmer. With a stemmer the index terms are stems, and each stem also gets a readable surface form: the
unstemmed word it was most often made from in the corpus (``Vocabulary.surface``), which is what embeddings and
displays use ("diseas" reads and embeds as "disease").

`CorpusTerms` is the analyzed corpus as a doc-major forward index (per document: its distinct term ids and their
counts), built from a stream of text chunks: a chunk is analyzed to term ids and reduced to compact arrays at once,
so neither the corpus text nor per-document token lists are ever held. It is what the BM25 index is built from
and what the candidate miner, RM3 and LSA read (only the rows they need), saved as ``.npy`` next to the index.
A large corpus is tokenized by worker processes (``workers``; the per-token work is Python's, one core each) and
their term ids merged into the ids one process would give, so the arrays are the same whatever the count.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import re
import sys
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from bm25s.stopwords import STOPWORDS_EN

from adaptive_ir.common.io import atomic_save_npy
from adaptive_ir.common.progress import Progress
from adaptive_ir.retrieval import lucene
from adaptive_ir.retrieval.porter import porter_stems
from adaptive_ir.retrieval.vocabulary import Vocabulary

TOKEN_PATTERN = r"(?u)\b\w\w+\b"
"""bm25s' (and scikit-learn's) default token pattern: runs of two or more word characters."""

# On ASCII text TOKEN_PATTERN finds exactly the maximal runs of [a-z0-9_] (after lower()) of length >= 2, which
# bytes.translate + split find at C speed: every other byte becomes a space and one-character runs are dropped
# like stopwords. Documents with other characters take the regex.
_ASCII_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_")
_ASCII_TO_SPACE = bytes(c if c in _ASCII_WORD else 0x20 for c in range(256))
_SEPARATOR = "\x01"  # between documents of an ASCII run; the table turns any \x01 of a document into a space
_ANALYZE_CHARS = 1 << 18
"""Characters of text analyzed at once (about 40k tokens of English)."""


ANALYZERS = ("bm25s", "lucene")
STEMMERS = ("none", "porter")


class Analyzer:
    """Text → index terms.

    ``bm25s`` (default): lowercase, split on ``TOKEN_PATTERN``, drop stopwords; with no stemmer this reproduces
    ``../shared/datasets/BASELINES.md`` exactly (bm25s' 33-word Lucene English list), so our BM25 numbers are
    comparable with published bm25s/rank-bm25 runs. ``lucene``: StandardTokenizer, EnglishPossessiveFilter,
    LowerCaseFilter and the same 33 stopwords (``lucene.py``). ``stemmer="porter"``: Lucene's PorterStemFilter last.
    """

    def __init__(self, stopwords: frozenset[str] | None = None, kind: str = "bm25s", stemmer: str = "none"):
        if kind not in ANALYZERS or stemmer not in STEMMERS:
            raise ValueError(f"analyzer must be one of {ANALYZERS} and stemmer one of {STEMMERS}, "
                             f"got {kind!r}, {stemmer!r}")
        self.stopwords = frozenset(STOPWORDS_EN) if stopwords is None else stopwords
        self.kind, self.stemmer = kind, stemmer
        self._token_re = re.compile(TOKEN_PATTERN)
        self._stems: dict[str, str] = {}

    def words(self, text: str) -> list[str]:
        """The unstemmed terms of ``text`` (lower-cased, stopwords dropped)."""
        if self.kind == "bm25s":
            return [t for t in self._token_re.findall(text.lower()) if t not in self.stopwords]
        return [w for w in map(lucene.normalize, lucene.standard_tokens(text)) if w and w not in self.stopwords]

    def tokenize(self, text: str) -> list[str]:
        words = self.words(text)
        if self.stemmer == "none":
            return words
        new = [w for w in dict.fromkeys(words) if w not in self._stems]
        if new:  # one compiled call for the words not seen before
            self._stems.update(zip(new, porter_stems(new)))
        return [self._stems[w] for w in words]

    @property
    def settings(self) -> dict:
        """The constructor's settings besides the stopwords (saved with an index to rebuild its analyzer)."""
        return {"kind": self.kind, "stemmer": self.stemmer}

    @property
    def identity(self) -> dict:
        """What the analyzer's output depends on (part of the index's cache key; the default's is unchanged)."""
        if self.kind == "bm25s":
            out = {"pattern": TOKEN_PATTERN, "lowercase": True, "stopwords": sorted(self.stopwords)}
        else:
            out = {"tokenizer": "lucene-standard", "max_token_length": lucene.MAX_TOKEN_LENGTH,
                   "possessive": True, "lowercase": True, "stopwords": sorted(self.stopwords)}
        if self.stemmer != "none":
            out["stemmer"] = "lucene-porter"
        return out


class _TermTable:
    """Token → provisional id while a corpus is analyzed.

    Ids ``0 .. dropped-1`` are reserved for what the analyzer drops (the document separator, the stopwords, the
    one-character ASCII words the fast path sees), so dropping is ``id < dropped``. Every other token gets the
    next id on first occurrence, in corpus order; minus ``dropped`` that is its final term id. Lookups go through
    ``defaultdict.__getitem__`` mapped over a chunk's tokens: one C-level dict probe per token.
    """

    def __init__(self, analyzer: Analyzer):
        self.ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        self.ids[_SEPARATOR]
        for tok in sorted(analyzer.stopwords) + [chr(c) for c in sorted(_ASCII_WORD)]:
            self.ids[tok]
        self.dropped = len(self.ids)
        self.findall = analyzer._token_re.findall

    def __len__(self) -> int:
        return len(self.ids)

    def analyze(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, position of the document in ``texts``) of every kept token of a chunk, in order."""
        if not texts:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        ascii_doc = np.fromiter(map(str.isascii, texts), dtype=bool, count=len(texts))
        cuts = np.flatnonzero(np.diff(ascii_doc)) + 1
        ids, docs = [], []
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(texts)]):
            run_ids, run_docs = (self._ascii_run if ascii_doc[lo] else self._regex_run)(texts[lo:hi])
            keep = run_ids >= self.dropped
            ids.append(run_ids[keep] - self.dropped)
            docs.append(run_docs[keep] + lo)
        return np.concatenate(ids), np.concatenate(docs)

    def _lookup(self, tokens, count: int) -> np.ndarray:
        return np.fromiter(map(self.ids.__getitem__, tokens), dtype=np.int32, count=count)

    def _ascii_run(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        cleaned = map(bytes.translate, map(str.encode, map(str.lower, texts)), itertools.repeat(_ASCII_TO_SPACE))
        tokens = f" {_SEPARATOR} ".encode().join(cleaned).decode("ascii").split()
        ids = self._lookup(tokens, len(tokens))
        return ids, np.cumsum(ids == self.ids[_SEPARATOR])  # the separator's id is 0: doc = separators so far

    def _regex_run(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        per_doc = list(map(self.findall, map(str.lower, texts)))
        counts = np.fromiter(map(len, per_doc), dtype=np.int64, count=len(per_doc))
        ids = self._lookup(itertools.chain.from_iterable(per_doc), int(counts.sum()))
        return ids, np.repeat(np.arange(len(texts)), counts)

    def terms(self) -> list[str]:
        """The vocabulary: final term id → string."""
        return list(itertools.islice(self.ids, self.dropped, None))

    def num_terms(self) -> int:
        return len(self.ids) - self.dropped

    def new_terms(self, start: int) -> list[str]:
        """The terms from final id ``start`` on, read from the end of the dict (the newest keys are last)."""
        return list(itertools.islice(reversed(self.ids), self.num_terms() - start))[::-1]


class _StandardTable:
    """Token → provisional id for the ``lucene`` analyzer: a token as StandardTokenizer emits it maps to the id of
    its normalised form (possessive cut, lower-cased; -1 when it is a stopword or no Lucene token), computed the
    first time the token is seen. Ids are in order of first occurrence of the normalised form."""

    def __init__(self, analyzer: Analyzer):
        self.words: dict[str, int] = {}
        self.list: list[str] = []
        stop = analyzer.stopwords
        words, out = self.words, self.list

        class Raw(dict):
            def __missing__(self, token: str) -> int:
                word = lucene.normalize(token)
                if not word or word in stop:
                    i = -1
                else:
                    known = words.get(word)
                    if known is None:
                        known = words[word] = len(out)
                        out.append(word)
                    i = known
                self[token] = i
                return i

        self.raw = Raw()

    def __len__(self) -> int:
        return len(self.list)

    num_terms = __len__

    def analyze(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        per_doc = list(map(lucene.standard_tokens, texts))
        counts = np.fromiter(map(len, per_doc), dtype=np.int64, count=len(per_doc))
        ids = np.fromiter(map(self.raw.__getitem__, itertools.chain.from_iterable(per_doc)), dtype=np.int32,
                          count=int(counts.sum()))
        docs = np.repeat(np.arange(len(texts)), counts)
        keep = ids >= 0
        return ids[keep], docs[keep]

    def new_terms(self, start: int) -> list[str]:
        return self.list[start:]

    def terms(self) -> list[str]:
        return self.list


class _Stems:
    """Word id → stem id as words appear, and how often each word occurs (to pick each stem's surface form)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.of = np.zeros(0, np.int32)
        self.count = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def map(self, word_ids: np.ndarray, table) -> np.ndarray:
        """Stem ids of a chunk's word ids (new words are stemmed first, in id order, so stem ids follow first
        occurrence too)."""
        n = table.num_terms()
        if n > len(self.of):
            ids = self.ids
            new = [ids.setdefault(s, len(ids)) for s in porter_stems(table.new_terms(len(self.of)))]
            self.of = np.concatenate([self.of, np.asarray(new, dtype=np.int32)])
            self.count = np.concatenate([self.count, np.zeros(n - len(self.count), np.int64)])
        self.count += np.bincount(word_ids, minlength=n)
        return self.of[word_ids]

    def surface(self, words: list[str]) -> list[str]:
        """Per stem id, its most frequent word (ties: the word seen first)."""
        order = np.lexsort((np.arange(len(self.of)), -self.count, self.of))
        first = order[np.concatenate([[True], self.of[order][1:] != self.of[order][:-1]])] if len(order) else order
        return [words[i] for i in first.tolist()]


_ARRAYS = ("doc_len", "doc_indptr", "doc_terms", "doc_tf")
_FIRST = "doc_first"
"""The optional array of first positions (indexes saved before it was kept have none)."""


COUNT_CHUNK = 1 << 20
"""Postings per ``np.bincount`` call of ``term_counts``."""
PARALLEL_MIN_DOCS = 20_000
"""Fewest documents whose analysis is shared among worker processes: below it, starting them costs more than they
save."""


def term_counts(terms: np.ndarray, num_terms: int) -> np.ndarray:
    """How often each term id occurs in ``terms`` (int64), counted a chunk at a time: ``np.bincount`` casts its
    whole input to int64 first, 8 bytes a posting (200 MB for 26M postings) for an answer of 8 bytes a term."""
    counts = np.zeros(num_terms, np.int64)
    for lo in range(0, len(terms), COUNT_CHUNK):
        counts += np.bincount(terms[lo:lo + COUNT_CHUNK], minlength=num_terms)
    return counts


@dataclass
class CorpusTerms:
    """The analyzed corpus, doc-major: document d's distinct term ids (ascending) are
    ``terms[indptr[d]:indptr[d+1]]``, their counts ``tf[...]``."""

    vocab: Vocabulary
    doc_len: np.ndarray
    """(num_docs,) float32 tokens per document after stopword removal."""
    indptr: np.ndarray
    """(num_docs + 1,) int64 offsets into ``terms``/``tf``."""
    terms: np.ndarray
    """(postings,) int32 term ids."""
    tf: np.ndarray
    """(postings,) term counts, uint16 (uint32 when a count exceeds 65,535)."""
    first: np.ndarray | None = None
    """(postings,) where the term first occurs in the document (its token position), uint16 (uint32 past 65,535):
    the order in which a reader meets a document's terms, which RM3's ties follow, without reading the text
    again. None for an index saved before it was kept."""

    @classmethod
    def build(cls, chunks: Iterable[list[str]], analyzer: Analyzer, num_docs: int | None = None,
              progress: bool = False, workers: int = 1) -> CorpusTerms:
        """Analyze a stream of chunks of document texts (corpus order). Per chunk, only its token ids live
        as arrays; what is kept is 6 bytes per (document, distinct term) and 12 per document. ``workers`` > 1:
        processes that tokenize, when ``num_docs`` is at least PARALLEL_MIN_DOCS (the same arrays)."""
        parallel = workers > 1 and (num_docs or 0) >= PARALLEL_MIN_DOCS
        table: _TermTable | _StandardTable | _MergedTable = _MergedTable() if parallel else _new_table(analyzer)
        stems = _Stems() if analyzer.stemmer != "none" else None
        parts: dict[str, list[np.ndarray]] = {"doc_len": [], "distinct": [], "terms": [], "tf": [], "first": []}
        runs = _runs(chunks)
        analyzed = _in_workers(runs, analyzer, table, workers) if isinstance(table, _MergedTable) else (
            (len(texts), *table.analyze(texts)) for texts in runs)
        with Progress(num_docs or 0, "index: analyze corpus", "doc", progress and bool(num_docs)) as bar:
            for n, ids, docs in analyzed:
                if stems is not None:
                    ids = stems.map(ids, table)
                # one sort turns tokens into (document, term, count) triples, documents in order and terms
                # ascending within each document
                width = len(table) if stems is None else len(stems)
                doc_len = np.bincount(docs, minlength=n)
                keys, first, tf = _distinct_terms(ids, docs, doc_len, width)
                doc_of = keys // width
                parts["doc_len"].append(doc_len.astype(np.float32))
                parts["distinct"].append(np.bincount(doc_of, minlength=n))
                parts["terms"].append((keys - doc_of * width).astype(np.int32))
                parts["tf"].append(_small(tf))
                parts["first"].append(_small(first))
                bar.update(n)
        terms, surface = table.terms(), None
        if stems is not None:
            terms, surface = list(stems.ids), stems.surface(terms)
        del table, stems  # freed before the final vocabulary dict is made: one big dict at a time
        distinct = _concat(parts.pop("distinct"))
        indptr = np.zeros(len(distinct) + 1, dtype=np.int64)
        np.cumsum(distinct, out=indptr[1:])
        return cls(vocab=Vocabulary.from_terms(terms, surface), doc_len=_concat(parts.pop("doc_len"), np.float32),
                   indptr=indptr, terms=_concat(parts.pop("terms"), np.int32), tf=_concat(parts.pop("tf")),
                   first=_concat(parts.pop("first")))

    @property
    def num_docs(self) -> int:
        return len(self.doc_len)

    @property
    def num_postings(self) -> int:
        return len(self.terms)

    def postings(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``terms``/``tf`` of the postings of ``docs`` in that order, their CSR row offsets)."""
        docs = np.asarray(docs, dtype=np.int64)
        lo = self.indptr[docs]
        count = self.indptr[docs + 1] - lo
        offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(count, out=offsets[1:])
        return np.repeat(lo - offsets[:-1], count) + np.arange(offsets[-1]), offsets

    def rows(self, docs: np.ndarray) -> sp.csr_matrix:
        """(len(docs), vocab) float32 term counts of these documents, reading only their postings."""
        pos, offsets = self.postings(docs)
        return sp.csr_matrix((self.tf[pos].astype(np.float32), self.terms[pos], offsets),
                             shape=(len(offsets) - 1, len(self.vocab)))

    def matrix(self) -> sp.csr_matrix:
        """The whole (num_docs, vocab) float32 count matrix (a copy: for models fitted on every document)."""
        return sp.csr_matrix((self.tf.astype(np.float32), self.terms, self.indptr),
                             shape=(self.num_docs, len(self.vocab)))

    def doc_token_ids(self) -> list[list[int]]:
        """Each document as a list of term ids with repeats (the form bm25s and rank-bm25 index)."""
        return [np.repeat(self.terms[lo:hi], self.tf[lo:hi]).tolist()
                for lo, hi in zip(self.indptr[:-1].tolist(), self.indptr[1:].tolist())]

    # ------------------------------------------------------------------ disk
    def save(self, folder: str | Path) -> None:
        """``doc_*.npy`` and the vocabulary's ``vocab_*.npy`` (one atomic write each)."""
        folder = Path(folder)
        for name, array in zip(_ARRAYS, (self.doc_len, self.indptr, self.terms, self.tf)):
            atomic_save_npy(folder / f"{name}.npy", array)
        if self.first is not None:
            atomic_save_npy(folder / f"{_FIRST}.npy", self.first)
        self.vocab.save(folder)

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True) -> CorpusTerms:
        folder = Path(folder)
        arrays = [np.load(folder / f"{name}.npy", mmap_mode="r" if mmap else None) for name in _ARRAYS]
        first = folder / f"{_FIRST}.npy"
        if (folder / "vocab_ends.npy").is_file():
            vocab = Vocabulary.load(folder, mmap)
        else:  # an index saved before the vocabulary was kept as arrays
            surface = folder / "surface.json"
            vocab = Vocabulary.from_terms(json.loads((folder / "vocab.json").read_text(encoding="utf-8")),
                                          json.loads(surface.read_text(encoding="utf-8")) if surface.is_file()
                                          else None)
        doc_len, indptr, terms, tf = arrays
        return cls(vocab, doc_len, indptr, terms, tf,
                   np.load(first, mmap_mode="r" if mmap else None) if first.is_file() else None)

    def first_occurrences(self, doc_lists: Sequence[np.ndarray]) -> list[list[int]]:
        """For each list of documents, their distinct term ids in the order a reader meets them: document by
        document in the given order, each document's terms by first position (``first``, which must be kept)."""
        assert self.first is not None, "an index saved before first positions were kept"
        out = []
        for docs in doc_lists:
            pos, offsets = self.postings(docs)
            which = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
            met = self.terms[pos][np.lexsort((self.first[pos], which))]
            _, at = np.unique(met, return_index=True)
            out.append(met[np.sort(at)].tolist())
        return out


def _new_table(analyzer: Analyzer) -> _TermTable | _StandardTable:
    return _TermTable(analyzer) if analyzer.kind == "bm25s" else _StandardTable(analyzer)


def _runs(chunks: Iterable[list[str]]) -> Iterator[list[str]]:
    """The texts of a stream of chunks in runs of about ``_ANALYZE_CHARS`` characters (``_by_size``)."""
    for chunk in chunks:
        if isinstance(chunk, str):
            raise TypeError("CorpusTerms.build reads chunks (lists) of document texts, not single texts")
        yield from _by_size(chunk)


class _MergedTable:
    """The ids one table would give (words in order of first occurrence in the corpus), from the tables of worker
    processes that each saw some of the runs. Merged in corpus order, the words new to the corpus in a run are new
    to the worker that analyzed it too, and in the same order; so only each result's words new to its worker are
    looked up here, and a worker's ids become these by one array lookup."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.list: list[str] = []
        self.maps: dict[int, tuple[np.ndarray, int]] = {}
        """Per worker: its word id → this table's id (an array grown by doubling, and how much of it is used)."""

    def __len__(self) -> int:
        return len(self.list)

    num_terms = __len__

    def new_terms(self, start: int) -> list[str]:
        return self.list[start:]

    def terms(self) -> list[str]:
        return self.list

    def merge(self, worker: int, new_words: list[str], ids: np.ndarray, doc_counts: np.ndarray
              ) -> tuple[int, np.ndarray, np.ndarray]:
        """One worker's result (``_analyze_run``) as ``table.analyze`` would have given it here: (documents,
        term ids, document of each token)."""
        table, used = self.maps.get(worker, (np.zeros(1024, np.int32), 0))
        if new_words:
            known, n0 = self.ids, len(self.list)
            got = [known.setdefault(w, len(known)) for w in new_words]
            self.list.extend(w for w, g in zip(new_words, got) if g >= n0)
            if used + len(got) > len(table):
                table = np.resize(table, max(2 * len(table), used + len(got)))
            table[used:used + len(got)] = got
            used += len(got)
        self.maps[worker] = (table, used)
        return len(doc_counts), table[ids], np.repeat(np.arange(len(doc_counts)), doc_counts)


_worker_table: _TermTable | _StandardTable | None = None
"""A worker process's own table (``_in_workers``)."""


def _start_worker(analyzer: Analyzer) -> None:
    global _worker_table
    _worker_table = _new_table(analyzer)


def _analyze_run(texts: list[str]) -> tuple[int, list[str], np.ndarray, np.ndarray]:
    """In a worker: (its process id, the words it had not seen before, in order, its ids of the run's tokens,
    tokens per document)."""
    table = _worker_table
    assert table is not None  # set by _start_worker
    start = table.num_terms()
    ids, docs = table.analyze(texts)
    return os.getpid(), table.new_terms(start), ids, np.bincount(docs, minlength=len(texts))


def _in_workers(runs: Iterator[list[str]], analyzer: Analyzer, table: _MergedTable, workers: int
                ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``table.analyze`` of each run, in order, done by ``workers`` processes; at most two runs per worker are
    in flight, so the texts read ahead stay a few megabytes."""
    # fork: the workers start at once and share the parent's pages (torch's DataLoader does the same on Linux)
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with ProcessPoolExecutor(workers, context, initializer=_start_worker, initargs=(analyzer,)) as pool:
        pending: deque = deque()
        for texts in runs:
            pending.append(pool.submit(_analyze_run, texts))
            if len(pending) > 2 * workers:
                yield table.merge(*pending.popleft().result())
        while pending:
            yield table.merge(*pending.popleft().result())


def _by_size(texts: list[str]) -> Iterable[list[str]]:
    """``texts`` in consecutive runs of about ``_ANALYZE_CHARS`` characters: a run's tokens, one Python string
    each, are the build's working memory, so it is bounded by text size, not by a count of documents."""
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))
    cuts = np.searchsorted(ends, np.arange(_ANALYZE_CHARS, ends[-1] if len(ends) else 0, _ANALYZE_CHARS), "left")
    bounds = [0, *dict.fromkeys(c for c in (cuts + 1).tolist() if c < len(texts)), len(texts)]
    return (texts[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo)


def _distinct_terms(ids: np.ndarray, docs: np.ndarray, doc_len: np.ndarray, width: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys ``doc · width + term`` ascending, each one's first position in its document, its count) of a run of
    tokens given document by document. One in-place sort of key and position packed in an int64 (shifts and masks,
    no division), as fast as the sort ``np.unique`` makes of the keys alone; a run too large to pack takes
    ``np.unique``'s stable argsort."""
    pos = np.arange(len(ids), dtype=np.int64)
    pos -= np.repeat(np.cumsum(doc_len) - doc_len, doc_len)
    bits = int(doc_len.max(initial=0)).bit_length()
    if (len(doc_len) * width) >> (62 - bits):
        keys, at, tf = np.unique(docs.astype(np.int64) * width + ids, return_index=True, return_counts=True)
        return keys, pos[at], tf
    packed = docs.astype(np.int64)
    packed *= width
    packed += ids
    packed <<= bits
    packed |= pos
    packed.sort()
    pair = packed >> bits
    new = np.empty(len(pair), dtype=bool)
    new[:1] = True
    np.not_equal(pair[1:], pair[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    return pair[starts], packed[starts] & ((1 << bits) - 1), np.diff(np.append(starts, len(pair)))


def _small(counts: np.ndarray) -> np.ndarray:
    """Non-negative integers as uint16, or uint32 when one exceeds 65,535."""
    return counts.astype(np.uint16 if counts.size == 0 or counts.max() < 2 ** 16 else np.uint32)


def _concat(parts: list[np.ndarray], dtype=None) -> np.ndarray:
    """np.concatenate that frees each part once copied (np.empty's pages are only committed when written, so the
    peak stays near one copy of the data rather than two)."""
    dtype = np.result_type(*parts) if dtype is None and parts else (dtype or np.int64)
    out = np.empty(sum(len(p) for p in parts), dtype=dtype)
    at = 0
    parts.reverse()
    while parts:
        p = parts.pop()
        out[at:at + len(p)] = p
        at += len(p)
    return out
