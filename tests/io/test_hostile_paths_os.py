"""Hostile paths and operating-system failures (issue 15, items 4 and 5).

* Production fixture names and case ids are names, never paths: ``../x``, an absolute path,
  ``.``/``..`` are refused naming file, case and field, and no store is created anywhere; a
  store path that resolves outside ``--work-dir`` (a symbolic link) is refused.
* A damaged production store (truncated, garbage, a table dropped, a short, zeroed or NaN
  vector, bad ``meta`` JSON, a piece without its memory) is one DataError naming the file;
  zero or NaN vectors are refused on writing too.
* Read-only file system, disk full, a file name too long and an ``--output`` whose parent is
  a file are one line from the CLI (no traceback), nothing outside the output is touched,
  and a run stopped by a full disk resumes.
* ``merge`` writes through one temporary directory; a merge killed with SIGKILL (a real
  one, and the artefacts of one simulated) is cleaned up by the next merge, which says so.

Read-only and full file systems are simulated in-process by monkeypatching the write
primitives (tests run as root, which ignores permissions); the long name and the
parent-that-is-a-file are real.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_eval import io as eio
from engram_eval.cli import main as cli
from engram_eval.errors import DataError, ProvenanceError, StorageError
from engram_eval.provenance import records as rows_mod  # RowWriter opens the rows file here
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs.config import RunConfig
from engram_eval.runs.merge import staging_dir
from engram_eval.runs.runner import run

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "fixtures" / "longmemeval_tiny.json"
N_SHARDS = 3


# --------------------------------------------------------------------------- helpers
def snapshot(root: Path, *, skip: tuple[Path, ...] = ()) -> dict[str, tuple[str, str]]:
    """relative path -> (kind, sha256 or link target) of everything under ``root``."""
    out: dict[str, tuple[str, str]] = {}
    skip_s = tuple(str(s) for s in skip)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if str(p).startswith(skip_s):
                continue
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", "")
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def cli_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def assert_one_line_error(rc: int, err: str, *needles: str) -> str:
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _cfg(**kw: Any) -> RunConfig:
    return RunConfig(retriever="dummy", progress=False, **kw)


def _strip(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "timing"}


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture()
def shards(tmp_path: Path) -> list[Path]:
    d = tmp_path / "shards"
    d.mkdir()
    outs = []
    for i in range(N_SHARDS):
        out = d / f"s{i}.jsonl"
        run(_cfg(shard=f"{i}/{N_SHARDS}"), TINY, out, echo=lambda m: None)
        outs.append(out)
    return outs


def _merge_argv(shards: list[Path], out: Path) -> list[str]:
    return ["merge", *map(str, shards), "--output", str(out), "--dataset", str(TINY)]


# =========================================================================== item 4
# Production fixtures: names, not paths.
FIXTURE = {
    "name": "tiny", "version": 1, "heldout": False,
    "cases": [
        {"case_id": "c1",
         "memories": [
             {"id": "a", "text": "I adopted a border collie puppy from the shelter.",
              "date": "2024-03-02"},
             {"id": "b", "text": "My sister bought a cake for the wedding.", "date": "2024-03-10"},
             {"id": "d", "text": "I listen to podcasts on the train commute.",
              "date": "2024-04-05"}],
         "questions": [
             {"question_id": "c1-1", "query": "What breed is the puppy I adopted?",
              "now": "2024-05-01", "gold": ["a"]},
             {"question_id": "c1-2", "query": "Which hotel did I book in Denver?",
              "now": "2024-05-01", "gold": []}]},
    ],
}


@pytest.fixture(scope="module")
def settings(tiny_embedding_model: str) -> Any:
    from engram_eval.production.settings import ProductionSettings

    return ProductionSettings(embedding_model=tiny_embedding_model)


def _engine(settings: Any) -> Any:
    from engram_eval.production.search import Engine

    return Engine(settings)


@pytest.mark.parametrize("where,value", [
    ("name", "../x"), ("name", "../../y"), ("name", "ABS"), ("name", ".."), ("name", "a/b"),
    ("case_id", "../x"), ("case_id", "../../y"), ("case_id", "ABS"), ("case_id", "."),
    ("case_id", ".."), ("case_id", "c\\1"),
])
def test_fixture_names_are_names(tmp_path: Path, settings: Any, where: str, value: str) -> None:
    from engram_eval.production_eval.runner import run_fixture

    root = tmp_path / "root"
    (root / "deep" / "er").mkdir(parents=True)
    if value == "ABS":
        value = str(tmp_path / "elsewhere" / "store")
    doc = copy.deepcopy(FIXTURE)
    if where == "name":
        doc["name"] = value
    else:
        doc["cases"][0]["case_id"] = value
    fx = root / "fx.json"
    fx.write_text(json.dumps(doc))
    work = root / "deep" / "er" / "work"
    before = snapshot(tmp_path)
    with pytest.raises(DataError) as e:
        run_fixture(fx, root / "out.json", work, _engine(settings), REPO)
    msg = str(e.value)
    assert "fx.json" in msg and f"field {where!r}" in msg and "plain name" in msg
    assert "\n" not in msg
    assert snapshot(tmp_path) == before  # nothing created anywhere, no .sqlite outside
    assert not list(tmp_path.rglob("*.sqlite"))


def test_fixture_name_error_is_one_line_from_the_script(tmp_path: Path,
                                                        tiny_embedding_model: str) -> None:
    doc = copy.deepcopy(FIXTURE)
    doc["cases"][0]["case_id"] = "../../escape"
    fx = tmp_path / "fx.json"
    fx.write_text(json.dumps(doc))
    before = snapshot(tmp_path)
    r = subprocess.run([sys.executable, str(REPO / "benchmarks/production_retrieval/run.py"),
                        "--fixture", str(fx), "--source-root", str(REPO),
                        "--embedding-model", tiny_embedding_model,
                        "--output", str(tmp_path / "o" / "out.json"),
                        "--work-dir", str(tmp_path / "w" / "work")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("WARNING")]
    assert len(lines) == 1 and "case_id" in lines[0] and "plain name" in lines[0], r.stderr
    assert snapshot(tmp_path) == before


def test_packaged_fixtures_keep_valid_names() -> None:
    from engram_eval.production_eval.fixture import check_name, load_fixture

    for name in ("dev", "holdout", "validation_v2"):
        view, _ = load_fixture(REPO / "fixtures" / "production" / f"{name}.json")
        assert check_name(view.name) and all(check_name(c.case_id) for c in view.cases)


def test_store_path_stays_inside_work_dir(tmp_path: Path, settings: Any) -> None:
    from engram_eval.production_eval.runner import run_fixture, store_path

    work = tmp_path / "work"
    work.mkdir()
    assert store_path(work, "tiny", "c1") == (work / "tiny" / "c1.sqlite").resolve()
    for name, case in (("..", "x"), ("tiny", "../../y"), ("tiny", str(tmp_path / "abs"))):
        with pytest.raises(ProvenanceError, match="outside the work directory"):
            store_path(work, name, case)
    # a valid name that is a symbolic link out of the work directory is refused too
    outside = tmp_path / "outside"
    outside.mkdir()
    (work / "tiny").symlink_to(outside, target_is_directory=True)
    fx = tmp_path / "fx.json"
    fx.write_text(json.dumps(FIXTURE))
    before = snapshot(tmp_path)
    with pytest.raises(ProvenanceError, match="outside the work directory"):
        run_fixture(fx, tmp_path / "out.json", work, _engine(settings), REPO)
    assert snapshot(tmp_path) == before
    assert not list(outside.iterdir())


# ---------------------------------------------------------------- damaged stores
MEMS = [("a", "I adopted a border collie puppy from the shelter.", "2024-03-02"),
        ("b", "My sister bought a cake for the wedding.", "2024-03-10")]


@pytest.fixture()
def store(tmp_path: Path, settings: Any) -> Path:
    from engram_eval.production.store import Memory, MemoryStore

    path = tmp_path / "stores" / "s.sqlite"
    st = MemoryStore.create(path, _engine(settings))
    st.add([Memory(*m) for m in MEMS])
    st.close()
    return path


def _sql(path: Path, *statements: str, params: tuple[Any, ...] = ()) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for s in statements:
            conn.execute(s, params) if params else conn.execute(s)
    conn.close()


def _dim(path: Path) -> int:
    conn = sqlite3.connect(path)
    dim = json.loads(conn.execute("SELECT value FROM meta WHERE key='dim'").fetchone()[0])
    conn.close()
    return int(dim)


def _damage(kind: str, path: Path) -> str:
    """Damage ``path``; returns a fragment the error must hold."""
    if kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2 + 7])
        return "s.sqlite"
    if kind == "garbage":
        path.write_bytes(b"this is not a database\n" * 400)
        return "not a readable memory store"
    if kind == "dropped-table":
        _sql(path, "DROP TABLE pieces")
        return "table pieces"
    if kind == "dropped-column":
        _sql(path, "ALTER TABLE memories DROP COLUMN date")
        return "column date"
    if kind == "bad-meta-json":
        _sql(path, "UPDATE meta SET value='{oops' WHERE key='embedding_model'")
        return "meta 'embedding_model'"
    if kind == "missing-meta":
        _sql(path, "DELETE FROM meta WHERE key='format_version'")
        return "format_version"
    if kind == "missing-dim":
        _sql(path, "DELETE FROM meta WHERE key='dim'")
        return "'dim'"
    if kind == "short-vector":
        _sql(path, "UPDATE pieces SET vector = substr(vector, 1, 12) WHERE memory_seq = 2")
        return "12 bytes"
    if kind == "long-vector":
        _sql(path, "UPDATE pieces SET vector = vector || vector WHERE memory_seq = 1")
        return "vector"
    if kind == "zero-vector":
        _sql(path, f"UPDATE pieces SET vector = zeroblob({4 * _dim(path)}) WHERE memory_seq = 2")
        return "all zeros"
    if kind == "nan-vector":
        nan = np.full(_dim(path), np.nan, dtype="<f4").tobytes()
        _sql(path, "UPDATE pieces SET vector = ? WHERE memory_seq = 1", params=(nan,))
        return "NaN"
    if kind == "orphan-piece":
        _sql(path, "DELETE FROM memories WHERE seq = 1")
        return "no memory has seq 1"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "dropped-table", "dropped-column",
                                  "bad-meta-json", "missing-meta", "missing-dim",
                                  "short-vector", "long-vector", "zero-vector", "nan-vector",
                                  "orphan-piece"])
def test_damaged_store_is_one_error_naming_the_file(store: Path, settings: Any,
                                                    kind: str) -> None:
    from engram_eval.production.store import MemoryStore

    fragment = _damage(kind, store)
    before = snapshot(store.parent.parent)
    with pytest.raises(DataError) as e:
        with MemoryStore.open(store, _engine(settings)) as st:
            st.search("What breed is the puppy?", now="2024-05-01", limit=3,
                      min_confidence=0.0)
    msg = str(e.value)
    assert str(store) in msg and fragment in msg, msg
    assert "\n" not in msg
    assert snapshot(store.parent.parent) == before  # reading changed nothing


@pytest.mark.parametrize("bad", ["zero", "nan", "short"])
def test_store_refuses_bad_vectors_on_add(tmp_path: Path, settings: Any, bad: str) -> None:
    from engram_eval.production.store import Memory, MemoryStore

    engine = _engine(settings)
    real = engine.encoder()

    class Broken:
        def encode(self, texts: list[str]) -> np.ndarray:
            v = np.asarray(real.encode(texts), dtype=np.float32)
            if bad == "zero":
                v[-1] = 0.0
            elif bad == "nan":
                v[0, 0] = np.nan
            else:
                v = v[:, :-1]
            return v

    path = tmp_path / "s.sqlite"
    st = MemoryStore.create(path, engine)
    st.add([Memory(*MEMS[0])])  # records the dimension
    engine.encoder = lambda: Broken()  # type: ignore[method-assign]
    with pytest.raises(DataError) as e:
        st.add([Memory(*MEMS[1])])
    assert str(path) in str(e.value) and "memory 'b'" in str(e.value)
    assert [m.id for m in st.memories()] == ["a"]  # nothing of the refused add was written
    st.close()


# =========================================================================== item 5
def test_run_read_only_file_system(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out" / "run.jsonl"
    real_open = os.open

    def ro_open(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and str(path).startswith(
                str(out.parent)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **k)

    (tmp_path / "out").mkdir()
    before = snapshot(tmp_path)
    monkeypatch.setattr(os, "open", ro_open)
    rc, _, err = cli_run(["run", str(TINY), "--retriever", "dummy", "--no-progress", "--output", str(out)],
                         capsys)
    monkeypatch.undo()
    assert_one_line_error(rc, err, "engram-eval run: error: cannot create", str(out),
                          "read-only file system")
    assert snapshot(tmp_path) == before


def test_merge_read_only_file_system(shards: list[Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "merged" / "m.jsonl"
    out.parent.mkdir()
    before = snapshot(tmp_path)
    real_link = os.link

    def ro_link(src: Any, dst: Any, *a: Any, **k: Any) -> None:
        if str(dst).startswith(str(out.parent)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(src), str(dst))
        real_link(src, dst, *a, **k)

    monkeypatch.setattr(os, "link", ro_link)
    rc, _, err = cli_run(_merge_argv(shards, out), capsys)
    monkeypatch.undo()
    assert_one_line_error(rc, err, "engram-eval merge: error: cannot", "read-only file system",
                          "merge again")
    assert snapshot(tmp_path) == before  # no output, no temporary directory


class _Disk:
    """A disk with ``free`` bytes left: writes beyond it fail with ENOSPC (partly written
    first, as the kernel does)."""

    def __init__(self, free: int) -> None:
        self.free = free

    def take(self, n: int) -> int:
        if self.free <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        k = min(n, self.free)
        self.free -= k
        return k


def test_run_disk_full_mid_run_is_said_once_and_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out" / "run.jsonl"
    other = tmp_path / "untouched.txt"
    other.write_text("keep me\n")
    full = tmp_path / "ref" / "full.jsonl"
    run(_cfg(), TINY, full, echo=lambda m: None)
    first_row = len(full.read_bytes().splitlines(keepends=True)[0])
    disk = _Disk(2 * first_row + first_row // 2)  # two rows and half of the third fit
    real_open = open

    class FullFile:
        def __init__(self, f: Any) -> None:
            self._f = f

        def write(self, data: Any) -> int:
            k = disk.take(len(data))
            return self._f.write(bytes(data[:k]))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

    def fake_open(path: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        f = real_open(path, mode, *a, **k)
        return FullFile(f) if "a" in mode else f

    def full_temp(path: Path, data: bytes) -> str:
        if disk.free <= 0:  # once full, the sidecar's rewrite hits the full disk too
            disk.take(len(data))
        return real_write_temp(path, data)

    real_write_temp = eio._write_temp
    before = snapshot(tmp_path, skip=(out.parent,))
    monkeypatch.setattr(rows_mod, "open", fake_open, raising=False)
    monkeypatch.setattr(eio, "_write_temp", full_temp)
    rc, _, err = cli_run(["run", str(TINY), "--retriever", "dummy", "--no-progress", "--output", str(out)],
                         capsys)
    monkeypatch.undo()
    line = assert_one_line_error(rc, err, f"cannot append rows to {out}",
                                 "no space left on device", "--resume")
    assert err.count("no space left") == 1 and line.count("no space left") == 1
    assert snapshot(tmp_path, skip=(out.parent,)) == before
    data = out.read_bytes()
    assert data.count(b"\n") == 2 and not data.endswith(b"\n")  # two rows and a torn line
    assert sidecar_path(out).is_file() and not summary_path(out).exists()
    # space freed: --resume repairs the torn line and finishes the run
    rc, stdout, err = cli_run(["run", str(TINY), "--retriever", "dummy", "--no-progress", "--output", str(out),
                               "--resume"], capsys)
    assert rc == 0, err
    assert "torn last line" in stdout + err
    assert [_strip(r) for r in _rows(out)] == [_strip(r) for r in _rows(full)]
    assert summary_path(out).is_file()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Any:
    """A real tmpfs mounted at ``tmp_path / "fs"`` (skipped where mounting is not allowed:
    not root, no CAP_SYS_ADMIN, not Linux); ``resize(size)`` and ``read_only()`` remount
    it; it is unmounted afterwards whatever happens."""
    mount = tmp_path / "fs"
    mount.mkdir()

    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=30)

    try:
        done = sh("mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount))
    except (FileNotFoundError, subprocess.SubprocessError):
        pytest.skip("no mount command")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")

    class Fs:
        path = mount

        def remount(self, options: str) -> None:
            done = sh("mount", "-o", f"remount,{options}", str(mount))
            assert done.returncode == 0, done.stderr

    try:
        yield Fs()
    finally:
        sh("umount", "-l", str(mount))


def test_a_real_full_tmpfs_is_said_once_and_the_run_resumes(
        tmpfs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The simulated full disk above, on a real 16 KiB tmpfs: the write that fails is said in
    one line, nothing outside the mount changes, and once the file system has room the run
    resumes, repairs what the interruption left and verifies."""
    from engram_eval.runs.verify import verify

    out = tmpfs.path / "run.jsonl"
    other = tmp_path / "untouched.txt"
    other.write_text("keep me\n")
    before = snapshot(tmp_path, skip=(tmpfs.path,))
    argv = ["run", str(TINY), "--retriever", "flat-bm25", "--no-progress", "--output",
            str(out)]
    rc, _, err = cli_run(argv, capsys)
    assert_one_line_error(rc, err, str(out), "no space left on device")
    assert snapshot(tmp_path, skip=(tmpfs.path,)) == before
    tmpfs.remount("size=4m")
    if not out.exists():  # it filled up before the first row: nothing to resume
        rc, _, err = cli_run(argv, capsys)
    else:
        rc, _, err = cli_run([*argv, "--resume"], capsys)
    assert rc == 0, err
    assert verify(out, TINY).verified
    tmpfs.remount("ro")
    rc, _, err = cli_run(["run", str(TINY), "--retriever", "flat-bm25", "--no-progress",
                          "--output", str(tmpfs.path / "again.jsonl")], capsys)
    assert_one_line_error(rc, err, "again.jsonl", "read-only file system")
    assert snapshot(tmp_path, skip=(tmpfs.path,)) == before


