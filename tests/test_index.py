"""BM25Index parity with bm25s (Lucene IDF) and rank-bm25 (Okapi IDF), on a hand-written corpus and on SciFact;
weighted and padded queries; the saved (memory-mapped) index; the top-k search (CPU kernel and tensor code)."""

from __future__ import annotations

from pathlib import Path

import bm25s
import numpy as np
import pytest
import torch
from helpers import TINY_DOCS, TINY_QUERIES, beir
from rank_bm25 import BM25Okapi

from adaptive_ir.common.errors import DataError
from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms
from adaptive_ir.retrieval.index import BM25Index

K1, B = 1.5, 0.75


def _setup(texts: list[str], queries: list[str]):
    analyzer = Analyzer()
    corpus = CorpusTerms.build([texts], analyzer)
    doc_tokens = [analyzer.tokenize(t) for t in texts]
    # out-of-vocabulary query words score 0 in both libraries; drop them so both get the same tokens
    q_tokens = [[w for w in analyzer.tokenize(q) if w in corpus.vocab.ids] for q in queries]
    return corpus, doc_tokens, [q for q in q_tokens if q]


def _ours(index: BM25Index, corpus: CorpusTerms, q_tokens: list[list[str]]) -> np.ndarray:
    ids, _ = index.pad([corpus.vocab.encode(q) for q in q_tokens])
    return index.score(ids).numpy()


def _assert_same_topk(ours: np.ndarray, ref: np.ndarray, k: int, rtol: float) -> None:
    """Top-k identical, up to documents whose reference scores tie (within rtol) at the cut."""
    for o, r in zip(ours, ref):
        top_o, top_r = np.argsort(-o, kind="stable")[:k], np.argsort(-r, kind="stable")[:k]
        if set(top_o) != set(top_r):
            cut = r[top_r[-1]]
            differ = set(top_o) ^ set(top_r)
            assert all(abs(r[d] - cut) <= rtol * max(1.0, abs(cut)) for d in differ)
        assert np.all(np.diff(r[top_o]) <= rtol * np.abs(r[top_o][:-1]).clip(min=1))  # ours is best first


def _parity(texts: list[str], queries: list[str], k: int) -> None:
    corpus, doc_tokens, q_tokens = _setup(texts, queries)

    ref = bm25s.BM25(k1=K1, b=B, method="lucene")
    ref.index(doc_tokens, show_progress=False)
    expected = np.stack([ref.get_scores(q) for q in q_tokens])
    ours = _ours(BM25Index.build(corpus, K1, B, idf="lucene"), corpus, q_tokens)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)
    _assert_same_topk(ours, expected, k, 1e-5)

    okapi = BM25Okapi(doc_tokens, k1=K1, b=B, epsilon=0.25)
    expected = np.stack([okapi.get_scores(q) for q in q_tokens])
    ours = _ours(BM25Index.build(corpus, K1, B, idf="okapi", epsilon=0.25), corpus, q_tokens)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)
    _assert_same_topk(ours, expected, k, 1e-5)


def test_parity_tiny_corpus():
    _parity(TINY_DOCS, TINY_QUERIES, k=3)


def test_parity_scifact():
    coll = beir("scifact")
    qids, texts, _ = coll.split("test")
    _parity([t for chunk in coll.iter_doc_texts() for t in chunk], texts[:25], k=100)


@pytest.fixture(scope="module")
def tiny():
    corpus = CorpusTerms.build([TINY_DOCS], Analyzer())
    return corpus, BM25Index.build(corpus, K1, B)


def test_weighted_query_is_weighted_sum_of_single_terms(tiny):
    corpus, index = tiny
    q = corpus.vocab.encode(["fox", "dogs", "query"])
    w = [0.5, 2.0, 1.25]
    ids, wt = index.pad([q], [w])
    combined = index.score(ids, wt)[0]
    singles = [index.score(*index.pad([[t]]))[0] for t in q]
    expected = sum(wi * s for wi, s in zip(w, singles))
    torch.testing.assert_close(combined, expected, rtol=1e-6, atol=1e-6)
    assert combined.abs().sum() > 0


def test_repeated_term_counts_twice(tiny):
    corpus, index = tiny
    fox = corpus.vocab.ids["fox"]
    torch.testing.assert_close(index.score(*index.pad([[fox, fox]]))[0], 2 * index.score(*index.pad([[fox]]))[0])


