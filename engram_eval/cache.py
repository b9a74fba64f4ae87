"""A content-addressed on-disk cache for embeddings and cross-encoder scores (SQLite).

Keys are sha256 digests of (model files hash, precision, backend, text), so a cached
vector can only be reused for exactly the same model weights and input text. The cache
changes speed, never results: a run records whether it was used but the cache is not
part of the run fingerprint. Writes are committed per batch; a crash loses at most the
batch being written, and SQLite keeps the file consistent.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np


def default_cache_dir() -> Path:
    base = os.environ.get("ENGRAM_EVAL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "engram-eval"
    )
    return Path(base)


def content_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


class VectorCache:
    """Maps key -> float32 vector and key -> float score. Safe for concurrent readers;
    concurrent writers are serialised by SQLite."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / "cache.sqlite3"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (k TEXT PRIMARY KEY, dim INTEGER, v BLOB)")
        self._db.execute("CREATE TABLE IF NOT EXISTS score (k TEXT PRIMARY KEY, v REAL)")
        self._db.commit()

    def get_vectors(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        keys = list(keys)
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = "SELECT k, dim, v FROM vec WHERE k IN ({})".format(",".join("?" * len(chunk)))
            for k, dim, blob in self._db.execute(q, chunk):
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape[0] == dim:
                    out[k] = vec
        return out

    def put_vectors(self, items: Mapping[str, np.ndarray]) -> None:
        rows = [(k, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes())
                for k, v in items.items()]
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?, ?)", rows)

    def get_scores(self, keys: Iterable[str]) -> dict[str, float]:
        keys = list(keys)
        out: dict[str, float] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = "SELECT k, v FROM score WHERE k IN ({})".format(",".join("?" * len(chunk)))
            out.update({k: float(v) for k, v in self._db.execute(q, chunk)})
        return out

    def put_scores(self, items: Mapping[str, float]) -> None:
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO score VALUES (?, ?)",
                                 [(k, float(v)) for k, v in items.items()])

    def close(self) -> None:
        self._db.close()
