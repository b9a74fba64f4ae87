"""The package's one bounded JSON / JSON lines reader, and the dataset loaders' helpers.

Every JSON file this package reads goes through here: datasets (:func:`read_json`,
:func:`iter_list_items`), whole documents (:func:`read_json_document`: sidecars, summaries,
manifests, the ledger, settings, calibrations, fixtures), JSON lines
(:func:`iter_json_lines`, :func:`parse_json_line`: rows, rankings, translations) and JSON
held elsewhere (:func:`parse_json_text`: a database value). The contract, for each:

* only a regular file is opened, without blocking (:func:`engram_eval.io.open_regular`: a
  FIFO with no writer is an error, never a hang); gzip is sniffed by its magic bytes;
* the bytes read are counted while reading (decompressed bytes for gzip), and reading stops
  at the first byte over the limit, so a gzip bomb costs its limit, not its size;
  a line of JSON lines is bounded the same way (:data:`MAX_LINE_BYTES`);
* nesting (:data:`MAX_DEPTH`) and string length (:data:`MAX_STRING_CHARS`) are checked
  before anything is returned; Python's recursion limit is never reached by a caller
  (a ``RecursionError`` of the parser is caught and located); a dataset's string over the
  limit is refused while it is read, once the limit is passed (:class:`_RunWatch`), not
  after a parser has built it;
* a key given twice in one object (``{"question": "a", "question": "b"}``) is refused, not
  resolved by "the last wins" (:func:`duplicate_key_reason`), on the whole-file and the
  streaming paths alike;
* a UTF-8 byte order mark at the start of the file is accepted (and dropped);
* a lone surrogate escape (``"\\ud800"`` not followed by its low half, or a low half alone)
  is refused, found in the bytes before a parser sees them (:func:`lone_surrogate`), so the
  whole-file and the streaming loaders give the same error (the ``json`` module would
  return the surrogate, ijson's C backend a ``?``); a pair (``"\\ud83d\\ude00"``) is one
  character, the same in both; bytes that are not UTF-8 (an encoded surrogate included)
  are refused too;
* a strict read (``strict=True``: the records of a run, which only this package writes)
  also refuses a key repeated within one object (the ``json`` module keeps the last value)
  and the non-JSON constants ``NaN`` / ``Infinity``;
* every failure is one :class:`engram_eval.errors.InputError` (a :class:`DataError`) naming
  the file, the record (``(file)``, ``line N``, ``question_id=... (index N)``) and, where
  known, the field. A missing file is the ``FileNotFoundError`` it was (callers say what
  was missing).
"""

from __future__ import annotations

import codecs
import errno
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import IO, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from engram_eval.errors import DataError, InputError
from engram_eval.io import input_problem, open_regular

GZIP_MAGIC = b"\x1f\x8b"
FILE_RECORD = "(file)"
ROOT_FIELD = "(root)"
#: Deepest nesting a dataset file may have, the top-level list counting as level 1 (real
#: LongMemEval and LoCoMo files nest 5 or 6 levels). Enforced while streaming, before the
#: parser's memory grows (an ijson prefix stack grows with depth squared), and on whole-file
#: loads before schema validation (which recurses once per level).
MAX_DEPTH = 64
#: Longest single string (a field value or key), in characters; real turns are a few KB.
MAX_STRING_CHARS = 64 * 2**20
#: A field path in an error message is cut to this many characters.
MAX_FIELD_CHARS = 120
#: Most (decompressed) bytes of a whole JSON document other than a dataset: a sidecar,
#: summary, manifest, ledger, settings or calibration file (real ones are below 1 MB).
MAX_DOCUMENT_BYTES = 256 * 2**20
#: Most (decompressed) bytes of a dataset read whole (LongMemEval_M is 2.7 GB).
MAX_DATASET_BYTES = 16 * 2**30
#: Most (decompressed) bytes of a JSON lines file (result rows, rankings, translations).
MAX_LINES_BYTES = 16 * 2**30
#: Most bytes of one line of a JSON lines file (a result row is a few KB).
MAX_LINE_BYTES = 256 * 2**20
#: A string of N characters takes at most this many bytes of JSON text (``\uXXXX``): a run
#: of more than ``MAX_STRING_CHARS`` times it without a ``"`` byte is over the string limit.
BYTES_PER_CHAR = 6
UTF8_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 20
#: A run of more bytes than this without a ``"`` (a long string still open) is held back
#: from the streaming parser until it closes or is refused (:class:`_StreamGuard`).
HOLD_BYTES = 1 << 20


def is_gzip(path: str | Path) -> bool:
    """True when the file starts with the gzip magic bytes (the extension is ignored). Only a
    regular file is opened (:func:`engram_eval.io.open_regular`: a FIFO or device is one
    error naming it, never a hang)."""
    with open_regular(path) as f:
        return f.read(2) == GZIP_MAGIC


def open_binary(path: str | Path) -> IO[bytes]:
    """Open ``path`` for reading bytes, un-gzipping on the fly when it starts with the gzip
    magic bytes. This is the one place that sniffs gzip; every reader goes through it. Only a
    regular file is opened."""
    f = open_regular(path)
    try:
        magic = f.read(2)
        f.seek(0)
    except BaseException:
        f.close()
        raise
    if magic == GZIP_MAGIC:
        g = gzip.GzipFile(fileobj=f, mode="rb")
        g.myfileobj = f  # type: ignore[assignment]  # closing it closes the file (as gzip.open)
        return g  # type: ignore[return-value]
    return f


