"""The batched reformulation environment against an independent recomputation of its rewards.

Every reward is checked against the recall / reciprocal rank of the rewritten query scored by bm25s (a separate
BM25 implementation, fed the rewritten query's words) and ranked by numpy, with relevance read straight from the
qrels, never from the env's tensors. The counting reward equals a sorted top-k list exactly (ties included), and
the env's three ways of scoring a step (incremental fixed-shape, compact, whole-query re-scoring) agree.
"""

from __future__ import annotations


import bm25s
import numpy as np
import pytest
import torch

from adaptive_ir.env import QuerySet, ReformulationEnv, ranked_metric, search_reward
from adaptive_ir.policy import Agent
from adaptive_ir.ppo import AmpContext
from adaptive_ir.rollout import policy_step, step_counters

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
        reward, term = env.step(acts)
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


@pytest.mark.parametrize("compact", [False, True])
def test_masks_stop_and_the_step_limit(world, compact):
    qs = world.qs
    assert (~qs.cand_valid).any(), "the fixture must have padded candidate slots"
    env = ReformulationEnv(qs, world.retriever.index, max_steps=3, reward_k=K, compact=compact)
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
    _, term = env.step(acts)
    assert torch.equal(term, stoppers)
    assert torch.equal(env.alive, ~stoppers)
    legal = env.legal()
    goers = (~stoppers).nonzero().squeeze(1)
    assert not legal[goers, first[goers]].any()  # a chosen term cannot be chosen again
    assert legal[:, -1].all()
    # a finished episode ignores further actions: no reward, no new terms, not terminated again
    terms_before = env.terms[stoppers].clone()
    reward, term = env.step(torch.where(stoppers, first, torch.full_like(first, env.M)))
    assert torch.equal(env.terms[stoppers], terms_before) and (reward[stoppers] == 0).all()
    assert torch.equal(term, ~stoppers) and not env.alive.any()
    # never stopping: the step that reaches max_steps ends the episode as terminal (nothing can follow it)
    env.reset(qidx)
    gen = torch.Generator().manual_seed(3)
    for t in range(3):
        legal = env.legal().float()
        legal[:, -1] = 1e-9  # STOP only where nothing else is left
        acts = torch.multinomial(legal, 1, generator=gen).squeeze(1)
        _, term = env.step(acts)
        expanded = acts < env.M
        assert torch.equal(term, ~expanded if t < 2 else torch.ones_like(term))
    assert not env.alive.any()


def test_policy_never_samples_illegal_actions(world):
    qs = world.qs
    torch.manual_seed(0)
    agent = Agent(world.emb_dim, qs.cand_feats.shape[-1], max_steps=5, hidden_dim=16, num_heads=2)
    agent.use_tables(world.tables)
    amp = AmpContext(torch.device("cpu"), enabled=False)
    env = ReformulationEnv(qs, world.retriever.index, max_steps=5, reward_k=K)
    qidx = torch.arange(len(qs)).repeat(20)  # many samples per query
    runs = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(0)
        env.reset(qidx)
        ep = agent.episode_inputs(qs, env.qidx)
        chosen_any, actions = False, []
        for step in step_counters(env, len(qidx)):
            legal = env.legal()
            acts, logp, _ = policy_step(agent, amp, ep, env, step, gen)
            live = env.alive
            assert legal[live.nonzero().squeeze(1), acts[live]].all()
            assert torch.isfinite(logp[live]).all()
            chosen_any |= bool((acts[live] < env.M).any())
            actions.append(acts)
            env.step(acts)
        assert chosen_any
        runs.append(torch.stack(actions))
    assert torch.equal(runs[0], runs[1])  # same seed, same device: same actions
    # chosen slots are always real candidates
    assert not (env.chosen & ~qs.cand_valid[qidx]).any()



# ---------------------------------------------------------------------------------------------- counting = top-k
def sorted_topk_metric(scores: torch.Tensor, rel_docs: torch.Tensor, n_rel: torch.Tensor, weights: dict[str, float],
                       k: int) -> torch.Tensor:
    """The reference: each row sorted by score with ties in corpus order (a stable sort), its first k documents
    with a score > 0 are the retrieved list; recall and reciprocal rank read off that list."""
    out = []
    for row, rel, n in zip(scores.tolist(), rel_docs.tolist(), n_rel.tolist()):
        order = sorted(range(len(row)), key=lambda d: -row[d])[:k]  # sorted() is stable
        top = [d for d in order if row[d] > 0]
        rel = {d for d in rel if d >= 0}
        hits = [d in rel for d in top]
        recall = sum(hits) / max(n, 1)
        rr = 1.0 / (hits.index(True) + 1) if any(hits) else 0.0
        out.append(weights.get("recall", 0.0) * recall + weights.get("mrr", 0.0) * rr)
    return torch.tensor(out)


