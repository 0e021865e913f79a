"""The batched reformulation environment against an independent recomputation of its rewards.

Every reward is checked against the recall / reciprocal rank of the rewritten query scored by bm25s (a separate
BM25 implementation, fed the rewritten query's words) and ranked by numpy, with relevance read straight from the
qrels, never from the env's tensors. The ranking each episode keeps equals the rewritten query searched from
scratch over every document, key for key (ties included), in both modes (the CPU kernels and the accelerator
tensor code), which give the same floats.
"""

from __future__ import annotations

import bm25s
import numpy as np
import pytest
import torch
from helpers import (
    default_collection,
    query_world,
    random_postings,
    reference_metric,
    reference_topk,
    relevant_sets,
)

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.retrieval.index import key_docs, key_scores, ranking_keys
from adaptive_ir.rl.env import Judgements, QuerySet, ReformulationEnv
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.rollout import policy_step, step_counters

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
    """(lowest, highest) Recall@K / RR@K mix of q0's words (weight 1) plus ``added`` words (or (word, weight)
    pairs), scored by bm25s and
    ranked by numpy; documents matching no query word are not retrieved.

    Documents with equal scores (identical statistics happen on the generated collection) may come in any order,
    so the metric is computed with relevant documents last and first among equal scores: the two are equal
    unless a tie straddles the cut at K.
    """
    vocab = w.ref.vocab_dict
    words = [(t, 1.0) for t in w.retriever.analyzer.tokenize(w.texts[qpos]) if t in vocab]
    words += [t if isinstance(t, tuple) else (t, expansion_weight) for t in added]
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
    return torch.where(stop, torch.full_like(acts, env.stop), acts)


def play(w, env: ReformulationEnv, seed: int, weights: dict[str, float]):
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
            if alive[i] and acts[i] < env.stop:
                slot, level = divmod(int(acts[i]), env.L)
                added[i].append((vocab[int(w.qs.cand_terms[i, slot])], env.levels[level]))
                before, now[i] = now[i], hand_metric(w, i, added[i], weights)
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
    check_telescoping(env, *play(world, env, seed=2, weights={"recall": 1.0}))


@pytest.mark.parametrize("compact", [True, False])
def test_an_action_adds_its_candidate_at_its_own_weight(world, compact):
    """With L weights, action a adds candidate a // L at weight levels[a % L]: every reward equals bm25s' search of
    the rewrite with those weights, and the legal actions are every weight of each open candidate."""
    levels = (0.3, 1.0, 2.5)
    env = ReformulationEnv(world.qs, world.retriever.index, max_steps=3, reward_k=K, expansion_weight=levels,
                           compact=compact)
    assert (env.L, env.stop) == (3, 3 * env.M)
    env.reset(torch.arange(len(world.qids)))
    legal = env.legal()
    assert legal.shape == (len(world.qids), 3 * env.M + 1)
    assert torch.equal(legal[:, :-1].view(-1, env.M, 3), world.qs.cand_valid[:, :, None].expand(-1, -1, 3))
    total, start, final = play(world, env, seed=5, weights={"recall": 1.0})
    check_telescoping(env, total, start, final)
    added = env.weights[:, world.qs.terms.shape[1]:]
    torch.testing.assert_close(added[added > 0].unique(), torch.tensor(levels))
    # a candidate once chosen is closed at every weight
    chosen = env.chosen
    assert not (env.legal()[:, :-1].view(-1, env.M, 3) & chosen[:, :, None]).any()


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
    acts = torch.where(stoppers, torch.full_like(first, env.stop), first)
    _, term = env.step(acts)
    assert torch.equal(term, stoppers)
    assert torch.equal(env.alive, ~stoppers)
    legal = env.legal()
    goers = (~stoppers).nonzero().squeeze(1)
    assert not legal[goers, first[goers]].any()  # a chosen term cannot be chosen again
    assert legal[:, -1].all()
    # a finished episode ignores further actions: no reward, no new terms, not terminated again
    terms_before = env.terms[stoppers].clone()
    reward, term = env.step(torch.where(stoppers, first, torch.full_like(first, env.stop)))
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
        expanded = acts < env.stop
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
            chosen_any |= bool((acts[live] < env.stop).any())
            actions.append(acts)
            env.step(acts)
        assert chosen_any
        runs.append(torch.stack(actions))
    assert torch.equal(runs[0], runs[1])  # same seed, same device: same actions
    # chosen slots are always real candidates
    assert not (env.chosen & ~qs.cand_valid[qidx]).any()