def test_padding_contributes_nothing(tiny):
    corpus, index = tiny
    q = corpus.vocab.encode(["quick", "fox"])
    short, _ = index.pad([q])
    padded = torch.tensor([q + [index.pad_id] * 4])
    torch.testing.assert_close(index.score(padded), index.score(short), rtol=0, atol=0)
    # a weight on a padding slot changes nothing either
    w = torch.tensor([[1.0, 1.0, 7.0, 7.0, 7.0, 7.0]])
    torch.testing.assert_close(index.score(padded, w), index.score(short), rtol=0, atol=0)
    assert torch.count_nonzero(index.score(torch.tensor([[index.pad_id] * 3]))) == 0
    # the batch pads short queries: the padded row equals the query searched alone
    ids, _ = index.pad([q, corpus.vocab.encode(["recall", "documents", "forty", "query"])])
    torch.testing.assert_close(index.score(ids)[0], index.score(short)[0], rtol=0, atol=0)


def test_save_load_mmap_round_trip(tiny, tmp_path):
    corpus, index = tiny
    index.save(tmp_path / "idx")
    loaded = BM25Index.load(tmp_path / "idx", mmap=True)
    assert loaded.meta == index.meta and loaded.num_docs == index.num_docs and loaded.pad_id == index.pad_id
    ids, w = index.pad([corpus.vocab.encode(q.split()) for q in TINY_QUERIES])
    for a, b in zip(index.search(ids, w, k=5), loaded.search(ids, w, k=5)):
        assert torch.equal(a, b)
    assert torch.equal(index.score(ids), loaded.score(ids))


def test_released_pages_leave_resident_memory_and_read_back_unchanged(tmp_path):
    # a loaded index gives its pages back while another phase runs (Workspace.on_stage), and reads the same after
    from adaptive_ir.common.memory import release_pages

    def resident_kib() -> int:
        return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmRSS:"))

    if not Path("/proc/self/status").is_file():
        pytest.skip("no /proc (resident memory is read from it)")
    rng = np.random.default_rng(0)
    docs = 20_000  # postings enough (about 3.9M: 16 MB of impacts, 16 of document ids) for the drop to show
    corpus = CorpusTerms.build([[" ".join(f"w{t}" for t in rng.integers(0, 5_000, 200)) for _ in range(docs)]],
                               Analyzer())
    BM25Index.build(corpus, K1, B).save(tmp_path / "idx")
    del corpus
    loaded = BM25Index.load(tmp_path / "idx")
    assert len(loaded.mapped) == 3  # data, indices, indptr
    ids, w = loaded.pad([[1, 2, 3], [4000, 7]])
    before = [t.clone() for t in loaded.search(ids, w, k=10)]
    float(loaded.data.sum()), int(loaded.indices.sum())  # every page read: resident
    read = resident_kib()
    release_pages(loaded.mapped)
    assert resident_kib() < read - 20_000  # at least 20 of the 31 MB left
    assert all(torch.equal(a, b) for a, b in zip(before, loaded.search(ids, w, k=10)))


def test_load_missing_or_foreign_index_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="params.json missing"):
        BM25Index.load(tmp_path)
    (tmp_path / "params.json").write_text('{"format": "other"}')
    with pytest.raises(DataError, match="unknown index format"):
        BM25Index.load(tmp_path)


def _random_queries(vocab_size: int, n: int, seed: int, max_len: int = 5):
    rng = np.random.default_rng(seed)
    queries = [rng.choice(vocab_size, size=rng.integers(1, max_len)).tolist() for _ in range(n)]
    queries[0] = queries[0] + queries[0]  # a repeated term counts twice
    weights = [rng.uniform(0.1, 2.0, size=len(q)).tolist() for q in queries]
    return queries, weights