def test_merge_disk_full_leaves_nothing(shards: list[Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "merged.jsonl"
    disk = _Disk(300)
    real_write = eio._GuardedFile.write

    def full_write(self: Any, data: Any) -> int:
        try:
            k = disk.take(len(data))
        except OSError as e:
            with eio.storage_errors(self._path, "write"):
                raise e
        return real_write(self, bytes(data[:k]))

    before = snapshot(tmp_path)
    monkeypatch.setattr(eio._GuardedFile, "write", full_write)
    rc, _, err = cli_run(_merge_argv(shards, out), capsys)
    monkeypatch.undo()
    assert_one_line_error(rc, err, f"cannot write {out}", "no space left on device",
                          "merge again")
    assert snapshot(tmp_path) == before
    rc, _, err = cli_run(_merge_argv(shards, out), capsys)  # space freed: it works
    assert rc == 0, err


def test_name_too_long_is_refused_before_anything_is_written(
        tmp_path: Path, shards: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    name = "r" * 244 + ".jsonl"  # 250 characters: fits, but its sidecar's name does not
    assert len(name) == 250
    before = snapshot(tmp_path)
    rc, _, err = cli_run(["run", str(TINY), "--retriever", "dummy", "--no-progress", "--output",
                          str(tmp_path / name)], capsys)
    assert_one_line_error(rc, err, "file name too long", ".metadata.json", "shorter")
    assert snapshot(tmp_path) == before
    rc, _, err = cli_run(_merge_argv(shards, tmp_path / name), capsys)
    assert_one_line_error(rc, err, "engram-eval merge: error:", "file name too long")
    assert snapshot(tmp_path) == before
    # a name over the limit itself (another command, another write path)
    long = tmp_path / ("e" * 300 + ".jsonl")
    rc, _, err = cli_run(["export", str(shards[0]), "--public", str(long)], capsys)
    assert_one_line_error(rc, err, "file name too long")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("depth", ["parent", "grandparent"])
def test_output_under_a_file(tmp_path: Path, shards: list[Path],
                             capsys: pytest.CaptureFixture[str], depth: str) -> None:
    blocker = tmp_path / "plain.txt"
    blocker.write_text("a file, not a directory\n")
    out = blocker / "out.jsonl" if depth == "parent" else blocker / "sub" / "out.jsonl"
    before = snapshot(tmp_path)
    rc, _, err = cli_run(["run", str(TINY), "--retriever", "dummy", "--no-progress", "--output", str(out)],
                         capsys)
    assert_one_line_error(rc, err, f"cannot create {out}", f"{blocker} is a file, not a "
                          "directory")
    rc, _, err = cli_run(_merge_argv(shards, out), capsys)
    assert_one_line_error(rc, err, f"{blocker} is a file, not a directory")
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- merge killed mid-way
KILLED_MERGE = r"""
import sys, time
from pathlib import Path
import engram_eval.runs.merge as M

ready, out, dataset, *shards = sys.argv[1:]
real = M.row_line
count = [0]
def slow(row):
    count[0] += 1
    if count[0] == 3:  # some rows are in the temporary file: say so, then wait to be killed
        Path(ready).write_text("ready")
        time.sleep(600)
    return real(row)
M.row_line = slow
M.merge(shards, out, dataset=dataset)
"""


def test_merge_killed_with_sigkill_is_cleaned_by_the_next(
        shards: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "merged" / "m.jsonl"
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_MERGE, str(ready), str(out),
                             str(TINY), *map(str, shards)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300  # a limit on waiting, not a measured threshold
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    stage = staging_dir(out)
    assert stage.is_dir() and (stage / "owner").is_file()
    assert not out.exists() and not sidecar_path(out).exists()
    left = [p.name for p in stage.iterdir()]
    assert left != ["owner"]  # partial files of the killed merge
    rc, stdout, err = cli_run(_merge_argv(shards, out), capsys)
    assert rc == 0, err
    assert "removed the stale temporary directory" in err and str(stage) in err
    assert not stage.exists()
    rc, stdout, err = cli_run(["verify", str(out), "--dataset", str(TINY)], capsys)
    assert rc == 0, stdout + err


def _stale(out: Path, pid: int = 2 ** 22 + 12345, linked: tuple[str, ...] = ()) -> Path:
    """The artefacts a merge killed with SIGKILL leaves: the temporary directory with an
    unlocked owner file naming a dead pid, partial files, and possibly some outputs already
    linked into place."""
    stage = staging_dir(out)
    stage.mkdir(parents=True)
    (stage / "owner").write_text(f"pid {pid} on somehost\n")
    (stage / ".rows.abc123.tmp").write_bytes(b'{"question_id": "lme_t0')
    finals = {"metadata.json": sidecar_path(out), "summary.json": summary_path(out),
              "rows": out}
    for name in linked:
        (stage / name).write_text("{}\n")
        os.link(stage / name, finals[name])
    return stage


@pytest.mark.parametrize("linked", [(), ("metadata.json",), ("metadata.json", "summary.json")])
def test_stale_merge_artefacts_are_removed_and_said(
        shards: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        linked: tuple[str, ...]) -> None:
    out = tmp_path / "merged" / "m.jsonl"
    stage = _stale(out, linked=linked)
    before = snapshot(tmp_path, skip=(out.parent,))
    rc, _, err = cli_run(_merge_argv(shards, out), capsys)
    assert rc == 0, err
    assert "removed the stale temporary directory" in err and "pid 4206649" in err
    if linked:
        assert "partly published" in err
    assert not stage.exists()
    assert json.loads(sidecar_path(out).read_text())["runs"][0]["mode"] == "merge"
    assert snapshot(tmp_path, skip=(out.parent,)) == before
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(
        [out.name, sidecar_path(out).name, summary_path(out).name])


def test_completely_published_stale_merge_is_kept(
        shards: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "merged" / "m.jsonl"
    stage = _stale(out, linked=("metadata.json", "summary.json", "rows"))
    rc, _, err = cli_run(_merge_argv(shards, out), capsys)
    assert rc == 2 and "already exists" in err  # the finished output is never removed
    # refused before any cleanup (issue 43): the directory is left as it is, and said
    assert stage.is_dir() and str(stage) in err
    assert out.is_file() and sidecar_path(out).is_file()


def test_live_merge_is_not_disturbed(shards: list[Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    import fcntl

    out = tmp_path / "merged" / "m.jsonl"
    stage = _stale(out, pid=os.getpid())
    fd = os.open(stage / "owner", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a merge holding it
        before = snapshot(tmp_path)
        rc, _, err = cli_run(_merge_argv(shards, out), capsys)
        assert_one_line_error(rc, err, "another merge into it is running", f"pid {os.getpid()}")
        assert snapshot(tmp_path) == before
    finally:
        os.close(fd)


def test_storage_error_is_an_engram_and_os_error() -> None:
    e = eio.storage_error(OSError(errno.ENOSPC, "x"), "/o/x.jsonl", "write", "free space",
                          cls=StorageError)
    assert isinstance(e, StorageError) and isinstance(e, OSError) and e.errno == errno.ENOSPC
    assert str(e) == "cannot write /o/x.jsonl: no space left on device; free space"


# --------------------------------------------------------------------------- links (issue 28)
def test_a_link_at_an_atomic_output_path_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A dangling symlink (or any link) where a summary or other owned file goes is one
    error naming it, and nothing is written through or over it."""
    import pytest as _pytest

    from engram_eval.io import WriteError, atomic_write

    target = tmp_path / "elsewhere" / "victim.json"
    link = tmp_path / "out.summary.json"
    link.symlink_to(target)  # dangling
    with _pytest.raises(WriteError, match="is a symbolic link"):
        atomic_write(link, "{}")
    assert link.is_symlink() and not target.exists()
    target.parent.mkdir()
    target.write_text("keep")
    with _pytest.raises(WriteError, match="is a symbolic link"):
        atomic_write(link, "{}")
    assert target.read_text() == "keep" and link.is_symlink()


def test_a_merge_never_cleans_through_a_linked_temporary_directory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A stale merge temporary directory that is a link to another directory: refused, and the
    directory it points to keeps every file."""
    import pytest as _pytest

    from engram_eval.errors import ProvenanceError
    from engram_eval.runs.merge import Staging, staging_dir

    out = tmp_path / "merged.jsonl"
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "data.txt").write_text("keep")
    (victim / "rows.jsonl").write_text("keep")
    staging_dir(out).symlink_to(victim, target_is_directory=True)
    with _pytest.raises(ProvenanceError, match="symbolic link"):
        Staging(out, echo=lambda m: None).acquire()
    assert sorted(p.name for p in victim.iterdir()) == ["data.txt", "rows.jsonl"]
