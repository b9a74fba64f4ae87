"""A persisted memory store: SQLite (standard library) holding records and their vectors.

One database file per store. Tables:

* ``meta(key, value)`` -- format version, the embedding model's files hash and name, the
  piece settings and the vector dimension (a store is searched only with the same model
  files and piece settings it was written with);
* ``memories(seq, id, text, date)`` -- one row per memory, ``seq`` its insertion order
  (the tie-break of every ranking), ``id`` unique;
* ``pieces(memory_seq, piece_index, text, vector)`` -- the dense pieces of each memory
  (cut exactly as the benchmark cuts user text, :func:`engram_eval.retrieval.dense.user_pieces`)
  with their float32 vectors as little-endian bytes.

Memories are written through :meth:`MemoryStore.add` (vectors computed at write time) and
read back from the database by :meth:`MemoryStore.search`; nothing is kept in a dict
between calls, so a closed and reopened store answers identically.

The store never imports :mod:`engram_eval.production.search` (which imports the store's
:class:`Memory`): it uses the engine it is given through :class:`StoreEngine` only, and
:meth:`MemoryStore.search` hands the stored memories, pieces and vectors to the engine's
``search``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engram_eval.errors import DataError, ProvenanceError

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Memory:
    """One stored memory: a short fact or a long document, with an optional date."""

    id: str
    text: str
    date: str = ""


class StoreEngine(Protocol):
    """What a store needs from its engine (:class:`engram_eval.production.search.Engine`):
    the settings and embedding model it writes into ``meta``, the piece cutter and encoder
    used at write time, and the gated search over what the store holds."""

    @property
    def settings(self) -> Any: ...

    @property
    def embedding_ref(self) -> Any: ...

    def pieces(self, memories: Sequence[Memory]) -> list[tuple[int, str]]: ...

    def encoder(self) -> Any: ...

    def search(self, query: str, *, now: str, memories: Sequence[Memory],
               pieces: Sequence[tuple[int, str]], vectors: np.ndarray,
               limit: int | None = None, min_confidence: float | None = None) -> Any: ...


class MemoryStore:
    """See the module docstring. Use :meth:`create` for a new store, :meth:`open` to reopen."""

    def __init__(self, path: Path, engine: StoreEngine, conn: sqlite3.Connection) -> None:
        self.path = path
        self.engine = engine
        self._conn: sqlite3.Connection | None = conn

    # -- lifecycle ------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, engine: StoreEngine) -> MemoryStore:
        p = Path(path)
        if p.exists():
            raise ProvenanceError(f"{p}: a memory store already exists there")
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(p)
        with conn:
            conn.executescript(
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                "CREATE TABLE memories (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, date TEXT NOT NULL);"
                "CREATE TABLE pieces (memory_seq INTEGER NOT NULL REFERENCES memories(seq),"
                " piece_index INTEGER NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL,"
                " PRIMARY KEY (memory_seq, piece_index));")
            conn.executemany("INSERT INTO meta VALUES (?, ?)",
                             [(k, json.dumps(v)) for k, v in cls._meta_for(engine).items()])
        return cls(p, engine, conn)

    @classmethod
    def open(cls, path: str | Path, engine: StoreEngine) -> MemoryStore:
        p = Path(path)
        if not p.is_file():
            raise ProvenanceError(f"{p}: no memory store there")
        conn = sqlite3.connect(p)
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        want = cls._meta_for(engine)
        for k, v in want.items():
            if k != "dim" and meta.get(k) != v:
                conn.close()
                raise ProvenanceError(f"{p}: store was written with {k}={meta.get(k)!r}; this "
                                      f"search uses {v!r}")
        return cls(p, engine, conn)

    @staticmethod
    def _meta_for(engine: StoreEngine) -> dict[str, Any]:
        s = engine.settings
        return {"format_version": FORMAT_VERSION,
                "embedding_sha256": engine.embedding_ref.sha256,
                "embedding_model": s.embedding_model, "embedding_backend": s.embedding_backend,
                "embedding_precision": s.embedding_precision,
                "piece_words": s.dense_piece_words, "piece_overlap": s.dense_piece_overlap}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ProvenanceError(f"{self.path}: store is closed")
        return self._conn

    # -- writing --------------------------------------------------------------------
    def add(self, memories: Sequence[Memory]) -> int:
        """Add memories (ids must be new and unique); returns how many were added."""
        ids = [m.id for m in memories]
        seen: set[str] = set()
        for m in memories:
            if not m.id or m.id in seen:
                raise DataError(self.path, f"memory {m.id!r}", "id",
                                "memory ids must be non-empty and unique")
            seen.add(m.id)
        clash = [r[0] for r in self.conn.execute(
            f"SELECT id FROM memories WHERE id IN ({','.join('?' * len(ids))})", ids)] if ids else []
        if clash:
            raise DataError(self.path, f"memory {clash[0]!r}", "id", "already in the store")
        pieces = self.engine.pieces(memories)
        vectors = self.engine.encoder().encode([t for _, t in pieces]) if pieces else None
        with self.conn:
            seqs = []
            for m in memories:
                cur = self.conn.execute("INSERT INTO memories (id, text, date) VALUES (?, ?, ?)",
                                        (m.id, m.text, m.date or ""))
                seqs.append(cur.lastrowid)
            counters: dict[int, int] = {}
            for j, (mi, text) in enumerate(pieces):
                k = counters.get(mi, 0)
                counters[mi] = k + 1
                assert vectors is not None
                vec = np.ascontiguousarray(vectors[j], dtype="<f4")
                self.conn.execute("INSERT INTO pieces VALUES (?, ?, ?, ?)",
                                  (seqs[mi], k, text, vec.tobytes()))
            if vectors is not None and len(vectors):
                self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('dim', ?)",
                                  (json.dumps(int(vectors.shape[1])),))
        return len(memories)

    # -- reading --------------------------------------------------------------------
    def memories(self) -> list[Memory]:
        return [Memory(i, t, d) for i, t, d in
                self.conn.execute("SELECT id, text, date FROM memories ORDER BY seq")]

    def pieces(self) -> tuple[list[tuple[int, str]], np.ndarray]:
        """(memory position, piece text) in insertion order, and their vectors."""
        pos = {seq: i for i, (seq,) in enumerate(
            self.conn.execute("SELECT seq FROM memories ORDER BY seq"))}
        rows = list(self.conn.execute(
            "SELECT memory_seq, text, vector FROM pieces ORDER BY memory_seq, piece_index"))
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        vecs = np.stack([np.frombuffer(v, dtype="<f4") for _, _, v in rows]).astype(np.float32)
        return [(pos[s], t) for s, t, _ in rows], vecs

    def __len__(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0])

    def search(self, query: str, *, now: str = "", limit: int | None = None,
               min_confidence: float | None = None) -> Any:
        """Gated search over the stored memories: the engine's ``search``
        (:func:`engram_eval.production.search.search_memories`), returning its
        :class:`~engram_eval.production.search.SearchResponse`."""
        pieces, vectors = self.pieces()
        return self.engine.search(query, now=now, memories=self.memories(), pieces=pieces,
                                  vectors=vectors, limit=limit, min_confidence=min_confidence)