# ---------------------------------------------------------------------------------------------- rankings and metric
def sorted_topk_metric(scores: torch.Tensor, relevant: list[set[int]], weights: dict[str, float],
                       k: int) -> torch.Tensor:
    """The reference: each row sorted by score with ties in corpus order (a stable sort), its first k documents
    with a score > 0 are the retrieved list; recall and reciprocal rank read off that list."""
    out = []
    for row, rel in zip(scores.tolist(), relevant):
        order = sorted(range(len(row)), key=lambda d: -row[d])[:k]  # sorted() is stable
        hits = [d in rel for d in order if row[d] > 0]
        recall = sum(hits) / max(len(rel), 1)
        rr = 1.0 / (hits.index(True) + 1) if any(hits) else 0.0
        out.append(weights.get("recall", 0.0) * recall + weights.get("mrr", 0.0) * rr)
    return torch.tensor(out)


@pytest.mark.parametrize("ties", [False, True])
def test_metric_of_ranking_keys_equals_the_sorted_topk_list(ties):
    gen = torch.Generator().manual_seed(7)
    b, n, r, k = 64, 300, 6, 20
    if ties:  # few distinct values: ties everywhere, across the cut at k and among relevant documents
        scores = torch.randint(0, 6, (b, n), generator=gen).float() * 0.5
    else:
        scores = torch.rand(b, n, generator=gen) * (torch.rand(b, n, generator=gen) < 0.3)  # many zero scores
    scores[:4] = 0.0  # queries matching nothing
    # distinct relevant documents per query, 0 to r of them (ragged)
    relevant = [set(torch.randperm(n, generator=gen)[: int(torch.randint(0, r + 1, (1,), generator=gen))].tolist())
                for _ in range(b)]
    n_rel = torch.tensor([float(len(x)) for x in relevant])
    rel_docs = torch.tensor([d for x in relevant for d in sorted(x)], dtype=torch.long)
    rel_indptr = torch.cat([torch.zeros(1, dtype=torch.long), n_rel.long().cumsum(0)])
    keys = torch.full((b, k), -1, dtype=torch.long)
    for i in range(b):  # the top k of each row by (score, position), as the env keeps them
        order = torch.argsort(-scores[i], stable=True)[:k]
        order = order[scores[i, order] > 0]
        keys[i, : len(order)] = ranking_keys(scores[i, order], order)
    for mix in ({"recall": 1.0}, {"mrr": 1.0}, {"recall": 0.7, "mrr": 0.3}):
        judged = Judgements(rel_indptr, rel_docs, n_rel, n, mix)
        for kernel in (False, True):
            got = judged.metric(torch.arange(b), keys, kernel)
            torch.testing.assert_close(got, sorted_topk_metric(scores, relevant, mix, k), atol=1e-6, rtol=0)
    assert (got > 0).any() and (got < 1).any()
    if ties:  # the tie rule decided some of these: a relevant document tied at the cut, in or out by position
        kth = scores.topk(k, dim=1).values[:, -1]
        assert any(scores[i, d] == kth[i] > 0 for i, rel in enumerate(relevant) for d in rel)


def random_rollout(env: ReformulationEnv, qidx: torch.Tensor, seed: int, check=None):
    """Random legal actions (STOP now and then) until every episode ends; ``check(env, reward)`` after each step.
    Returns the rewards, (steps + 1, B) with the start metric first."""
    gen = torch.Generator().manual_seed(seed)
    env.reset(qidx)
    out = [env.metric.clone()]
    if check:
        check(env, None)
    while env.alive.any():
        legal = env.legal().float()
        legal[:, -1] = 0.2
        reward, _ = env.step(torch.multinomial(legal, 1, generator=gen).squeeze(1))
        out.append(reward)
        if check:
            check(env, reward)
    return torch.stack(out)


def exact_check(env: ReformulationEnv, relevant, mix):
    """After every step: the kept ranking equals the rewritten query searched from scratch, key for key (ties
    included), and the reward is the metric difference."""
    state = {"metric": None}

    def check(e, reward):
        want = reference_topk(e.index, e.terms, e.weights, K, e.exclude)
        assert torch.equal(e.topk, want)
        metric = reference_metric(want, relevant, mix)
        torch.testing.assert_close(e.metric, metric, atol=1e-6, rtol=0)
        if reward is not None:
            torch.testing.assert_close(reward, metric - state["metric"], atol=1e-6, rtol=0)
        state["metric"] = metric

    return check


