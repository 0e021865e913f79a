"""Query sets to reformulate, read as a stream: a BEIR ``queries.jsonl``, TREC topics (SGML ``<top>`` or the XML of
TREC 2009+), ``id<TAB>text`` lines, one query per line (its id: the line number), any of them gzipped, or ``-``
for standard input; or a collection's own split.

Each reader yields ``Query(id, text, where)`` one at a time, so a query log of millions of lines is read in
constant memory (ids are not collected to find repeats: a repeated id is written twice). The line parsers are the
collection loaders' own (``adaptive_ir.data.lines``). Bad input is a ``DataError`` naming ``file:line`` and what is
wrong: a line without an id, an empty query, a topic left open, a file that cannot be read.
"""

from __future__ import annotations

import itertools
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from adaptive_ir.common.errors import DataError, where
from adaptive_ir.data.lines import (
    _QUERY_ID_KEYS,
    _QUERY_TEXT_KEYS,
    _trec_topics,
    _tsv_queries,
    check_id,
    decode_line,
    is_jsonl,
    json_object,
    json_str,
    open_binary,
)

QUERY_FORMATS = ("auto", "jsonl", "trec", "tsv", "lines")
"""``auto``: by the file's name (``.jsonl``/``.json``) or its first line (``{``: JSON lines, ``<``: TREC topics, a
tab: ``id<TAB>text``, else one query per line)."""

STDIN = "-"


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    where: str = ""
    """``file:line`` the query was read from (for messages); empty for queries given in memory."""


def read_query_file(path: str | Path, fmt: str = "auto", topic_fields: tuple[str, ...] = ("title",),
                    stdin: IO[bytes] | None = None) -> Iterator[Query]:
    """The queries of ``path`` (``-``: standard input, or ``stdin`` when given) in file order, one at a time.

    ``fmt`` one of ``QUERY_FORMATS``; ``topic_fields``: which of a TREC topic's title/desc/narr make its text."""
    if fmt not in QUERY_FORMATS:
        raise DataError(f"queries format '{fmt}': choose one of {', '.join(QUERY_FORMATS)}")
    name = "<stdin>" if str(path) == STDIN else str(path)
    rows = _stdin_lines(stdin or sys.stdin.buffer) if str(path) == STDIN else _file_lines(Path(path))
    first = next(rows, None)
    if first is None:
        raise DataError(f"{name}: no queries (the file is empty)")
    rows = itertools.chain([first], rows)
    if fmt == "auto":
        fmt = _detect(name, first[1])
        fmt = "auto-lines" if fmt == "lines" else fmt
    parsed: Iterator[tuple[int, str, str]]
    if fmt == "jsonl":
        parsed = ((n, json_str(o, _QUERY_ID_KEYS, name, n, True), json_str(o, _QUERY_TEXT_KEYS, name, n, False))
                  for n, o in ((n, json_object(name, n, line)) for n, line in rows))
    elif fmt == "trec":
        parsed = _trec_topics(name, rows, topic_fields)
    elif fmt == "tsv":
        parsed = _tsv_queries(name, rows)
    else:
        parsed = _numbered(name, rows, detected=fmt == "auto-lines")
    for lineno, qid, text in parsed:
        check_id(qid, "query id", name, lineno)
        text = " ".join(text.split())
        if not text:
            raise DataError(f"{where(name, lineno)}: query '{qid}' has empty text; give it text or remove the line")
        yield Query(qid, text, where(name, lineno))


def _detect(name: str, first: str) -> str:
    head = first.lstrip()
    if is_jsonl(Path(name)) or head.startswith("{"):
        return "jsonl"
    if head.startswith("<"):
        return "trec"
    return "tsv" if "\t" in first else "lines"


def _numbered(name: str, rows: Iterable[tuple[int, str]], detected: bool) -> Iterator[tuple[int, str, str]]:
    """One query per line, its id the line number (blank lines are skipped and keep their numbers). ``detected``
    (the format was guessed from a first line without a tab): a later line with a tab is an id<TAB>text file whose
    first line lacks its id, an error rather than a query holding an id."""
    first = None
    for lineno, line in rows:
        first = first or lineno
        if detected and "\t" in line:
            raise DataError(f"{where(name, lineno)}: 'id<TAB>text', but line {first} has no tab (no id): give every "
                            "line an id, or read the file as one query per line (--queries-format lines)")
        yield lineno, str(lineno), line.strip()


def _file_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) for each non-blank line; an unreadable file is a DataError naming it."""
    if path.is_dir():
        raise DataError(f"{path}: is a folder; give a queries file (queries.jsonl, topics, id<TAB>text lines)")
    try:
        f = open_binary(path)
    except OSError as e:  # e.g. permission denied
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from e
    yield from _lines(str(path), f)


def _stdin_lines(stream: IO[bytes]) -> Iterator[tuple[int, str]]:
    yield from _lines("<stdin>", stream, close=False)


def _lines(name: str, f: IO[bytes], close: bool = True) -> Iterator[tuple[int, str]]:
    lineno = 0
    try:
        for lineno, raw in enumerate(f, 1):
            line = decode_line(name, lineno, raw)
            if line.strip():
                yield lineno, line
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{where(name, lineno + 1)}: cannot read ({type(e).__name__}: {e})") from e
    finally:
        if close:
            f.close()


def as_queries(queries: str | Path | Iterable, fmt: str = "auto") -> Iterator[Query]:
    """Queries from a file name (or ``-``), or an iterable of ``Query``, ``(id, text)`` pairs or texts (their ids:
    1, 2, ... as for a file of one query per line). Texts given in memory must not be empty either."""
    if isinstance(queries, (str, Path)):
        yield from read_query_file(queries, fmt)
        return
    for n, q in enumerate(queries, 1):
        if isinstance(q, Query):
            yield q
            continue
        qid, text = (str(n), q) if isinstance(q, str) else (str(q[0]), q[1])
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"query {n} (id '{qid}'): empty text; give it text or leave it out")
        yield Query(qid, text)


def batches(queries: Iterable[Query], size: int) -> Iterator[list[Query]]:
    """``queries`` in lists of ``size`` (the last one shorter)."""
    it = iter(queries)
    while batch := list(itertools.islice(it, size)):
        yield batch


__all__ = ["QUERY_FORMATS", "STDIN", "Query", "as_queries", "batches", "read_query_file"]
