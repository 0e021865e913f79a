"""The batched reformulation environment against an independent recomputation of its rewards.

Every reward is checked against the recall / reciprocal rank of the rewritten query scored by bm25s (a separate
BM25 implementation, fed the rewritten query's words) and ranked by numpy, with relevance read straight from the
qrels, never from the env's tensors.
"""

from __future__ import annotations


import bm25s
import numpy as np
import pytest
import torch

from adaptive_ir.env import ReformulationEnv
from adaptive_ir.policy import Agent
from adaptive_ir.ppo import AmpContext
from adaptive_ir.rollout import policy_step

from helpers import query_world

NUM_QUERIES = 24
K = 40


@pytest.fixture(scope="module")
def world():
    w = query_world(NUM_QUERIES)
    w.ref = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    w.ref.index([w.retriever.analyzer.tokenize(t) for t in w.coll.doc_texts()], show_progress=False)
    return w


def hand_metric(w, qpos: int, added: list[str], weights: dict[str, float],
                expansion_weight: float = 1.0) -> tuple[float, float]:
    """(lowest, highest) Recall@K / RR@K mix of q0's words (weight 1) plus ``added`` words, scored by bm25s and
    ranked by numpy; documents matching no query word are not retrieved.

    Documents with equal scores (identical statistics happen on the generated collection) may come in any order,
    so the metric is computed with relevant documents last and first among equal scores: the two are equal
    unless a tie straddles the cut at K.
    """
    vocab = w.ref.vocab_dict
    words = [(t, 1.0) for t in w.retriever.analyzer.tokenize(w.texts[qpos]) if t in vocab]
    words += [(t, expansion_weight) for t in added]
    scores = np.round(sum(wt * w.ref.get_scores([t]).astype(np.float64) for t, wt in words), 6)
    rel = {d for d, g in w.qrels[w.qids[qpos]].items() if g >= 1}
    is_rel = np.array([d in rel for d in w.coll.doc_ids])
    out = []
    for rel_key in (is_rel, ~is_rel):  # relevant last, then first, among equal scores
        top = [d for d in np.lexsort((rel_key, -scores))[:K] if scores[d] > 0]
        hits = is_rel[top]
        recall = hits.sum() / len(rel)
        rr = 1.0 / (int(np.argmax(hits)) + 1) if hits.any() else 0.0
        out.append(weights.get("recall", 0.0) * recall + weights.get("mrr", 0.0) * rr)
    return out[0], out[1]


def random_legal(env: ReformulationEnv, gen: torch.Generator, stop_prob: float = 0.15) -> torch.Tensor:
    legal = env.legal().float()
    legal[:, -1] = 0.0
    none_left = legal.sum(1) == 0
    legal[none_left, -1] = 1.0
    acts = torch.multinomial(legal, 1, generator=gen).squeeze(1)
    stop = torch.rand(acts.shape, generator=gen) < stop_prob
    return torch.where(stop, torch.full_like(acts, env.M), acts)


def play(w, env: ReformulationEnv, seed: int, weights: dict[str, float], expansion_weight: float = 1.0):
    """Random legal episodes for every query; checks each reward against hand_metric as it goes.

    Returns (sum of rewards, env metric at the start, hand-computed final (lo, hi) bounds) per query.
    """
    gen = torch.Generator().manual_seed(seed)
    qidx = torch.arange(len(w.qids))
    env.reset(qidx)
    start = env.metric.clone()
    vocab = w.retriever.vocab.terms
    added = [[] for _ in qidx]
    now = [hand_metric(w, i, [], weights) for i in range(len(qidx))]
    for i, (lo, hi) in enumerate(now):
        assert lo - 1e-6 <= start[i] <= hi + 1e-6
    total = torch.zeros(len(qidx))
    exact = checked = 0
    while env.alive.any():
        acts = random_legal(env, gen)
        alive = env.alive.clone()
        reward, term, trunc = env.step(acts)
        for i in range(len(qidx)):
            if alive[i] and acts[i] < env.M:
                added[i].append(vocab[int(w.qs.cand_terms[i, acts[i]])])
                before, now[i] = now[i], hand_metric(w, i, added[i], weights, expansion_weight)
                r = reward[i].item()
                assert now[i][0] - before[1] - 1e-5 <= r <= now[i][1] - before[0] + 1e-5
                if before[0] == before[1] and now[i][0] == now[i][1]:
                    assert r == pytest.approx(now[i][0] - before[0], abs=1e-5)
                    exact += 1
                checked += 1
            else:
                assert reward[i] == 0
        total += reward
    assert exact >= 0.8 * checked  # ties at the cut are rare: most rewards were checked exactly
    assert checked > len(qidx)
    return total, start, torch.tensor(now, dtype=torch.float32)


