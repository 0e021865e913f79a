"""Other engines: Lucene through Pyserini (``anserini``), for parity checks and for running our rewrites there."""

from adaptive_ir.interop.anserini import (
    body_pairs,
    boolean_query,
    build_index,
    find_jdk,
    hits_run,
    pyserini_ready,
    rm3_parity,
    same_query,
    write_json_collection,
)

__all__ = ["body_pairs", "boolean_query", "build_index", "find_jdk", "hits_run", "pyserini_ready", "rm3_parity",
           "same_query", "write_json_collection"]
