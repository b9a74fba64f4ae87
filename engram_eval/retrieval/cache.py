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
"""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import struct
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.errors import CacheError

#: The database file of the current schema (entries with a checksum). Older files in the
#: same directory (``cache.sqlite3``, no checksums) are never read or changed.
CACHE_FILE = "cache.v2.sqlite3"
SCHEMA_VERSION = 2


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


class VectorCache:
    """Maps key -> float32 vector and key -> float score.

    Safe for several processes (and several workers) sharing one directory: the database
    runs in WAL mode (readers never block the writer, nor the writer readers), each write
    is one ``BEGIN IMMEDIATE`` transaction (the write lock is taken up front, so two
    writers never deadlock upgrading read locks), a busy timeout makes a writer wait for
    another's transaction, and a statement still locked after that is retried with
    backoff. Values are content-addressed (``INSERT OR IGNORE``: the first writer of a key
    wins, and a key always maps to the same value), so racing writers cannot disagree.
    One connection per process: open a new ``VectorCache`` in each worker."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / CACHE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S,
                                   isolation_level=None)  # transactions are explicit
        self._db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        _retry(self._db.execute, "PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never torn
        self._write([("CREATE TABLE IF NOT EXISTS vec (k TEXT PRIMARY KEY, dim INTEGER, v BLOB, "
                      "sum TEXT NOT NULL)", None),
                     ("CREATE TABLE IF NOT EXISTS score (k TEXT PRIMARY KEY, v REAL, "
                      "sum TEXT NOT NULL)", None),
                     (f"PRAGMA user_version={SCHEMA_VERSION}", None)])

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

        _retry(txn)

    def _fetch(self, sql: str, params: list[str]) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, params).fetchall()

    def get_vectors(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        keys = list(keys)
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = "SELECT k, dim, v, sum FROM vec WHERE k IN ({})".format(
                ",".join("?" * len(chunk)))
            for k, dim, blob, stored in _retry(self._fetch, q, chunk):
                if not isinstance(blob, bytes) or not isinstance(dim, int) \
                        or stored != _vector_sum(dim, blob) or len(blob) != 4 * dim:
                    raise self._corrupt(k, "vector")
                out[k] = np.frombuffer(blob, dtype=np.float32)
        return out

    def _corrupt(self, key: str, what: str) -> CacheError:
        return CacheError(self.path, key, (
            f"{self.path}: cache entry {key} ({what}) does not match its checksum: the stored "
            "value was changed after it was written. Run with --no-use-cache to compute "
            f"without the cache, or delete the cache directory {self.path.parent} (it is "
            "rebuilt as needed)."))

    def put_vectors(self, items: Mapping[str, np.ndarray]) -> None:
        rows = []
        for k, v in items.items():
            blob = np.ascontiguousarray(v, dtype=np.float32).tobytes()
            rows.append((k, int(v.shape[0]), blob, _vector_sum(int(v.shape[0]), blob)))
        if rows:
            self._write([("INSERT OR IGNORE INTO vec VALUES (?, ?, ?, ?)", rows)])

    def get_scores(self, keys: Iterable[str]) -> dict[str, float]:
        keys = list(keys)
        out: dict[str, float] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = "SELECT k, v, sum FROM score WHERE k IN ({})".format(",".join("?" * len(chunk)))
            for k, v, stored in _retry(self._fetch, q, chunk):
                if not isinstance(v, float) or stored != _score_sum(v):
                    raise self._corrupt(k, "score")
                out[k] = v
        return out

    def put_scores(self, items: Mapping[str, float]) -> None:
        rows = [(k, float(v), _score_sum(float(v))) for k, v in items.items()]
        if rows:
            self._write([("INSERT OR IGNORE INTO score VALUES (?, ?, ?)", rows)])

    def close(self) -> None:
        self._db.close()