def check_telescoping(env: ReformulationEnv, total, start, final) -> None:
    """Σ rewards = metric(final query) − metric(q0), and the final metric is the hand-computed one."""
    torch.testing.assert_close(total, env.metric - start, atol=1e-5, rtol=0)
    assert ((final[:, 0] - 1e-5 <= env.metric) & (env.metric <= final[:, 1] + 1e-5)).all()


def test_rewards_are_metric_differences_and_telescope(world):
    env = ReformulationEnv(world.qs, world.retriever.index, max_steps=4, reward_k=K)
    total, start, final = play(world, env, seed=0, weights={"recall": 1.0})
    check_telescoping(env, total, start, final)
    assert (total != 0).any(), "a test where no expansion changes recall checks nothing"


def test_reward_weights_mix_recall_and_mrr(world):
    mix = {"recall": 0.7, "mrr": 0.3}
    env = ReformulationEnv(world.qs, world.retriever.index, max_steps=3, reward_k=K, reward_weights=mix)
    check_telescoping(env, *play(world, env, seed=1, weights=mix))
    # the mix is the mix of the two metrics, each measured alone
    recall = ReformulationEnv(world.qs, world.retriever.index, reward_k=K, reward_weights={"recall": 1.0})
    mrr = ReformulationEnv(world.qs, world.retriever.index, reward_k=K, reward_weights={"mrr": 1.0})
    qidx = torch.arange(len(world.qids))
    for e in (recall, mrr, env):
        e.reset(qidx)
    torch.testing.assert_close(env.metric, 0.7 * recall.metric + 0.3 * mrr.metric)
    assert not torch.allclose(recall.metric, mrr.metric)


def test_expansion_weight_scales_added_terms(world):
    env = ReformulationEnv(world.qs, world.retriever.index, max_steps=3, reward_k=K, expansion_weight=0.4)
    check_telescoping(env, *play(world, env, seed=2, weights={"recall": 1.0}, expansion_weight=0.4))


def test_documents_matching_no_query_term_are_not_retrieved(world):
    # with k = every document, recall is the share of relevant documents that match a query word at all
    index = world.retriever.index
    env = ReformulationEnv(world.qs, index, reward_k=index.num_docs, reward_weights={"recall": 1.0})
    env.reset(torch.arange(len(world.qids)))
    vocab = world.ref.vocab_dict
    expected = []
    for qid, text in zip(world.qids, world.texts):
        words = [t for t in world.retriever.analyzer.tokenize(text) if t in vocab]
        matched = sum(world.ref.get_scores([t]) for t in words) > 0
        rel = [world.coll.doc_ids.index(d) for d, g in world.qrels[qid].items() if g >= 1]
        expected.append(matched[rel].mean())
    torch.testing.assert_close(env.metric, torch.tensor(expected, dtype=torch.float32))
    assert (env.metric < 1).any()