@pytest.mark.parametrize("mix, weight", [({"recall": 1.0}, 0.6), ({"recall": 0.7, "mrr": 0.3}, 0.6),
                                         ({"recall": 1.0}, (0.5, 1.0, 2.0))])
def test_kept_rankings_equal_a_search_from_scratch_in_both_modes(world, mix, weight):
    index, qs = world.retriever.index, world.qs
    qidx = torch.arange(0, len(qs), 2).repeat(3)[: len(qs) - 1]  # fewer episodes than queries, repeats
    runs = []
    for compact in (True, False):
        env = ReformulationEnv(qs, index, 4, K, mix, expansion_weight=weight, compact=compact)
        runs.append(random_rollout(env, qidx, seed=1, check=exact_check(env, relevant_sets(qs, qidx), mix)))
    # the kernels and the tensor code: the same rankings at every step (exact_check), the same rewards up to the
    # rounding of the metric mix (fused multiply-add or not)
    torch.testing.assert_close(runs[0], runs[1], atol=1e-6, rtol=0)
    assert (runs[0][1:] != 0).any()


@pytest.fixture(scope="module")
def tie_world():
    """A corpus where every document appears three times (equal scores everywhere: ties decided by position),
    with qrels on some of the copies."""
    from adaptive_ir.data import Collection, MemoryCorpus
    from adaptive_ir.mining.candidates import CandidateMiner
    from adaptive_ir.retrieval.retriever import Retriever

    texts = [t for t in default_collection().doc_texts()[:300] for _ in range(3)]
    corpus = MemoryCorpus([f"d{i}" for i in range(len(texts))], [""] * len(texts), texts)
    coll = Collection("ties", corpus, {}, {})
    retriever = Retriever.build(coll)
    queries = [" ".join(t.split()[:3]) for t in texts[::17][:30]]
    terms = retriever.encode(queries)
    cands = CandidateMiner(retriever, top_k0=10, max_candidates=20, min_candidates=5, num_workers=1).mine(terms)
    qrels = {f"q{i}": {f"d{3 * (i * 17 // 3) + j}": 1 for j in (1, 2)} for i in range(len(queries))}
    rows = np.where(cands.valid, np.arange(cands.terms.size).reshape(cands.terms.shape), cands.terms.size)
    qs = QuerySet.build(list(qrels), terms, cands, rows, np.arange(len(queries)), qrels, corpus.doc_positions,
                        retriever.index.pad_id, "cpu")
    return qs, retriever.index


@pytest.mark.parametrize("compact", [True, False])
def test_ties_are_decided_by_corpus_position_as_a_search_from_scratch_does(tie_world, compact):
    qs, index = tie_world
    mix = {"recall": 0.5, "mrr": 0.5}
    env = ReformulationEnv(qs, index, 3, K, mix, compact=compact)
    qidx = torch.arange(len(qs))
    env.reset(qidx)
    scores = key_scores(env.topk)
    assert ((scores[:, 1:] == scores[:, :-1]) & (scores[:, 1:] > 0)).any(), "the fixture must have ties"
    random_rollout(env, qidx, seed=4, check=exact_check(env, relevant_sets(qs), mix))


@pytest.mark.parametrize("compact", [True, False])
def test_lanes_hold_the_current_scores_and_are_cleared_between_batches(world, compact):
    index, qs = world.retriever.index, world.qs
    env = ReformulationEnv(qs, index, 4, K, compact=compact)
    random_rollout(env, torch.arange(len(qs)), seed=2)
    b = len(qs)
    assert torch.equal(env.lanes[:b], index.score(env.terms, env.weights))
    # a smaller batch next: its lanes hold its own queries' scores only, the rows it does not use are zero
    qidx = torch.arange(3, 9)
    random_rollout(env, qidx, seed=3)
    assert torch.equal(env.lanes[: len(qidx)], index.score(env.terms, env.weights))
    assert not env.lanes[len(qidx):].any()
    # a larger one than the lanes have rows: new lanes
    env.reset(torch.arange(len(qs)).repeat(2))
    assert env.lanes.shape[0] == 2 * len(qs)
    assert torch.equal(env.lanes[: 2 * len(qs)], index.score(env.terms, env.weights))
    # lanes given back (before a run's test phase) are made again by the next batch
    env.release_lanes()
    assert env.lanes is None and env.terms is None
    random_rollout(env, qidx, seed=3)
    assert env.lanes.shape[0] == len(qidx) and torch.equal(env.lanes, index.score(env.terms, env.weights))


