"""The shared embedding cache under concurrent writers (several processes at once)."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import sqlite3
from pathlib import Path

import numpy as np

from engram_eval.retrieval.cache import CACHE_FILE, VectorCache

N_KEYS = 600
BATCH = 25
DIM = 16


def _vector(key: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return np.random.default_rng(seed).random(DIM, dtype=np.float32)


def _writer(directory: str, worker: int, start: mp.Event) -> None:  # type: ignore[valid-type]
    cache = VectorCache(directory)
    start.wait(30)  # type: ignore[attr-defined]
    # Both workers write every key (in opposite orders, so their batches collide), read
    # back what is there, and write scores too.
    keys = [f"k{i}" for i in range(N_KEYS)]
    if worker % 2:
        keys.reverse()
    for i in range(0, len(keys), BATCH):
        chunk = keys[i : i + BATCH]
        cache.put_vectors({k: _vector(k) for k in chunk})
        cache.put_scores({k: float(_vector(k)[0]) for k in chunk})
        got = cache.get_vectors(chunk)
        assert set(got) == set(chunk)
    cache.close()


def test_two_processes_write_the_cache_at_once(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, start)) for w in range(2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]

    db = sqlite3.connect(str(tmp_path / CACHE_FILE))
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT COUNT(*) FROM vec").fetchone()[0] == N_KEYS
    assert db.execute("SELECT COUNT(*) FROM score").fetchone()[0] == N_KEYS
    db.close()
    cache = VectorCache(tmp_path)
    keys = [f"k{i}" for i in range(N_KEYS)]
    vecs = cache.get_vectors(keys)
    scores = cache.get_scores(keys)
    for k in keys:
        np.testing.assert_array_equal(vecs[k], _vector(k))
        assert scores[k] == float(_vector(k)[0])
    cache.close()


def test_first_writer_of_a_key_wins(tmp_path: Path) -> None:
    a, b = VectorCache(tmp_path), VectorCache(tmp_path)
    a.put_vectors({"x": np.ones(4, dtype=np.float32)})
    twos = np.full(4, 2.0, dtype=np.float32)
    b.put_vectors({"x": twos, "y": twos})
    np.testing.assert_array_equal(b.get_vectors(["x"])["x"], np.ones(4, dtype=np.float32))
    assert set(a.get_vectors(["x", "y", "z"])) == {"x", "y"}
    a.put_vectors({})
    a.close()
    b.close()
