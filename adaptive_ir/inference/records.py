"""The records ``Reformulator.reformulate_file`` yields and ``adaptive-ir reformulate --output`` writes, one JSON
object per query, and the query each search engine runs:

``id``, ``text``: the query as read; ``start_terms``: terms the start added (RM3's with ``retrieval.start: rm3``),
``added_terms``: the agent's, each ``{"term", "weight"}``; ``rewritten``: the rewrite as words; ``lucene_query``:
Lucene's classic syntax (``term^0.5``, for a query parser); ``elasticsearch``: an Elasticsearch / OpenSearch
search body, ``{"query": {"bool": {"should": [{"match": {field: {"query": term, "boost": w}}}, ...]}}}`` (POST it
to ``/<index>/_search``); ``top_docs``: ``[{"id", "score"}]`` when asked for.

Terms are the surface words of the index's terms (a stem shows as its most frequent word), so an engine analyzes
them again with its own analyzer: ``match`` clauses (the default) do, ``term`` clauses do not (for a field whose
analyzer already produced these very tokens).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from adaptive_ir.common.io import atomic_write

ES_CLAUSES = ("match", "term")


def merge_weights(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """A term that occurs more than once (a repeated query word) gets the sum of its weights, as BM25 scores it
    here (and as ``lucene_query`` writes it); terms keep their first position."""
    total: dict[str, float] = {}
    for term, weight in pairs:
        total[term] = total.get(term, 0.0) + weight
    return total


def elasticsearch_query(pairs: Iterable[tuple[str, float]], field: str = "contents", clause: str = "match") -> dict:
    """A weighted bag of words as an Elasticsearch / OpenSearch search body: a ``bool`` query whose ``should``
    clauses (``match`` or ``term``, on ``field``) each carry their term's weight as ``boost``; scores add up, as
    the weighted BM25 sum of our own search does."""
    if clause not in ES_CLAUSES:
        raise ValueError(f"clause '{clause}': choose one of {', '.join(ES_CLAUSES)}")
    key = "query" if clause == "match" else "value"
    should = [{clause: {field: {key: t, "boost": round(w, 6)}}} for t, w in merge_weights(pairs).items()]
    return {"query": {"bool": {"should": should}}}


def term_weights(terms: list[str], weights: list[float]) -> list[dict]:
    return [{"term": t, "weight": round(w, 6)} for t, w in zip(terms, weights)]


def write_jsonl(path: str | Path, records: Iterable[dict], on_write=None) -> int:
    """Write ``records`` as JSON lines to ``path`` atomically (``common.io.atomic_write``: renamed over ``path`` only
    once every record is written and fsynced), so a run that fails or is interrupted leaves no file that looks
    complete. ``on_write(n)`` after each record; returns the count."""
    n = 0

    def write(f: BinaryIO) -> None:
        nonlocal n
        for record in records:
            f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
            n += 1
            if on_write is not None:
                on_write(1)

    atomic_write(path, write)
    return n


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """The records of a file ``write_jsonl`` wrote."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


__all__ = ["ES_CLAUSES", "elasticsearch_query", "merge_weights", "read_jsonl", "term_weights", "write_jsonl"]