@pytest.mark.parametrize("compact", [True, False])
def test_trial_is_the_step_it_tries_and_leaves_the_episode_as_it_was(world, compact):
    index, qs = world.retriever.index, world.qs
    env = ReformulationEnv(qs, index, 4, K, {"recall": 0.7, "mrr": 0.3}, expansion_weight=0.5, compact=compact)
    qidx = torch.arange(len(qs))
    env.reset(qidx)
    gen = torch.Generator().manual_seed(5)
    for _ in range(3):
        legal = env.legal().float()
        legal[:, -1] = 0.1
        acts = torch.multinomial(legal, 1, generator=gen).squeeze(1)
        lanes, topk, metric = env.lanes.clone(), env.topk.clone(), env.metric.clone()
        tried = env.trial(acts)
        assert torch.equal(env.lanes, lanes) and torch.equal(env.topk, topk) and torch.equal(env.metric, metric)
        every = torch.stack([env.trial(torch.full_like(qidx, j)) for j in range(env.switch)], 1)
        torch.testing.assert_close(env.trial_all(), every, atol=0, rtol=0)  # the CPU's one call for the oracle
        reward, _ = env.step(acts)
        torch.testing.assert_close(tried, metric + reward, atol=0, rtol=0)


@pytest.mark.parametrize("ties", [False, True])
def test_the_cpu_trials_of_every_candidate_equal_reading_every_posting(ties):
    """``kernels.lanes_trial_all`` (a candidate whose bound is below an episode's k-th score looked up in its best
    documents only) gives the top k of the env's own trial reading every posting (``lanes_add`` undone), on random
    indexes (equal impacts, so equal scores, when ``ties``), episodes of several weighted terms with an excluded
    document, and candidates (weight 0: an episode that does not expand). An infinite bound forces the full
    reading; the shortcut must be taken often, or this could not fail."""
    from adaptive_ir.retrieval import kernels

    rng = np.random.default_rng(7 + ties)
    shortcuts = 0
    for _ in range(40):
        num_docs, vocab, indptr, indices, data = random_postings(rng, ties)
        maxes = kernels.term_max(indptr, data)
        b, width, m, k = 8, int(rng.integers(1, 6)), int(rng.integers(1, 12)), int(rng.integers(1, 40))
        terms = rng.integers(0, vocab + 1, (b, width)).astype(np.int64)  # vocab: the padding term
        weights = (rng.integers(1, 5, (b, width)) * 0.25).astype(np.float32)
        lanes = np.zeros((b, num_docs), np.float32)
        kernels.lanes_fill(indptr, indices, data, lanes, np.arange(b), terms, weights)
        exclude = rng.integers(-1, num_docs, b)
        topk = np.full((b, k), -1, np.int64)
        for i in range(b):
            docs = np.flatnonzero((lanes[i] > 0) & (np.arange(num_docs) != exclude[i]))
            keys = np.sort(ranking_keys(torch.from_numpy(lanes[i, docs]), torch.from_numpy(docs)).numpy())[::-1][:k]
            topk[i, :len(keys)] = keys
        cands = rng.integers(0, vocab + 1, (b, m)).astype(np.int64)
        cand_w = (rng.integers(0, 4, (b, m)) * 0.5).astype(np.float32)
        fast, full = np.empty((m, b, k), np.int64), np.empty((m, b, k), np.int64)
        kernels.lanes_trial_all(indptr, indices, data, maxes, lanes, terms, cands, cand_w, exclude, topk, fast)
        kernels.lanes_trial_all(indptr, indices, data, np.full_like(maxes, np.inf), lanes, terms, cands, cand_w,
                                exclude, topk, full)
        np.testing.assert_array_equal(fast, full)
        for j in range(m):
            tried = topk.copy()
            kernels.lanes_add(indptr, indices, data, lanes, np.arange(b), cands[:, j], cand_w[:, j], exclude, tried,
                              True)
            np.testing.assert_array_equal(fast[j], tried)
        theta = np.where(topk[:, -1] >= 0, lanes[np.arange(b), (2**32 - 1) - (topk[:, -1] & (2**32 - 1))], np.inf)
        postings = indptr[cands + 1] - indptr[cands]
        shortcuts += int(((cand_w > 0) & (cand_w * maxes[cands] < theta[:, None]) & (k * 24 < postings)).sum())
    assert shortcuts > 100


