"""CPU kernels (numba) for the work that follows postings: the batched top-k search and the env's score lanes.

Each is one compiled pass over the postings it needs, with no per-posting temporaries; the torch code in
``index.py`` and ``env.py`` does the same work with tensor operations on accelerators (and is checked against these
kernels on the CPU, bit for bit). Every kernel releases the GIL, so a thread pool runs them side by side.

Shared rules (see ``index.ranking_keys``): a document's score is the float32 sum of ``weight × impact`` over the
query's slots, added in slot order (the order of the torch paths, so every path gives the same floats); a ranking
key is ``(float32 bits of the score) << 32 | (2^32 − 1 − position)``, so keys order documents by score, then by
lower position, and a score > 0 gives a key ≥ 2^32; -1 marks an empty slot of a ranking.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_LOW = np.int64((1 << 32) - 1)
_POSITIVE = np.int64(1 << 32)


@njit(inline="always")
def _key(bits: np.int32, doc: np.int64) -> np.int64:
    """The ranking key of a document whose score has the float32 ``bits`` (read through an int32 view)."""
    return (np.int64(bits) << np.int64(32)) + (_LOW - doc)


@njit(nogil=True, cache=True)
def _best_distinct(keys: np.ndarray, k: int, out: np.ndarray) -> None:
    """``out[:]`` = the k largest distinct keys of ``keys`` (those ≥ 0), largest first, -1 padded."""
    out[:] = -1
    n = 0
    for i in range(keys.shape[0]):
        if keys[i] >= 0:
            keys[n] = keys[i]
            n += 1
    if n == 0:
        return
    pool = keys[:n]
    if n > 4 * k:  # a threshold first: only a few keys need sorting; a document appears at most twice, so the
        # 2k largest keys hold the k largest distinct ones
        pool = np.partition(pool, n - 2 * k)[n - 2 * k:]
    pool = np.sort(pool)
    j = 0
    for i in range(pool.shape[0] - 1, -1, -1):
        if j == k:
            break
        if j > 0 and pool[i] == out[j - 1]:
            continue  # one document reached twice (before and after a step)
        out[j] = pool[i]
        j += 1


@njit(inline="always")
def _accumulate(indptr, indices, data, acc, touched, terms, weights, slots):
    """Add the first ``slots`` slots of one query (``terms``, ``weights``: its row) into ``acc``, in slot order;
    each posting's document goes to ``touched`` (a document once per posting). Returns how many."""
    n = 0
    for j in range(slots):
        t, w = terms[j], weights[j]
        for p in range(indptr[t], indptr[t + 1]):
            d = np.int64(indices[p])
            touched[n] = d
            n += 1
            acc[d] += w * data[p]
    return n


@njit(nogil=True, cache=True)
def search_topk(indptr, indices, data, num_docs, terms, weights, k, out):
    """``out[r]`` = the top-k keys of query row r (terms (R, L), weights (R, L) float32; padding slots name a
    term with no postings). One float32 accumulator over the corpus, zeroed again as each row's documents are
    read, so the work follows the row's postings."""
    acc = np.zeros(num_docs, np.float32)
    acc_bits = acc.view(np.int32)
    width = 0
    for r in range(terms.shape[0]):
        total = 0
        for j in range(terms.shape[1]):
            total += indptr[terms[r, j] + 1] - indptr[terms[r, j]]
        width = max(width, total)
    touched = np.empty(width, np.int64)
    keys = np.empty(width, np.int64)
    for r in range(terms.shape[0]):
        n = _accumulate(indptr, indices, data, acc, touched, terms[r], weights[r], terms.shape[1])
        m = 0
        for i in range(n):
            d = touched[i]
            s = acc[d]
            if s > 0:  # a document's first reading; later copies read the zero written below
                keys[m] = _key(acc_bits[d], d)
                m += 1
            acc[d] = np.float32(0.0)
        _best_distinct(keys[:m], k, out[r])