@pytest.mark.parametrize("duplicated", [False, True])
def test_search_equals_a_stable_sort_of_every_score(duplicated):
    # every document twice (equal scores: ties decided by corpus position) or once; weighted and unweighted;
    # the CPU kernel and the tensor code (accelerators), the latter in chunks of every size
    texts = [t for t in TINY_DOCS * 3 for _ in range(2 if duplicated else 1)]
    corpus = CorpusTerms.build([texts], Analyzer())
    index = BM25Index.build(corpus)
    queries, weights = _random_queries(len(corpus.vocab), 17, seed=1)
    ids, w = index.pad(queries, weights)
    for wt in (w, None):
        scores = index.score(ids, wt)
        order = torch.argsort(-scores, dim=1, stable=True)[:, :6]
        want_s = scores.gather(1, order)
        want_i = torch.where(want_s > 0, order, 0)
        got = index.search(ids, wt, k=6)
        assert torch.equal(got[0], want_s) and torch.equal(got[1], want_i)
        keys = index.topk_keys(ids, wt, k=6)
        for cells in (1, index.num_docs, 3 * index.num_docs, 10 ** 9):  # one row per chunk, uneven chunks, one
            assert torch.equal(index.topk_keys_torch(ids, wt, k=6, max_cells=cells), keys)
    if duplicated:
        assert (want_s[:, 1:] == want_s[:, :-1]).any()  # ties were decided


def test_search_k_capped_and_empty_batch(tiny):
    corpus, index = tiny
    s, i = index.search(*index.pad([corpus.vocab.encode(["fox"])]), k=1000)
    assert s.shape == (1, index.num_docs)
    found = int((s[0] > 0).sum())  # the documents holding "fox", then the tail: score 0, document 0
    assert 0 < found < index.num_docs and (s[0, found:] == 0).all() and (i[0, found:] == 0).all()
    assert sorted(i[0, :found].tolist()) == np.flatnonzero(index.score(*index.pad([corpus.vocab.encode(["fox"])]))[0]).tolist()
    s, i = index.search(torch.empty((0, 2), dtype=torch.long), k=3)
    assert s.shape == (0, 3) and i.dtype == torch.long


MIXED_DOCS = [
    "Über-große Café NAÏVE résumé — the İstanbul test, a b c x1 y_2 __init__",
    "plain ASCII text: Fox, fox; FOX! a fox and 42 foxes\x01between\x1cseparators",
    "",
    "ünïcödé ß straße STRASSE 東京 tokyo 東京 東京",
    "quick quick quick brown",
    "",
    "word\twith\ttabs\nand\nnewlines and the stopwords of it",
    "ümlaut ONLY",
]


def _bm25s_arrays(corpus: CorpusTerms, k1: float, b: float):
    """bm25s' own CSC arrays for our term ids (it indexes the documents as lists of our ids)."""
    ref = bm25s.BM25(k1=k1, b=b, method="lucene")
    ref.index((corpus.doc_token_ids(), {str(i): i for i in range(len(corpus.vocab))}), show_progress=False)
    return ref.scores["data"], ref.scores["indices"], ref.scores["indptr"]


def _streamed(texts: list[str], chunk: int) -> CorpusTerms:
    return CorpusTerms.build((texts[i:i + chunk] for i in range(0, len(texts), chunk)), Analyzer(), len(texts))


