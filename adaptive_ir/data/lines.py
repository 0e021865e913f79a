"""Reading text files line by line, with the file and line number in every error: queries, qrels and the lines
of jsonl/tsv corpora, from plain files, .gz files or members of a zip archive."""

from __future__ import annotations

import gzip
import html
import itertools
import json
import re
import zipfile
import zlib
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, cast

from adaptive_ir.common.errors import DataError, where
from adaptive_ir.data.corpus import Corpus


@dataclass(frozen=True)
class ZipPath:
    """A file (or folder, ending in '/') inside a zip archive, opened afresh each time it is read: a corpus is
    re-read long after loading, so no open archive is kept. Has the parts of `Path` the readers use."""

    archive: Path
    at: str = ""

    def __truediv__(self, name: str) -> ZipPath:
        return ZipPath(self.archive, f"{self.at.rstrip('/')}/{name}" if self.at else name)

    @property
    def name(self) -> str:
        return PurePosixPath(self.at).name

    def exists(self) -> bool:
        with zipfile.ZipFile(self.archive) as zf:
            names = zf.namelist()
        folder = self.at.rstrip("/") + "/"
        return self.at in names or any(n.startswith(folder) for n in names)

    def open(self, mode: str = "rb") -> IO[bytes]:
        zf = zipfile.ZipFile(self.archive)
        try:
            return zf.open(self.at)
        finally:
            zf.close()  # the member keeps the archive's file open until it is closed itself

    def stat(self):
        return self.archive.stat()

    def __str__(self) -> str:
        return f"{self.archive}/{self.at.rstrip('/')}" if self.at else str(self.archive)


PathLike = Path | ZipPath


def open_binary(path: PathLike) -> IO[bytes]:
    """The file's bytes (a .gz file, or a .gz member of a zip, is unzipped); a clear error when it is missing or
    unreadable."""
    if not path.exists():
        raise DataError(f"{path}: file not found")
    try:
        raw = path.open("rb")
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e})") from e
    # a GzipFile has every method of IO[bytes] the readers use; typeshed does not declare it one
    return cast(IO[bytes], _GzipOwning(raw)) if path.name.endswith(".gz") else raw


class _GzipOwning(gzip.GzipFile):
    """A gzip stream over an open file (a plain file or a zip member) that closes that file when closed."""

    def __init__(self, raw: IO[bytes]):
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def decode_line(path: PathLike | str, lineno: int, raw: bytes) -> str:
    """One line as text without its newline; invalid UTF-8 is an error naming the line and the fix."""
    try:
        line = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{where(path, lineno)}: not valid UTF-8 (byte {e.start + 1} of the line); "
            "re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 in > out`"
        ) from e
    return line.removeprefix("\ufeff") if lineno == 1 else line  # a byte-order mark written by some editors


def numbered_lines(path: PathLike) -> Iterator[tuple[int, int, str]]:
    """(line number, byte offset of the line, line) for each non-blank line of a UTF-8 file. Offsets are into
    the uncompressed bytes; for a plain file they are where `seek` finds the line again."""
    with open_binary(path) as f:
        lineno = offset = 0
        try:
            # Binary mode so a bad byte costs one line, not the whole file, and we can say which line.
            for lineno, raw in enumerate(f, 1):
                line = decode_line(path, lineno, raw)
                if line.strip():
                    yield lineno, offset, line
                offset += len(raw)
        except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as e:  # truncated or corrupt .gz / zip member
            raise DataError(f"{where(path, lineno + 1)}: cannot read ({type(e).__name__}: {e}); the file is damaged: "
                            "download or unpack it again") from e


def lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """(line number, line without its newline) for each non-blank line of a UTF-8 file (.gz is unzipped)."""
    return ((lineno, line) for lineno, _, line in numbered_lines(path))


_JSON = json.JSONDecoder()


def json_object(path: PathLike | str, lineno: int, line: str) -> dict:
    """One line of a JSON-lines file as an object."""
    try:
        obj = _JSON.decode(line)
    except (ValueError, RecursionError) as e:
        raise DataError(f"{where(path, lineno)}: not valid JSON ({e}); each line must be one JSON object") from e
    if not isinstance(obj, dict):
        raise DataError(f"{where(path, lineno)}: expected a JSON object, got {type(obj).__name__}")
    return obj