def test_ragged_qrels_hold_every_judged_document_once(world):
    qs = world.qs
    for i, qid in enumerate(world.qids):
        want = {world.coll.doc_positions([d])[0] for d, g in world.qrels[qid].items() if g >= 1}
        lo, hi = int(qs.rel_indptr[i]), int(qs.rel_indptr[i + 1])
        assert qs.rel_docs[lo:hi].tolist() == sorted(want) and qs.n_rel[i] == len(want)
    assert qs.rel_docs.numel() == int(qs.n_rel.sum())  # no padding


# ---------------------------------------------------------------------------------------------- excluded documents
def with_exclusions(qs: QuerySet, exclude: torch.Tensor) -> QuerySet:
    return QuerySet(**{**vars(qs), "exclude_docs": exclude})


def test_excluded_document_is_never_retrieved_and_takes_no_rank(world):
    index, qs = world.retriever.index, world.qs
    mix = {"recall": 0.5, "mrr": 0.5}
    base = ReformulationEnv(qs, index, 2, K, mix)
    qidx = torch.arange(len(qs))
    base.reset(qidx)
    # per query: exclude its best-ranked document (relevant or not), or nothing for every third query
    top = key_docs(base.topk[:, 0])
    exclude = torch.where((qidx % 3 == 0) | (base.topk[:, 0] < 0), -1, top)
    keep = exclude >= 0
    assert keep.any()
    relevant = relevant_sets(qs)
    for compact in (False, True):
        env = ReformulationEnv(with_exclusions(qs, exclude), index, 2, K, mix, compact=compact)
        random_rollout(env, qidx, seed=3, check=exact_check(env, relevant, mix))
        assert not (key_docs(env.topk) == exclude[:, None]).any()
    # excluding a relevant top document lowers the metric where it was retrieved
    rel_top = torch.tensor([int(t) in r for t, r in zip(top, relevant)]) & keep
    env = ReformulationEnv(with_exclusions(qs, exclude), index, 2, K, mix)
    env.reset(qidx)
    assert rel_top.any() and (env.metric[rel_top] < base.metric[rel_top]).all()
    # QuerySet.build takes the argument, default none
    assert (qs.exclude_docs == -1).all()


# ---------------------------------------------------------------------------------------------- weighted start
def test_episodes_started_from_rm3_keep_rankings_equal_to_a_search_from_scratch(world):
    # retrieval.start = rm3: q0 is each query's RM3 expansion, its words at weight 1; the env's first ranking is
    # that query's RM3 run (the fixed rule), and every step keeps the rewritten query's ranking exactly
    from adaptive_ir.evaluation.metrics import rm3_run

    r, mix = world.retriever, {"recall": 1.0}
    qs = query_world(NUM_QUERIES, start="rm3").qs
    assert qs.first_keys is None and qs.terms.shape[1] > world.qs.terms.shape[1]
    assert {1.0} < set(qs.term_weights[qs.terms != r.index.pad_id].tolist())  # query words 1, expansion terms not
    qidx = torch.arange(len(qs))
    runs = []
    for compact in (True, False):
        env = ReformulationEnv(qs, r.index, 3, K, mix, expansion_weight=(0.5, 2.0), compact=compact)
        runs.append(random_rollout(env, qidx, seed=2, check=exact_check(env, relevant_sets(qs, qidx), mix)))
    torch.testing.assert_close(runs[0], runs[1], atol=1e-6, rtol=0)
    assert (runs[0][1:] != 0).any()
    # the start is RM3 over the same 5 feedback documents, document for document
    env = ReformulationEnv(qs, r.index, 3, K, mix)
    env.reset(qidx)
    rm3 = rm3_run(r, world.qids, world.texts, k=K, fb_docs=5)
    for i, qid in enumerate(world.qids):
        docs = [world.coll.doc_ids[d] for d in key_docs(env.topk[i][env.topk[i] >= 0]).tolist()]
        assert docs == list(rm3[qid])
    with pytest.raises(ValueError, match="2 weights for 1 terms"):
        QuerySet.build(["q"], [[3]], world.cands, world.qs.cand_rows.numpy()[:1], np.arange(1), None,
                       world.coll.doc_positions, r.index.pad_id, "cpu", query_weights=[[1.0, 2.0]])


