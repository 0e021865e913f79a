"""Inference: a trained agent rewrites queries and retrieves with them (``reformulate``: ``Reformulator``, loaded
from a checkpoint or a shipped / exported policy, and the rewrite as a Lucene query), the query sets it reads as
a stream (``queries``) and the records it writes, with the query each search engine runs (``records``)."""

from adaptive_ir.inference.queries import QUERY_FORMATS, STDIN, Query, as_queries, batches, read_query_file
from adaptive_ir.inference.records import (
    ES_CLAUSES,
    elasticsearch_query,
    merge_weights,
    read_jsonl,
    term_weights,
    write_jsonl,
)
from adaptive_ir.inference.reformulate import Reformulator, lucene_escape, lucene_query

__all__ = ["ES_CLAUSES", "QUERY_FORMATS", "STDIN", "Query", "Reformulator", "as_queries", "batches",
           "elasticsearch_query", "lucene_escape", "lucene_query", "merge_weights", "read_jsonl", "read_query_file",
           "term_weights", "write_jsonl"]