def json_str(obj: dict, keys: tuple[str, ...], path: PathLike | str, lineno: int, required: bool) -> str:
    """The first of `keys` present in `obj`, as a string ('' for null); ids may be integers."""
    for key in keys:  # a plain loop: this runs three times per corpus line
        if key in obj:
            value = obj[key]
            if type(value) is str:
                return value
            break
    else:
        if required:
            raise DataError(f"{where(path, lineno)}: no '{keys[0]}' field (also accepted: {', '.join(keys[1:])})")
        return ""
    if value is None and not required:
        return ""
    if isinstance(value, int) and not isinstance(value, bool) and required:
        return str(value)
    if not isinstance(value, str):
        raise DataError(f"{where(path, lineno, key)}: expected a string, got {json.dumps(value)[:60]}")
    return value


_WHITESPACE = re.compile(r"\s")


def check_id(key: str, what: str, path: PathLike | str, lineno: int) -> None:
    """An id must be non-empty and hold no whitespace: TREC run and qrels files separate their fields by it."""
    if not key or _WHITESPACE.search(key):
        raise DataError(f"{where(path, lineno)}: {what} {key!r} is empty or holds whitespace; TREC run files separate "
                        "fields by whitespace, so ids cannot: rename it")


def check_new(seen: dict[str, int], key: str, what: str, path: PathLike | str, lineno: int) -> None:
    """Record `key` as seen at `lineno`; a repeat is an error naming both lines."""
    if key in seen:
        raise DataError(
            f"{where(path, lineno)}: duplicate {what} '{key}' (first at line {seen[key]}); ids must be unique"
        )
    seen[key] = lineno


def is_jsonl(path: PathLike) -> bool:
    return path.name.removesuffix(".gz").endswith((".jsonl", ".json"))


# --------------------------------------------------------------------------------------------------------------
# Queries and qrels
# --------------------------------------------------------------------------------------------------------------

_QUERY_ID_KEYS = ("_id", "id", "qid", "query_id")
_QUERY_TEXT_KEYS = ("text", "query", "title")


def read_queries(path: PathLike, topic_fields: tuple[str, ...] = ("title",)) -> dict[str, str]:
    """{qid: text} from JSON lines (`_id`, `text`), a `qid<TAB>text` tsv, classic TREC SGML topics
    (`<top><num> Number: 301 <title> ...`) or the XML topics of TREC 2009+ (`<topic number="1"><query> ...`;
    `topic_fields` picks which of title/desc/narr make the query; in XML title is `<query>` or `<title>`)."""
    rows = lines(path)
    parsed: Iterator[tuple[int, str, str]]
    if is_jsonl(path):
        parsed = (
            (n, json_str(o, _QUERY_ID_KEYS, path, n, True), json_str(o, _QUERY_TEXT_KEYS, path, n, False))
            for n, o in ((n, json_object(path, n, line)) for n, line in rows)
        )
    else:
        first = next(rows, (0, ""))
        rows = itertools.chain([first], rows)
        sgml = first[1].lstrip().startswith("<")  # <top>, or XML's <?xml / <topics> / <webtrack2009>
        parsed = _trec_topics(path, rows, topic_fields) if sgml else _tsv_queries(path, rows)
    queries: dict[str, str] = {}
    seen: dict[str, int] = {}
    for lineno, qid, text in parsed:
        check_id(qid, "query id", path, lineno)
        check_new(seen, qid, "query id", path, lineno)
        if not text.strip():
            raise DataError(f"{where(path, lineno)}: query '{qid}' has empty text; give it text or remove it")
        queries[qid] = text
    if not queries:
        raise DataError(f"{path}: no queries")
    return queries


def _tsv_queries(path: PathLike | str, rows: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str, str]]:
    for lineno, line in rows:
        qid, tab, text = line.partition("\t")
        if not tab:
            raise DataError(f"{where(path, lineno)}: expected 'qid<TAB>query text' (no tab found)")
        yield lineno, qid.strip(), text.strip()


_TOPIC_TAG = re.compile(r"<(\w+)>([^<]*)")  # an opening tag and the text up to the next tag (closing tags optional)
_TOPIC_LABEL = re.compile(r"^(number|topic|description|narrative)\s*:\s*", re.IGNORECASE)
_XML_TOPIC = re.compile(r"<topic\b([^>]*)>", re.IGNORECASE)
_XML_NUMBER = re.compile(r"""\bnumber\s*=\s*["']?([^"'\s>]+)""", re.IGNORECASE)
_BLOCK_START = re.compile(r"(?=<top>|<topic\b)", re.IGNORECASE)
_FIELD_ALIASES = {"query": "title", "description": "desc", "narrative": "narr"}  # XML topics' names for SGML's