def open_text(path: str | Path) -> IO[str]:
    """Text (UTF-8) view of :func:`open_binary`."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8")


# --------------------------------------------------------------------------- bounded reading
def _read_problem(path: Path, exc: BaseException) -> str:
    """What an error met while opening or reading ``path`` says, in words."""
    if isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile)):
        return f"not a valid gzip stream: {exc}"
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:  # said as every input says it
        return f"cannot read file: {input_problem(path) or exc}"
    return f"cannot read file: {exc}"


class CappedReader:
    """A binary stream (plain or un-gzipped) that counts the bytes read through it.

    Reading more than ``limit`` bytes in all is one :class:`InputError` naming the file,
    raised by the read that passes the limit: no read asks for more than one byte past it,
    so a gzip bomb is decompressed only up to its limit. An operating-system, gzip or zlib
    error while reading is an :class:`InputError` too."""

    def __init__(self, f: IO[bytes], path: Path, limit: int, what: str = "") -> None:
        self._f = f
        self.path = path
        self.limit = limit
        self.what = what
        self.count = 0
        self.compressed = isinstance(f, gzip.GzipFile)

    def _left(self) -> int:
        return self.limit + 1 - self.count

    def read(self, n: int | None = -1) -> bytes:
        """Up to ``n`` bytes (all that are left, read in chunks, when ``n`` < 0)."""
        if n is None or n < 0:
            parts = []
            while block := self.read(_CHUNK):
                parts.append(block)
            return b"".join(parts)
        return self._account(self._guarded(self._f.read, min(n, self._left())))

    def readline(self, size: int = -1) -> bytes:
        """One line (``size`` bytes at most, as ``IOBase.readline``)."""
        size = self._left() if size < 0 else min(size, self._left())
        return self._account(self._guarded(self._f.readline, size))

    def skip_bom(self) -> bool:
        """Drop a UTF-8 byte order mark at the start; True when there was one."""
        if self.count == 0 and self.read(len(UTF8_BOM)) == UTF8_BOM:
            return True
        self._guarded(self._f.seek, 0)
        self.count = 0
        return False

    def _guarded(self, call: Any, arg: int) -> Any:
        try:
            return call(arg)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(self.path, FILE_RECORD, ROOT_FIELD,
                             _read_problem(self.path, exc)) from None

    def _account(self, block: bytes) -> bytes:
        self.count += len(block)
        if self.count > self.limit:
            raise self.over_limit()
        return block

    def over_limit(self) -> InputError:
        """The error for more than ``limit`` bytes."""
        kind = " (decompressed)" if self.compressed else ""
        of = f" for {self.what}" if self.what else ""
        return InputError(self.path, FILE_RECORD, ROOT_FIELD,
                          f"more than {self.limit} bytes{kind}, the limit{of}; refusing to "
                          "read further")

    def close(self) -> None:
        self._f.close()


@contextmanager
def open_capped(path: str | Path, limit: int, what: str = "") -> Iterator[CappedReader]:
    """:func:`open_binary` (regular files only, gzip sniffed) as a :class:`CappedReader` of
    at most ``limit`` (decompressed) bytes. A missing file is ``FileNotFoundError``; any
    other failure to open is an :class:`InputError` naming the file."""
    p = Path(path)
    try:
        f = open_binary(p)
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(p, FILE_RECORD, ROOT_FIELD, _read_problem(p, exc)) from None
    reader = CappedReader(f, p, limit, what)
    try:
        yield reader
    finally:
        reader.close()


#: Bytes that continue a UTF-8 character (``10xxxxxx``): the others each start one.
_CONTINUATION = bytes(range(0x80, 0xC0))


class _RunWatch:
    """Watches the bytes of a JSON text, block by block, for a run without a ``"`` that
    holds more than ``MAX_STRING_CHARS`` characters: a string over the limit (or a value no
    real file holds), found while reading, as soon as the limit is passed -- before a
    parser builds the string (which costs the string's whole size in memory and time).

    A run's characters are counted from below, without decoding: each byte that starts a
    UTF-8 character is one, less :data:`BYTES_PER_CHAR` per backslash (an escape spends at
    most that many bytes per backslash on one character: ``\\uXXXX``). So a run of plain
    text is refused once it holds ``MAX_STRING_CHARS`` characters, and one dense with escapes
    at the latest after ``MAX_STRING_CHARS * BYTES_PER_CHAR`` bytes. A ``"`` right after a
    backslash (an escaped quote) does not end a run, so scattering ``\\"`` through a
    string does not hide it. Only runs that reach a block's edge are measured (a run inside
    one block is shorter than the block): a few passes in C per block."""

    def __init__(self) -> None:
        self.offset = 0  # bytes seen
        self.start = 0  # where the open run (after the last '"') starts
        self.leads = 0  # bytes of the open run that start a character
        self.slashes = 0  # backslashes in the open run
        self.slash_edge = False  # the last block ended with a backslash

    def open_run(self) -> int:
        """Bytes since the last ``"`` seen (the run still open)."""
        return self.offset - self.start

    def _add(self, part: bytes) -> None:
        self.leads += len(part.translate(None, _CONTINUATION))
        self.slashes += part.count(b"\\")

    def _over(self, run: int) -> bool:
        return (run > MAX_STRING_CHARS * BYTES_PER_CHAR
                or self.leads - BYTES_PER_CHAR * self.slashes > MAX_STRING_CHARS)

    def over(self, block: bytes) -> int:
        """Take the next block; the length in bytes of a run over the limit, else 0."""
        first, last = block.find(b'"'), block.rfind(b'"')
        if self._escaped(block, first) or self._escaped(block, last):
            quotes = block.replace(b'\\"', b"\\_")  # escaped quotes end no run
            if self.slash_edge and quotes[:1] == b'"':
                quotes = b"_" + quotes[1:]
            first, last = quotes.find(b'"'), quotes.rfind(b'"')
        self.slash_edge = block.endswith(b"\\")
        end = self.offset + len(block)
        self._add(block if first < 0 else block[:first])
        run = (end if first < 0 else self.offset + first) - self.start
        if self._over(run):
            self.offset = end
            return run
        if first >= 0:
            self.start = self.offset + last + 1
            self.leads = self.slashes = 0
            self._add(block[last + 1:])
        self.offset = end
        return 0

    def _escaped(self, block: bytes, at: int) -> bool:
        """Whether the ``"`` at ``at`` (-1: none) follows a backslash."""
        if at < 0:
            return False
        return block[at - 1] == 0x5C if at > 0 else self.slash_edge


