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

Memories are checked before anything is written (:func:`check_memories`: a non-empty
unique id, text that is not empty or whitespace only, a date the temporal step can read or
none; :func:`memories_from` also refuses a key a memory does not have, naming it). A memory
file is added with :func:`add_to_store`: a store it created for the add is removed again
when the add fails (disk full, ...), and the error says exactly what was kept.

Memories are written through :meth:`MemoryStore.add` (vectors computed at write time) and
read back from the database by :meth:`MemoryStore.search`; nothing is kept in a dict
between calls, so a closed and reopened store answers identically.

A damaged store (not SQLite, truncated, a table or column missing, a ``meta`` value that is
not JSON or is missing, a piece pointing at no memory, a vector whose length is not the
recorded dimension, or one that is all zeros or holds NaN/inf) is refused on opening or
reading with one :class:`~engram_eval.errors.DataError` naming the file, the record and what
is wrong; vectors are checked on writing too, so such a store is never made.

The store never imports :mod:`engram_eval.production.search` (which imports the store's
:class:`Memory`): it uses the engine it is given through :class:`StoreEngine` only, and
:meth:`MemoryStore.search` hands the stored memories, pieces and vectors to the engine's
``search``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engram_eval.data._jsonio import parse_json_text
from engram_eval.data.dates import read_date
from engram_eval.errors import DataError, InputError, ProvenanceError, StorageError
from engram_eval.io import (
    SQLITE_SIDE_SUFFIXES,
    UnsafePathError,
    database_problem,
    make_parent,
    remove_contained,
    storage_errors,
)

FORMAT_VERSION = 1
#: The tables and columns a store must have.
TABLES = {"meta": ("key", "value"), "memories": ("seq", "id", "text", "date"),
          "pieces": ("memory_seq", "piece_index", "text", "vector")}
_DAMAGED = "the memory store is damaged; rebuild it"



def _meta_value(path: Path, key: str, value: Any) -> Any:
    """The JSON ``value`` of meta ``key`` in the store ``path``, parsed under the bounded
    reader's limits (:func:`engram_eval.data._jsonio.parse_json_text`); anything else is one
    :class:`DataError` naming the key and saying the store is damaged."""
    if not isinstance(value, (str, bytes)):
        raise DataError(path, f"meta {key!r}", "value", f"not JSON (a {type(value).__name__}); "
                        f"{_DAMAGED}")
    try:
        return parse_json_text(path, value, f"meta {key!r}")
    except InputError as e:
        field = "value" if e.field == "(root)" else f"value.{e.field}"
        raise DataError(path, f"meta {key!r}", field, f"{e.reason}; {_DAMAGED}") from None

