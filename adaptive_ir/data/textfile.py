"""A jsonl or tsv corpus file, left on disk.

Loading validates the file in one streaming pass (every line parsed, ids checked unique) and keeps only the ids
(`DocIds`) and each document's byte offset in the uncompressed text (int64), so `doc_texts_at` seeks and re-reads
those lines. `iter_doc_texts` re-reads the file from the start.

A .gz file or a member of a zip archive has no random access: a seek decompresses everything before the target.
`doc_texts_at` reads its documents in corpus order, so for those files one call is one forward pass over the
decompressed bytes up to its last document, with only the wanted lines parsed: about what `zcat` takes (WikiCAR's
181 MB of gzip, 434 MB of JSON lines: 3 s of CPU). So ask for many documents per call: the callers that read
documents by position do (`Retriever.first_occurrences` reads every query's feedback documents at once). No
decompressed copy is kept: it would cost a second copy of the corpus on disk to save one pass per such call.

A file changed after loading is an error on the next read (its size and modification time are checked), not
silently different documents.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import numpy as np

from adaptive_ir.common.errors import DataError, where
from adaptive_ir.data.corpus import Corpus, DocIdsBuilder
from adaptive_ir.data.lines import PathLike, check_id, is_jsonl, json_object, json_str, numbered_lines, open_binary

_DOC_ID_KEYS = ("_id", "id", "docno", "docid", "doc_id")
_DOC_TEXT_KEYS = ("text", "contents", "body")


def parse_doc(path: PathLike, lineno: int, line: str, jsonl: bool) -> tuple[str, str, str]:
    """(doc_id, title, text) of one corpus line: JSON (`_id`/`id`/`docno`, `title`, `text`/`contents`) or tsv
    (`docid<TAB>text` or `docid<TAB>title<TAB>text`)."""
    doc_id, title, text = _parse_doc(path, lineno, line, jsonl)
    check_id(doc_id, "document id", path, lineno)
    return doc_id, title, text


def _parse_doc(path: PathLike, lineno: int, line: str, jsonl: bool) -> tuple[str, str, str]:
    if jsonl:
        obj = json_object(path, lineno, line)
        doc_id = json_str(obj, _DOC_ID_KEYS, path, lineno, required=True)
        if "title" not in obj and not any(k in obj for k in _DOC_TEXT_KEYS):
            # else a corpus whose text sits under another key (MS MARCO v2's 'passage') indexes as empty documents
            raise DataError(f"{where(path, lineno)}: no text field ('{_DOC_TEXT_KEYS[0]}'; also accepted: "
                            f"{', '.join(_DOC_TEXT_KEYS[1:])}, 'title'); the line's keys: {', '.join(list(obj)[:8])}")
        return (doc_id, json_str(obj, ("title",), path, lineno, required=False),
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
        self._offsets = np.frombuffer(offsets, dtype=np.int64)

    def _check_unchanged(self) -> None:
        if _stamp(self.path) != self._stamp:
            raise DataError(f"{self.path}: the file changed after the collection was loaded; load it again")

    def _iter_docs(self) -> Iterator[tuple[str, str]]:
        self._check_unchanged()
        for lineno, _, line in numbered_lines(self.path):
            yield parse_doc(self.path, lineno, line, self._jsonl)[1:]

    def _read_sorted(self, positions: np.ndarray) -> Iterator[tuple[str, str]]:
        """Seeks forward from document to document (sorted positions): for a compressed file, one decompression
        pass that parses only the wanted lines."""
        self._check_unchanged()
        with open_binary(self.path) as f:
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