#: A ``\uXXXX`` escape of a UTF-16 surrogate (``D800``-``DFFF``), from its backslash; whether
#: that backslash starts an escape is decided by the backslashes before it (an odd run of
#: them ends in an escaped backslash, and ``uD800`` is then plain text).
_SURROGATE_B = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE_S = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: The low half (``DC00``-``DFFF``) that must follow a high one at once.
_LOW_B = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_LOW_S = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
#: Length of one ``\uXXXX`` escape.
ESCAPE_LEN = 6


def lone_surrogate(buf: bytes | str, end: int | None = None, *, before: int = 0,
                   paired: int = -1) -> tuple[int, int]:
    """``(index, paired)``: the index in the JSON text ``buf`` of the backslash of its first
    lone surrogate escape -- a high half (``\\ud800``-``\\udbff``) not followed at once by a
    low half (``\\udc00``-``\\udfff``), or a low half without a high one -- or -1 when there
    is none; ``paired`` is the index of the low half of the last pair read (-1: none).

    Only escapes whose backslash lies before ``end`` (default: the whole of ``buf``) are
    judged; the caller of a stream keeps the bytes from ``end`` on for the next call, at least
    ``2 * ESCAPE_LEN`` of them, so a pair cut by a block edge is seen whole. ``before``: the
    number (or its parity) of backslashes right before ``buf[0]``; ``paired``: from the
    previous call, moved to this ``buf``'s indexes. A regular expression finds the (rare)
    surrogate escapes; the run of backslashes before one is counted by hand, once."""
    text = isinstance(buf, str)
    pattern: Any = _SURROGATE_S if text else _SURROGATE_B
    low: Any = _LOW_S if text else _LOW_B
    slash: Any = "\\" if text else 0x5C
    high: Any = "89abAB" if text else b"89abAB"
    stop = len(buf) if end is None else end
    for m in pattern.finditer(buf):
        at = m.start()
        if at >= stop:
            break
        k = at
        while k > 0 and buf[k - 1] == slash:
            k -= 1
        if (at - k + (before if k == 0 else 0)) % 2:
            continue  # an escaped backslash, then plain text
        if at == paired:
            continue  # the low half of a pair read already
        if buf[at + 3:at + 4] in high and low.match(buf, at + ESCAPE_LEN):
            paired = at + ESCAPE_LEN
            continue
        return at, paired
    return -1, paired


class _SurrogateWatch:
    """:func:`lone_surrogate` over a stream of blocks, in bounded memory: each block is
    judged up to ``2 * ESCAPE_LEN`` bytes before its end and the rest held for the next one.
    :meth:`feed` returns the bytes judged clean (what a parser may be given); ``lone`` is the
    offset of the first lone surrogate escape from the stream's start (-1: none yet)."""

    KEEP = 2 * ESCAPE_LEN

    def __init__(self) -> None:
        self.held = b""  # bytes not yet judged
        self.base = 0  # offset of held[0]
        self.before = 0  # parity of the backslashes right before held[0]
        self.paired = -1  # index in held of a pair's low half already read
        self.lone = -1
        self.escape = ""  # the lone escape's text

    def feed(self, block: bytes) -> bytes:
        """Take the next block (``b""``: the end of the stream); the bytes now judged clean,
        ``b""`` once a lone surrogate escape is found."""
        buf = self.held + block if self.held else block
        end = max(0, len(buf) - self.KEEP) if block else len(buf)
        at, paired = lone_surrogate(buf, end, before=self.before, paired=self.paired)
        if at >= 0:
            self.lone = self.base + at
            self.escape = buf[at:at + ESCAPE_LEN].decode("ascii")
            return b""
        done = buf[:end]
        run = end - len(done.rstrip(b"\\"))
        self.before = (run + (self.before if run == end else 0)) % 2
        self.paired = paired - end if paired >= end else -1
        self.held = buf[end:]
        self.base += end
        return done

    def finish(self, block: bytes, limit: int) -> None:
        """The stream stops at offset ``limit`` (a byte that is not UTF-8, in ``block`` or
        held): judge the escapes before it, as :func:`json_text` does."""
        buf = self.held + block
        end = min(len(buf), max(0, limit - self.base))
        at, _ = lone_surrogate(buf, end, before=self.before, paired=self.paired)
        if at >= 0:
            self.lone = self.base + at
            self.escape = buf[at:at + ESCAPE_LEN].decode("ascii")