@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """SQLite's own errors on a damaged file as one DataError naming the file."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        raise DataError(path, "(file)", "(database)",
                        f"not a readable memory store ({e}); {_DAMAGED}") from None


def check_vectors(path: Path, vectors: np.ndarray, names: Sequence[tuple[str, str]],
                  dim: int | None) -> None:
    """Refuse (DataError naming ``names[i]`` = (record, field)) a vector that is not of
    length ``dim``, holds NaN or infinite values, or is all zeros (it would match nothing,
    so a search would silently return nothing)."""
    if vectors.ndim != 2 or len(vectors) != len(names):
        raise DataError(path, "(pieces)", "vector", f"expected {len(names)} vectors, got an "
                        f"array of shape {vectors.shape}")
    if dim is not None and len(vectors) and vectors.shape[1] != dim:
        raise DataError(path, names[0][0], names[0][1], f"{vectors.shape[1]} values; the "
                        f"store's vectors have {dim}")
    finite = np.isfinite(vectors).all(axis=1)
    zero = ~vectors.any(axis=1)
    for i in np.flatnonzero(~finite | zero):
        record, field = names[int(i)]
        what = "holds NaN or infinite values" if not finite[i] else "is all zeros"
        raise DataError(path, record, field, f"the vector {what}; it would match nothing")


@dataclass(frozen=True)
class Memory:
    """One stored memory: a short fact or a long document, with an optional date."""

    id: str
    text: str
    date: str = ""


#: The keys a memory (a JSON object of a memory file) may have.
MEMORY_KEYS = ("id", "text", "date")


def check_memories(path: str | Path, memories: Sequence[Memory]) -> None:
    """Refuse, before anything is written, a memory that would be stored wrong: an empty or
    repeated id, text that is empty or whitespace only (it would be stored and never
    found), a date the temporal step cannot read (it would be silently ignored). One
    DataError naming ``path`` (the memory file, or the store), the memory and the field."""
    seen: set[str] = set()
    for m in memories:
        if not m.id or m.id in seen:
            raise DataError(path, f"memory {m.id!r}", "id",
                            "memory ids must be non-empty and unique")
        seen.add(m.id)
        if not m.text.strip():
            raise DataError(path, f"memory {m.id!r}", "text", "empty (or whitespace only): a "
                            "memory needs text to be found; remove it or give its text")
        read_date(path, f"memory {m.id!r}", "date", m.date, readable=True,
                  instead="leave it empty for an undated memory")


def memories_from(path: str | Path, items: Any) -> list[Memory]:
    """The memories of a memory file's list ``items`` (objects with string ``id`` and
    ``text`` and an optional string ``date``), checked (:func:`check_memories`); a key
    outside :data:`MEMORY_KEYS` (a misspelt ``data`` for ``date`` would be ignored) or a
    value of another type is one DataError naming the file, the memory and the key."""
    if not isinstance(items, list):
        raise DataError(path, "(file)", "memories", "expected a list of memories (or a "
                        "mapping whose 'memories' is one)")
    out = []
    for k, m in enumerate(items):
        if not isinstance(m, dict):
            raise DataError(path, f"memory {k}", "(root)", "expected a mapping with string "
                            "'id' and 'text' and an optional string 'date'")
        record = f"memory {m['id']!r} (index {k})" if isinstance(m.get("id"), str) \
            else f"memory {k}"
        unknown = sorted(set(m) - set(MEMORY_KEYS))
        if unknown:
            raise DataError(path, record, unknown[0], f"not a key of a memory (keys: "
                            f"{', '.join(MEMORY_KEYS)})")
        for key in MEMORY_KEYS:
            if (key != "date" or key in m) and not isinstance(m.get(key), str):
                raise DataError(path, record, key, "missing" if key not in m else
                                f"a string is expected, got {type(m[key]).__name__}")
        out.append(Memory(m["id"], m["text"], m.get("date", "")))
    check_memories(path, out)
    return out


def _remove_store(p: Path) -> None:
    """Remove the store file ``p`` and the files SQLite keeps beside it (a store this call
    created a moment ago; never through a link: :func:`engram_eval.io.remove_contained`)."""
    for f in (p, *(Path(str(p) + x) for x in SQLITE_SIDE_SUFFIXES)):
        remove_contained(f, p.parent, recursive=False, ignore_errors=True)


def add_to_store(path: str | Path, engine: StoreEngine, memories: Sequence[Memory]
                 ) -> tuple[int, int]:
    """Add ``memories`` to the store at ``path``, created when absent; returns (added, now
    stored). When the add fails, the error says what was kept: of an existing store, its
    memories as before (nothing of this add); a store created for this add is removed again
    (nothing was kept, so a retry starts afresh), never left empty as if the add had
    happened."""
    p = Path(path)
    check_memories(p, memories)  # before a store is created
    created = not p.exists() and not p.is_symlink()
    store = MemoryStore.create(p, engine) if created else MemoryStore.open(p, engine)
    try:
        added = store.add(memories)
        return added, len(store)
    except BaseException as e:
        store.close()
        if not created:
            raise
        _remove_store(p)  # ours, absent a moment ago: never left empty as if added to
        if not isinstance(e, StorageError):
            raise
        kept = (f"nothing was kept: the store, created for this add, was removed ({p} does "
                "not exist); free space (or fix the file system) and run it again")
        raise StorageError(p, f"{e.message.split(' (nothing of this add()')[0]}; {kept}",
                           e.errno) from None
    finally:
        store.close()


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
        problem = database_problem(p)
        if problem is not None:  # a link (dangling or not), a FIFO, a device, a directory
            raise UnsafePathError(p, f"{problem}; a memory store is created as a new regular "
                                  "file: remove it or choose another path (nothing was "
                                  "written)")
        if p.exists():
            raise ProvenanceError(f"{p}: a memory store already exists there")
        with storage_errors(p, "create", cls=StorageError):
            make_parent(p)
        try:
            conn = sqlite3.connect(p)
        except sqlite3.DatabaseError as e:
            raise StorageError(p, f"cannot create the memory store {p}: {e}") from None
        try:
            with conn:
                cls._create_tables(conn, engine)
        except sqlite3.DatabaseError as e:
            conn.close()
            remove_contained(p, p.parent, recursive=False)  # ours: absent a moment ago
            raise StorageError(p, f"cannot create the memory store {p}: {e}") from None
        return cls(p, engine, conn)

    @classmethod
    def _create_tables(cls, conn: sqlite3.Connection, engine: StoreEngine) -> None:
        conn.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE memories (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
            " id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, date TEXT NOT NULL);"
            "CREATE TABLE pieces (memory_seq INTEGER NOT NULL REFERENCES memories(seq),"
            " piece_index INTEGER NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL,"
            " PRIMARY KEY (memory_seq, piece_index));")
        conn.executemany("INSERT INTO meta VALUES (?, ?)",
                         [(k, json.dumps(v)) for k, v in cls._meta_for(engine).items()])

    @classmethod
    def open(cls, path: str | Path, engine: StoreEngine) -> MemoryStore:
        p = Path(path)
        problem = database_problem(p)
        if problem is not None:  # SQLite would hang on a FIFO or follow a link elsewhere
            raise DataError(p, "(file)", "(database)", f"{problem}; a memory store must be "
                            "a regular file")
        if not p.is_file():
            raise ProvenanceError(f"{p}: no memory store there")
        try:
            conn = sqlite3.connect(p)
        except sqlite3.DatabaseError as e:
            raise DataError(p, "(file)", "(database)", f"cannot open the memory store: {e}"
                            ) from None
        try:
            meta = cls._read_meta(p, conn)
            want = cls._meta_for(engine)
            missing = [k for k in want if k not in meta]
            if missing:
                raise DataError(p, "table meta", f"key {missing[0]!r}",
                                f"missing; {_DAMAGED}")
            for k, v in want.items():
                if k != "dim" and meta.get(k) != v:
                    raise ProvenanceError(f"{p}: store was written with {k}={meta.get(k)!r}; "
                                          f"this search uses {v!r}")
        except BaseException:
            conn.close()
            raise
        return cls(p, engine, conn)

    @staticmethod
    def _read_meta(p: Path, conn: sqlite3.Connection) -> dict[str, Any]:
        """The ``meta`` table, after checking that every table and column is there."""
        with _reading(p):
            for table, columns in TABLES.items():
                have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                if not have:
                    raise DataError(p, "(schema)", f"table {table}", f"missing; {_DAMAGED}")
                lacking = [c for c in columns if c not in have]
                if lacking:
                    raise DataError(p, f"table {table}", f"column {lacking[0]}",
                                    f"missing; {_DAMAGED}")
            rows = list(conn.execute("SELECT key, value FROM meta"))
        meta: dict[str, Any] = {}
        for k, v in rows:
            meta[k] = _meta_value(p, k, v)
        dim = meta.get("dim")
        if "dim" in meta and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise DataError(p, "meta 'dim'", "value", f"{dim!r} is not a positive vector "
                            f"dimension; {_DAMAGED}")
        return meta

    def dim(self) -> int | None:
        """The recorded vector dimension (None before any vector was written)."""
        with _reading(self.path):
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        if row is None:
            return None
        dim = _meta_value(self.path, "dim", row[0])
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise DataError(self.path, "meta 'dim'", "value", f"{dim!r} is not a positive "
                            f"vector dimension; {_DAMAGED}")
        return dim

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
        check_memories(self.path, memories)
        with _reading(self.path):
            clash = [r[0] for r in self.conn.execute(
                f"SELECT id FROM memories WHERE id IN ({','.join('?' * len(ids))})", ids)
                     ] if ids else []
        if clash:
            raise DataError(self.path, f"memory {clash[0]!r}", "id", "already in the store")
        pieces = self.engine.pieces(memories)
        vectors = self.engine.encoder().encode([t for _, t in pieces]) if pieces else None
        if vectors is not None:
            vectors = np.asarray(vectors, dtype=np.float32)
            names, seen_pieces = [], dict.fromkeys(range(len(memories)), 0)
            for mi, _ in pieces:  # refused before anything is written
                names.append((f"memory {memories[mi].id!r}", f"piece {seen_pieces[mi]} vector"))
                seen_pieces[mi] += 1
            check_vectors(self.path, vectors, names, self.dim())
        with self._writing(), self.conn:
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

    @contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as e:  # disk full, read-only file system, ...
            raise StorageError(self.path, f"cannot write the memory store {self.path}: {e} "
                               "(nothing of this add() was kept; the store holds what it "
                               "held before)") from None

    # -- reading --------------------------------------------------------------------
    def memories(self) -> list[Memory]:
        with _reading(self.path):
            rows = list(self.conn.execute("SELECT seq, id, text, date FROM memories "
                                          "ORDER BY seq"))
        for seq, i, t, d in rows:
            for field, v in (("id", i), ("text", t), ("date", d)):
                if not isinstance(v, str):
                    raise DataError(self.path, f"memory seq {seq}", field,
                                    f"{type(v).__name__} where text is expected; {_DAMAGED}")
        return [Memory(i, t, d) for _, i, t, d in rows]

    def pieces(self) -> tuple[list[tuple[int, str]], np.ndarray]:
        """(memory position, piece text) in insertion order, and their vectors (each checked:
        the recorded dimension, finite, not all zeros)."""
        with _reading(self.path):
            mems = list(self.conn.execute("SELECT seq, id FROM memories ORDER BY seq"))
            rows = list(self.conn.execute("SELECT memory_seq, piece_index, text, vector FROM "
                                          "pieces ORDER BY memory_seq, piece_index"))
        pos = {seq: i for i, (seq, _) in enumerate(mems)}
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        dim = self.dim()
        if dim is None:
            raise DataError(self.path, "table meta", "key 'dim'", "missing although the store "
                            f"holds vectors; {_DAMAGED}")
        out: list[tuple[int, str]] = []
        vecs = np.empty((len(rows), dim), dtype=np.float32)
        names = []
        for j, (seq, k, text, blob) in enumerate(rows):
            record = f"piece {k} of memory seq {seq}"
            if seq not in pos:
                raise DataError(self.path, record, "memory_seq", f"no memory has seq {seq}; "
                                f"{_DAMAGED}")
            record = f"piece {k} of memory {mems[pos[seq]][1]!r}"
            if not isinstance(blob, bytes) or len(blob) != 4 * dim:
                n = len(blob) if isinstance(blob, bytes | str) else 0
                raise DataError(self.path, record, "vector",
                                f"{n} bytes where the store's {dim}-dimensional float32 vectors "
                                f"take {4 * dim}; {_DAMAGED}")
            if not isinstance(text, str):
                raise DataError(self.path, record, "text", f"{type(text).__name__} where text "
                                f"is expected; {_DAMAGED}")
            vecs[j] = np.frombuffer(blob, dtype="<f4")
            out.append((pos[seq], text))
            names.append((record, "vector"))
        check_vectors(self.path, vecs, names, dim)
        return out, vecs

    def __len__(self) -> int:
        with _reading(self.path):
            return int(self.conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0])

    def search(self, query: str, *, now: str = "", limit: int | None = None,
               min_confidence: float | None = None) -> Any:
        """Gated search over the stored memories: the engine's ``search``
        (:func:`engram_eval.production.search.search_memories`), returning its
        :class:`~engram_eval.production.search.SearchResponse`."""
        read_date(self.path, "(search)", "now", now, readable=True,
                  instead="leave it empty when the query has no date")
        pieces, vectors = self.pieces()
        return self.engine.search(query, now=now, memories=self.memories(), pieces=pieces,
                                  vectors=vectors, limit=limit, min_confidence=min_confidence)
