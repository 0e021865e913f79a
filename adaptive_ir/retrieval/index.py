"""BM25 as a sparse term × document impact matrix, searched for a whole batch of queries in one call.

The impacts are Lucene BM25 exactly as bm25s computes them (method "lucene", same float32/float64 steps, so the
arrays are bit-identical to ``bm25s.BM25(method="lucene").index``), or with ``scoring="lucene"`` as Lucene 9's
``BM25Similarity`` computes them (``LuceneWeights``: float32, the 1-byte length norm), built from the doc-major
``CorpusTerms`` by a counting sort on term ids in blocks of documents: memory is the arrays themselves plus one
block. The batched top-k search is ours and follows the postings of the query terms, never a pass over every
document: on the CPU one compiled kernel (``kernels.search_topk``), on accelerators tensor code (a gather of every
posting, an ``index_add_`` into a scratch of score rows, the touched cells read back and ranked). Both rank by
``ranking_keys`` (score, then lower corpus position) and give the same keys. ``indices`` (document of each
posting) is int32.
"""

from __future__ import annotations

import json
import math
import mmap
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from adaptive_ir.common.errors import DataError
from adaptive_ir.common.hostsync import allowed_sync
from adaptive_ir.common.io import atomic_save_npy, atomic_write_json
from adaptive_ir.common.memory import mappings
from adaptive_ir.common.progress import Progress
from adaptive_ir.retrieval import kernels
from adaptive_ir.retrieval.analyzer import CorpusTerms, term_counts

IDF_VARIANTS = ("lucene", "okapi")
SCORINGS = ("bm25s", "lucene")
_FORMAT = "adaptive-ir-bm25/2"
_BLOCK_POSTINGS = 1 << 16
"""Postings per block of the counting sort (its temporaries take about 60 bytes per posting)."""
SCRATCH_CELLS = 1 << 26
"""Most score cells (rows × num_docs, float32: 256 MiB) of ``search``'s scratch."""
CHUNK_POSTINGS = 1 << 23
"""Most postings ``search`` gathers at once (its temporaries take about 60 bytes per posting)."""
PARALLEL_SEARCH_ROWS = 256
"""Fewest query rows per thread of a CPU search (a thread pool costs more than it saves on fewer)."""
POSITIVE_KEY = 1 << 32
"""The smallest ranking key of a document with a score > 0 (see ``ranking_keys``)."""
_LOW = (1 << 32) - 1