class _Utf8Watch:
    """UTF-8 validity of a stream of blocks (an incremental decoder, its text dropped):
    :meth:`check` returns the offset of the first byte that is not UTF-8, -1 while there is
    none (``reason`` says what is wrong)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.fed = 0
        self.reason = ""

    def check(self, block: bytes) -> int:
        """Take the next block (``b""``: the end, where a cut sequence is an error)."""
        pending = len(self._decoder.getstate()[0])
        try:
            self._decoder.decode(block, final=not block)
        except UnicodeDecodeError as exc:
            self.reason = str(exc.reason)
            return self.fed - pending + exc.start
        self.fed += len(block)
        return -1


def read_capped_bytes(path: str | Path, limit: int, *, what: str = "",
                      id_key: str | None = None) -> bytes:
    """The (decompressed) bytes of ``path``, a UTF-8 byte order mark dropped.

    More than ``limit`` bytes is one :class:`InputError`, raised while reading. So is a run
    without a ``"`` of more than :data:`MAX_STRING_CHARS` characters (a string over the
    limit, or a value no real file holds; :class:`_RunWatch`), raised as
    soon as it is read and naming the record and field it starts in (``id_key`` as for
    :func:`read_json`)."""
    parts: list[bytes] = []
    watch = _RunWatch()
    with open_capped(path, limit, what) as f:
        f.skip_bom()
        while block := f.read(_CHUNK):
            parts.append(block)
            run = watch.over(block)
            if run:
                raise _run_error(Path(path), b"".join(parts)[:watch.start], run, id_key)
    raw = b"".join(parts)
    del parts
    return raw


def read_stored_bytes(path: str | Path, limit: int, what: str = "") -> bytes:
    """The bytes of ``path`` as stored (a gzip file is *not* decompressed, a byte order mark
    kept: what a file hash covers), at most ``limit`` of them, read from a regular file only
    (:func:`engram_eval.io.open_regular`). Over the limit, or unreadable, is one
    :class:`InputError`; a missing file is ``FileNotFoundError``."""
    p = Path(path)
    try:
        f = open_regular(p)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise InputError(p, FILE_RECORD, ROOT_FIELD, _read_problem(p, exc)) from None
    with f:
        return CappedReader(f, p, limit, what).read()  # type: ignore[arg-type]


def gunzip_capped(path: str | Path, data: bytes, limit: int, what: str = "") -> bytes:
    """``data`` (the bytes of ``path``) decompressed when it starts with the gzip magic bytes,
    at most ``limit`` bytes of it (counted while decompressing: a gzip bomb stops at the
    limit); else ``data`` itself. A broken stream or too many bytes is one
    :class:`InputError`."""
    if data[:2] != GZIP_MAGIC:
        return data
    g = gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")
    with g:
        return CappedReader(g, Path(path), limit, what).read()  # type: ignore[arg-type]


def first_byte(path: str | Path) -> bytes:
    """The first byte of the (decompressed) file after a byte order mark and whitespace,
    b"" when there is none; read through :func:`open_capped` (errors as there)."""
    with open_capped(path, MAX_DATASET_BYTES, "a dataset") as f:
        f.skip_bom()
        while block := f.read(4096):
            stripped = block.lstrip()
            if stripped:
                return stripped[:1]
    return b""


def _run_error(path: Path, prefix: bytes, run: int, id_key: str | None) -> InputError:
    """The error for a run of ``run`` bytes without a ``"`` that starts after ``prefix``."""
    record, field = _position(prefix, id_key)
    return InputError(path, record, field,
                      f"a string (or value) longer than {MAX_STRING_CHARS} characters: "
                      f"the {run} bytes from byte {len(prefix)} hold more, and no closing "
                      "'\"'; refusing to read further")