@pytest.mark.parametrize("compact", [True, False])
def test_restarted_rows_run_new_episodes_exactly_while_the_others_go_on(world, compact):
    """A vector env's autoreset: rows restart at other steps than the rest of the batch. Every kept ranking stays
    the rewritten query searched from scratch, every reward the metric difference (``exact_check``), the restarted
    rows' state is what a fresh reset gives those queries, and the lanes hold each row's current scores."""
    index, qs = world.retriever.index, world.qs
    mix = {"recall": 1.0}
    env = ReformulationEnv(qs, index, 4, K, mix, expansion_weight=(0.5, 1.0), compact=compact)
    qidx = torch.arange(8)
    gen = torch.Generator().manual_seed(5)
    env.reset(qidx)
    restarted = 0
    for step in range(12):
        legal = env.legal().float()
        legal[:, -1] = 0.3
        before = env.metric.clone()
        reward, _ = env.step(torch.multinomial(legal, 1, generator=gen).squeeze(1))
        torch.testing.assert_close(reward, env.metric - before, atol=1e-6, rtol=0)
        done = (~env.alive).nonzero().squeeze(1)
        if done.numel():
            new = (torch.arange(done.numel()) * 3 + step) % len(qs)
            env.restart(done, new)
            qidx[done] = new
            restarted += done.numel()
            fresh = ReformulationEnv(qs, index, 4, K, mix, expansion_weight=(0.5, 1.0), compact=compact)
            fresh.reset(new)
            for name in ("terms", "weights", "topk", "metric", "alive", "chosen", "steps", "exclude"):
                assert torch.equal(getattr(env, name)[done], getattr(fresh, name)), name
        # the rewards so far and the state now, every row measured against its own query
        relevant = relevant_sets(qs, qidx)
        want = reference_topk(env.index, env.terms, env.weights, K, env.exclude)
        assert torch.equal(env.topk, want)
        torch.testing.assert_close(env.metric, reference_metric(want, relevant, mix), atol=1e-6, rtol=0)
        assert torch.equal(env.qidx, qidx)
        assert torch.equal(env.lanes[: len(qidx)], index.score(env.terms, env.weights))
    assert restarted >= 8


@pytest.mark.parametrize("compact", [True, False])
def test_is_legal_reads_the_mask_of_legal(world, compact):
    index, qs = world.retriever.index, world.qs
    env = ReformulationEnv(qs, index, 4, K, expansion_weight=(0.5, 1.0), compact=compact)
    env.reset(torch.arange(len(qs)))
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        legal = env.legal()
        for a in range(env.stop + 1):
            actions = torch.full((len(qs),), a)
            assert torch.equal(env.is_legal(actions), legal[:, a])
        assert not env.is_legal(torch.full((len(qs),), env.stop + 1)).any()
        env.step(torch.multinomial(legal.float(), 1, generator=gen).squeeze(1))


# ---------------------------------------------------------------------------------------------- choosing the start
@pytest.fixture(scope="module")
def choice_world():
    return query_world(NUM_QUERIES, start="choose")


def switching_rollout(env: ReformulationEnv, qidx: torch.Tensor, seed: int, check) -> int:
    """Random legal episodes where half the episodes switch at their first step; returns how many switched."""
    gen = torch.Generator().manual_seed(seed)
    env.reset(qidx)
    check(env, None)
    first = torch.rand(qidx.shape, generator=gen) < 0.5
    reward, _ = env.step(torch.where(first, env.switch, env.stop - 1 - 3 * torch.arange(len(qidx)) % 7))
    check(env, reward)
    switched = int(env.started.sum())
    while env.alive.any():
        legal = env.legal().float()
        assert not legal[:, env.switch].any()  # the first step only
        legal[:, -1] = 0.2
        reward, _ = env.step(torch.multinomial(legal, 1, generator=gen).squeeze(1))
        check(env, reward)
    return switched


@pytest.mark.parametrize("compact", [True, False])
def test_switching_to_rm3_keeps_rankings_equal_to_a_search_from_scratch(choice_world, compact):
    # retrieval.start = choose: the switch replaces the query with its RM3 expansion (lanes, terms, ranking), its
    # reward is RM3's metric minus the query's, and every later step keeps the rewritten query's ranking exactly
    w, mix = choice_world, {"recall": 0.7, "mrr": 0.3}
    qs, index = w.qs, w.retriever.index
    env = ReformulationEnv(qs, index, 3, K, mix, expansion_weight=(0.5, 2.0), compact=compact)
    assert env.choice and env.stop == env.switch + 1 == env.M * env.L + 1
    qidx = torch.arange(len(qs))
    switched = switching_rollout(env, qidx, 4, exact_check(env, relevant_sets(qs, qidx), mix))
    assert 0 < switched < len(qs)
    assert torch.equal(env.lanes[: len(qidx)], index.score(env.terms, env.weights))