def test_masks_stop_and_truncation(world):
    qs = world.qs
    assert (~qs.cand_valid).any(), "the fixture must have padded candidate slots"
    env = ReformulationEnv(qs, world.retriever.index, max_steps=3, reward_k=K)
    qidx = torch.arange(len(qs))
    env.reset(qidx)
    legal = env.legal()
    assert legal.shape == (len(qs), qs.max_candidates + 1)
    assert legal[:, -1].all()
    assert torch.equal(legal[:, :-1], qs.cand_valid)
    # half stop at once, half take their first candidate
    first = qs.cand_valid.float().argmax(1)
    stoppers = torch.arange(len(qs)) % 2 == 0
    acts = torch.where(stoppers, torch.full_like(first, env.M), first)
    _, term, trunc = env.step(acts)
    assert torch.equal(term, stoppers) and not trunc.any()
    assert torch.equal(env.alive, ~stoppers)
    legal = env.legal()
    goers = (~stoppers).nonzero().squeeze(1)
    assert not legal[goers, first[goers]].any()  # a chosen term cannot be chosen again
    assert legal[:, -1].all()
    # a finished episode ignores further actions: no reward, no new terms
    terms_before = env.terms[stoppers].clone()
    reward, term, trunc = env.step(torch.where(stoppers, first, torch.full_like(first, env.M)))
    assert torch.equal(env.terms[stoppers], terms_before) and (reward[stoppers] == 0).all()
    assert torch.equal(term, ~stoppers) and not trunc.any() and not env.alive.any()
    # never stopping: truncated exactly at max_steps, not terminated
    env.reset(qidx)
    gen = torch.Generator().manual_seed(3)
    for t in range(3):
        legal = env.legal().float()
        legal[:, -1] = 1e-9  # STOP only where nothing else is left
        _, term, trunc = env.step(torch.multinomial(legal, 1, generator=gen).squeeze(1))
        has_cands = qs.cand_valid.sum(1) > t
        assert torch.equal(trunc, has_cands & (t == 2)) if t == 2 else not trunc.any()
    assert not env.alive.any()


def test_policy_never_samples_illegal_actions(world):
    qs = world.qs
    torch.manual_seed(0)
    agent = Agent(world.emb_dim, qs.cand_feats.shape[-1], max_steps=5, hidden_dim=16, num_heads=2)
    agent.use_tables(world.tables)
    amp = AmpContext(torch.device("cpu"), enabled=False)
    env = ReformulationEnv(qs, world.retriever.index, max_steps=5, reward_k=K, cache_size=0)
    gen = torch.Generator().manual_seed(0)
    qidx = torch.arange(len(qs)).repeat(20)  # many samples per query
    env.reset(qidx)
    chosen_any = False
    while env.alive.any():
        legal = env.legal()
        acts, logp, _ = policy_step(agent, amp, qs, env, gen)
        live = env.alive
        assert legal[live.nonzero().squeeze(1), acts[live]].all()
        assert torch.isfinite(logp[live]).all()
        chosen_any |= bool((acts[live] < env.M).any())
        env.step(acts)
    assert chosen_any
    # chosen slots are always real candidates
    assert not (env.chosen & ~qs.cand_valid[qidx]).any()


def test_reward_cache_is_transparent(world):
    qidx = torch.arange(len(world.qids))
    results = []
    for cache_size in (0, 10_000):
        env = ReformulationEnv(world.qs, world.retriever.index, max_steps=3, reward_k=K, cache_size=cache_size)
        runs = []
        for _ in range(2):  # the same seeded episodes twice: the second pass must hit the cache
            gen = torch.Generator().manual_seed(5)
            env.reset(qidx)
            rewards = []
            while env.alive.any():
                rewards.append(env.step(random_legal(env, gen))[0])
            runs.append(torch.stack(rewards))
        results.append((runs, env))
    (off, env_off), (on, env_on) = results
    for a, b in zip(off + on, off + on[::-1]):
        assert torch.equal(a, b)
    assert env_off.cache_hits == 0 and len(env_off.cache) == 0
    assert env_on.cache_hits > 0 and env_on.searches < env_off.searches
    # the second pass was served from the cache alone
    assert env_on.cache_hits >= env_on.cache_misses


def test_cache_is_bounded(world):
    env = ReformulationEnv(world.qs, world.retriever.index, max_steps=2, reward_k=K, cache_size=5)
    env.reset(torch.arange(len(world.qids)))
    env.step(random_legal(env, torch.Generator().manual_seed(0), stop_prob=0.0))
    assert len(env.cache) == 5