@njit(nogil=True, cache=True)
def search_prefixes(indptr, indices, data, num_docs, terms, weights, start, marks, k, out):
    """``out[r, i]`` = the top-k keys of query row r cut after ``start + marks[i]`` slots: the rankings of one
    query growing a slot at a time (a fixed rule adding its first j candidates), each equal to ``search_topk`` of
    that prefix, for the cost of one search of the whole row. ``marks`` ascending, each ≤ ``terms.shape[1] -
    start``; the slots after ``start`` must have weights > 0 (scores only rise, ``_step``)."""
    acc = np.zeros(num_docs, np.float32)
    bits = acc.view(np.int32)
    seen = np.zeros(num_docs, np.bool_)
    width, longest = 0, 0
    for r in range(terms.shape[0]):
        total = 0
        for j in range(terms.shape[1]):
            n = indptr[terms[r, j] + 1] - indptr[terms[r, j]]
            total += n
            if j >= start:
                longest = max(longest, n)
        width = max(width, total)
    touched = np.empty(width, np.int64)
    keys = np.empty(width, np.int64)
    pool = np.empty(longest + k, np.int64)
    cur = np.empty(k, np.int64)
    for r in range(terms.shape[0]):
        n = _accumulate(indptr, indices, data, acc, touched, terms[r], weights[r], start)
        m = 0
        for i in range(n):
            d = touched[i]
            if acc[d] > 0 and not seen[d]:
                seen[d] = True
                keys[m] = _key(bits[d], d)
                m += 1
        for i in range(n):
            seen[touched[i]] = False
        _best_distinct(keys[:m], k, cur)
        mark = 0
        while mark < marks.shape[0] and marks[mark] == 0:
            out[r, mark] = cur
            mark += 1
        for c in range(terms.shape[1] - start):
            t = terms[r, start + c]
            if indptr[t + 1] > indptr[t]:
                _step(acc, indptr, indices, data, t, weights[r, start + c], np.int64(-1), cur, cur, pool)
                for p in range(indptr[t], indptr[t + 1]):
                    touched[n] = np.int64(indices[p])
                    n += 1
            while mark < marks.shape[0] and marks[mark] == c + 1:
                out[r, mark] = cur
                mark += 1
        for i in range(n):
            acc[touched[i]] = np.float32(0.0)


@njit(nogil=True, cache=True)
def lanes_clear(indptr, indices, lanes, rows, terms):
    """Zero ``lanes[rows[i]]`` wherever a term of ``terms[i]`` has a posting (the cells an episode touched)."""
    for i in range(rows.shape[0]):
        lane = lanes[rows[i]]
        for j in range(terms.shape[1]):
            t = terms[i, j]
            for p in range(indptr[t], indptr[t + 1]):
                lane[indices[p]] = np.float32(0.0)


@njit(nogil=True, cache=True)
def lanes_fill(indptr, indices, data, lanes, rows, terms, weights):
    """Score query i into the zeroed ``lanes[rows[i]]``: each slot's weight × impacts added in slot order."""
    for r in range(terms.shape[0]):
        lane = lanes[rows[r]]
        for j in range(terms.shape[1]):
            t, w = terms[r, j], weights[r, j]
            for p in range(indptr[t], indptr[t + 1]):
                lane[indices[p]] += w * data[p]


@njit(inline="always")
def _step(lane, indptr, indices, data, t, w, exclude, old, out, pool):
    """``lane`` (one query's scores over the corpus) adds term ``t`` × ``w``; ``out`` = the top-k keys of the new
    scores: the old top k ``old`` (sorted, -1 padded; ``out`` may be ``old``), moved up, merged with the documents
    the term touches (scores only rise, so nothing else can enter), never ``exclude``."""
    k = old.shape[0]
    kth = old[k - 1]
    bits = lane.view(np.int32)
    n = 0
    for p in range(indptr[t], indptr[t + 1]):
        d = np.int64(indices[p])
        s = lane[d] + w * data[p]
        lane[d] = s
        if s > 0 and d != exclude:
            key = _key(bits[d], d)
            if key > kth:  # below the old k-th it cannot enter (the old top k only rise)
                pool[n] = key
                n += 1
    for j in range(k):
        if old[j] >= 0:
            d = _LOW - (old[j] & _LOW)
            pool[n] = _key(bits[d], d)
            n += 1
    _best_distinct(pool[:n], k, out)