@pytest.mark.parametrize("ties", [False, True])
def test_counting_reward_equals_the_sorted_topk_list(ties):
    gen = torch.Generator().manual_seed(7)
    b, n, r, k = 64, 300, 6, 20
    if ties:  # few distinct values: ties everywhere, across the cut at k and among relevant documents
        scores = torch.randint(0, 6, (b, n), generator=gen).float() * 0.5
    else:
        scores = torch.rand(b, n, generator=gen) * (torch.rand(b, n, generator=gen) < 0.3)  # many zero scores
    scores[:4] = 0.0  # queries matching nothing
    # distinct relevant documents per query, 0 to r of them, -1 padded
    rel_docs = torch.stack([torch.randperm(n, generator=gen)[:r] for _ in range(b)])
    rel_docs = torch.where(torch.rand(b, r, generator=gen) < 0.3, -1, rel_docs)
    n_rel = (rel_docs >= 0).sum(1).float()
    for mix in ({"recall": 1.0}, {"mrr": 1.0}, {"recall": 0.7, "mrr": 0.3}):
        got = ranked_metric(scores, rel_docs, n_rel, mix, k)
        torch.testing.assert_close(got, sorted_topk_metric(scores, rel_docs, n_rel, mix, k), atol=1e-6, rtol=0)
    assert (got > 0).any() and (got < 1).any()
    if ties:  # the tie rule decided some of these: a relevant document tied at the cut, in or out by position
        kth = scores.topk(k, dim=1).values[:, -1:]
        assert ((scores.gather(1, rel_docs.clamp(min=0)) == kth) & (rel_docs >= 0) & (kth > 0)).any()


# ---------------------------------------------------------------------------------------------- scoring modes
def rollout_rewards(env: ReformulationEnv, qidx: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    env.reset(qidx)
    out = [env.metric.clone()]
    for _ in range(env.max_steps):
        legal = env.legal().float()
        legal[:, -1] = 0.2
        out.append(env.step(torch.multinomial(legal, 1, generator=gen).squeeze(1))[0])
    return torch.stack(out), env.metric


@pytest.mark.parametrize("mix", [{"recall": 1.0}, {"recall": 0.7, "mrr": 0.3}])
def test_incremental_compact_and_rescoring_modes_agree(world, mix):
    index, qs = world.retriever.index, world.qs
    qidx = torch.arange(0, len(qs), 2).repeat(3)[: len(qs) - 1]  # fewer episodes than queries
    runs = []
    # None: every query's first scores are kept (they fit); B × N: only the episodes' state fits, so each reset
    # searches; 1: not even that, so every step re-scores whole queries
    for cells in (None, len(qidx) * index.num_docs, 1):
        for compact in (False, True):
            env = ReformulationEnv(qs, index, 4, K, mix, expansion_weight=0.6, compact=compact, max_state_cells=cells)
            assert (env._initial is None) == (cells is not None)
            runs.append(rollout_rewards(env, qidx, seed=1))
            assert (env.scores is None) == (cells == 1)
            # the final metric is that of the final query searched from scratch
            final = search_reward(index, env.terms, env.weights, qs.rel_docs[qidx], qs.n_rel[qidx], mix, K)
            torch.testing.assert_close(env.metric, final, atol=1e-6, rtol=0)
    for rewards, _ in runs[1:]:
        torch.testing.assert_close(rewards, runs[0][0], atol=1e-6, rtol=0)
    assert (runs[0][0][1:] != 0).any()


def test_incremental_scores_equal_whole_query_scores(world):
    index, qs = world.retriever.index, world.qs
    env = ReformulationEnv(qs, index, 4, K, compact=False)
    rollout_rewards(env, torch.arange(len(qs)), seed=2)
    assert env.postings_width == int((index.indptr[qs.cand_terms + 1] - index.indptr[qs.cand_terms]).max())
    torch.testing.assert_close(env.scores, index.score(env.terms, env.weights), atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------- excluded documents
def with_exclusions(qs: QuerySet, exclude: torch.Tensor) -> QuerySet:
    return QuerySet(**{**vars(qs), "exclude_docs": exclude, "has_exclusions": bool((exclude >= 0).any())})


def test_excluded_document_is_never_retrieved_and_takes_no_rank(world):
    index, qs = world.retriever.index, world.qs
    mix = {"recall": 0.5, "mrr": 0.5}
    base = ReformulationEnv(qs, index, 2, K, mix)
    qidx = torch.arange(len(qs))
    base.reset(qidx)
    scores = index.score(qs.terms, (qs.terms != index.pad_id).float())
    # per query: exclude its best-ranked document (relevant or not), or nothing for every third query
    top = scores.argmax(1)
    exclude = torch.where(qidx % 3 == 0, -1, top)
    assert ((qidx % 3 != 0) & (scores.max(1).values > 0)).any()
    # the reference: the excluded document's score is 0 before ranking, i.e. it is out of the corpus
    removed = scores.clone()
    keep = exclude >= 0
    removed[keep.nonzero().squeeze(1), exclude[keep]] = 0.0
    expected = sorted_topk_metric(removed, qs.rel_docs, qs.n_rel, mix, K)
    for compact in (False, True):
        env = ReformulationEnv(with_exclusions(qs, exclude), index, 2, K, mix, compact=compact)
        env.reset(qidx)
        torch.testing.assert_close(env.metric, expected, atol=1e-6, rtol=0)
        # and it stays out after expansions (an added term's postings may include it)
        rewards, metric = rollout_rewards(env, qidx, seed=3)
        assert (env.scores.gather(1, exclude.clamp(min=0)[:, None]).squeeze(1)[keep] == 0).all()
        final = search_reward(index, env.terms, env.weights, qs.rel_docs, qs.n_rel, mix, K, exclude)
        torch.testing.assert_close(metric, final, atol=1e-6, rtol=0)
    # excluding a relevant top document changes the reward where it was retrieved
    rel_top = (qs.rel_docs == top[:, None]).any(1) & keep
    assert rel_top.any() and (expected[rel_top] < base.metric[rel_top]).all()
    # QuerySet.build takes the argument, default none
    assert (qs.exclude_docs == -1).all() and not qs.has_exclusions