class _StrictProblem(ValueError):
    """What :func:`_strict_hooks` found (the field and what is wrong with it)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook`` of a strict read: an object whose key appears
    twice is refused (the ``json`` module would keep the last value silently)."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _StrictProblem(key, f"key {key[:MAX_FIELD_CHARS]!r} appears twice in one "
                                 "object (JSON readers disagree on which value counts; no "
                                 "writer of this package repeats a key)")
        seen.add(key)
    return obj  # pragma: no cover - a shorter dict means a repeated key


def _no_constant(name: str) -> Any:
    """``json.loads``' ``parse_constant`` of a strict read: ``NaN``, ``Infinity`` and
    ``-Infinity`` are not JSON (RFC 8259), and no writer of this package emits them."""
    raise _StrictProblem(ROOT_FIELD, f"{name} is not a JSON number (no writer of this package "
                         "writes one)")


_CONSTANT_KEY = re.compile(r'"((?:[^"\\]|\\.){0,200})"\s*:\s*-?(?:NaN|Infinity)\b')


def _constant_key(text: str) -> str:
    """The key whose value is the first ``NaN`` / ``Infinity`` of ``text`` (for the error of
    a strict read; the parser's hook is not told the key), or ``(root)``."""
    m = _CONSTANT_KEY.search(text)
    return m.group(1) if m else ROOT_FIELD


def parse_json_text(path: str | Path, text: str | bytes, record: str = FILE_RECORD, *,
                    id_key: str | None = None, strict: bool = False) -> Any:
    """Parse one JSON value held in memory (a whole file's text, one line, a database value)
    of ``path``; ``record`` names it in errors (``(file)``: a whole file, whose top-level list
    elements are then named by ``id_key``). Syntax errors, nesting deeper than
    :data:`MAX_DEPTH` (``RecursionError`` never escapes), strings longer than
    :data:`MAX_STRING_CHARS`, lone surrogate escapes and bytes that are not UTF-8
    (:func:`json_text`) are one :class:`InputError` naming the record and field.

    ``strict`` (the records of a run: rows, sidecars, summaries, which only this package
    writes): a key repeated within one object and the non-JSON constants ``NaN``,
    ``Infinity`` and ``-Infinity`` are refused too, naming the key."""
    text = json_text(path, text, id_key, _as_record(record))
    try:
        data = (json.loads(text, object_pairs_hook=_unique_object, parse_constant=_no_constant)
                if strict else json.loads(text, object_pairs_hook=_unique_keys))
    except _StrictProblem as exc:
        raise InputError(path, record, exc.field if exc.field != ROOT_FIELD
                         else _constant_key(text), exc.reason) from None
    except _DuplicateKey as dup:  # the streaming scan names the record and field
        locate_limit_violation(path, id_key, source=text, record=_as_record(record))
        raise InputError(path, record, ROOT_FIELD,  # pragma: no cover - located above
                         duplicate_key_reason(dup.key)) from None
    except json.JSONDecodeError as exc:
        raise InputError(path, record, ROOT_FIELD, f"not valid JSON: {exc.msg} at line "
                         f"{exc.lineno} column {exc.colno}") from None
    except RecursionError:
        # Nested deeper than Python's parser allows: the streaming scan names where.
        locate_limit_violation(path, id_key, source=text, record=_as_record(record))
        raise InputError(path, record, ROOT_FIELD,  # pragma: no cover - located above
                         f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise InputError(path, record, ROOT_FIELD, f"not valid JSON: {str(exc)[:200]}"
                         ) from None
    check_limits(path, data, id_key, source=text, record=_as_record(record))
    return data


class _DuplicateKey(ValueError):
    """A key given twice in one JSON object (raised by :func:`_unique_keys`)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object hook: the object as a dict, or :class:`_DuplicateKey` when a
    key appears twice (the ``json`` module would keep the last value silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return out


def duplicate_key_reason(key: str) -> str:
    """What is wrong with an object that gives ``key`` twice (the field named is the key)."""
    shown = key if len(key) <= 80 else key[:80] + "..."
    return (f"the key {shown!r} appears more than once in one object; a JSON reader would keep "
            "only one of its values silently: remove the other")


def _as_record(record: str) -> str | None:
    """``record`` for the locating scan: None for a whole file (records named there)."""
    return None if record == FILE_RECORD else record


def read_json_document(path: str | Path, *, what: str = "", limit: int | None = None,
                       id_key: str | None = None, strict: bool = False) -> Any:
    """One whole JSON document (plain or gzipped, any extension) under every limit of the
    module docstring: at most ``limit`` bytes (default :data:`MAX_DOCUMENT_BYTES`), ``what``
    naming the kind of file in the size error. A missing file is ``FileNotFoundError``;
    every other failure one :class:`InputError` naming the file, record and field.
    ``strict``: as :func:`parse_json_text`."""
    cap = MAX_DOCUMENT_BYTES if limit is None else limit
    return parse_json_text(path, read_capped_bytes(path, cap, what=what, id_key=id_key),
                           id_key=id_key, strict=strict)


def parse_json_line(path: str | Path, number: int, raw: bytes, *, strict: bool = False) -> Any:
    """Line ``number`` (1-based) of a JSON lines file, its newline included or not: at most
    :data:`MAX_LINE_BYTES` bytes, then :func:`parse_json_text` with record ``line N``
    (``strict`` as there)."""
    record = f"line {number}"
    if len(raw) - raw.endswith(b"\n") > MAX_LINE_BYTES:
        raise InputError(path, record, ROOT_FIELD, f"a line of more than {MAX_LINE_BYTES} "
                         "bytes; refusing to read further")
    if number > 1 and raw.startswith(UTF8_BOM):  # only the file's start may hold one
        raise InputError(path, record, ROOT_FIELD, "not valid JSON: a byte order mark "
                         "inside the file")
    return parse_json_text(path, raw, record, strict=strict)


def iter_json_lines(path: str | Path, *, what: str = "", limit: int | None = None
                    ) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of a JSON lines file (plain or
    gzipped), streaming: each line is read at most :data:`MAX_LINE_BYTES` + 1 bytes at a time
    and the file at most ``limit`` bytes (default :data:`MAX_LINES_BYTES`); a byte order
    mark before line 1 is dropped. Every failure is one :class:`InputError` naming the line
    (:func:`parse_json_line`); a missing file is ``FileNotFoundError``."""
    cap = MAX_LINES_BYTES if limit is None else limit
    with open_capped(path, cap, what) as f:
        f.skip_bom()
        number = 0
        while raw := f.readline(MAX_LINE_BYTES + 1):
            number += 1
            if raw.strip():
                yield number, parse_json_line(path, number, raw)
            elif len(raw) > MAX_LINE_BYTES:
                parse_json_line(path, number, raw)  # raises: too long


def read_json(path: str | Path, id_key: str | None = None) -> Any:
    """Parse a dataset JSON file, transparently un-gzipping it when it starts with the gzip
    magic bytes (:func:`read_json_document` with the dataset size limit,
    :data:`MAX_DATASET_BYTES`).

    The extension is ignored: ``data.json`` that is really gzip is read, ``data.json.gz`` that
    is really plain JSON is read too. The nesting and string limits (:data:`MAX_DEPTH`,
    :data:`MAX_STRING_CHARS`) are checked before anything is returned; a violation is one
    :class:`DataError` naming the record (``<id_key>=<id> (index N)`` for a top-level list of
    objects) and the field. A missing file is a :class:`DataError` too.
    """
    p = Path(path)
    try:
        return read_json_document(p, what="a dataset", limit=MAX_DATASET_BYTES, id_key=id_key)
    except FileNotFoundError as exc:
        raise InputError(p, FILE_RECORD, ROOT_FIELD, f"cannot read file: {exc}") from exc


def _ijson() -> Any:
    try:
        import ijson
    except ImportError:  # pragma: no cover - ijson is a declared dependency
        raise DataError("(ijson)", FILE_RECORD, ROOT_FIELD,
                        "streaming needs the 'ijson' package: pip install 'ijson>=3.2'") from None
    return ijson


class _StreamGuard:
    """A stream for ``ijson`` that refuses, while reading, a run without a ``"`` that holds
    more than ``MAX_STRING_CHARS`` characters (:class:`_RunWatch`; ijson builds a string
    whole before handing it over; ``tripped`` says so), a lone surrogate
    escape (:class:`_SurrogateWatch`; ``lone`` is its offset) and a byte that is not UTF-8
    (:class:`_Utf8Watch`; ``bad`` is its offset), the last two judged before ijson is given
    the bytes, in the order :func:`json_text` judges a whole file. Once one is found,
    ``read`` returns no more bytes."""

    def __init__(self, f: CappedReader) -> None:
        self._f = f
        self._watch = _RunWatch()
        self._surrogates = _SurrogateWatch()
        self._utf8 = _Utf8Watch()
        self._ready = bytearray()  # judged clean, not yet handed to ijson
        self.tripped = False
        self.bad = -1

    @property
    def reason(self) -> str:
        """Why the stream stopped early ("" while it has not): a format string with
        ``{at}`` for where, as :func:`_text_error` takes."""
        if self.lone >= 0:
            return _surrogate_reason(self._surrogates.escape)
        return _utf8_reason(self._utf8.reason) if self.bad >= 0 else ""

    @property
    def stopped_at(self) -> int:
        return self.lone if self.lone >= 0 else self.bad

    @property
    def lone(self) -> int:
        return self._surrogates.lone

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes judged clean. While the text ends in a run longer than
        :data:`HOLD_BYTES` without a ``"`` (a long string still open), its bytes are held
        back and more is read: ijson re-reads a string that spans its reads from the start
        at every read (time quadratic in the string), so a string over the limit is refused
        here before ijson has seen it, and one under it is handed over when it closes."""
        while not self.tripped and self.lone < 0 and self.bad < 0:
            if self._ready and self._watch.open_run() <= HOLD_BYTES:
                return self._take(n)
            block = self._f.read(n)
            if self._watch.over(block):
                self.tripped = True
                break
            bad = self._utf8.check(block)
            if bad >= 0:
                self._surrogates.finish(block, bad)
                self.bad = -1 if self.lone >= 0 else bad
                break
            self._ready += self._surrogates.feed(block)
            if not block:  # the end: all that is left
                return self._take(n)
        return b""

    def _take(self, n: int) -> bytes:
        """The first ``n`` (all when < 0) ready bytes, removed."""
        size = len(self._ready) if n < 0 else n
        out = bytes(self._ready[:size])
        del self._ready[:size]
        return out


def iter_list_items(path: str | Path, id_key: str | None = None) -> Iterator[Any]:
    """The elements of the top-level JSON list of ``path`` (plain or gzipped), one at a time.

    Streams with ``ijson``: basic parse events are checked against :data:`MAX_DEPTH` and
    :data:`MAX_STRING_CHARS` *before* they reach the object builder, so a hostile file (say
    400 KB of nested ``[``) fails with one :class:`DataError` naming the record and the field
    instead of growing the parser's memory; a string far over the limit is refused while it is
    read, before ijson holds it. The file is read at most :data:`MAX_DATASET_BYTES` bytes. A
    byte order mark is dropped. Syntax and read errors are :class:`DataError` too.
    """
    ijson = _ijson()
    from ijson.utils import sendable_list

    backend = ijson.get_backend(ijson.backend)
    p = Path(path)
    too_deep = False
    index = 0
    with open_capped(p, MAX_DATASET_BYTES, "a dataset") as capped:
        capped.skip_bom()
        f = _StreamGuard(capped)
        out = sendable_list()
        send = backend.parse_basecoro(backend.items_basecoro(out, "item")).send
        depth = 0
        keys: list[set[str]] = []  # per open object: its keys so far (a repeat is refused)
        try:
            for event, value in ijson.basic_parse(f, use_float=True):
                if event == "start_map" or event == "start_array":
                    depth += 1
                    if depth > MAX_DEPTH:
                        too_deep = True
                        break
                    if event == "start_map":
                        keys.append(set())
                elif event == "end_map" or event == "end_array":
                    depth -= 1
                    if event == "end_map":
                        keys.pop()
                elif (event == "string" or event == "map_key") and \
                        len(value) > MAX_STRING_CHARS:
                    too_deep = True
                    break
                if event == "map_key":
                    if value in keys[-1]:
                        too_deep = True  # located below, as a limit is
                        break
                    keys[-1].add(value)
                send((event, value))
                if out:
                    items = list(out)
                    out.clear()
                    index += len(items)
                    yield from items
        except ijson.JSONError as exc:
            if not f.tripped and not f.reason:
                raise InputError(p, FILE_RECORD, ROOT_FIELD, f"not valid JSON: {exc}"
                                 ) from None
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(p, FILE_RECORD, ROOT_FIELD, f"cannot read file: {exc}") from exc
        if f.reason:
            raise _located(p, f.stopped_at, f.reason, id_key)
        if f.tripped:
            raise InputError(p, f"index {index}", ROOT_FIELD,
                             f"a string (or value) longer than {MAX_STRING_CHARS} characters, "
                             "with no closing '\"' yet; refusing to read further")
    if too_deep:
        locate_limit_violation(p, id_key)
        raise InputError(p, FILE_RECORD, ROOT_FIELD,  # pragma: no cover - located above
                         f"nested deeper than {MAX_DEPTH} levels, a string too long or a "
                         "key given twice")


def _located(path: Path, at: int, reason: str, id_key: str | None) -> InputError:
    """:func:`_text_error` for ``reason`` at byte ``at`` of the file ``path`` (after a byte
    order mark), its first ``at`` bytes streamed again to name the record and field."""
    with open_capped(path, MAX_DATASET_BYTES, "a dataset") as f:
        f.skip_bom()
        return _text_error(path, f, at, reason, id_key)


def _record_label(top_is_list: bool, key: str | int, rid: str | None, id_key: str | None
                  ) -> str:
    if not top_is_list:
        return f"{id_key}={key}" if id_key else f"key {key!r}"
    if rid:
        return f"{id_key}={rid} (index {key})"
    return f"index {key}"


class _Tracker:
    """Where a stream of ``ijson`` basic parse events is, and the first limit it breaks."""

    def __init__(self, id_key: str | None, *, unique_keys: bool = False) -> None:
        self.id_key = id_key
        self.unique_keys = unique_keys  # a key given twice in one object breaks a limit
        self.stack: list[list[Any]] = []  # per open container: [is_list, current index/key]
        self.keys: list[set[str]] = []  # per open object: the keys seen so far
        self.rid: str | None = None  # the id of the current top-level record
        self.last = ""  # the last event taken

    def feed(self, event: str, value: Any) -> str:
        """Take one event; the reason it breaks a limit, or ``""``."""
        self.last = event
        stack = self.stack
        if event == "end_map" or event == "end_array":
            stack.pop()
            if event == "end_map":
                self.keys.pop()
            if len(stack) == 1:
                self.rid = None
            return ""
        if event == "map_key":
            if len(value) > MAX_STRING_CHARS:
                return f"a key of {len(value)} characters (limit {MAX_STRING_CHARS})"
            stack[-1][1] = value
            if self.unique_keys:
                if value in self.keys[-1]:
                    return duplicate_key_reason(value)
                self.keys[-1].add(value)
            return ""
        if stack and stack[-1][0]:
            stack[-1][1] += 1
        if event == "start_map" or event == "start_array":
            if len(stack) >= MAX_DEPTH:
                return (f"nested deeper than {MAX_DEPTH} levels (real files nest fewer than "
                        "10); refusing to parse further")
            stack.append([event == "start_array", -1])
            if event == "start_map":
                self.keys.append(set())
        elif event == "string":
            if len(value) > MAX_STRING_CHARS:
                return f"a string of {len(value)} characters (limit {MAX_STRING_CHARS})"
            if (self.id_key and len(stack) == 2 and stack[0][0] and not stack[1][0]
                    and stack[1][1] == self.id_key):
                self.rid = value
        return ""

    def where(self, record: str | None, pending: bool = False) -> tuple[str, str]:
        """``(record, field)`` of the current value; ``pending``: of the value about to
        start (one past the current list index). ``record`` given (a line): it is the
        record and the whole path the field."""
        parts = [list(frame) for frame in self.stack]
        key = pending and bool(parts) and not parts[-1][0] and self.last != "map_key"
        if key:  # inside an object where a key is due: the pending string is a key of it
            parts = parts[:-1]
        elif pending and parts and parts[-1][0]:
            parts[-1][1] += 1
        if record is None and not parts:
            return FILE_RECORD, "(a key)" if key else ROOT_FIELD
        if record is None:
            record = _record_label(parts[0][0], parts[0][1], self.rid, self.id_key)
            parts = parts[1:]
        field = format_field([part for _, part in parts])
        if len(field) > MAX_FIELD_CHARS:
            field = field[:MAX_FIELD_CHARS] + f"... ({len(parts)} levels)"
        if key:  # a key of the record itself, or of the object at ``field``
            return record, f"{field} (a key)" if parts else "(a key)"
        return record, field


def _position(prefix: bytes | Any, id_key: str | None, record: str | None = None
              ) -> tuple[str, str]:
    """``(record, field)`` of the value that starts right after ``prefix`` (a file's start,
    cut inside it; bytes or a binary stream of them): where the parse of the prefix stops.
    Cut inside an object's key, the field is that object's, with `` (a key)``. ``record`` (a
    line): the record named, the whole path being the field."""
    ijson = _ijson()
    tracker = _Tracker(id_key)
    stream = io.BytesIO(prefix) if isinstance(prefix, (bytes, bytearray)) else prefix
    try:
        for event, value in ijson.basic_parse(stream, use_float=True):
            if tracker.feed(event, value):
                break
    except (ijson.JSONError, UnicodeDecodeError):
        pass  # the cut: expected
    return tracker.where(record, pending=True)


class _Prefix:
    """The first ``n`` bytes of a binary stream or of bytes in memory (no copy), as a
    stream: what :func:`_position` parses to name where an offset lies."""

    def __init__(self, source: Any, n: int) -> None:
        self._view = memoryview(source)[:n] if isinstance(source, (bytes, bytearray)) \
            else None
        self._f = source
        self._left = n
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        size = self._left if size is None or size < 0 else min(size, self._left)
        if self._view is not None:
            out = bytes(self._view[self._pos:self._pos + size])
        else:
            out = self._f.read(size)
        self._pos += len(out)
        self._left -= len(out)
        return out


def _text_error(path: str | Path, source: Any, at: int, reason: str, id_key: str | None,
                record: str | None = None) -> InputError:
    """The one error for a problem (``reason``) at byte ``at`` of the JSON text ``source``
    (bytes, or a binary stream from the text's start; ``record``: a line or value, else a
    whole file), naming the record and field it lies in: the text before it is parsed again
    (:func:`_position`), the same whoever found it."""
    where_record, field = _position(_Prefix(source, at), id_key, record)
    of = f" of {record}" if record is not None else ""
    return InputError(path, where_record, field, reason.format(at=f"at byte {at}{of}"))


def _surrogate_reason(escape: str) -> str:
    return (f"a lone surrogate escape {escape} {{at}}: not a character (one beyond U+FFFF is "
            "written as a pair, such as \\ud83d\\ude00)")


def _utf8_reason(reason: str) -> str:
    return f"not valid UTF-8 {{at}} ({reason})"


def json_text(path: str | Path, data: bytes | str, id_key: str | None = None,
              record: str | None = None) -> str:
    """The JSON text ``data`` of ``path`` (bytes: UTF-8, a leading byte order mark dropped;
    or text), after the checks every loader makes before a parser sees the text: no lone
    surrogate escape (:func:`lone_surrogate`) and valid UTF-8 (a surrogate encoded in UTF-8
    is not). The first problem -- a lone surrogate escape before the first byte that is not
    UTF-8, else that byte -- is one :class:`InputError` naming its record and field
    (``id_key`` as for :func:`read_json`; ``record``: a line or value named so), the same
    error :func:`iter_list_items` gives for the same file."""
    bom = UTF8_BOM if isinstance(data, bytes) else "\ufeff"
    if data.startswith(bom):  # type: ignore[arg-type]
        data = data[len(bom):]
    at, _ = lone_surrogate(data)

    def lone(raw: bytes, at: int) -> InputError:  # ``at``: a byte offset into ``raw``
        escape = raw[at:at + ESCAPE_LEN].decode("ascii")
        return _text_error(path, raw, at, _surrogate_reason(escape), id_key, record)

    if isinstance(data, str):
        if at >= 0:
            raise lone(data.encode("utf-8", "surrogatepass"),
                       len(data[:at].encode("utf-8", "surrogatepass")))
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if 0 <= at < exc.start:
            raise lone(data, at) from None
        raise _text_error(path, data, exc.start, _utf8_reason(exc.reason), id_key,
                          record) from None
    if at >= 0:
        raise lone(data, at)
    return text


def locate_limit_violation(path: str | Path, id_key: str | None = None, *,
                           source: str | bytes | None = None, record: str | None = None
                           ) -> None:
    """Stream ``path`` (or ``source``, its text already in memory) with full path tracking and
    raise the :class:`InputError` for its first value (in file order) nested deeper than
    :data:`MAX_DEPTH`, a string longer than :data:`MAX_STRING_CHARS` or a key given twice in
    one object (:func:`duplicate_key_reason`, the field naming the key); return when there
    is none (or on a syntax error before one). ``record`` (a line of JSON lines): the record
    every error names, the whole path being the field.

    The slow path of :func:`iter_list_items` and :func:`read_json`: it runs only once a
    violation is known, so the common path does not pay for tracking field paths. Memory
    stays bounded by the depth limit (it stops at the first violation).
    """
    ijson = _ijson()
    p = Path(path)
    tracker = _Tracker(id_key, unique_keys=True)
    reason = ""
    try:
        with _source_stream(p, source) as f:
            for event, value in ijson.basic_parse(f, use_float=True):
                reason = tracker.feed(event, value)
                if reason:
                    break
    except (ijson.JSONError, OSError, EOFError, zlib.error, DataError):
        return
    if reason:
        where_record, field = tracker.where(record)
        raise InputError(p, where_record, field, reason)


@contextmanager
def _source_stream(path: Path, source: str | bytes | None) -> Iterator[Any]:
    """A binary stream of ``source`` (text in memory) or else of the file ``path``."""
    if source is None:
        with open_capped(path, MAX_DATASET_BYTES) as f:
            f.skip_bom()
            yield f
        return
    raw = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
    yield io.BytesIO(raw)


def check_limits(path: str | Path, data: Any, id_key: str | None = None, *,
                 source: str | bytes | None = None, record: str | None = None) -> None:
    """Raise the :class:`InputError` of :func:`locate_limit_violation` when the parsed
    ``data`` of ``path`` (``source``: its text, when in memory; ``record``: a line) nests
    deeper than :data:`MAX_DEPTH` or holds a string longer than :data:`MAX_STRING_CHARS`.
    Iterative (no recursion), so it is safe to run before schema validation, which recurses
    once per level."""
    if not _breaks_limits(data):
        return
    locate_limit_violation(path, id_key, source=source, record=record)
    raise InputError(path, record or FILE_RECORD, ROOT_FIELD,  # pragma: no cover - located
                     f"nested deeper than {MAX_DEPTH} levels or a string too long")


def _breaks_limits(data: Any) -> bool:
    """Whether ``data`` nests deeper than :data:`MAX_DEPTH` or holds a longer string than
    :data:`MAX_STRING_CHARS` (iterative)."""
    if isinstance(data, str):
        return len(data) > MAX_STRING_CHARS
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, dict):
            if depth > MAX_DEPTH or any(len(k) > MAX_STRING_CHARS for k in obj):
                return True
            children: Iterable[Any] = obj.values()
        elif isinstance(obj, list):
            if depth > MAX_DEPTH:
                return True
            children = obj
        else:
            continue
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
            elif isinstance(child, str) and len(child) > MAX_STRING_CHARS:
                return True
    return False


def load_schema(name: str) -> dict[str, Any]:
    """Load ``engram_eval/schemas/<name>`` (package data) as a dict (the one schema loader:
    dataset record schemas and the sidecar schema alike)."""
    text = (resources.files("engram_eval") / "schemas" / name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def record_validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    """A validator for one record: the ``items`` sub-schema of a top-level array schema.

    The record schemas are written without ``$ref`` so the sub-schema stands alone.
    """
    item_schema = schema["items"]
    Draft202012Validator.check_schema(item_schema)
    return Draft202012Validator(item_schema)


def format_field(parts: Iterable[str | int]) -> str:
    """``['haystack_sessions', 3, 2, 'content']`` -> ``'haystack_sessions[3][2].content'``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(record)"


def first_error(validator: Draft202012Validator, instance: Any) -> ValidationError | None:
    """The first schema error of ``instance`` in document order (None when valid).

    Errors are ordered by their path, so the reported field is the earliest offending one;
    within one location the most relevant error (jsonschema's ``best_match``) wins.
    """
    errors = list(validator.iter_errors(instance))
    if not errors:
        return None
    errors.sort(key=lambda e: _path_key(e.absolute_path))
    first_path = _path_key(errors[0].absolute_path)
    same = [e for e in errors if _path_key(e.absolute_path) == first_path]
    best = best_match(same)
    return best if best is not None else errors[0]


def _path_key(path: Iterable[str | int]) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in path)


def schema_error_to_data_error(path: str | Path, record: str, error: ValidationError) -> DataError:
    """One readable :class:`DataError` for a jsonschema error inside ``record``.

    For a missing property the field names the missing property itself.
    """
    parts: list[str | int] = list(error.absolute_path)
    reason = error.message
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [k for k in error.validator_value if k not in error.instance]
        if missing:
            parts.append(missing[0])
            reason = "required field is missing"
    elif error.validator == "type":
        reason = f"expected {_type_words(error.validator_value)}, got {_json_type(error.instance)}"
    if len(reason) > 300:
        reason = reason[:297] + "..."
    return DataError(path, record, format_field(parts), reason)


def _type_words(value: Any) -> str:
    if isinstance(value, str):
        return value
    return " or ".join(str(v) for v in value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
