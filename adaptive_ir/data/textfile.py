"""A jsonl or tsv corpus file, left on disk.

Loading validates the file in one streaming pass (every line parsed, ids checked unique) and keeps only the ids
(`DocIds`) and, for a plain file, each document's byte offset (int64), so `doc_texts_at` seeks and re-reads
those lines. `iter_doc_texts` re-reads the file from the start. A .gz file or a member of a zip archive cannot be
seeked cheaply (gzip and zip seeks decompress from the start), so there `doc_texts_at` makes one sequential pass
over the file that picks the wanted documents (sorted, so the pass stops after the last of them): one
decompression per call, whatever the number of documents asked for. Decompress a large corpus once if something
reads documents one at a time.

A file changed after loading is an error on the next read (its size and modification time are checked), not
silently different documents.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
import numpy as np

from adaptive_ir.errors import DataError, where

from .corpus import Corpus, DocIdsBuilder
from .lines import PathLike, is_compressed, is_jsonl, json_object, json_str, numbered_lines

_DOC_ID_KEYS = ("_id", "id", "docno", "docid", "doc_id")
_DOC_TEXT_KEYS = ("text", "contents", "body")


def parse_doc(path: PathLike, lineno: int, line: str, jsonl: bool) -> tuple[str, str, str]:
    """(doc_id, title, text) of one corpus line: JSON (`_id`/`id`/`docno`, `title`, `text`/`contents`) or tsv
    (`docid<TAB>text` or `docid<TAB>title<TAB>text`)."""
    if jsonl:
        obj = json_object(path, lineno, line)
        return (json_str(obj, _DOC_ID_KEYS, path, lineno, required=True),
                json_str(obj, ("title",), path, lineno, required=False),
                json_str(obj, _DOC_TEXT_KEYS, path, lineno, required=False))
    fields = line.split("\t")
    if len(fields) == 2:
        return fields[0].strip(), "", fields[1]
    if len(fields) == 3:
        return fields[0].strip(), fields[1], fields[2]
    raise DataError(
        f"{where(path, lineno)}: expected 'docid<TAB>text' or 'docid<TAB>title<TAB>text', "
        f"got {len(fields)} tab-separated fields"
    )


class TextFileCorpus(Corpus):
    """Documents of a JSON-lines or tsv file (plain, .gz, or inside a zip); see the module docstring.
    Empty documents are kept (Cranfield has two)."""

    def __init__(self, path: PathLike):
        self.path, self._jsonl = path, is_jsonl(path)
        ids, offsets = DocIdsBuilder(), array("q")
        for lineno, offset, line in numbered_lines(path):
            ids.add(parse_doc(path, lineno, line, self._jsonl)[0])
            offsets.append(offset)
        if not len(ids):
            raise DataError(f"{path}: no documents")
        self._stamp = _stamp(path)
        self.doc_ids = ids.build()
        repeat = self.doc_ids.first_repeat()
        if repeat is not None:
            first, again = self._line_numbers(repeat)
            raise DataError(f"{where(path, again)}: duplicate document id '{self.doc_ids[repeat[1]]}' "
                            f"(first at line {first}); ids must be unique")
        self._offsets = None if is_compressed(path) else np.frombuffer(offsets, dtype=np.int64)

    def _check_unchanged(self) -> None:
        if _stamp(self.path) != self._stamp:
            raise DataError(f"{self.path}: the file changed after the collection was loaded; load it again")

    def _iter_docs(self) -> Iterator[tuple[str, str]]:
        self._check_unchanged()
        for lineno, _, line in numbered_lines(self.path):
            yield parse_doc(self.path, lineno, line, self._jsonl)[1:]

    def _read_sorted(self, positions: np.ndarray) -> Iterator[tuple[str, str]]:
        return super()._read_sorted(positions) if self._offsets is None else self._seek(positions)

    def _seek(self, positions: np.ndarray) -> Iterator[tuple[str, str]]:
        self._check_unchanged()
        with self.path.open("rb") as f:
            for pos in positions.tolist():
                offset = int(self._offsets[pos])
                f.seek(offset)
                # validated at load and unchanged since: decoding and parsing cannot fail here
                line = f.readline().decode("utf-8").rstrip("\r\n")
                if offset == 0:
                    line = line.removeprefix("\ufeff")
                yield parse_doc(self.path, 0, line, self._jsonl)[1:]

    def _line_numbers(self, positions: tuple[int, ...]) -> list[int]:
        """Line numbers of documents (for error messages: one more pass over the file)."""
        lines, wanted = {}, set(positions)
        for pos, (lineno, _, _) in enumerate(numbered_lines(self.path)):
            if pos in wanted:
                lines[pos] = lineno
                if len(lines) == len(wanted):
                    break
        return [lines[p] for p in positions]

    def __repr__(self) -> str:
        return f"TextFileCorpus({self.path}, {self.num_docs} documents)"


def _stamp(path: PathLike) -> tuple[int, int]:
    """Size and modification time of the file (of the archive, for a zip member)."""
    st = path.stat()
    return st.st_size, st.st_mtime_ns