@njit(inline="always")
def _trial(lane, indptr, indices, data, t, w, exclude, old, out, pool, tops, one):
    """``out`` = the top-k keys ``_step`` would give, the lane left as it is: nothing is written, so nothing is
    restored. The old top k's documents, sorted into ``tops`` (k int64), are met in the term's postings (both
    ascending) to take their new scores; ``one``: a float32 scratch of length 1 (a score's bits)."""
    k = old.shape[0]
    kth = old[k - 1]
    bits = lane.view(np.int32)
    one_bits = one.view(np.int32)
    n_top = 0
    for j in range(k):
        if old[j] >= 0:
            tops[n_top] = _LOW - (old[j] & _LOW)
            n_top += 1
    tops[:n_top].sort()
    n, i = 0, 0
    for p in range(indptr[t], indptr[t + 1]):
        d = np.int64(indices[p])
        one[0] = lane[d] + w * data[p]
        while i < n_top and tops[i] < d:
            pool[n] = _key(bits[tops[i]], tops[i])  # an old top document the term does not touch
            n += 1
            i += 1
        if i < n_top and tops[i] == d:
            pool[n] = _key(one_bits[0], d)
            n += 1
            i += 1
        elif one[0] > 0 and d != exclude:
            key = _key(one_bits[0], d)
            if key > kth:
                pool[n] = key
                n += 1
    while i < n_top:
        pool[n] = _key(bits[tops[i]], tops[i])
        n += 1
        i += 1
    _best_distinct(pool[:n], k, out)


@njit(nogil=True, cache=True)
def lanes_add(indptr, indices, data, lanes, rows, terms, weights, exclude, topk, undo):
    """Episode ``rows[i]`` adds ``terms[i]`` × ``weights[i]`` to its lane and its top-k keys ``topk[i]`` (sorted,
    -1 padded) become those of the new scores (``_step``); with ``undo`` the lane is left as it was (``_trial``)."""
    k = topk.shape[1]
    width = 0
    for i in range(rows.shape[0]):
        width = max(width, indptr[terms[i] + 1] - indptr[terms[i]])
    pool = np.empty(width + k, np.int64)
    tops = np.empty(k, np.int64)
    one = np.empty(1, np.float32)
    for i in range(rows.shape[0]):
        if undo:
            _trial(lanes[rows[i]], indptr, indices, data, terms[i], weights[i], exclude[i], topk[i], topk[i], pool,
                   tops, one)
        else:
            _step(lanes[rows[i]], indptr, indices, data, terms[i], weights[i], exclude[i], topk[i], topk[i], pool)


@njit(inline="always")
def _holds(doc_terms: np.ndarray, lo: np.int64, hi: np.int64, t: np.int64) -> bool | np.bool_:
    """Whether the ascending ``doc_terms[lo:hi]`` (e.g. one document's distinct terms, one query's relevant documents) holds term ``t``."""
    at = _lower_bound(doc_terms, lo, hi, t)
    return at < hi and doc_terms[at] == t