def test_the_switch_then_stop_is_anserinis_rm3_to_the_bit(choice_world):
    from adaptive_ir.evaluation.metrics import rm3_anserini_run

    w = choice_world
    env = ReformulationEnv(w.qs, w.retriever.index, 3, K, {"recall": 1.0})
    qidx = torch.arange(len(w.qs))
    env.reset(qidx)
    bare = env.metric.clone()
    reward, done = env.step(torch.full_like(qidx, env.switch))
    assert not done.any() and env.started.all()
    torch.testing.assert_close(reward, env.alt_metric - bare)
    env.step(torch.full_like(qidx, env.stop))
    run = rm3_anserini_run(w.retriever, w.qids, w.texts, k=K)
    for i, qid in enumerate(w.qids):
        keys = env.topk[i][env.topk[i] >= 0]
        assert [w.coll.doc_ids[d] for d in key_docs(keys).tolist()] == list(run[qid])
        # scores scaled by a power of two: exactly
        ratio = (key_scores(keys).double() / torch.tensor(list(run[qid].values()), dtype=torch.float64)).unique()
        assert ratio.numel() == 1 and float(ratio.log2()).is_integer()
    assert (env.alt_metric != bare).any()


def test_the_oracle_with_a_choice_is_at_least_the_better_start_of_each_query(choice_world):
    from adaptive_ir.evaluation.oracle import oracle_rewrite

    w, mix = choice_world, {"recall": 1.0}
    env = ReformulationEnv(w.qs, w.retriever.index, 3, K, mix)
    env.reset(torch.arange(len(w.qs)))
    better = torch.maximum(env.metric, env.alt_metric)
    terms, weights = oracle_rewrite(w.qs, w.retriever.index, 3, K, mix)
    got = reference_metric(reference_topk(w.retriever.index, terms, weights, K), relevant_sets(w.qs, torch.arange(
        len(w.qs))), mix)
    assert (got >= better - 1e-6).all() and (got > better).any()


def test_a_policy_with_a_choice_may_switch_at_the_first_step_only(choice_world):
    from adaptive_ir.mining.query_features import QUERY_FEATURES

    w = choice_world
    assert w.qs.query_feats.shape == (len(w.qs), len(QUERY_FEATURES)) and torch.isfinite(w.qs.query_feats).all()
    env = ReformulationEnv(w.qs, w.retriever.index, 3, K, {"recall": 1.0})
    agent = Agent(w.emb_dim, w.qs.cand_feats.shape[-1], 3, hidden_dim=32, num_layers=0,
                  query_dim=len(QUERY_FEATURES))
    agent.core.init_stop_prior(env.switch)
    agent.use_tables(w.tables)
    qidx = torch.arange(len(w.qs)).repeat(4)  # about 1/5 of the first steps switch: never none of 96
    env.reset(qidx)
    ep = agent.episode_inputs(w.qs, env.qidx)
    seen = set()
    for t, step in enumerate(step_counters(env, len(qidx))):
        logits, _ = agent(ep, env.chosen, step, env.started)
        assert logits.shape == (len(qidx), env.stop + 1)
        assert torch.equal(logits > torch.finfo(logits.dtype).min, env.legal())
        # factorised: the logits are log-probabilities already; the untrained selector switches with probability
        # 1/2 at the first step, never later
        p = logits.exp()
        torch.testing.assert_close(p.sum(1), torch.ones(len(qidx)))
        torch.testing.assert_close(p[:, env.switch], torch.full((len(qidx),), 0.5 if t == 0 else 0.0))
        actions, _, _ = policy_step(agent, AmpContext(torch.device("cpu"), False), ep, env, step,
                                      torch.Generator().manual_seed(t))
        assert env.is_legal(actions).all()
        seen |= set(actions[env.alive].tolist())
        env.step(actions)
    assert env.switch in seen and env.started.any()


def test_lanes_that_cannot_fit_are_refused_in_one_line_naming_the_setting():
    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.rl.env import require_lanes_fit

    cpu = torch.device("cpu")
    # MS MARCO's 8.8M passages, 256 episodes (8.4 GiB of lanes), 12 GiB available: 128 fit in half of it
    with pytest.raises(ConfigError, match=r"^training.collect_batch_size 256: .* = 8.4 GiB, more than half of the "
                                          r"12.0 GiB available on cpu; set training.collect_batch_size to 182 or less$"):
        require_lanes_fit(256, 8_841_823, cpu, "training.collect_batch_size", available=12 * 2**30)
    require_lanes_fit(128, 8_841_823, cpu, "training.collect_batch_size", available=12 * 2**30)  # fits
    with pytest.raises(ConfigError, match="one episode's score lane"):
        require_lanes_fit(1, 8_841_823, cpu, "training.collect_batch_size", available=2**20)


