"""The embedding/score cache validates every value it returns (issue 28).

An entry whose checksum is right but whose value is unusable -- a NaN, infinite or zero
vector, a vector of another dimension, a score that is not finite -- is a miss with one
warning naming the cache file and the key, recomputed by the model and overwritten; it is
never returned. A damaged database (garbage, truncated, another table layout, a directory
where the file goes) is one CacheError naming the file and the ways out.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from engram_eval.errors import CacheError
from engram_eval.retrieval.cache import (
    CACHE_FILE,
    VectorCache,
    _score_sum,
    _vector_sum,
    score_problem,
    vector_problem,
)
from engram_eval.retrieval.embeddings import CachedEncoder

DIM = 4
GOOD = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)


def _forge_vector(directory: Path, key: str, vec: np.ndarray) -> None:
    """Store ``vec`` under ``key`` with a valid checksum, as a forger (or a degenerate
    model output written by an older version) would."""
    blob = np.ascontiguousarray(vec, dtype=np.float32).tobytes()
    db = sqlite3.connect(str(directory / CACHE_FILE))
    db.execute("INSERT OR REPLACE INTO vec VALUES (?, ?, ?, ?)",
               (key, int(vec.shape[0]), blob, _vector_sum(int(vec.shape[0]), blob)))
    db.commit()
    db.close()


def _forge_score(directory: Path, key: str, value: float) -> None:
    db = sqlite3.connect(str(directory / CACHE_FILE))
    db.execute("INSERT OR REPLACE INTO score VALUES (?, ?, ?)", (key, value, _score_sum(value)))
    db.commit()
    db.close()


def _rows(directory: Path, table: str) -> dict[str, Any]:
    db = sqlite3.connect(str(directory / CACHE_FILE))
    out = dict(db.execute(f"SELECT k, v FROM {table}").fetchall())
    db.close()
    return out


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "engram_eval.retrieval.cache" and r.levelno == logging.WARNING]


# --------------------------------------------------------------------------- the checks
@pytest.mark.parametrize("vec,dim,why", [
    (np.array([1.0, np.nan, 0.0, 0.0], np.float32), None, "not finite"),
    (np.array([1.0, np.inf, 0.0, 0.0], np.float32), None, "not finite"),
    (np.zeros(4, np.float32), None, "zero norm"),
    (np.zeros(0, np.float32), None, "dimension 0"),
    (np.ones(3, np.float32), 4, "dimension 3, expected 4"),
])
def test_vector_problem(vec: np.ndarray, dim: int | None, why: str) -> None:
    got = vector_problem(vec, dim)
    assert got is not None and why in got
    assert vector_problem(GOOD, 4) is None
    assert vector_problem(np.full(4, 1e-30, np.float32)) is None  # tiny, not zero


def test_score_problem() -> None:
    assert score_problem(0.5) is None and score_problem(-3.0) is None
    for bad in (None, float("inf"), float("-inf"), float("nan")):
        assert score_problem(bad) is not None


# --------------------------------------------------------------------------- invalid entries
@pytest.mark.parametrize("bad", [
    np.array([np.nan, 1.0, 1.0, 1.0], np.float32),
    np.array([np.inf, 1.0, 1.0, 1.0], np.float32),
    np.zeros(DIM, np.float32),
], ids=["nan", "inf", "zero"])
def test_an_invalid_vector_is_a_miss_warned_and_overwritten(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: np.ndarray) -> None:
    cache = VectorCache(tmp_path)
    cache.put_vectors({"good": GOOD})
    _forge_vector(tmp_path, "bad", bad)
    with caplog.at_level(logging.WARNING):
        got = cache.get_vectors(["good", "bad"])
    assert set(got) == {"good"}
    np.testing.assert_array_equal(got["good"], GOOD)
    (msg,) = _warnings(caplog)
    assert str(tmp_path / CACHE_FILE) in msg and "bad" in msg and "treated as missing" in msg
    # the recomputed value replaces the forged one (a plain put would keep the first writer)
    cache.put_vectors({"bad": GOOD * 2})
    np.testing.assert_array_equal(cache.get_vectors(["bad"])["bad"], GOOD * 2)
    cache.close()


def test_a_vector_of_another_dimension_is_a_miss(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    cache = VectorCache(tmp_path)
    cache.put_vectors({"a": GOOD, "b": GOOD + 1})
    _forge_vector(tmp_path, "short", np.ones(3, np.float32))
    with caplog.at_level(logging.WARNING):
        # no dimension given: the one the other vectors of the read share
        assert set(cache.get_vectors(["a", "b", "short"])) == {"a", "b"}
        # the model's dimension given: even alone it is refused
        assert cache.get_vectors(["short"], dim=DIM) == {}
        # two entries, two dimensions, nothing to tell which is right: both are misses
        assert cache.get_vectors(["a", "short"]) == {}
    msgs = _warnings(caplog)
    assert len(msgs) == 3 and all("short" in m for m in msgs)
    assert "dimension 3, expected 4" in msgs[0] and "disagrees" in msgs[2]
    cache.close()


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_a_score_that_is_not_finite_is_a_miss_warned_and_overwritten(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: float) -> None:
    cache = VectorCache(tmp_path)
    cache.put_scores({"good": 0.25})
    _forge_score(tmp_path, "bad", bad)  # SQLite stores a NaN as NULL
    with caplog.at_level(logging.WARNING):
        assert cache.get_scores(["good", "bad"]) == {"good": 0.25}
    (msg,) = _warnings(caplog)
    assert str(tmp_path / CACHE_FILE) in msg and "bad" in msg
    cache.put_scores({"bad": 0.75})
    assert cache.get_scores(["bad"]) == {"bad": 0.75}
    cache.close()


def test_a_changed_invalid_score_is_still_a_checksum_error(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path)
    cache.put_scores({"s": 0.25})
    db = sqlite3.connect(str(tmp_path / CACHE_FILE))
    db.execute("UPDATE score SET v = 1e999 WHERE k = 's'")  # infinity, checksum of 0.25
    db.commit()
    db.close()
    with pytest.raises(CacheError, match="does not match its checksum"):
        cache.get_scores(["s"])
    cache.close()


def test_invalid_values_are_never_written(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path)
    cache.put_vectors({"nan": np.full(DIM, np.nan, np.float32),
                       "zero": np.zeros(DIM, np.float32), "ok": GOOD})
    cache.put_scores({"inf": float("inf"), "nan": float("nan"), "ok": 0.5})
    assert set(_rows(tmp_path, "vec")) == {"ok"}
    assert _rows(tmp_path, "score") == {"ok": 0.5}
    cache.close()


# --------------------------------------------------------------------------- the encoder
class FakeEmbedder:
    """Deterministic unit vectors of dimension DIM; records what the model was asked."""

    def __init__(self) -> None:
        self.ref = SimpleNamespace(sha256="f" * 64)
        self.precision = "fp32"
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big")
            v = np.random.default_rng(seed).random(DIM).astype(np.float32) + 0.1
            out.append(v / np.linalg.norm(v))
        return np.stack(out).astype(np.float32)


def test_the_encoder_recomputes_invalid_entries(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    first = FakeEmbedder()
    enc = CachedEncoder(first, VectorCache(tmp_path), "onnx")  # type: ignore[arg-type]
    want = enc.encode(["alpha", "beta", "gamma"])
    _forge_vector(tmp_path, enc.key("alpha"), np.full(DIM, np.nan, np.float32))
    _forge_vector(tmp_path, enc.key("beta"), np.zeros(DIM, np.float32))
    again = FakeEmbedder()
    enc2 = CachedEncoder(again, VectorCache(tmp_path), "onnx")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        got = enc2.encode(["alpha", "beta", "gamma"])
    np.testing.assert_array_equal(got, want)  # the same results as without the cache
    assert again.calls == [["alpha", "beta"]] and enc2.n_disk == 1
    assert any(enc.key("alpha") in m and enc.key("beta") in m for m in _warnings(caplog))
    # overwritten: a third encoder finds everything on disk
    third = FakeEmbedder()
    enc3 = CachedEncoder(third, VectorCache(tmp_path), "onnx")  # type: ignore[arg-type]
    np.testing.assert_array_equal(enc3.encode(["alpha", "beta", "gamma"]), want)
    assert third.calls == []


def test_the_encoder_never_stacks_a_cached_vector_of_another_dimension(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    probe = CachedEncoder(FakeEmbedder(), None, "onnx")  # type: ignore[arg-type]
    VectorCache(tmp_path).close()
    # the only cached entry of its read: nothing yet says its dimension is wrong
    _forge_vector(tmp_path, probe.key("alpha"), np.ones(DIM + 2, np.float32))
    emb = FakeEmbedder()
    enc = CachedEncoder(emb, VectorCache(tmp_path), "onnx")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        got = enc.encode(["alpha", "beta"])
    assert got.shape == (2, DIM)
    np.testing.assert_array_equal(got, FakeEmbedder().encode(["alpha", "beta"]))
    assert emb.calls == [["beta"], ["alpha"]]
    assert any(probe.key("alpha") in m and "the model's is 4" in m for m in _warnings(caplog))
    # the forged entry is overwritten by the model's vector
    assert _rows(tmp_path, "vec")[probe.key("alpha")] == got[0].tobytes()


# --------------------------------------------------------------------------- damaged files
def _assert_damaged(e: CacheError, path: Path) -> None:
    msg = str(e)
    assert e.path == str(path) and msg.startswith(str(path))
    assert "\n" not in msg
    for way_out in ("delete it", "--no-use-cache", "--cache-dir"):
        assert way_out in msg, msg


def test_a_garbage_file_is_one_error(tmp_path: Path) -> None:
    db = tmp_path / CACHE_FILE
    db.write_bytes(b"this is not SQLite at all\n" + os.urandom(4096))
    before = db.read_bytes()
    with pytest.raises(CacheError) as e:
        VectorCache(tmp_path)
    _assert_damaged(e.value, db)
    assert "not a database" in str(e.value)
    assert db.read_bytes() == before  # left as it is for the user to look at


def test_a_truncated_database_is_one_error(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path)
    cache.put_vectors({f"k{i}": np.full(64, i + 1, np.float32) for i in range(1000)})
    cache.close()
    db = tmp_path / CACHE_FILE
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 2)
    with pytest.raises(CacheError) as e:
        reopened = VectorCache(tmp_path)
        try:
            reopened.get_vectors([f"k{i}" for i in range(1000)])
        finally:
            reopened.close()
    _assert_damaged(e.value, db)


@pytest.mark.parametrize("schema", [
    "CREATE TABLE vec (k TEXT PRIMARY KEY, value BLOB)",
    "CREATE TABLE vec (k TEXT, dim INTEGER, v BLOB, sum TEXT)",  # no primary key
    "CREATE TABLE score (k TEXT PRIMARY KEY, v REAL)",
])
def test_a_database_of_another_layout_is_one_error(tmp_path: Path, schema: str) -> None:
    db = tmp_path / CACHE_FILE
    conn = sqlite3.connect(str(db))
    conn.execute(schema)
    conn.commit()
    conn.close()
    with pytest.raises(CacheError) as e:
        VectorCache(tmp_path)
    _assert_damaged(e.value, db)
    assert "another layout" in str(e.value)


def test_a_directory_where_the_database_goes_is_one_error(tmp_path: Path) -> None:
    (tmp_path / CACHE_FILE).mkdir()
    with pytest.raises(CacheError) as e:
        VectorCache(tmp_path)
    _assert_damaged(e.value, tmp_path / CACHE_FILE)


def test_a_cache_dir_under_a_file_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(CacheError, match="is a file, not a directory.*--cache-dir"):
        VectorCache(tmp_path / "f" / "cache")


def test_a_damaged_cache_is_one_line_from_the_cli(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  tiny_embedding_model: str) -> None:
    from engram_eval.cli import main as cli

    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / CACHE_FILE).write_bytes(b"garbage" * 100)
    rc = cli.main(["run", str(fixture), "--retriever", "dense", "--no-rerank",
                   "--embedding-backend", "sentence_transformers",
                   "--embedding-model", tiny_embedding_model, "--cache-dir", str(cache),
                   "--no-progress", "--output", str(tmp_path / "out.jsonl")])
    err = [line for line in capsys.readouterr().err.splitlines()
           if line.strip() and not line.startswith("WARNING")]
    assert rc == 2 and len(err) == 1, err
    assert str(cache / CACHE_FILE) in err[0] and "--no-use-cache" in err[0]
    assert "Traceback" not in err[0]