def assert_same_as_bm25s(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Bit for bit with numpy >= 2. Under numpy 1.x's value-based casting (before NEP 50) bm25s rounds some impacts
    differently: there they agree to 2 ulp (measured on SciFact with numpy 1.24)."""
    if int(np.__version__.split(".")[0]) >= 2:
        assert np.array_equal(ours, theirs)
    else:
        np.testing.assert_array_max_ulp(ours, theirs, maxulp=2)


@pytest.mark.parametrize("chunk,chars,block", [(1, 1 << 20, 1), (2, 1 << 20, 3), (3, 1 << 20, 1 << 20),
                                                (100, 40, 7), (100, 1, 1 << 20)])
def test_streamed_build_equals_one_chunk_and_bm25s_bit_for_bit(chunk, chars, block, monkeypatch):
    import adaptive_ir.retrieval.analyzer as text_module
    import adaptive_ir.retrieval.index as index_module

    texts = MIXED_DOCS + TINY_DOCS
    analyzer = Analyzer()
    whole = CorpusTerms.build([texts], analyzer)
    monkeypatch.setattr(text_module, "_ANALYZE_CHARS", chars)  # chunks analyzed in runs of about this much text
    monkeypatch.setattr(index_module, "_BLOCK_POSTINGS", block)  # counting-sort blocks, some of empty documents
    streamed = _streamed(texts, chunk)
    # the vocabulary is every kept token in order of first occurrence, as the analyzer tokenizes each document
    tokens = [analyzer.tokenize(t) for t in texts]
    assert streamed.vocab.terms == list(dict.fromkeys(t for doc in tokens for t in doc))
    assert {"über", "große", "東京", "x1", "y_2", "__init__", "between", "separators"} <= set(streamed.vocab.ids)
    assert not {"a", "b", "c", "the", "and", "\x01"} & set(streamed.vocab.ids)
    for name in ("doc_len", "indptr", "terms", "tf"):
        assert np.array_equal(getattr(whole, name), getattr(streamed, name)), name
    # the forward index holds each document's term counts exactly
    for d, doc in enumerate(tokens):
        lo, hi = streamed.indptr[d], streamed.indptr[d + 1]
        counts = {streamed.vocab.terms[t]: int(f) for t, f in zip(streamed.terms[lo:hi], streamed.tf[lo:hi])}
        assert counts == {w: doc.count(w) for w in doc} and streamed.doc_len[d] == len(doc)
    index = BM25Index.build(streamed, K1, B)
    data, indices, indptr = _bm25s_arrays(streamed, K1, B)
    assert index.indices.dtype == torch.int32
    assert np.array_equal(index.indptr[:-1].numpy(), indptr) and np.array_equal(index.indices.numpy(), indices)
    assert_same_as_bm25s(index.data.numpy(), data)
    # the miner's per-posting impacts are the index's numbers
    docs = np.repeat(np.arange(streamed.num_docs), np.diff(streamed.indptr))
    impacts = index.weights.impacts(streamed.terms, streamed.tf, streamed.doc_len[docs])
    by_posting = dict(zip(zip(docs.tolist(), streamed.terms.tolist()), impacts.tolist()))
    ptr = index.indptr.tolist()
    csc = {(d, t): v for t in range(index.vocab_size)
           for d, v in zip(index.indices[ptr[t]:ptr[t + 1]].tolist(), index.data[ptr[t]:ptr[t + 1]].tolist())}
    assert by_posting == csc


ANALYZERS = [("bm25s", "none"), ("bm25s", "porter"), ("lucene", "none"), ("lucene", "porter")]


def _assert_same_corpus(one: CorpusTerms, other: CorpusTerms) -> None:
    assert one.vocab.terms == other.vocab.terms and one.vocab.surface == other.vocab.surface
    for name in ("doc_len", "indptr", "terms", "tf", "first"):
        a, b = getattr(one, name), getattr(other, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


def _many_texts() -> list[str]:
    return (MIXED_DOCS + TINY_DOCS) * 2 + [f"rare{i} Word{i % 7} Über{i % 5} caresses ponies {i}" for i in range(40)]


@pytest.mark.parametrize("kind,stemmer", ANALYZERS)
@pytest.mark.parametrize("assign", ["round robin", "random"])
def test_tables_of_several_workers_merge_into_the_ids_of_one(kind, stemmer, assign, monkeypatch):
    """Runs analyzed by several tables (each seeing only its runs), merged in corpus order, give one table's ids:
    workers simulated in this process, each run given to a worker by ``assign``."""
    import adaptive_ir.retrieval.analyzer as text_module

    texts, analyzer = _many_texts(), Analyzer(kind=kind, stemmer=stemmer)
    one = CorpusTerms.build([texts], analyzer)
    monkeypatch.setattr(text_module, "_ANALYZE_CHARS", 50)
    workers = {w: text_module._new_table(analyzer) for w in range(3)}
    rng = np.random.default_rng(0)

    def simulated(runs, analyzer, table, count):
        for i, run in enumerate(runs):
            w = i % 3 if assign == "round robin" else int(rng.integers(3))
            monkeypatch.setattr(text_module, "_worker_table", workers[w])
            _, new_words, ids, counts = text_module._analyze_run(run)
            yield table.merge(w, new_words, ids, counts)

    monkeypatch.setattr(text_module, "_in_workers", simulated)
    monkeypatch.setattr(text_module, "PARALLEL_MIN_DOCS", 1)
    merged = CorpusTerms.build(([t] for t in texts), analyzer, len(texts), workers=3)
    assert all(len(t) for t in workers.values())  # every simulated worker had runs
    _assert_same_corpus(one, merged)


@pytest.mark.parametrize("kind,stemmer", [("bm25s", "none"), ("lucene", "porter")])
def test_worker_processes_build_the_arrays_of_one_process(kind, stemmer, monkeypatch):
    import adaptive_ir.retrieval.analyzer as text_module

    texts, analyzer = _many_texts(), Analyzer(kind=kind, stemmer=stemmer)
    one = CorpusTerms.build([texts], analyzer)
    monkeypatch.setattr(text_module, "_ANALYZE_CHARS", 50)  # many runs in flight among the processes
    monkeypatch.setattr(text_module, "PARALLEL_MIN_DOCS", 1)
    _assert_same_corpus(one, CorpusTerms.build(([t] for t in texts), analyzer, len(texts), workers=2))
    monkeypatch.setattr(text_module, "PARALLEL_MIN_DOCS", len(texts) + 1)  # too few documents: no processes

    def no_workers(*args):
        raise AssertionError("processes started for a small corpus")

    monkeypatch.setattr(text_module, "_in_workers", no_workers)
    _assert_same_corpus(one, CorpusTerms.build([texts], analyzer, len(texts), workers=2))


def test_streamed_build_scifact_bit_for_bit_with_bm25s(monkeypatch):
    import adaptive_ir.retrieval.index as index_module

    texts = [t for chunk in beir("scifact").iter_doc_texts() for t in chunk]
    monkeypatch.setattr(index_module, "_BLOCK_POSTINGS", 10_000)  # many counting-sort blocks
    corpus = _streamed(texts, 997)
    index = BM25Index.build(corpus, K1, B)
    data, indices, indptr = _bm25s_arrays(corpus, K1, B)
    assert np.array_equal(index.indptr[:-1].numpy(), indptr) and np.array_equal(index.indices.numpy(), indices)
    assert_same_as_bm25s(index.data.numpy(), data)
    assert corpus.vocab.terms == CorpusTerms.build([texts], Analyzer()).vocab.terms


def _collection(texts: list[str]):
    from adaptive_ir.data import Collection, MemoryCorpus

    return Collection("cached", MemoryCorpus([f"d{i}" for i in range(len(texts))], [""] * len(texts), texts), {}, {})


def test_index_saved_once_then_memory_mapped(tmp_path, monkeypatch, caplog):
    from adaptive_ir.retrieval.retriever import Retriever

    texts = MIXED_DOCS + TINY_DOCS
    built = Retriever.cached(_collection(texts), tmp_path, K1, B, "okapi")
    folder, build_lock, lock = sorted(tmp_path.iterdir())  # one folder and its locks, no temporary left behind
    assert lock.name == f"{folder.name}.lock" and build_lock.name == f"{folder.name}.build.lock"
    assert folder.name.startswith("index-") and (folder / "params.json").is_file()
    assert isinstance(built.corpus.terms, np.memmap) and isinstance(built.corpus.doc_len, np.memmap)
    fresh = Retriever.build(_collection(texts), K1, B, "okapi")
    assert built.vocab.terms == fresh.vocab.terms and built.index.meta == fresh.index.meta
    assert built.corpus_sha256 == fresh.corpus_sha256
    for name in ("data", "indices", "indptr"):
        assert torch.equal(getattr(built.index, name), getattr(fresh.index, name)), name
    for name in ("doc_len", "indptr", "terms", "tf", "first"):
        assert np.array_equal(getattr(built.corpus, name), getattr(fresh.corpus, name)), name
    q = fresh.encode(TINY_QUERIES)
    assert all(np.array_equal(a, b) for a, b in zip(built.search(q, k=4), fresh.search(q, k=4)))

    def no_build(*args, **kwargs):
        raise AssertionError("the index was built again although it is saved")

    monkeypatch.setattr(CorpusTerms, "build", no_build)
    coll = _collection(texts)
    again = Retriever.cached(coll, tmp_path, K1, B, "okapi")
    assert torch.equal(again.index.data, fresh.index.data)
    # the corpus is read (hashed) once per corpus object: its next index finds its key without a read
    assert coll.corpus.content_sha256 == fresh.corpus_sha256
    monkeypatch.setattr(type(coll.corpus), "iter_doc_texts", lambda *a: no_build())
    assert Retriever.cached(coll, tmp_path, K1, B, "okapi").corpus_sha256 == fresh.corpus_sha256
    monkeypatch.undo()
    # another corpus content, or other BM25 parameters: another index
    Retriever.cached(_collection(texts[:-1] + ["changed"]), tmp_path, K1, B, "okapi")
    Retriever.cached(_collection(texts), tmp_path, K1, B, "lucene")
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 3
    # a damaged copy (here: arrays that disagree with params.json) is rebuilt, with a warning
    np.save(folder / "doc_terms.npy", np.zeros(3, np.int32))
    with caplog.at_level("WARNING"):
        rebuilt = Retriever.cached(_collection(texts), tmp_path, K1, B, "okapi")
    assert "damaged" in caplog.text
    assert np.array_equal(rebuilt.corpus.terms, fresh.corpus.terms)


def test_processes_sharing_a_cache_build_an_index_once(tmp_path, monkeypatch):
    """Two processes (the ranks of a torchrun node) asking for the same missing index: one builds it, the other
    waits and maps the saved copy (never two builds held at once). Threads stand in for processes: each takes the
    lock through its own file descriptor."""
    import threading
    import time

    from adaptive_ir.retrieval.retriever import Retriever

    texts = MIXED_DOCS + TINY_DOCS
    builds = []
    build = Retriever.build

    def slow_build(*args, **kwargs):
        builds.append(threading.get_ident())
        time.sleep(0.5)  # long enough for the other to arrive while this one builds
        return build(*args, **kwargs)

    monkeypatch.setattr(Retriever, "build", slow_build)
    got = []
    threads = [threading.Thread(target=lambda: got.append(Retriever.cached(_collection(texts), tmp_path)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(got) == 2
    assert all(isinstance(r.corpus.terms, np.memmap) for r in got)  # both map the saved copy
    assert torch.equal(got[0].index.data, got[1].index.data)


def test_a_build_that_cannot_fit_is_refused_in_one_line_before_the_corpus_is_analysed(tmp_path, monkeypatch):
    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.retrieval import retriever as module

    # MS MARCO's size from a sample of 2,048 documents with 37.25 postings each: 329M postings, 8.0 GiB to build
    with pytest.raises(ConfigError, match=r"^embeddings.cache_dir: building the index of 8,841,823 documents needs "
                                          r"about 8.0 GiB \(26 bytes for each of about 329M postings, estimated from "
                                          r"the first 2,048 documents\) and 6.0 GiB are available; .* memory-map a "
                                          r"saved index\)$"):
        module.require_build_fits(2048 * 37 + 512, 2048, 8_841_823, available=6 * 2**30)
    module.require_build_fits(2048 * 37 + 512, 2048, 8_841_823, available=9 * 2**30)  # fits

    texts = MIXED_DOCS + TINY_DOCS
    monkeypatch.setattr(module, "CHUNK_DOCS", 4)
    sample = CorpusTerms.build([texts[:4]], Analyzer()).num_postings
    need = module.BUILD_BYTES_PER_POSTING * sample / 4 * len(texts)
    analysed = []
    build = CorpusTerms.build

    def counting_build(chunks, *args, **kwargs):
        chunks = list(chunks)
        analysed.append(sum(map(len, chunks)))
        return build(chunks, *args, **kwargs)

    monkeypatch.setattr(CorpusTerms, "build", counting_build)
    monkeypatch.setattr(module, "available_memory", lambda: int(need) - 1)
    with pytest.raises(ConfigError, match="embeddings.cache_dir: building the index"):
        module.Retriever.cached(_collection(texts), tmp_path)
    assert analysed == [4]  # the sample alone: refused before the corpus is analysed
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # nothing saved
    monkeypatch.setattr(module, "available_memory", lambda: int(need) + 1)
    built = module.Retriever.cached(_collection(texts), tmp_path)
    assert analysed == [4, 4, len(texts)] and built.index.num_docs == len(texts)


def test_postings_slot_major_hold_the_same_postings_grouped_by_slot(tiny):
    corpus, index = tiny
    queries, weights = _random_queries(len(corpus.vocab), 9, seed=2)
    ids, w = index.pad(queries, weights)
    rows, docs, contrib = index.postings(ids, w)
    s_rows, s_docs, s_contrib = index.postings(ids, w, slot_major=True)
    key = lambda r, d, c: sorted(zip(r.tolist(), d.tolist(), c.tolist()))  # noqa: E731
    assert key(rows, docs, contrib) == key(s_rows, s_docs, s_contrib)
    counts = (index.indptr[ids + 1] - index.indptr[ids]).t().reshape(-1)  # slot-major (slot, row) order
    expect = torch.arange(ids.shape[0]).repeat(ids.shape[1]).repeat_interleave(counts)
    assert torch.equal(s_rows, expect) and not torch.equal(rows, s_rows)


def test_a_search_split_among_threads_gives_the_same_keys(monkeypatch):
    import adaptive_ir.retrieval.index as index_module

    coll = beir("scifact", dev_fraction=0)
    corpus = CorpusTerms.build(coll.iter_doc_texts(), Analyzer())
    index = BM25Index.build(corpus)
    _, texts, _ = coll.split("test")
    terms, weights = index.pad([corpus.vocab.encode(Analyzer().tokenize(t)) for t in texts],
                               [[0.5 + (i % 3)] * len(corpus.vocab.encode(Analyzer().tokenize(t)))
                                for i, t in enumerate(texts)])
    calls = []
    search = index_module.kernels.search_topk
    monkeypatch.setattr(index_module.kernels, "search_topk", lambda *a: calls.append(len(a[4])) or search(*a))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = index.topk_keys(terms, weights, 100)
        torch.set_num_threads(3)
        monkeypatch.setattr(index_module, "PARALLEL_SEARCH_ROWS", 64)
        split = index.topk_keys(terms, weights, 100)
    finally:
        torch.set_num_threads(threads)
    assert calls[0] == len(texts) and len(calls) == 4 and sum(calls[1:]) == len(texts)  # one call, then three
    assert torch.equal(one, split)


@pytest.mark.parametrize("k", [3, 100])
def test_prefix_search_equals_a_search_of_each_prefix(k, monkeypatch):
    """``prefix_topk_keys`` (a fixed rule's rankings for every depth in one pass): each mark's keys are those of a
    search of the query cut there, pad slots in the middle included, whatever the thread split."""
    import adaptive_ir.retrieval.index as index_module
    from adaptive_ir.data import make_default
    from adaptive_ir.retrieval.retriever import Retriever

    r = Retriever.build(make_default())
    _, texts, _ = make_default().split("test")
    rng = np.random.default_rng(0)
    start = r.encode(texts)
    vocab = len(r.vocab)
    # candidates: random terms, a pad (an invalid candidate) now and then, and one of the query's own words
    added = [[int(t) if rng.random() > 0.2 else r.index.pad_id for t in rng.integers(0, vocab, 10)] for _ in texts]
    for q, a in zip(start, added):
        if q:
            a[4] = q[0]
    weights = [[1.0 + 0.5 * (i % 2)] * len(q) for i, q in enumerate(start)]
    marks = [0, 1, 2, 3, 5, 8, 10]
    monkeypatch.setattr(index_module, "PARALLEL_SEARCH_ROWS", 16)  # split among threads too
    scores, docs = r.search_prefixes(start, weights, added, 0.5, marks, k)
    assert scores.shape == (len(texts), len(marks), min(k, r.index.num_docs))
    for i, j in enumerate(marks):
        expect_s, expect_d = r.search([q + a[:j] for q, a in zip(start, added)],
                                      [w + [0.5] * j for w, a in zip(weights, added)], k)
        np.testing.assert_array_equal(scores[:, i], expect_s)
        np.testing.assert_array_equal(docs[:, i], expect_d)
    assert not np.array_equal(scores[:, 0], scores[:, -1])  # the candidates change the rankings
    with pytest.raises(ValueError, match="must weigh > 0"):
        r.search_prefixes(start, weights, added, 0.0, marks, k)


def test_term_counts_in_chunks_and_document_frequency_off_the_index(monkeypatch):
    # counts without casting every posting to int64 at once, and df read off the posting lists' lengths
    import adaptive_ir.retrieval.analyzer as analyzer_module
    from adaptive_ir.data import make_default
    from adaptive_ir.retrieval.analyzer import term_counts
    from adaptive_ir.retrieval.retriever import Retriever

    terms = np.random.default_rng(0).integers(0, 50, 1_000).astype(np.int32)
    monkeypatch.setattr(analyzer_module, "COUNT_CHUNK", 64)  # many chunks, the last one short
    assert np.array_equal(term_counts(terms, 60), np.bincount(terms, minlength=60))
    r = Retriever.build(make_default())
    df = r.index.document_frequency()
    assert df.dtype == np.float32 and len(df) == len(r.vocab)  # the padding term is not one
    assert np.array_equal(df, np.bincount(np.asarray(r.corpus.terms), minlength=len(r.vocab)))