def test_the_selector_is_fitted_on_both_starts_outcomes(choice_world):
    # start_outcomes forces each start: with a policy that stops at once, the two outcomes are the query's and
    # RM3's own metrics; the fitted selector then switches where RM3 is better on most such queries
    from adaptive_ir.mining.query_features import QUERY_FEATURES
    from adaptive_ir.rl.selector import fit_selector, start_outcomes

    w = choice_world
    env = ReformulationEnv(w.qs, w.retriever.index, 3, K, {"recall": 1.0})
    agent = Agent(w.emb_dim, w.qs.cand_feats.shape[-1], 3, hidden_dim=32, num_layers=0,
                  query_dim=len(QUERY_FEATURES))
    with torch.no_grad():
        agent.core.kind_bias.copy_(torch.tensor([-30.0, 30.0]))  # STOP once the start is chosen
    agent.use_tables(w.tables)
    amp, qidx = AmpContext(torch.device("cpu"), False), torch.arange(len(w.qs))
    from_query, from_rm3 = start_outcomes(agent, amp, env, qidx, 8)
    env.reset(qidx)
    assert np.allclose(from_query, env.metric.numpy()) and np.allclose(from_rm3, env.alt_metric.numpy())
    assert float(agent.core.selector.linear.bias) == 0.0  # restored
    stats = fit_selector(agent, amp, [(env, w.tables, qidx)], 8)
    assert stats["queries"] == len(qidx) and stats["rm3_better"] + stats["query_better"] <= len(qidx)
    switch = agent.core.selector(w.qs.query_feats) > 0
    gain = torch.as_tensor(from_rm3 - from_query)
    # on the queries it was fitted on, its choice gains more than either start alone
    assert float(torch.where(switch, gain, 0.0).sum()) >= max(0.0, float(gain.sum()))


def test_fit_logistic_finds_a_separating_direction():
    from adaptive_ir.rl.selector import fit_logistic

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3)) * [1.0, 5.0, 0.1] + [0.0, 2.0, 1.0]
    y = (x[:, 1] - 2.0 > 0).astype(float)  # only the second feature decides
    weight, bias, mean, scale = fit_logistic(x, y, np.ones(len(x)))
    pred = ((x - mean) / scale) @ weight + bias > 0
    assert (pred == y.astype(bool)).mean() > 0.97 and abs(weight[1]) > 5 * max(abs(weight[0]), abs(weight[2]))


def test_an_accelerator_collects_an_update_in_one_round_where_its_lanes_fit():
    from adaptive_ir.config import load_config
    from adaptive_ir.training.trainer import episodes_per_round

    cfg = load_config("scifact")  # collect_batch_size 32, episodes_per_update 256
    cpu, cuda, plenty = torch.device("cpu"), torch.device("cuda"), 2**40
    assert episodes_per_round(cfg, cpu, 5_183, plenty) == 32  # the CPU keeps its rounds (and its results)
    assert episodes_per_round(cfg, cuda, 5_183, plenty) == 256
    # MS MARCO: 256 lanes of 8.8M documents need 8.4 GiB, more than half of 12 GiB: rounds of 32 instead
    assert episodes_per_round(cfg, cuda, 8_841_823, 12 * 2**30) == 32
    assert episodes_per_round(load_config("scifact", {"training.accelerator_one_round": False}), cuda, 5_183,
                              plenty) == 32
    # lanes of collections not loaded yet cannot be checked
    assert episodes_per_round(load_config("scifact", {"data.also_train_on": ["elsewhere"]}), cuda, 5_183, plenty) == 32


def test_ddp_ranks_on_one_cpu_share_its_lanes_and_ranks_on_gpus_do_not():
    from adaptive_ir.config import load_config
    from adaptive_ir.training.trainer import episodes_per_round

    cfg = load_config("scifact", {"training.accelerator_one_round": False})  # collect_batch_size 32
    cpu, cuda, plenty = torch.device("cpu"), torch.device("cuda"), 2**40
    assert [episodes_per_round(cfg, cpu, 5_183, plenty, ranks_here=n) for n in (1, 2, 3, 64)] == [32, 16, 10, 1]
    assert episodes_per_round(cfg, cuda, 5_183, plenty, ranks_here=2) == 32  # one GPU each: their own memory