@njit(inline="always")
def _lower_bound(a, lo, hi, x):
    """The first position in the ascending ``a[lo:hi]`` whose value is ≥ x (``hi`` if none): a bisection."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True, cache=True)
def topk_metric(topk, qidx, rel_indptr, rel_docs, recall_coef, mrr_weight, out):
    """``out[i]`` = recall_coef · (relevant documents in ranking i) + mrr_weight · (1 / rank of the first one), for
    (B, k) ranking keys ``topk`` of the queries ``qidx`` (their relevant documents ascending in
    ``rel_docs[rel_indptr[q]:rel_indptr[q + 1]]``); ``env.Judgements.metric`` in one pass."""
    for i in range(topk.shape[0]):
        q = qidx[i]
        lo, hi = rel_indptr[q], rel_indptr[q + 1]
        hits, first = 0, 0
        for j in range(topk.shape[1]):
            key = topk[i, j]
            if key < _POSITIVE:  # sorted: nothing retrieved after this
                break
            if _holds(rel_docs, lo, hi, _LOW - (key & _LOW)):
                hits += 1
                if first == 0:
                    first = j + 1
        v = np.float32(hits) * recall_coef[q]
        if mrr_weight != 0 and first:
            v += np.float32(mrr_weight) * (np.float32(1.0) / np.float32(first))
        out[i] = v


@njit(nogil=True, cache=True)
def feedback_cooc(doc_indptr, doc_terms, fb_idx, fb_weight, query_terms, cands, out):
    """Per candidate, how it co-occurs with its query's terms in the query's feedback documents (forward index
    ``doc_terms[doc_indptr[d]:doc_indptr[d + 1]]``, ascending per document). ``fb_idx`` (Q, K) feedback documents,
    ``fb_weight`` (Q, K, 2) their rank weight and score weight (0: not feedback); ``query_terms`` (Q, L) -1
    padded; ``cands`` (Q, M) -1 padded. ``out[q, m]`` (5 values, 0 where the candidate holds no feedback
    document): over the feedback documents D_t holding the candidate,
    0. mean over query terms w of |D_t ∩ D_w| / |D_t| (document-level co-occurrence),
    1. the same, least over the query terms (the query term it co-occurs with least),
    2. share of the query terms that co-occur with it at least once,
    3. Σ_{D_t} rank weight / Σ rank weight (its distribution over the feedback ranks),
    4. Σ_{D_t} score weight / Σ score weight."""
    nq, k = fb_idx.shape
    width = query_terms.shape[1]
    holds_q = np.zeros((k, width), np.bool_)
    counts = np.zeros(width, np.float64)
    for q in range(nq):
        nterms = 0
        for j in range(width):
            if query_terms[q, j] >= 0:
                nterms += 1
        total_rank, total_score = 0.0, 0.0
        for r in range(k):
            total_rank += fb_weight[q, r, 0]
            total_score += fb_weight[q, r, 1]
            d = fb_idx[q, r]
            for j in range(nterms):
                holds_q[r, j] = fb_weight[q, r, 0] > 0 and _holds(doc_terms, doc_indptr[d], doc_indptr[d + 1],
                                                                  query_terms[q, j])
        for m in range(cands.shape[1]):
            t = cands[q, m]
            if t < 0:
                continue
            n, rank_w, score_w = 0.0, 0.0, 0.0
            counts[:nterms] = 0.0
            for r in range(k):
                if fb_weight[q, r, 0] <= 0:
                    continue
                d = fb_idx[q, r]
                if not _holds(doc_terms, doc_indptr[d], doc_indptr[d + 1], t):
                    continue
                n += 1.0
                rank_w += fb_weight[q, r, 0]
                score_w += fb_weight[q, r, 1]
                for j in range(nterms):
                    if holds_q[r, j]:
                        counts[j] += 1.0
            if n == 0 or nterms == 0:
                continue
            least, covered, total = 1.0, 0.0, 0.0
            for j in range(nterms):
                share = counts[j] / n
                total += share
                least = min(least, share)
                covered += counts[j] > 0
            out[q, m, 0] = total / nterms
            out[q, m, 1] = least
            out[q, m, 2] = covered / nterms
            out[q, m, 3] = rank_w / max(total_rank, 1e-12)
            out[q, m, 4] = score_w / max(total_score, 1e-12)


@njit(inline="always")
def _ahead(v, r, t, v2, r2, t2) -> bool:
    """Whether (value ``v``, rank ``r``, term ``t``) comes before (``v2``, ``r2``, ``t2``): the larger value first,
    equal values by the smaller rank, then the smaller term id (a pruning's order)."""
    return v > v2 or (v == v2 and (r < r2 or (r == r2 and t < t2)))


@njit(inline="always")
def _keep_best(n, cap, t, v, r, best_t, best_v, best_r):
    """Insert term ``t`` (value ``v``, rank ``r``) into the ``n`` best so far (``best_*``, in ``_ahead`` order),
    keeping at most ``cap``; returns the new count."""
    if cap == 0:
        return 0
    if n == cap:
        if not _ahead(v, r, t, best_v[n - 1], best_r[n - 1], best_t[n - 1]):
            return n
        j = n - 1
    else:
        j = n
        n += 1
    while j > 0 and _ahead(v, r, t, best_v[j - 1], best_r[j - 1], best_t[j - 1]):
        best_t[j], best_v[j], best_r[j] = best_t[j - 1], best_v[j - 1], best_r[j - 1]
        j -= 1
    best_t[j], best_v[j], best_r[j] = t, v, r
    return n


@njit(nogil=True, cache=True)
def top_terms(indptr, indices, data, has_order, order_ptr, order_terms, num_terms, out_terms, out_values):
    """``out_terms[q]`` / ``out_values[q]``: the ``out_terms.shape[1]`` largest values of CSR row q (term ids
    ``indices``), largest first, -1 padded; equal values by the term's position in the row's order
    (``order_terms[order_ptr[q]:order_ptr[q + 1]]`` where ``has_order[q]``; terms absent from it after those in
    it, a repeated term at its last position), else by the smaller term id."""
    cap = out_terms.shape[1]
    pos = np.full(num_terms, -1, np.int64)
    best_t = np.empty(cap, np.int64)
    best_v = np.empty(cap, data.dtype)
    best_r = np.empty(cap, np.int64)
    for q in range(indptr.shape[0] - 1):
        distinct = 0
        if has_order[q]:
            for i in range(order_ptr[q], order_ptr[q + 1]):
                t = order_terms[i]
                distinct += pos[t] < 0
                pos[t] = i - order_ptr[q]
        n = 0
        for p in range(indptr[q], indptr[q + 1]):
            t = np.int64(indices[p])
            r = t
            if has_order[q]:
                r = pos[t] if pos[t] >= 0 else np.int64(distinct)
            n = _keep_best(n, cap, t, data[p], r, best_t, best_v, best_r)
        if has_order[q]:
            for i in range(order_ptr[q], order_ptr[q + 1]):
                pos[order_terms[i]] = -1
        out_terms[q, :] = -1
        out_values[q, :] = 0
        out_terms[q, :n] = best_t[:n]
        out_values[q, :n] = best_v[:n]


@njit(nogil=True, cache=True)
def rm3_relevance_models(doc_indptr, doc_terms, doc_tf, eligible, rank, fb_docs, fb_scores, fb_terms, out_terms,
                         out_weights):
    """Anserini's RM1 (Rm3Reranker) per query, in Java's float arithmetic. ``fb_docs`` (Q, F) feedback documents in
    order, -1 padded, ``fb_scores`` their float32 scores; a document's vector is its ``fb_terms`` most frequent
    ``eligible`` terms (ties by ``rank``, the terms' string order) over the sum of their counts; RM1(w) = Σ_d
    score(d) · v_d(w), added document by document in float32, pruned to ``fb_terms`` and L1-normalised (the norm
    summed in double in the pruned order). ``out_terms[q]`` (-1 padded) / ``out_weights[q]``: RM1 in pruned order."""
    num_q, num_fb = fb_docs.shape
    doc_t = np.empty(fb_terms, np.int64)
    doc_c = np.empty(fb_terms, np.float32)
    doc_r = np.empty(fb_terms, np.int64)
    union = np.empty(num_fb * fb_terms, np.int64)
    weight = np.empty(num_fb * fb_terms, np.float32)
    slot = np.full(eligible.shape[0], -1, np.int64)
    for q in range(num_q):
        out_terms[q, :] = -1
        out_weights[q, :] = 0
        m = 0
        for i in range(num_fb):
            d = fb_docs[q, i]
            if d < 0:
                break
            n = 0
            for p in range(doc_indptr[d], doc_indptr[d + 1]):
                t = np.int64(doc_terms[p])
                if eligible[t]:
                    n = _keep_best(n, fb_terms, t, np.float32(doc_tf[p]), rank[t], doc_t, doc_c, doc_r)
            norm = 0.0
            for j in range(n):
                norm += np.float64(doc_c[j])
                if slot[doc_t[j]] < 0:
                    slot[doc_t[j]] = m
                    union[m] = doc_t[j]
                    weight[m] = 0
                    m += 1
            norm32 = np.float32(norm)
            if norm32 > np.float32(0.001):
                s = fb_scores[q, i]
                for j in range(n):
                    k = slot[doc_t[j]]
                    weight[k] = weight[k] + (doc_c[j] / norm32) * s
        n = 0
        for k in range(m):
            slot[union[k]] = -1
            n = _keep_best(n, fb_terms, union[k], weight[k], rank[union[k]], doc_t, doc_c, doc_r)
        total, l1 = 0.0, 0.0
        for j in range(n):
            total += np.float64(doc_c[j])
            l1 += abs(np.float64(doc_c[j]))
        for j in range(n):
            out_terms[q, j] = doc_t[j]
            out_weights[q, j] = np.float32(np.float64(doc_c[j]) / l1) if total > 0 else doc_c[j]


_BISECTION_READS = 24
"""Postings a lookup by bisection is worth (about log2 of a long list's length, each read a cache miss): a trial
looks documents up in a term's postings (``_trial_near``) when that many reads per document are fewer than the
term's postings, else reads them all (``_trial``)."""


@njit(nogil=True, cache=True)
def term_max(indptr, data):
    """Each term's largest impact (0 for a term with no postings): ``effect_preview``'s bound."""
    out = np.zeros(indptr.shape[0] - 1, np.float32)
    for t in range(out.shape[0]):
        m = np.float32(0.0)
        for p in range(indptr[t], indptr[t + 1]):
            m = max(m, data[p])
        out[t] = m
    return out


@njit(inline="always")
def _impact_of(indices, data, lo, hi, d):
    """The impact of document ``d`` in the posting list ``indices[lo:hi]`` (ascending), or -1 if it is not there."""
    at = _lower_bound(indices, lo, hi, d)
    return data[at] if at < hi and indices[at] == d else np.float32(-1.0)


@njit(inline="always")
def _trial_near(lane, indptr, indices, data, t, w, exclude, old, out, pool, near, n_near, one):
    """``_trial`` for a term whose postings cannot lift a document the query left below ``near``'s end into the
    top k: only the old top k and the ``near`` documents (the query's best-scored ones, best first) are looked up
    in the term's postings (by bisection), not every posting read. ``_bounded_trial`` decides when that holds."""
    k = old.shape[0]
    kth = old[k - 1]
    bits = lane.view(np.int32)
    one_bits = one.view(np.int32)
    lo, hi = indptr[t], indptr[t + 1]
    n = 0
    for j in range(k):
        if old[j] >= 0:
            d = _LOW - (old[j] & _LOW)
            x = _impact_of(indices, data, lo, hi, d)
            if x >= 0:
                one[0] = lane[d] + w * x
                pool[n] = _key(one_bits[0], d)
            else:
                pool[n] = _key(bits[d], d)
            n += 1
    for i in range(n_near):
        d = near[i]
        x = _impact_of(indices, data, lo, hi, d)
        if x >= 0:
            one[0] = lane[d] + w * x
            if one[0] > 0 and d != exclude:
                key = _key(one_bits[0], d)
                if key > kth:  # an old top document is in the pool already, with this same key
                    pool[n] = key
                    n += 1
    _best_distinct(pool[:n], k, out)


@njit(inline="always")
def _trial_buffers(indptr, cands, terms, k):
    """Scratch for the bounded trials of rows of ``cands`` (Q, M; -1: none) whose scores hold ``terms``: (pool,
    tops, one, near_docs, near_keys), the pool room for the longest candidate list or a row's near documents, each
    plus the old top ``k``."""
    width, touched = 0, 0
    for q in range(cands.shape[0]):
        for m in range(cands.shape[1]):
            t = cands[q, m]
            if t >= 0:
                width = max(width, indptr[t + 1] - indptr[t])
        n = 0
        for j in range(terms.shape[1]):
            n += indptr[terms[q, j] + 1] - indptr[terms[q, j]]
        touched = max(touched, n)
    return (np.empty(max(width, touched) + k, np.int64), np.empty(k, np.int64), np.empty(1, np.float32),
            np.empty(touched, np.int64), np.empty(touched, np.int64))


@njit(inline="always")
def _kth_score(lane, old):
    """(the k-th key of the top-k keys ``old``, -1 if fewer; its score in ``lane``, 0 then)."""
    kth = old[old.shape[0] - 1]
    return kth, (lane[_LOW - (kth & _LOW)] if kth >= 0 else np.float32(0.0))


@njit(inline="always")
def _bounded_trial(lane, indptr, indices, data, maxes, t, w, exclude, old, theta, out, pool, tops, one, near_docs,
                   n_near):
    """``out`` = the top-k keys of adding term ``t`` × ``w`` to ``lane`` (top k ``old``, k-th score ``theta``), read
    the cheaper exact way: when the term's bound (``w`` × its largest impact) is below the k-th score, a document
    the ranking never scored cannot enter, and only the ``near`` documents (best first) the bound can lift to the
    k-th and the old top k are looked up in its postings (``_trial_near``), where that is fewer reads than all of
    them; else every posting is read (``_trial``)."""
    k = old.shape[0]
    postings = indptr[t + 1] - indptr[t]
    b = w * maxes[t]
    if old[k - 1] >= 0 and w > 0 and b < theta:  # a bound holds for added scores only
        lift = 0
        while lift < n_near and lane[near_docs[lift]] + b >= theta:
            lift += 1
        if (lift + k) * _BISECTION_READS < postings:
            _trial_near(lane, indptr, indices, data, t, w, exclude, old, out, pool, near_docs, lift, one)
            return
    _trial(lane, indptr, indices, data, t, w, exclude, old, out, pool, tops, one)


@njit(inline="always")
def _reach(cands, levels, maxes, theta):
    """The largest bound (weight × the term's largest impact) below ``theta`` among one query's candidates and
    levels; 0 if none."""
    reach = np.float32(0.0)
    for m in range(cands.shape[0]):
        t = cands[m]
        if t >= 0:
            for lv in range(levels.shape[1]):
                b = levels[m, lv] * maxes[t]
                if b < theta and b > reach:
                    reach = b
    return reach


@njit(inline="always")
def _gather_near(indptr, indices, acc, terms, reach, theta, near_keys, near_docs):
    """Into ``near_docs``, best first and each once, the documents of one query (``terms``; its scores in
    ``acc``) whose score plus ``reach`` reaches ``theta``; returns how many."""
    if reach <= 0:
        return 0
    bits = acc.view(np.int32)
    n = 0
    for j in range(terms.shape[0]):
        t = terms[j]
        for p in range(indptr[t], indptr[t + 1]):
            d = np.int64(indices[p])
            if acc[d] > 0 and acc[d] + reach >= theta:
                near_keys[n] = _key(bits[d], d)
                n += 1
    near_keys[:n].sort()
    kept = 0
    for i in range(n - 1, -1, -1):  # a document read by several query terms: once
        if i == n - 1 or near_keys[i] != near_keys[i + 1]:
            near_docs[kept] = _LOW - (near_keys[i] & _LOW)
            kept += 1
    return kept


@njit(inline="always")
def _entering(acc, new, kth, best, out):
    """``out[:3]`` = the effect preview's three numbers for the new top k ``new`` (``effect_preview``)."""
    k = new.shape[0]
    bits = acc.view(np.int32)
    entered, head, match = 0, 0, 0.0
    for i in range(k):
        if new[i] < 0:
            break
        d = _LOW - (new[i] & _LOW)
        # the lane holds the query's own scores: a document was in its top k iff it scored and its key reaches
        # the old k-th (a ranking of fewer than k holds every document that scored)
        if acc[d] > 0 and _key(bits[d], d) >= kth:
            continue
        entered += 1
        head += i < 10
        match += acc[d]
    out[0] = entered / k
    out[1] = head / min(10, k)
    if entered and best > 0:
        out[2] = match / entered / best


@njit(nogil=True, cache=True)
def effect_preview(indptr, indices, data, maxes, num_docs, terms, weights, first, cands, levels, out):
    """What adding each candidate would do to its query's first ranking, without the answers. ``terms``,
    ``weights`` (Q, L0): the queries (padding slots name a term with no postings); ``first`` (Q, k) the keys of
    their top k (sorted, -1 padded); ``cands`` (Q, M) -1 padded; ``levels`` (Q, M, L) float32 the weight each
    candidate would be added at; ``maxes``: each term's largest impact (``term_max``). ``out[q, m, 3·l + i]``,
    adding candidate m at ``levels[q, m, l]``:
    0. documents entering the top k, / k;
    1. documents entering the top 10, / 10 (the head, where precision is made);
    2. mean over the entering top-k documents of their score for the query alone / the query's best score (the
       documents a term brings in that match the query well, or that match the new term only; 0 if none enter).
    The query's scores in one lane (``lanes_fill``), then each candidate per level as a trial of the env's own
    step, the lane read and never written (``_trial``). A common term's bound (weight × its largest impact) is
    usually below the query's k-th score: then no document the query did not reach can enter, nor one whose
    score plus the bound stays below the k-th (float32 sums only rise with their terms), so only the query's
    best-scored documents are looked up in the term's postings (``_trial_near``): the same keys, from a fraction
    of the postings at a million documents and more."""
    k = first.shape[1]
    lanes = np.zeros((1, num_docs), np.float32)
    acc = lanes[0]
    row = np.zeros(1, np.int64)
    pool, tops, one, near_docs, near_keys = _trial_buffers(indptr, cands, terms, k)
    new = np.empty(k, np.int64)
    for q in range(cands.shape[0]):
        lanes_fill(indptr, indices, data, lanes, row, terms[q:q + 1], weights[q:q + 1])
        best = acc[_LOW - (first[q, 0] & _LOW)] if first[q, 0] >= 0 else np.float32(0.0)
        kth, theta = _kth_score(acc, first[q])
        n_near = 0
        if kth >= 0:
            n_near = _gather_near(indptr, indices, acc, terms[q], _reach(cands[q], levels[q], maxes, theta), theta,
                                  near_keys, near_docs)
        for m in range(cands.shape[1]):
            t = cands[q, m]
            if t < 0:
                continue
            for lv in range(levels.shape[2]):
                _bounded_trial(acc, indptr, indices, data, maxes, t, levels[q, m, lv], -1, first[q], theta, new, pool,
                               tops, one, near_docs, n_near)
                _entering(acc, new, kth, best, out[q, m, 3 * lv:3 * lv + 3])
        lanes_clear(indptr, indices, lanes, row, terms[q:q + 1])


@njit(nogil=True, cache=True)
def lanes_trial_all(indptr, indices, data, maxes, lanes, terms, cand_terms, cand_weights, exclude, topk, out):
    """``out[j, i]`` = the top-k keys episode i would have after adding ``cand_terms[i, j]`` × ``cand_weights[i, j]``
    (``_trial`` of every action, lane i left as it is): the oracle's trials in one call. ``terms[i]``: the terms
    whose scores lane i holds (padding: a term with no postings); ``topk[i]`` its top-k keys (sorted, -1 padded);
    ``maxes``: each term's largest impact (``term_max``). As in ``effect_preview``, a candidate whose bound is below
    the k-th score is looked up in the episode's near documents only, not read posting by posting."""
    pool, tops, one, near_docs, near_keys = _trial_buffers(indptr, cand_terms, terms, topk.shape[1])
    for i in range(cand_terms.shape[0]):
        lane = lanes[i]
        kth, theta = _kth_score(lane, topk[i])
        n_near = 0
        if kth >= 0:  # one level per action: its weight
            reach = _reach(cand_terms[i], cand_weights[i].reshape(-1, 1), maxes, theta)
            n_near = _gather_near(indptr, indices, lane, terms[i], reach, theta, near_keys, near_docs)
        for j in range(cand_terms.shape[1]):
            _bounded_trial(lane, indptr, indices, data, maxes, cand_terms[i, j], cand_weights[i, j], exclude[i],
                           topk[i], theta, out[j, i], pool, tops, one, near_docs, n_near)
