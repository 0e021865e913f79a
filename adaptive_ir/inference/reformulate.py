"""Inference: rewrite queries with a trained agent and retrieve with the rewritten queries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from adaptive_ir.artifacts.checkpoint import DATA_DIR_ADVICE, SavedPolicy, load_agent, pretrained_config
from adaptive_ir.common.amp import AmpContext
from adaptive_ir.config import Config, config_from_dict, dotted_keys, resolve_device
from adaptive_ir.evaluation.agent import agent_run
from adaptive_ir.inference.records import merge_weights
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.workspace import Workspace


class Reformulator:
    """``Reformulator.load(checkpoint).reformulate(["query", ...])`` → one record per rewritten query
    (``records.py``), in batches."""

    def __init__(self, cfg: Config, ws: Workspace, agent: Agent, amp: AmpContext, origin: str | None = None):
        self.cfg, self.ws, self.agent, self.amp = cfg, ws, agent, amp
        self.origin = origin
        """Which run (and update) the agent's checkpoint came from, as one line; None when built in memory."""

    @classmethod
    def load(cls, checkpoint: str | Path | SavedPolicy, device: str = "auto",
             data_dir: str | None = None) -> Reformulator:
        """A checkpoint with the config it was trained with, over the collection it was trained on (``data_dir``:
        where that collection is now, if it moved)."""
        saved = SavedPolicy.read(checkpoint)
        cfg = config_from_dict(saved.state["config"])
        cfg.system.device = device
        if data_dir:
            cfg.data.data_dir = data_dir
        dev = torch.device(resolve_device(device))
        ws = Workspace(cfg, dev, progress=False)
        return cls(cfg, ws, *load_agent(saved, cfg, ws, dev, advice=DATA_DIR_ADVICE))

    @classmethod
    def from_pretrained(cls, policy: str | Path, data_dir: str | None = None, device: str = "auto",
                        progress: bool = False, **overrides) -> Reformulator:
        """A trained policy (a shipped policy's name, an exported folder or a checkpoint) over a collection it may
        never have seen: ``data_dir`` a BEIR folder (None: the embedded collection), indexed and embedded on first
        use with the policy's own settings and cached under ``runs/pretrained/<collection>``."""
        cfg, saved = pretrained_config(policy, data_dir, dotted_keys(overrides))
        cfg.system.device = device
        dev = torch.device(resolve_device(device))
        ws = Workspace(cfg, dev, progress=progress, splits=())
        return cls(cfg, ws, *load_agent(saved, cfg, ws, dev, portable=True))

    def _rewrites(self, queries: list[str], top_docs: int) -> list[tuple]:
        """Per query text (``agent_run``: greedy, variants fused by RRF): the words the start added, the words the
        agent added, every (term, weight) searched, and the top ``top_docs`` documents as (id, score)."""
        qids = [f"q{i}" for i in range(len(queries))]
        qs, tables = self.ws.query_set("adhoc", qids, queries, None, cache_candidates=False)
        weighted: list[list[tuple[str, float]]] = []
        run, added = agent_run(self.cfg, self.ws, self.agent, self.amp, qs, tables, weighted=weighted)
        vocab, pad = self.ws.retriever.vocab.surface, self.ws.retriever.index.pad_id
        own = self.ws.retriever.encode(queries)
        out = []
        for qid, text, words, start, terms, pairs in zip(qids, queries, own, qs.terms.tolist(), added, weighted):
            ranked = sorted(run[qid].items(), key=lambda kv: -kv[1])[:top_docs]
            extra = [vocab[t] for t in start if t != pad and t not in words]
            out.append((text, extra, terms, pairs, ranked))
        return out

    def reformulate(self, queries: list, top_docs: int = 10, field: str = "contents",
                    clause: str = "match") -> list[dict]:
        """One record per query (``records.py``: id, text, the start's and the agent's terms with their weights,
        the rewrite, its Lucene query string and Elasticsearch body on ``field``, and with ``top_docs`` > 0 the top
        documents as ``{"id", "score"}``). ``queries``: ``Query`` objects, ``(id, text)`` pairs or texts (ids 1, 2,
        ...). Greedy rewrites (with ``num_query_variants`` > 1 the greedy variant's terms and the
        documents of the variants fused); no search when no documents are asked for."""
        from adaptive_ir.inference.queries import as_queries
        from adaptive_ir.inference.records import elasticsearch_query, term_weights

        qs_in = list(as_queries(queries))
        if not qs_in:
            return []
        if self.cfg.rl_agent.num_query_variants > 1:
            return self._records_fused(qs_in, top_docs, field, clause)
        ids, texts = [q.id for q in qs_in], [q.text for q in qs_in]
        qs, tables = self.ws.query_set("adhoc", [f"q{i}" for i in range(len(texts))], texts, None,
                                       cache_candidates=False)
        rows = self._greedy_rows(qs, tables, top_docs)
        own = self.ws.retriever.encode(texts)
        vocab = self.ws.retriever.vocab.surface
        out = []
        for qid, text, words, (start, added, pairs, docs) in zip(ids, texts, own, rows):
            start = [(vocab[t], w) for t, w in start if t not in words]
            record = {"id": qid, "text": text,
                      "start_terms": term_weights([t for t, _ in start], [w for _, w in start]),
                      "added_terms": term_weights([t for t, _ in added], [w for _, w in added]),
                      "rewritten": " ".join([text, *(t for t, _ in start), *(t for t, _ in added)]),
                      "lucene_query": lucene_query(pairs),
                      "elasticsearch": elasticsearch_query(pairs, field, clause)}
            if top_docs > 0:
                record["top_docs"] = docs
            out.append(record)
        return out

    @torch.no_grad()
    def _greedy_rows(self, qs, tables, top_docs: int, batch_size: int = 256) -> list[tuple]:
        """Per query: (the start's (term id, weight)s, added (term, weight)s, every (term, weight) searched,
        top documents). ``agent_run``'s greedy pass, with the search cut to ``top_docs`` (none when 0): the search
        ranks ties by corpus position, so its first ``top_docs`` are ``agent_run``'s."""
        from adaptive_ir.evaluation.metrics import to_run
        from adaptive_ir.rl.factory import make_env
        from adaptive_ir.rl.rollout import greedy_rewrite

        self.agent.use_tables(tables)
        env = make_env(self.cfg, self.ws, qs, scored=False)
        vocab, pad = self.ws.retriever.vocab.surface, self.ws.retriever.index.pad_id
        doc_ids = self.ws.retriever.doc_ids
        l0, out = qs.terms.shape[1], []
        for lo in range(0, len(qs), batch_size):
            qidx = torch.arange(lo, min(len(qs), lo + batch_size))
            terms, weights = greedy_rewrite(self.agent, self.amp, env, qidx)
            runs: list[list[dict]] | None = None
            if top_docs > 0:
                s, d = self.ws.retriever.index.search(terms, weights, k=min(top_docs, self.cfg.retrieval.top_k))
                names = [str(i) for i in qidx.tolist()]
                ranked = to_run(names, doc_ids, s.cpu().numpy(), d.cpu().numpy())
                runs = [[{"id": doc, "score": score} for doc, score in ranked[n].items()] for n in names]
            for j, (row_t, row_w) in enumerate(zip(terms.tolist(), weights.tolist())):
                pairs = [(vocab[t], w) for t, w in zip(row_t, row_w) if t != pad]
                start = [(t, w) for t, w in zip(row_t[:l0], row_w[:l0]) if t != pad]
                added = [(vocab[t], w) for t, w in zip(row_t[l0:], row_w[l0:]) if t != pad]
                out.append((start, added, pairs, runs[j] if runs is not None else []))
        return out

    def _records_fused(self, queries: list, top_docs: int, field: str, clause: str) -> list[dict]:
        """Records of the fused path (query variants fused by RRF, ``_rewrites``): each term's weight is the one
        the greedy rewrite searched it with."""
        from adaptive_ir.inference.records import elasticsearch_query, merge_weights

        out = []
        for q, (_, extra, terms, pairs, ranked) in zip(queries, self._rewrites([q.text for q in queries],
                                                                                 max(top_docs, 1))):
            weights = merge_weights(pairs)
            record = {"id": q.id, "text": q.text,
                      "start_terms": [{"term": t, "weight": weights.get(t)} for t in extra],
                      "added_terms": [{"term": t, "weight": weights.get(t)} for t in terms],
                      "rewritten": " ".join([q.text, *extra, *terms]), "lucene_query": lucene_query(pairs),
                      "elasticsearch": elasticsearch_query(pairs, field, clause)}
            if top_docs > 0:
                record["top_docs"] = [{"id": d, "score": s} for d, s in ranked]
            out.append(record)
        return out

    def reformulate_file(self, queries, top_docs: int = 0, field: str = "contents", clause: str = "match",
                         batch_size: int = 1024, fmt: str = "auto", progress: bool = False,
                         total: int | None = None, reuse_word_vectors: bool = True) -> Iterator[dict]:
        """The records (``reformulate``) of a whole query set, yielded in input order as each batch of
        ``batch_size`` queries is done: a file (BEIR ``queries.jsonl``, TREC topics, ``id<TAB>text`` lines, one
        query per line, ``-`` for stdin; ``fmt`` forces one of ``queries.QUERY_FORMATS``), or an iterable of
        ``Query``, ``(id, text)`` or texts. Memory stays that of one batch, whatever the number of queries;
        ``progress``: a bar counting queries (of ``total``, when known).

        The embedding model encodes each batch's query texts once (not once for the feedback and once for the
        policy) and, with ``reuse_word_vectors``, each candidate term once: once per run, and once across runs that
        share the embedding cache (its ``words/`` folder, written as the run ends; ``memo.MemoEmbedder``)."""
        from tqdm.auto import tqdm

        from adaptive_ir.inference.memo import MemoEmbedder
        from adaptive_ir.inference.queries import as_queries, batches

        ws = self.ws
        embedder, fb_embedder = getattr(ws, "embedder", None), getattr(ws, "fb_embedder", None)
        if embedder is not None:
            memo = MemoEmbedder(embedder, words=reuse_word_vectors, store=ws.emb_cache.words_folder)
            ws.embedder = memo
            if fb_embedder is embedder:
                ws.fb_embedder = memo
        bar = tqdm(total=total, desc="reformulate", unit="query", unit_scale=True, disable=not progress,
                   dynamic_ncols=True, leave=False)
        try:
            for batch in batches(as_queries(queries, fmt), batch_size):
                records = self.reformulate(batch, top_docs, field, clause)
                bar.update(len(records))
                yield from records
        finally:
            bar.close()
            if embedder is not None:
                memo.save()
                ws.embedder = embedder
                if fb_embedder is embedder:
                    ws.fb_embedder = fb_embedder

    def split_queries(self, split: str) -> list:
        """A split of the collection's own (its judged queries), as ``Query`` objects."""
        from adaptive_ir.common.errors import DataError
        from adaptive_ir.inference.queries import Query

        self.ws.load_split(split)
        if split not in self.ws.collection.queries:
            raise DataError(f"collection '{self.ws.collection.name}' has no '{split}' split (it has: "
                            f"{', '.join(self.ws.collection.queries) or 'none'})")
        qids, texts, _ = self.ws.collection.split(split)
        return [Query(q, t, f"{split} split") for q, t in zip(qids, texts)]


LUCENE_SPECIAL = set('+-&|!(){}[]^"~*?:\\/')
"""Characters Lucene's classic query parser reads as syntax; a term holding one is escaped with a backslash."""


def lucene_escape(term: str) -> str:
    return "".join("\\" + c if c in LUCENE_SPECIAL else c for c in term)


def lucene_query(pairs: list[tuple[str, float]]) -> str:
    """A weighted bag of words in Lucene's classic query syntax (what Lucene's QueryParser, Solr, Elasticsearch's
    query_string and Anserini/Pyserini through Lucene's parser read): ``term`` for weight 1, ``term^0.5`` otherwise.
    A term that occurs more than once (a repeated query word) gets the sum of its weights, which is how BM25 scores
    it here (``records.merge_weights``); terms keep their first position. Terms are the analyzer's output: the
    parser analyzes them again."""
    return " ".join(lucene_escape(t) if abs(w - 1.0) < 1e-6 else f"{lucene_escape(t)}^{w:.4g}"
                    for t, w in merge_weights(pairs).items())