def ranking_keys(scores: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
    """int64 keys whose order is the ranking order: score first, then lower corpus position.

    The bits of a float32 ≥ 0 read as an int32 grow with its value, so (bits << 32) + (2^32 − 1 − position) is a
    distinct key per document, and a score > 0 gives a key ≥ ``POSITIVE_KEY``."""
    return torch.add(_LOW - docs, scores.view(torch.int32).long(), alpha=1 << 32)


def key_scores(keys: torch.Tensor) -> torch.Tensor:
    """The float32 scores of ranking keys (0 for the -1 of an empty slot)."""
    return (keys.clamp(min=0) >> 32).int().view(torch.float32)


def key_docs(keys: torch.Tensor) -> torch.Tensor:
    """The corpus positions of ranking keys (0 for the -1 of an empty slot)."""
    return torch.where(keys >= 0, _LOW - (keys & _LOW), 0)


def touched_topk(keys: torch.Tensor, row: torch.Tensor, per_row: torch.Tensor, k: int, copies: int,
                 width: int) -> torch.Tensor:
    """The k best distinct keys of each row, (R, k), -1 padded, from flat ``keys`` grouped by ``row`` (``per_row``
    of them each, ``width`` ≥ the largest count, known on the host) in which one document may appear up to
    ``copies`` times with equal keys."""
    starts = torch.cumsum(per_row, 0) - per_row
    rank = torch.arange(keys.numel(), device=keys.device) - starts.index_select(0, row)
    mat = torch.full((per_row.numel(), max(width, 1)), -1, dtype=torch.long, device=keys.device)
    mat.index_put_((row, rank), keys)
    return best_distinct(mat, k, copies)


def best_distinct(keys: torch.Tensor, k: int, copies: int) -> torch.Tensor:
    """The k best distinct keys of each row of ``keys`` (-1 padded, in and out), (R, k), where one document may
    appear up to ``copies`` times with equal keys: the k × copies best entries hold the k best distinct ones."""
    best = keys.topk(min(k * copies, keys.shape[1]), dim=1).values
    if copies > 1:  # equal neighbours in a sorted row are one document
        best[:, 1:].masked_fill_((best[:, 1:] == best[:, :-1]) & (best[:, 1:] >= 0), -1)
        best = best.topk(min(k, best.shape[1]), dim=1).values
    return torch.nn.functional.pad(best[:, :k], (0, k - min(k, best.shape[1])), value=-1)


def lucene_idf(df: np.ndarray, num_docs: int, exact: bool = True) -> np.ndarray:
    """Lucene's IDF per term, ``log(1 + (N - df + .5)/(df + .5))``, the one formula every part of the index uses.

    ``exact``: in double precision stored as float32 (0 for a term that occurs nowhere), as bm25s and Lucene's
    ``BM25Similarity`` (N: documents with a token) compute it; evaluated once per distinct df with ``math.log``,
    so it is cheap and bit-identical to bm25s. Otherwise vectorised in df's own precision (``log1p``): the miner's
    tf-idf feature and the Okapi rescale take it in float32, and the shipped policies were trained on those bits."""
    if not exact:
        return np.log1p((num_docs - df + 0.5) / (df + 0.5))
    uniq, inverse = np.unique(np.asarray(df, dtype=np.int64), return_inverse=True)
    values = np.array([math.log(1 + (num_docs - d + 0.5) / (d + 0.5)) if d else 0.0 for d in uniq.tolist()],
                      dtype=np.float32)
    return values[inverse.reshape(-1)]


def _okapi_rescale(df: np.ndarray, num_docs: int, k1: float, epsilon: float) -> np.ndarray:
    """Per-term factor turning a Lucene impact into rank-bm25's BM25Okapi one.

    Lucene: idf·tf/(tf+k1·norm). Okapi: idf'·tf·(k1+1)/(tf+k1·norm) with idf' = log((N-df+.5)/(df+.5)),
    negative idf' replaced by epsilon·mean(idf') as rank-bm25 does. The tf part is shared, so the factor is
    (k1+1)·idf'/idf and the impacts stay exactly bm25s'.
    """
    idf_lucene = lucene_idf(df, num_docs, exact=False)
    idf_okapi = np.log((num_docs - df + 0.5) / (df + 0.5))
    seen = df > 0  # rank-bm25 only knows terms that occur
    floor = epsilon * idf_okapi[seen].mean() if seen.any() else 0.0
    idf_okapi = np.where(idf_okapi < 0, floor, idf_okapi)
    return ((k1 + 1.0) * idf_okapi / idf_lucene).astype(np.float32)


@dataclass
class BM25Weights:
    """What turns a posting (term, count, document length) into its impact: the per-term IDF and the length norm."""

    k1: float
    b: float
    avgdl: float
    idf: np.ndarray
    """(vocab,) float32 Lucene IDF (bm25s' values)."""
    factor: np.ndarray | None
    """(vocab,) float32 Okapi rescale factor (``idf: okapi``), or None."""

    @classmethod
    def from_df(cls, df: np.ndarray, num_docs: int, k1: float, b: float, avgdl: float, idf: str,
                epsilon: float) -> BM25Weights:
        factor = _okapi_rescale(df.astype(np.float32), num_docs, k1, epsilon) if idf == "okapi" else None
        return cls(k1, b, avgdl, lucene_idf(df, num_docs), factor)

    def impacts(self, terms: np.ndarray, tf: np.ndarray, doc_len: np.ndarray) -> np.ndarray:
        """float32 impacts of postings (term id, count, length of its document): the numbers in ``BM25Index.data``.

        bm25s' steps: idf (float32) · tf / (k1·((1 − b) + b·|d|/avgdl) + tf), the fraction in float64, the
        product rounded to float32; with ``idf: okapi`` then times the term's float32 rescale factor."""
        norm = self.k1 * ((1 - self.b) + self.b * np.asarray(doc_len, np.float64) / self.avgdl)
        tf = np.asarray(tf, np.float32)
        out = (self.idf[terms] * (tf / (norm + tf))).astype(np.float32)
        return out if self.factor is None else out * self.factor[terms]


def _byte4_to_int(code: int) -> int:
    """Lucene's ``SmallFloat.byte4ToInt``: a length norm byte (0..255) → the document length it stands for."""
    if code < _NUM_FREE_VALUES:
        return code
    code -= _NUM_FREE_VALUES
    bits, shift = code & 0x07, (code >> 3) - 1
    return _NUM_FREE_VALUES + (bits if shift == -1 else (bits | 0x08) << shift)


_NUM_FREE_VALUES = 24
"""``SmallFloat.NUM_FREE_VALUES``: 255 − longToInt4(Integer.MAX_VALUE) (= 231); lengths below it are exact."""
LENGTH_TABLE = np.array([_byte4_to_int(i) for i in range(256)], dtype=np.int64)
"""``BM25Similarity.LENGTH_TABLE``: the length each norm byte decodes to (increasing)."""


def length_norm_byte(doc_len: np.ndarray) -> np.ndarray:
    """``SmallFloat.intToByte4``: the byte Lucene stores for a field of this many tokens. It keeps 4 significant
    bits, i.e. rounds down to the largest decodable length, so it is a search in ``LENGTH_TABLE``."""
    return np.searchsorted(LENGTH_TABLE, np.asarray(doc_len, np.int64), side="right") - 1


@dataclass
class LuceneWeights:
    """Lucene 9's ``BM25Similarity`` (what Anserini's ``-bm25`` runs), step by step in float32 as Java computes it:
    idf = (float) log(1 + (N − df + 0.5)/(df + 0.5)) with N the documents with at least one token; avgdl =
    (float) (tokens / N); per norm byte, ``1f / (k1 · ((1 − b) + b · LENGTH_TABLE[byte] / avgdl))``; impact =
    idf − idf / (1 + tf · that), the document length read back from its 1-byte norm (exact below 24 tokens, then
    rounded down to 4 significant bits: 100 → 96)."""

    k1: float
    b: float
    avgdl: float
    idf: np.ndarray
    """(vocab,) float32."""
    norm_inverse: np.ndarray
    """(256,) float32: BM25Similarity's per-byte cache."""

    @classmethod
    def from_df(cls, df: np.ndarray, doc_count: int, k1: float, b: float, avgdl: float) -> LuceneWeights:
        idf = lucene_idf(df, doc_count)
        k1_, b_, avgdl_ = np.float32(k1), np.float32(b), np.float32(avgdl)
        cache = np.float32(1) / (k1_ * ((np.float32(1) - b_) + b_ * LENGTH_TABLE.astype(np.float32) / avgdl_))
        return cls(k1, b, avgdl, idf, cache.astype(np.float32))

    def impacts(self, terms: np.ndarray, tf: np.ndarray, doc_len: np.ndarray) -> np.ndarray:
        """float32 impacts of postings (term id, count, length of its document), as ``BM25Weights.impacts``."""
        weight = self.idf[terms]
        norm_inverse = self.norm_inverse[length_norm_byte(doc_len)]
        return weight - weight / (np.float32(1) + np.asarray(tf, np.float32) * norm_inverse)


class BM25Index:
    """BM25 impacts in CSC form: ``data[indptr[t]:indptr[t+1]]`` are term t's impacts on docs ``indices[...]``.

    Term id ``vocab_size`` is an always-empty padding term, so padded query slots cost nothing.
    """

    def __init__(self, data, indices, indptr, num_docs: int, meta: dict):
        self.num_docs = int(num_docs)
        self.meta = meta
        self.mapped: list[mmap.mmap] = []
        """The file mappings under the arrays of a loaded index (``load``), for ``Retriever.release_pages``."""
        self.vocab_size = len(indptr) - 1
        self.weights = _weights(np.diff(np.asarray(indptr)), meta)
        # the padding term: one more column with no postings
        indptr = np.concatenate([np.asarray(indptr), np.asarray(indptr)[-1:]])
        with warnings.catch_warnings():
            # memory-mapped arrays are read-only; the index never writes to its tensors
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self.data = torch.as_tensor(np.asarray(data, np.float32))
            self.indices = torch.as_tensor(np.asarray(indices, np.int32))
            self.indptr = torch.as_tensor(np.asarray(indptr, np.int64))

    def document_frequency(self) -> np.ndarray:
        """Documents per term (float32), read off the posting lists' lengths: no pass over the postings."""
        return np.diff(self.indptr.cpu().numpy())[:self.vocab_size].astype(np.float32)

    @property
    def pad_id(self) -> int:
        return self.vocab_size

    @property
    def device(self) -> torch.device:
        return self.data.device

    @classmethod
    def build(cls, corpus: CorpusTerms, k1: float = 1.5, b: float = 0.75, idf: str = "lucene",
              epsilon: float = 0.25, progress: bool = False, scoring: str = "bm25s") -> BM25Index:
        """Index the whole corpus (every document, judged or not). ``scoring``: ``bm25s`` (its numbers) or
        ``lucene`` (``LuceneWeights``; Lucene's IDF only)."""
        if idf not in IDF_VARIANTS or scoring not in SCORINGS:
            raise ValueError(f"idf must be one of {IDF_VARIANTS} and scoring one of {SCORINGS}, got {idf!r}, "
                             f"{scoring!r}")
        if scoring == "lucene" and idf != "lucene":
            raise ValueError("Lucene's BM25 has Lucene's IDF only; use idf='lucene' with scoring='lucene'")
        n, v, p = corpus.num_docs, len(corpus.vocab), corpus.num_postings
        indptr = np.zeros(v + 1, dtype=np.int64)
        np.cumsum(term_counts(corpus.terms, v), out=indptr[1:])
        meta = {"format": _FORMAT, "k1": k1, "b": b, "idf": idf, "epsilon": epsilon, "num_docs": n,
                "vocab_size": v, "postings": p}
        if scoring == "bm25s":
            # bm25s: avgdl = np.mean of the integer lengths, i.e. their exact sum / N in float64
            meta["avgdl"] = float(corpus.doc_len.sum(dtype=np.float64)) / n if n else 1.0
        else:
            # Lucene's docCount counts the documents with the field, i.e. with at least one token
            doc_count = int(np.count_nonzero(corpus.doc_len))
            total = float(corpus.doc_len.sum(dtype=np.float64))
            meta.update(scoring=scoring, doc_count=doc_count,
                        avgdl=float(np.float32(total / doc_count)) if doc_count else 1.0)
        weights = _weights(np.diff(indptr), meta)
        data, indices = np.empty(p, np.float32), np.empty(p, np.int32)
        heads = indptr[:-1].copy()  # next free slot of each term's column
        with Progress(p, "index: BM25 impacts", "posting", progress and p > _BLOCK_POSTINGS) as bar:
            d0 = 0
            while d0 < n:
                # whole documents, about _BLOCK_POSTINGS postings (at least one document)
                end = np.searchsorted(corpus.indptr, corpus.indptr[d0] + _BLOCK_POSTINGS, "right") - 1
                d1 = min(n, max(d0 + 1, int(end)))
                lo, hi = int(corpus.indptr[d0]), int(corpus.indptr[d1])
                if hi > lo:
                    _place_block(corpus, weights, d0, d1, heads, data, indices)
                bar.update(hi - lo)
                d0 = d1
        return cls(data, indices, indptr, n, meta)

    def to(self, device: str | torch.device) -> BM25Index:
        self.data, self.indices, self.indptr = (t.to(device) for t in (self.data, self.indices, self.indptr))
        return self

    # ------------------------------------------------------------------ search
    def pad(self, queries: list[list[int]], weights: list[list[float]] | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """Lists of term ids (and optional weights) → padded (B, L) id and weight tensors on the index device."""
        width = max(1, max((len(q) for q in queries), default=1))
        ids = torch.full((len(queries), width), self.pad_id, dtype=torch.long)
        w = torch.zeros((len(queries), width), dtype=torch.float32)
        for i, q in enumerate(queries):
            if q:
                ids[i, : len(q)] = torch.as_tensor(q, dtype=torch.long)
                w[i, : len(q)] = torch.as_tensor(weights[i] if weights is not None else [1.0] * len(q))
        return ids.to(self.device), w.to(self.device)

    def postings(self, terms: torch.Tensor, weights: torch.Tensor | None = None, total: int | None = None,
                 slot_major: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every posting of every term of a padded (B, L) batch, flat and grouped by row (then slot, then
        document), or with ``slot_major`` by slot (then row, then document): (row (P,), document (P,) int64,
        impact × the slot's weight (P,) float32).

        ``total``: the number of postings when the caller knows it on the host; without it the count is read from
        the device (a host-device synchronisation on a GPU)."""
        bsz, width = terms.shape
        if slot_major:
            terms = terms.t()
            weights = None if weights is None else weights.t()
        flat = terms.reshape(-1)
        start = self.indptr[flat]
        count = self.indptr[flat + 1] - start
        if total is None:
            total = int(count.sum())
        slots = torch.arange(flat.numel(), device=flat.device)
        slot = torch.repeat_interleave(slots, count, output_size=total)
        # position of each gathered posting: its term's start + its rank within that term's posting list, i.e.
        # arange(total) + (start - first output position of the term); the per-term parts are computed on the
        # (B·L) slots and gathered once, which is cheaper than per-posting arithmetic (int64 division above all)
        shift = start - (torch.cumsum(count, 0) - count)
        pos = shift.index_select(0, slot) + torch.arange(total, device=flat.device)
        contrib = self.data.index_select(0, pos)
        if weights is not None:
            contrib = contrib * weights.reshape(-1).index_select(0, slot).to(contrib.dtype)
        rows = torch.arange(bsz, device=flat.device)
        row = (rows.repeat(width) if slot_major else rows.repeat_interleave(width)).index_select(0, slot)
        return row, self.indices.index_select(0, pos).long(), contrib

    def add_by_slot(self, flat: torch.Tensor, terms: torch.Tensor, weights: torch.Tensor | None,
                    slot_totals: np.ndarray) -> None:
        """Add every posting of a padded (B, L) batch into ``flat`` (B · num_docs cells, row-major), one slot (query
        term) after another; ``slot_totals`` (L,) are each slot's posting counts, known on the host.

        Why slot by slot: a GPU's ``index_add_`` adds floats that meet in one cell in whatever order its atomic
        adds take, so one call over all slots would sum a document's terms in a varying order (rankings that differ
        in the last bit from run to run, and from the CPU's). Within one slot a row meets each document once, so
        no two additions of a call meet, and every cell sums its terms in slot order: the CPU kernels' order. The
        postings are gathered once, slot by slot, so each slot's are one slice: one extra launch per slot."""
        bounds = np.concatenate([[0], np.cumsum(slot_totals)])
        row, doc, contrib = self.postings(terms, weights, int(bounds[-1]), slot_major=True)
        target = row * self.num_docs + doc
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if hi > lo:
                flat.index_add_(0, target[lo:hi], contrib[lo:hi])

    def slot_counts(self, terms: torch.Tensor) -> np.ndarray:
        """(B, L) posting counts of a batch's terms, on the host (one read of the device)."""
        counts = self.indptr[terms + 1] - self.indptr[terms]
        with allowed_sync():
            return counts.cpu().numpy()

    def score(self, terms: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """Full (B, num_docs) BM25 scores for a batch of padded queries: Σ_t weight_t · impact(t, d), added in slot
        order (the order every other scoring path here keeps, so all of them give the same floats).

        A whole-corpus matrix: for small corpora and for checking the other paths; ``search`` never forms it."""
        scores = torch.zeros(terms.shape[0] * self.num_docs, dtype=self.data.dtype, device=self.data.device)
        self.add_by_slot(scores, terms, weights, self.slot_counts(terms).sum(0))
        return scores.view(terms.shape[0], self.num_docs)

    def search(self, terms: torch.Tensor, weights: torch.Tensor | None = None, k: int = 100,
               max_cells: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k (scores, doc indices) for a batch, both (B, k), best first; ties go to the lower corpus position
        (the reward's rule, ``ranking_keys``). Only documents with a score > 0 are results: a row with fewer fills
        its tail with score 0 and document 0.

        The work follows the postings of the query terms, never the corpus: each chunk of rows adds its postings
        into a zeroed scratch of ``rows × num_docs`` floats (at most ``max_cells``), reads the touched cells back
        and zeroes them again, and ranks each row's touched documents only (``touched_topk``).
        """
        keys = self.topk_keys(terms, weights, k, max_cells)
        return key_scores(keys), key_docs(keys)

    def topk_keys(self, terms: torch.Tensor, weights: torch.Tensor | None = None, k: int = 100,
                  max_cells: int | None = None) -> torch.Tensor:
        """``search`` as (B, k) ranking keys (``ranking_keys``), -1 where a row has fewer than k results."""
        k = min(k, self.num_docs)
        if self.device.type == "cpu":  # one compiled pass over the postings (kernels.search_topk)
            out = np.full((terms.shape[0], k), -1, np.int64)
            w = np.ones(terms.shape, np.float32) if weights is None else weights.numpy().astype(np.float32, copy=False)
            if terms.shape[0] and k:
                self._search_rows(terms.numpy(), w, k, out)
            return torch.from_numpy(out)
        return self.topk_keys_torch(terms, weights, k, max_cells)

    def prefix_topk_keys(self, terms: torch.Tensor, weights: torch.Tensor, start: int, marks: list[int],
                         k: int = 100) -> torch.Tensor:
        """(B, len(marks), k) ranking keys: ``[:, i]`` is ``topk_keys`` of every row cut after its first
        ``start + marks[i]`` slots (padding slots add nothing). The rows of a fixed rule that adds its first j
        candidates, for every j at once: on the CPU one pass over each row's postings (``kernels.search_prefixes``;
        the slots after ``start`` must weigh > 0), elsewhere one search per mark."""
        k = min(k, self.num_docs)
        if self.device.type != "cpu":
            return torch.stack([self.topk_keys(terms[:, :start + j], weights[:, :start + j], k) for j in marks], 1)
        out = np.full((terms.shape[0], len(marks), k), -1, np.int64)
        if terms.shape[0] and k and marks:
            t, w = terms.numpy(), weights.numpy().astype(np.float32, copy=False)
            if (w[:, start:] <= 0).any():
                raise ValueError("prefix_topk_keys: the slots after start must weigh > 0 (scores only rise)")
            m = np.asarray(marks, np.int64)
            arrays = (self.indptr.numpy(), self.indices.numpy(), self.data.numpy(), self.num_docs)
            self._rows_in_threads(len(t), lambda lo, hi: kernels.search_prefixes(
                *arrays, t[lo:hi], w[lo:hi], start, m, k, out[lo:hi]))
        return torch.from_numpy(out)

    @staticmethod
    def _rows_in_threads(rows: int, run) -> None:
        """``run(lo, hi)`` over row ranges split among torch's threads when there are many rows (the kernels
        release the GIL; each row is searched alone, so the split changes no number)."""
        parts = min(torch.get_num_threads(), rows // PARALLEL_SEARCH_ROWS)
        if parts <= 1:
            run(0, rows)
            return
        bounds = np.linspace(0, rows, parts + 1).astype(int).tolist()
        with ThreadPoolExecutor(parts) as pool:
            list(pool.map(run, bounds[:-1], bounds[1:]))

    def _search_rows(self, terms: np.ndarray, weights: np.ndarray, k: int, out: np.ndarray) -> None:
        """``kernels.search_topk`` over the rows (``_rows_in_threads``)."""
        arrays = (self.indptr.numpy(), self.indices.numpy(), self.data.numpy(), self.num_docs)
        self._rows_in_threads(terms.shape[0], lambda lo, hi: kernels.search_topk(*arrays, terms[lo:hi],
                                                                                 weights[lo:hi], k, out[lo:hi]))

    def topk_keys_torch(self, terms: torch.Tensor, weights: torch.Tensor | None = None, k: int = 100,
                        max_cells: int | None = None) -> torch.Tensor:
        """``topk_keys`` with tensor operations (accelerators; on the CPU it checks the kernel)."""
        k = min(k, self.num_docs)
        bsz = terms.shape[0]
        out = torch.full((bsz, k), -1, dtype=torch.long, device=self.device)
        if bsz == 0 or k == 0:
            return out
        if max_cells is None:
            max_cells = SCRATCH_CELLS
        rows = max(1, min(bsz, max_cells // max(1, self.num_docs)))
        per_slot = self.slot_counts(terms)  # one read per call, to plan the chunks (not part of a rollout step)
        count = per_slot.sum(1)
        # chunks of rows with similar posting counts (each row's ranking is padded to its chunk's longest), at most
        # `rows` of them (the scratch) and CHUNK_POSTINGS postings (the temporaries) unless one row has more
        order = np.argsort(count, kind="stable")
        cum = np.cumsum(count[order])
        scratch = torch.zeros(rows * self.num_docs, dtype=self.data.dtype, device=self.device)
        lo = 0
        while lo < bsz:
            base = cum[lo - 1] if lo else 0
            hi = max(lo + 1, min(lo + rows, int(np.searchsorted(cum, base + CHUNK_POSTINGS, "right"))))
            pick_host = torch.from_numpy(order[lo:hi])
            pick = pick_host.to(self.device)
            w = None if weights is None else weights.index_select(0, pick)
            chunk = terms.index_select(0, pick)
            self.add_by_slot(scratch, chunk, w, per_slot[order[lo:hi]].sum(0))
            row, doc, _ = self.postings(chunk, None, int(cum[hi - 1] - base))  # the touched cells, grouped by row
            target = row * self.num_docs + doc
            score = scratch.index_select(0, target)
            scratch.index_fill_(0, target, 0.0)
            keys = torch.where(score > 0, ranking_keys(score, doc), -1)
            per_row = count[order[lo:hi]]
            # a document shows up once per query term it contains (equal keys): the row's k × width best cover k
            # distinct documents
            out[pick] = touched_topk(keys, row, torch.from_numpy(per_row).to(self.device), k, terms.shape[1],
                                     int(per_row.max()))
            lo = hi
        return out

    # ------------------------------------------------------------------ disk
    def save(self, folder: str | Path, extra: dict | None = None) -> None:
        """``data.npy``, ``indices.npy``, ``indptr.npy`` + ``params.json`` (meta plus ``extra``), each written
        atomically, params.json last: its presence marks a complete index."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_save_npy(folder / "data.npy", self.data.cpu().numpy())
        atomic_save_npy(folder / "indices.npy", self.indices.cpu().numpy())
        atomic_save_npy(folder / "indptr.npy", self.indptr[:-1].cpu().numpy())
        atomic_write_json(folder / "params.json", {**self.meta, **(extra or {})})

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True) -> BM25Index:
        folder = Path(folder)
        params = folder / "params.json"
        if not params.exists():
            raise DataError(f"{folder}: no BM25 index here (params.json missing); build it again")
        meta = json.loads(params.read_text())
        if meta.get("format") != _FORMAT:
            raise DataError(f"{params}: unknown index format {meta.get('format')!r}; rebuild the index")
        mode: Literal["r"] | None = "r" if mmap else None
        data, indices, indptr = [np.load(folder / f"{n}.npy", mmap_mode=mode) for n in ("data", "indices", "indptr")]
        index = cls(data, indices, indptr, num_docs=meta["num_docs"], meta=meta)
        index.mapped = mappings(data, indices, indptr)
        return index


def _weights(df: np.ndarray, meta: dict) -> BM25Weights | LuceneWeights:
    """The impact formula an index's ``params.json`` describes (no ``scoring`` key: bm25s', as before it existed)."""
    if meta.get("scoring", "bm25s") == "lucene":
        return LuceneWeights.from_df(df, meta["doc_count"], meta["k1"], meta["b"], meta["avgdl"])
    return BM25Weights.from_df(df, meta["num_docs"], meta["k1"], meta["b"], meta["avgdl"], meta["idf"],
                               meta["epsilon"])


def _place_block(corpus: CorpusTerms, weights: BM25Weights | LuceneWeights, d0: int, d1: int, heads: np.ndarray,
                 data: np.ndarray, indices: np.ndarray) -> None:
    """Counting-sort step for documents d0..d1-1: write their postings' impacts and document ids at their terms'
    next free slots (``heads``, advanced)."""
    lo, hi = int(corpus.indptr[d0]), int(corpus.indptr[d1])
    docs = np.repeat(np.arange(d0, d1, dtype=np.int32), np.diff(corpus.indptr[d0:d1 + 1]))
    terms = corpus.terms[lo:hi]
    impact = weights.impacts(terms, corpus.tf[lo:hi], corpus.doc_len[docs])
    # sort the block by (term, position): documents stay ascending within a term; a posting's slot is its term's
    # next free slot plus its rank among the block's postings of that term
    key = (terms.astype(np.int64) << 32) | np.arange(hi - lo, dtype=np.int64)
    key.sort()
    order, sorted_terms = key & 0xFFFFFFFF, key >> 32
    starts = np.flatnonzero(np.concatenate([[True], sorted_terms[1:] != sorted_terms[:-1]]))
    run = np.diff(np.append(starts, len(key)))
    slot = heads[sorted_terms] + np.arange(len(key)) - np.repeat(starts, run)
    data[slot], indices[slot] = impact[order], docs[order]
    heads[sorted_terms[starts]] += run


__all__ = ["BM25Index", "IDF_VARIANTS", "POSITIVE_KEY", "SCORINGS", "LuceneWeights", "best_distinct", "key_docs",
           "key_scores", "length_norm_byte", "lucene_idf", "ranking_keys", "touched_topk"]
