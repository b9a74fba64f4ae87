"""A content-addressed on-disk cache for embeddings and cross-encoder scores (SQLite).

Keys are sha256 digests of (model files hash, precision, backend, versions of the
libraries that compute the vectors, text), so a cached vector can only be reused for
exactly the same model weights, inference code and input text. The cache
changes speed, never results: a run records whether it was used but the cache is not
part of the run fingerprint. Writes are committed per batch; a crash loses at most the
batch being written, and SQLite keeps the file consistent.

Every entry carries a checksum of its value (blake2b of the stored bytes), checked on each
read: a value changed in the database afterwards is a :class:`~engram_eval.errors.CacheError`
naming the cache file and the key (``--no-use-cache`` goes around the cache; deleting the
cache directory rebuilds it), never a silently different ranking. The schema is versioned by
file name (:data:`CACHE_FILE`): a cache written before checksums (``cache.sqlite3``) is left
as it is and not read.

Every value read is also validated (:func:`vector_problem`, :func:`score_problem`): a
vector must be finite, of non-zero norm and of the expected dimension (the model's, when the
caller knows it, else the one most vectors of the same read share), a score finite. An
entry that fails (its checksum right: it was stored that way, by a degenerate model output
or forged) is never used: it is treated as a miss, with one warning naming the cache file
and the key(s), recomputed by the model and overwritten by the next write of that key. That
is what a careful user wants: the run goes on and its results are exactly those without the
cache, whereas a checksum mismatch (the file changed behind the cache's back, so any entry
may be wrong) stops the run. Invalid values are never written (a model's degenerate output
is used by the run as it is, just not cached).

A damaged database (not SQLite, truncated, tables of another layout, a directory where the
file goes) is one :class:`~engram_eval.errors.CacheError` naming the file and saying how to
go on (delete it, run with ``--no-use-cache``, or choose another ``--cache-dir``), never a
traceback.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import random
import sqlite3
import struct
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.errors import CacheError
from engram_eval.io import database_problem, describe_os_error

_log = logging.getLogger(__name__)

#: The database file of the current schema (entries with a checksum). Older files in the
#: same directory (``cache.sqlite3``, no checksums) are never read or changed.
CACHE_FILE = "cache.v2.sqlite3"
SCHEMA_VERSION = 2
#: The tables of the current schema: (column name, primary-key position) in order.
TABLES: dict[str, tuple[tuple[str, int], ...]] = {
    "vec": (("k", 1), ("dim", 0), ("v", 0), ("sum", 0)),
    "score": (("k", 1), ("v", 0), ("sum", 0)),
}
#: How to go on past a damaged cache database (said by every such error).
DAMAGED_HINT = ("delete it (the cache is rebuilt as needed), run with --no-use-cache, or "
                "choose another --cache-dir")


def default_cache_dir() -> Path:
    base = os.environ.get("ENGRAM_EVAL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "engram-eval"
    )
    return Path(base)


# The distributions whose code turns text into vectors or scores, per backend.
BACKEND_LIBRARIES: dict[str, tuple[str, ...]] = {
    "sentence_transformers": ("torch", "transformers", "sentence-transformers", "tokenizers"),
    "flag_embedding": ("torch", "transformers", "FlagEmbedding", "tokenizers"),
    "onnx": ("onnxruntime", "optimum", "transformers", "sentence-transformers", "tokenizers"),
}


def library_versions(backend: str) -> str:
    """``name==version`` of every library behind ``backend`` (read from package metadata,
    nothing imported), part of every cache key: an upgrade that changes the numbers can
    never be served stale vectors."""
    from importlib import metadata

    names = BACKEND_LIBRARIES.get(backend.split(":")[0], ("torch", "transformers"))
    out = []
    for n in names:
        try:
            out.append(f"{n}=={metadata.version(n)}")
        except metadata.PackageNotFoundError:
            out.append(f"{n}==absent")
    return ";".join(out)


def content_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


#: How long one statement waits for another process's write lock, and how often a
#: statement that still finds the database locked (or busy) is retried.
BUSY_TIMEOUT_S = 60.0
LOCK_RETRIES = 8


def _retry(fn: Any, *args: Any) -> Any:
    """Run ``fn(*args)``, retrying with backoff while SQLite reports a locked or busy
    database (beyond what the busy timeout already absorbed)."""
    delay = 0.05
    for attempt in range(LOCK_RETRIES + 1):
        try:
            return fn(*args)
        except sqlite3.OperationalError as e:
            msg = str(e).lower()
            if attempt == LOCK_RETRIES or ("locked" not in msg and "busy" not in msg):
                raise
            time.sleep(delay + random.random() * delay)
            delay = min(delay * 2, 2.0)
    return None  # pragma: no cover


def _vector_sum(dim: int, blob: bytes) -> str:
    """Checksum of a stored vector: blake2b over its dimension and float32 bytes."""
    return hashlib.blake2b(struct.pack("<q", dim) + blob, digest_size=16).hexdigest()


def _score_sum(value: float) -> str:
    """Checksum of a stored score: blake2b over its float64 bytes."""
    return hashlib.blake2b(struct.pack("<d", value), digest_size=16).hexdigest()


def vector_problem(vec: np.ndarray, dim: int | None = None) -> str | None:
    """Why ``vec`` is not a usable embedding (wrong dimension, not finite, zero norm), or
    None. ``dim``: the expected dimension (None: any)."""
    n = int(vec.shape[0]) if vec.ndim == 1 else -1
    if n < 1 or (dim is not None and n != dim):
        return f"dimension {n}" + (f", expected {dim}" if dim is not None else "")
    if not bool(np.all(np.isfinite(vec))):
        return "not finite (NaN or infinity)"
    if not float(np.linalg.norm(vec.astype(np.float64))) > 0.0:
        return "zero norm"
    return None


def score_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable score (not a number, not finite), or None."""
    if value is None:
        return "not a number (NULL: SQLite stores NaN so)"
    if not isinstance(value, float) or not math.isfinite(value):
        return f"not finite ({value!r})"
    return None