def _trec_topics(path: PathLike | str, rows: Iterable[tuple[int, str]], fields: tuple[str, ...]
                 ) -> Iterator[tuple[int, str, str]]:
    """Yield (line of the opening tag, qid, text) for each `<top>...</top>` (SGML) or `<topic number="N">...
    </topic>` (XML) block of a TREC topics file. A block left open is an error: it would drop a topic silently."""
    block: list[str] = []
    start, closing = 0, ""
    parts = ((n, part) for n, line in rows for part in _BLOCK_START.split(line) if part)  # one-line XML too
    for lineno, line in parts:
        lower = line.lower()
        ends_with = "</top>" if "<top>" in lower else "</topic>" if _XML_TOPIC.search(line) else ""
        if ends_with:
            if closing:
                raise DataError(f"{where(path, start)}: this topic has no {closing} before the next one opens "
                                f"(line {lineno}); close it")
            block, start, closing = [], lineno, ends_with
        if closing:
            block.append(line)
        if closing and closing in lower:
            yield start, *_topic(path, start, " ".join(block), closing == "</topic>", fields)
            closing = ""
    if closing:
        raise DataError(f"{where(path, start)}: this topic has no {closing} (the file ends inside it); close it")


def _topic(path: PathLike | str, start: int, text: str, xml: bool, fields: tuple[str, ...]) -> tuple[str, str]:
    """(qid, query text) of one topic block."""
    tags: dict[str, str] = {}
    for tag, value in _TOPIC_TAG.findall(text):
        value = html.unescape(value) if xml else value
        tag = _FIELD_ALIASES.get(tag.lower(), tag.lower()) if xml else tag.lower()
        tags.setdefault(tag, _TOPIC_LABEL.sub("", " ".join(value.split())))
    if xml:
        opening = _XML_TOPIC.search(text)
        assert opening is not None  # an XML block starts at the line its <topic ...> tag was found on
        number = _XML_NUMBER.search(opening.group(1))
        tags["num"] = number.group(1) if number else tags.get("num", "")
    if not tags.get("num"):
        raise DataError(f"{where(path, start)}: topic without a {'number=' if xml else '<num>'} number")
    return tags["num"], " ".join(tags.get(f, "") for f in fields).strip()


def read_qrels(path: PathLike, queries: Container[str], corpus: Corpus) -> dict[str, dict[str, int]]:
    """{qid: {doc_id: grade}} from `qid<TAB>docid<TAB>score` (BEIR; header optional) or TREC `qid 0 docid rel`.

    Every judged query must have text in `queries` and every judged document must be in the corpus:
    anything else means the files do not belong together, so it is an error naming the line.
    """
    rows: list[tuple[int, str, str, int]] = []
    for lineno, line in lines(path):
        fields = line.split("\t") if "\t" in line else line.split()
        fields = [f.strip() for f in fields]
        if len(fields) not in (3, 4):
            raise DataError(
                f"{where(path, lineno)}: expected 'query-id<TAB>corpus-id<TAB>score' or TREC 'qid 0 docid rel', "
                f"got {len(fields)} fields"
            )
        qid, doc_id, score = (fields[0], fields[1], fields[2]) if len(fields) == 3 else (fields[0], *fields[2:])
        try:
            grade = int(score)
        except ValueError:
            if lineno == 1 and not any(c.isdigit() for c in score):  # a header such as 'query-id corpus-id score'
                continue
            raise DataError(f"{where(path, lineno)}: relevance '{score[:30]}' is not an integer") from None
        if qid not in queries:
            raise DataError(f"{where(path, lineno)}: query '{qid}' is judged here but has no text in the queries file")
        rows.append((lineno, qid, doc_id, grade))
    # one lookup for the whole file: the corpus keeps its ids compactly, not as a set of strings
    unknown = (corpus.doc_positions([r[2] for r in rows]) < 0).nonzero()[0]
    if unknown.size:
        lineno, _, doc_id, _ = rows[unknown[0]]
        raise DataError(f"{where(path, lineno)}: document '{doc_id}' is judged here but is not in the corpus")
    qrels: dict[str, dict[str, int]] = {}
    for lineno, qid, doc_id, grade in rows:
        judged = qrels.setdefault(qid, {})
        if judged.get(doc_id, grade) != grade:
            raise DataError(f"{where(path, lineno)}: ({qid}, {doc_id}) judged twice with different grades")
        judged[doc_id] = grade
    return qrels
