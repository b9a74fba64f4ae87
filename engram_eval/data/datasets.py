"""Datasets as the runner sees them: format detection, loading, protocol defaults, selection.

One idea: turn a dataset path plus a config into the ordered questions to rank. Format
detection peeks at the start of the (possibly gzipped) file through the one gzip sniffer,
:func:`engram_eval.data._jsonio.open_text`.

The runner works in two passes over a LongMemEval file (:func:`open_source`), so that memory
does not grow with the file (LongMemEval_M is 2.7 GB):

1. :func:`open_source` streams every record through
   :func:`engram_eval.data.longmemeval.iter_longmemeval` (the same per-record checks as the
   in-memory loader) and keeps only the question ids and types, in file order. A bad record
   anywhere fails here, before any output exists. For a file of at most
   :data:`IN_MEMORY_ERROR_LIMIT` bytes the error is re-derived by the in-memory loader, so the
   message is exactly the one a whole-file load gives (they differ only for a JSON syntax
   error, or a syntax error after a bad record); a bigger file keeps the streamed message.
2. :meth:`QuestionSource.iter_questions` streams the file again and yields the wanted
   questions one at a time, in file order (every selection — ``question_ids``, ``limit``,
   ``--shard``, resume — is a subsequence of file order), stopping after the last one. The
   file's size, mtime and inode are checked against the first pass before and after, so a
   file replaced mid-run is refused instead of being silently mixed.

A LoCoMo file (small) is held in memory, as is a LongMemEval file opened with
``stream=False`` (the reference path the tests compare the streamed one against).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from engram_eval.data._jsonio import open_text
from engram_eval.data.records import Question
from engram_eval.errors import ConfigError, DataError, ProvenanceError

FORMATS = ("longmemeval", "locomo")
#: Stream LongMemEval files in the runner (False: load them whole, the reference path).
STREAM_LONGMEMEVAL = True
#: Up to this size a streamed load error is re-derived by the in-memory loader (same message).
IN_MEMORY_ERROR_LIMIT = 512 * 2**20


def detect_format(path: str | Path) -> str:
    """``locomo`` when the start of the file looks like a LoCoMo record (``qa`` and
    ``conversation`` keys), else ``longmemeval``."""
    try:
        with open_text(path) as f:
            start = f.read(1 << 16)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError(path, "(file)", "(file)", f"cannot read: {e}") from None
    return "locomo" if '"qa"' in start and '"conversation"' in start else "longmemeval"


def resolve_format(path: str | Path, fmt: str = "auto") -> str:
    return detect_format(path) if fmt == "auto" else fmt


def load_questions(path: str | Path, fmt: str = "auto") -> tuple[str, tuple[Question, ...]]:
    """``(format, questions in file order)``; the whole file is validated first."""
    fmt = resolve_format(path, fmt)
    if fmt == "locomo":
        from engram_eval.data.locomo import load_locomo

        return fmt, tuple(load_locomo(path).questions)
    from engram_eval.data.longmemeval import load_longmemeval

    return fmt, tuple(load_longmemeval(path).questions)


def select_ids(ids: Sequence[str], config: Any, path: str | Path) -> list[str]:
    """Apply ``question_ids`` (file order kept) then ``limit`` to question ids in file order;
    unknown ids are an error."""
    chosen = list(ids)
    if config.question_ids:
        known = set(ids)
        unknown = [i for i in config.question_ids if i not in known]
        if unknown:
            raise ConfigError(f"--question-id: {', '.join(unknown[:5])} not found in {path}")
        want = set(config.question_ids)
        chosen = [i for i in chosen if i in want]
    if config.limit is not None:
        chosen = chosen[: config.limit]
    return chosen


def select(questions: Sequence[Question], config: Any, path: str | Path) -> list[Question]:
    """Apply ``question_ids`` (file order kept) then ``limit``; unknown ids are an error."""
    by_id = {q.question_id: q for q in questions}
    return [by_id[i] for i in select_ids([q.question_id for q in questions], config, path)]


def _stat_key(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


@dataclass
class QuestionSource:
    """A validated dataset as the runner needs it: ids and types in file order (always in
    memory, small), and the questions themselves on demand (see the module docstring)."""

    path: Path
    fmt: str
    ids: tuple[str, ...]
    types: tuple[str, ...]
    streamed: bool
    _stat: tuple[int, int, int]
    _by_id: dict[str, Question] | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.ids)

    def check_unchanged(self) -> None:
        """Refuse when the file differs (size, mtime, inode) from the one first read."""
        try:
            now = _stat_key(self.path)
        except OSError as e:
            raise ProvenanceError(f"{self.path}: dataset is no longer readable: {e}") from None
        if now != self._stat:
            raise ProvenanceError(f"{self.path}: the dataset file changed while the run was "
                                  "in progress (size, mtime or inode differ from the first "
                                  "pass); start the run again")

    def iter_questions(self, ids: Iterable[str]) -> Iterator[Question]:
        """The questions ``ids`` (a subsequence of file order), one at a time, in that order."""
        want = list(ids)
        if not want:
            return
        if self._by_id is not None:
            for qid in want:
                yield self._by_id[qid]
            return
        from engram_eval.data.longmemeval import iter_longmemeval

        position = {qid: k for k, qid in enumerate(want)}
        if len(position) != len(want):
            raise ValueError("iter_questions: repeated question ids")
        self.check_unchanged()
        expect = 0
        with closing(cast(Generator[Question, None, None], iter_longmemeval(self.path))) \
                as stream:
            for q in stream:
                k = position.get(q.question_id)
                if k is None:
                    continue
                if k != expect:
                    raise ValueError("iter_questions: ids must follow file order "
                                     f"({q.question_id!r} came before {want[expect]!r})")
                yield q
                expect += 1
                if expect == len(want):
                    break
        if expect != len(want):
            raise ProvenanceError(f"{self.path}: question {want[expect]!r} not found on the "
                                  "second pass; the dataset file changed during the run")
        self.check_unchanged()


def open_source(path: str | Path, fmt: str = "auto", *, stream: bool | None = None,
                observe: Callable[[Question], None] | None = None) -> QuestionSource:
    """Validate the whole file and index it (first pass); ``stream`` defaults to
    :data:`STREAM_LONGMEMEVAL` for LongMemEval and is ignored for LoCoMo (in memory).
    ``observe``, when given, is called with every question of the first pass, in file order
    (the runner counts unparsable dates with it without another pass over the file)."""
    p = Path(path)
    fmt = resolve_format(p, fmt)
    if stream is None:
        stream = STREAM_LONGMEMEVAL
    stat = _stat_key(p)
    if fmt == "locomo" or not stream:
        _, questions = load_questions(p, fmt)
        if observe is not None:
            for q in questions:
                observe(q)
        return QuestionSource(p, fmt, tuple(q.question_id for q in questions),
                              tuple(q.question_type for q in questions), False, stat,
                              {q.question_id: q for q in questions})
    from engram_eval.data.longmemeval import iter_longmemeval, load_longmemeval

    ids: list[str] = []
    types: list[str] = []
    try:
        for q in iter_longmemeval(p):
            ids.append(q.question_id)
            types.append(q.question_type)
            if observe is not None:
                observe(q)
    except DataError:
        if stat[0] <= IN_MEMORY_ERROR_LIMIT:
            load_longmemeval(p)  # raises the whole-file loader's (first) error
        raise
    return QuestionSource(p, fmt, tuple(ids), tuple(types), True, stat)