def _expected_dim(dims: list[int]) -> int | None:
    """The dimension most of ``dims`` share; -1 when two dimensions are equally common (none
    can be trusted); None for no vectors."""
    top = Counter(dims).most_common(2)
    if not top:
        return None
    if len(top) > 1 and top[0][1] == top[1][1]:
        return -1
    return top[0][0]


class VectorCache:
    """Maps key -> float32 vector and key -> float score.

    Safe for several processes (and several workers) sharing one directory: the database
    runs in WAL mode (readers never block the writer, nor the writer readers), each write
    is one ``BEGIN IMMEDIATE`` transaction (the write lock is taken up front, so two
    writers never deadlock upgrading read locks), a busy timeout makes a writer wait for
    another's transaction, and a statement still locked after that is retried with
    backoff. Values are content-addressed (``INSERT OR IGNORE``: the first writer of a key
    wins, and a key always maps to the same value), so racing writers cannot disagree.
    One connection per process: open a new ``VectorCache`` in each worker.

    Reads validate every value (module docstring): an invalid entry is left out of the
    result (a miss, warned about) and the key is remembered, so the caller's recomputed
    value replaces it on the next ``put_*``."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / CACHE_FILE
        self._stale: dict[str, set[str]] = {"vec": set(), "score": set()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheError(self.path, "", (
                f"cannot create the cache directory {self.path.parent}: "
                f"{describe_os_error(e, self.path)}; run with --no-use-cache or choose "
                "another --cache-dir")) from None
        problem = database_problem(self.path)
        if problem is not None:  # a FIFO would hang SQLite, a link lead it elsewhere
            raise CacheError(self.path, "", (
                f"{problem}; the cache database and the files beside it must be regular "
                "files or absent: delete it, run with --no-use-cache, or choose another "
                "--cache-dir"))
        with self._guard():
            self._db = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S,
                                       isolation_level=None)  # transactions are explicit
        try:
            self._open()
        except BaseException:
            self._db.close()
            raise

    def _open(self) -> None:
        """Settings, tables (created when absent) and the check of their layout."""
        with self._guard():
            self._db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            _retry(self._db.execute, "PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints
            self._write([("CREATE TABLE IF NOT EXISTS vec (k TEXT PRIMARY KEY, dim INTEGER, "
                          "v BLOB, sum TEXT NOT NULL)", None),
                         ("CREATE TABLE IF NOT EXISTS score (k TEXT PRIMARY KEY, v REAL, "
                          "sum TEXT NOT NULL)", None),
                         (f"PRAGMA user_version={SCHEMA_VERSION}", None)])
            self._check_layout()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """An SQLite failure inside the block is one CacheError naming the file: a database
        still locked after every retry, or a damaged one (:data:`DAMAGED_HINT`)."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            msg = str(e).lower()
            if isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg):
                raise CacheError(self.path, "", (
                    f"{self.path}: the cache database stayed locked by another process ({e}); "
                    "run again when it is done, or run with --no-use-cache")) from None
            raise CacheError(self.path, "", (
                f"{self.path}: the cache database is damaged or not an engram-eval cache "
                f"({e}); {DAMAGED_HINT}")) from None

    def _check_layout(self) -> None:
        """Refuse tables of another layout (same names, other columns) before any read."""
        for table, want in TABLES.items():
            got = tuple((r[1], r[5]) for r in self._db.execute(f"PRAGMA table_info({table})"))
            if got != want:
                cols = ", ".join(c for c, _ in got) or "none"
                raise CacheError(self.path, "", (
                    f"{self.path}: the cache database has a table {table!r} of another layout "
                    f"(columns {cols}; expected {', '.join(c for c, _ in want)}): not an "
                    f"engram-eval cache of schema {SCHEMA_VERSION}; {DAMAGED_HINT}"))

    def _write(self, statements: list[tuple[str, list[tuple[Any, ...]] | None]]) -> None:
        def txn() -> None:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, rows in statements:
                    if rows is None:
                        self._db.execute(sql)
                    else:
                        self._db.executemany(sql, rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

        with self._guard():
            _retry(txn)

    def _fetch(self, sql: str, params: list[str]) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, params).fetchall()

    def _select(self, sql: str, keys: list[str]) -> Iterator[tuple[Any, ...]]:
        """Rows of ``sql`` (``... WHERE k IN ({})``) for ``keys``, 500 keys a statement."""
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            with self._guard():
                rows = _retry(self._fetch, sql.format(",".join("?" * len(chunk))), chunk)
            yield from rows

    def get_vectors(self, keys: Iterable[str], dim: int | None = None) -> dict[str, np.ndarray]:
        """The cached vectors of ``keys`` (absent keys left out). A changed entry (checksum)
        is a CacheError; an invalid one -- not finite, zero norm, a dimension other than
        ``dim`` (None: the one most vectors of this read share) -- is left out as a miss,
        with a warning (:meth:`reject`)."""
        read: dict[str, np.ndarray] = {}
        for k, d, blob, stored in self._select("SELECT k, dim, v, sum FROM vec WHERE k IN ({})",
                                               list(keys)):
            if not isinstance(blob, bytes) or not isinstance(d, int) \
                    or stored != _vector_sum(d, blob) or len(blob) != 4 * d:
                raise self._corrupt(k, "vector")
            read[k] = np.frombuffer(blob, dtype=np.float32)
        want = dim if dim is not None else _expected_dim([v.shape[0] for v in read.values()])
        bad: dict[str, str] = {}
        for k, v in read.items():
            why = ("dimension disagrees with the other vectors read with it"
                   if want == -1 else vector_problem(v, want))
            if why is not None:
                bad[k] = why
        self.reject("vec", bad)
        return {k: v for k, v in read.items() if k not in bad}

    def reject(self, table: str, problems: Mapping[str, str]) -> None:
        """Treat the entries ``problems`` (key -> what is wrong) of ``table`` (``vec`` or
        ``score``) as misses: one warning naming the cache file and the keys; the next
        ``put_*`` of those keys overwrites them."""
        if not problems:
            return
        self._stale[table].update(problems)
        what = "vector" if table == "vec" else "score"
        shown = "; ".join(f"{k} ({why})" for k, why in list(problems.items())[:3])
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        _log.warning("%s: %d cached %s(s) unusable, treated as missing (recomputed and "
                     "overwritten): %s%s", self.path, len(problems), what, shown, more)

    def _put(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        """Insert ``rows`` (key first): a key already there is kept (the first writer wins)
        unless this process rejected it on reading, then it is replaced."""
        stale = self._stale[table]
        marks = ",".join("?" * len(TABLES[table]))
        fresh = [r for r in rows if r[0] not in stale]
        again = [r for r in rows if r[0] in stale]
        statements: list[tuple[str, list[tuple[Any, ...]] | None]] = []
        if fresh:
            statements.append((f"INSERT OR IGNORE INTO {table} VALUES ({marks})", fresh))
        if again:
            statements.append((f"INSERT OR REPLACE INTO {table} VALUES ({marks})", again))
        if statements:
            self._write(statements)
            stale.difference_update(r[0] for r in again)

    def _corrupt(self, key: str, what: str) -> CacheError:
        return CacheError(self.path, key, (
            f"{self.path}: cache entry {key} ({what}) does not match its checksum: the stored "
            "value was changed after it was written. Run with --no-use-cache to compute "
            f"without the cache, or delete the cache directory {self.path.parent} (it is "
            "rebuilt as needed)."))

    def put_vectors(self, items: Mapping[str, np.ndarray]) -> None:
        """Store ``items``; an invalid vector (:func:`vector_problem`) is not stored."""
        rows = []
        for k, v in items.items():
            v = np.ascontiguousarray(v, dtype=np.float32)
            if vector_problem(v) is None:
                blob = v.tobytes()
                rows.append((k, int(v.shape[0]), blob, _vector_sum(int(v.shape[0]), blob)))
        self._put("vec", rows)

    def get_scores(self, keys: Iterable[str]) -> dict[str, float]:
        """The cached scores of ``keys`` (absent keys left out). A changed entry (checksum)
        is a CacheError; a stored value that is not a finite number is left out as a miss,
        with a warning (:meth:`reject`)."""
        out: dict[str, float] = {}
        bad: dict[str, str] = {}
        for k, v, stored in self._select("SELECT k, v, sum FROM score WHERE k IN ({})",
                                         list(keys)):
            if v is not None and (not isinstance(v, float) or stored != _score_sum(v)):
                raise self._corrupt(k, "score")
            why = score_problem(v)  # NULL (a NaN stored), infinity
            if why is None and isinstance(v, float):
                out[k] = v
            else:
                bad[k] = why or "not a number"
        self.reject("score", bad)
        return out

    def put_scores(self, items: Mapping[str, float]) -> None:
        """Store ``items``; a score that is not finite is not stored."""
        rows = [(k, float(v), _score_sum(float(v))) for k, v in items.items()
                if score_problem(float(v)) is None]
        self._put("score", rows)

    def close(self) -> None:
        self._db.close()
