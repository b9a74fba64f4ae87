"""The one bounded JSON / JSON lines reader (issue 28 item 1) on real hostile files.

Each case writes a file under ``tmp_path``, reads it through a package reader and expects
one clear error naming the file and the record (and the field where known); nothing outside
``tmp_path`` changes. A FIFO is read in a subprocess with a timeout, so a reader that blocks
fails the test instead of hanging it (the timeout is a safety net, not a threshold).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_eval.analysis import tune as T
from engram_eval.data import _jsonio
from engram_eval.data.longmemeval import iter_longmemeval, load_longmemeval
from engram_eval.data.translations import load_question_translations
from engram_eval.errors import ConfigError, DataError, InputError, ProvenanceError
from engram_eval.production.confidence import load_calibration
from engram_eval.production_eval.fixture import read_document
from engram_eval.provenance.frozen import load_manifest, read_ledger
from engram_eval.provenance.sidecar import read_sidecar, sidecar_path, summary_path
from engram_eval.runs.reader import read_summary
from engram_eval.runs.rows import scan_rows
from engram_eval.scoring.score import read_rankings

REPO = Path(__file__).resolve().parents[2]
TINY_LME = REPO / "fixtures" / "longmemeval_tiny.json"
DEEP = 100_000


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def unchanged(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path``; the repository's fixtures are the same afterwards."""
    before = _snapshot(REPO / "fixtures")
    yield tmp_path
    assert _snapshot(REPO / "fixtures") == before


def _deep(n: int = DEEP) -> str:
    return "[" * n + "]" * n


def _one_error(call: Callable[[], Any], path: Path, *parts: str,
               kind: type[BaseException] = DataError) -> BaseException:
    with pytest.raises(kind) as info:
        call()
    text = str(info.value)
    assert str(path) in text, text
    for part in parts:
        assert part in text, text
    assert len(text) < 600, text
    return info.value


# --------------------------------------------------------------------------- deep nesting
WHOLE_READERS: list[tuple[str, Callable[[Path], Any]]] = [
    ("dataset", lambda p: load_longmemeval(p)),
    ("translations", lambda p: load_question_translations(p)),
    ("frozen manifest", lambda p: load_manifest(p)),
    ("ledger", lambda p: read_ledger(p)),
    ("fixture", lambda p: read_document(p)),
    ("calibration", lambda p: load_calibration(p)),
    ("document", lambda p: _jsonio.read_json_document(p)),
]


@pytest.mark.parametrize("name,reader", WHOLE_READERS, ids=[n for n, _ in WHOLE_READERS])
def test_nesting_100000_deep_is_one_error_on_every_whole_file_reader(
        unchanged: Path, name: str, reader: Callable[[Path], Any]) -> None:
    p = unchanged / f"{name.replace(' ', '_')}.json"
    p.write_text(_deep())
    err = _one_error(lambda: reader(p), p, f"nested deeper than {_jsonio.MAX_DEPTH} levels")
    assert isinstance(err, InputError)
    assert err.record == "index 0" or err.record == "(file)"


def test_nesting_inside_a_sidecar_names_the_field(unchanged: Path) -> None:
    out = unchanged / "run.jsonl"
    out.write_text("")
    side = sidecar_path(out)
    side.write_text('{"settings": {"a": ' + _deep() + "}}")
    err = _one_error(lambda: read_sidecar(out), side, "nested deeper", kind=ProvenanceError)
    assert isinstance(err, InputError)
    assert err.record == "key 'settings'" and err.field.startswith("a[0][0]")


def test_nesting_in_a_summary_is_one_error(unchanged: Path) -> None:
    out = unchanged / "run.jsonl"
    summary_path(out).write_text(_deep())
    _one_error(lambda: read_summary(out), summary_path(out), "nested deeper",
               kind=ProvenanceError)


def test_nesting_in_a_row_names_the_line_and_field(unchanged: Path) -> None:
    p = unchanged / "rows.jsonl"
    p.write_text('{"question_id": "a"}\n{"question_id": "b", "trace": ' + _deep() + "}\n")
    err = _one_error(lambda: scan_rows(p, required=("question_id",)), p, "line 2",
                     "nested deeper", kind=ProvenanceError)
    assert isinstance(err, InputError) and err.field.startswith("trace[0]")


def test_nesting_in_rankings_names_the_line(unchanged: Path) -> None:
    p = unchanged / "rankings.jsonl"
    p.write_text('{"question_id": "q", "ranked_session_ids": ' + _deep() + "}\n")
    err = _one_error(lambda: read_rankings(p), p, "line 1", "nested deeper")
    assert isinstance(err, InputError) and err.record == "line 1"


def test_a_torn_last_line_nested_deep_is_still_only_torn(unchanged: Path) -> None:
    p = unchanged / "rows.jsonl"
    p.write_text('{"question_id": "a"}\n' + "[" * DEEP)
    scan = scan_rows(p, required=("question_id",))
    assert len(scan.rows) == 1 and scan.torn_bytes == DEEP


# --------------------------------------------------------------------------- size limits
def test_a_gzip_bomb_of_one_giant_string_stops_at_the_string_limit(
        unchanged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonio, "MAX_STRING_CHARS", 1 << 20)  # 6 MiB of run: a few blocks
    p = unchanged / "bomb.json.gz"
    with gzip.open(p, "wb") as f:
        f.write(b'[{"question_id": "q1", "question": "')
        block = b"a" * (1 << 20)
        for _ in range(64):  # 64 MiB decompressed, ~64 KB on disk
            f.write(block)
        f.write(b'"}]')
    assert p.stat().st_size < 1 << 20
    reads: list[int] = []
    real = _jsonio.CappedReader.read

    def counting(self: _jsonio.CappedReader, n: int | None = -1) -> bytes:
        out = real(self, n)
        reads.append(self.count)
        return out

    monkeypatch.setattr(_jsonio.CappedReader, "read", counting)
    err = _one_error(lambda: load_longmemeval(p), p, "question_id=q1", "longer than")
    assert isinstance(err, InputError) and err.field == "question"
    assert max(reads) < 16 << 20  # stopped long before the 64 MiB were decompressed
    err = _one_error(lambda: list(iter_longmemeval(p)), p, "index 0", "longer than")


def test_a_document_over_its_byte_limit_is_refused_while_reading(
        unchanged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonio, "MAX_DOCUMENT_BYTES", 1000)
    p = unchanged / "manifest.json.gz"
    with gzip.open(p, "wb") as f:
        f.write(b'{"kind": "' + b" " * 10_000_000 + b'"}')
    err = _one_error(lambda: load_manifest(p), p, "more than 1000 bytes (decompressed)",
                     kind=ProvenanceError)
    assert isinstance(err, InputError) and err.record == "(file)"


def test_an_oversized_line_names_its_line(unchanged: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonio, "MAX_LINE_BYTES", 100)
    p = unchanged / "rankings.jsonl"
    ok = json.dumps({"question_id": "q", "ranked_session_ids": ["s"]})
    p.write_text(ok + "\n" + json.dumps({"question_id": "r", "ranked_session_ids":
                                         ["x" * 500]}) + "\n")
    err = _one_error(lambda: read_rankings(p), p, "line 2", "more than 100 bytes")
    assert isinstance(err, InputError)
    rows = unchanged / "rows.jsonl"
    rows.write_text(ok + "\n" + json.dumps({"question_id": "r", "pad": "x" * 500}) + "\n")
    _one_error(lambda: scan_rows(rows, required=("question_id",)), rows, "line 2",
               "more than 100 bytes", kind=ProvenanceError)
    translations = unchanged / "t.jsonl"
    translations.write_text('{"question_id": "q", "question": "' + "y" * 500 + '"}\n')
    _one_error(lambda: load_question_translations(translations), translations, "line 1",
               "more than 100 bytes")


def test_a_string_over_the_limit_in_a_line_names_line_and_field(
        unchanged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonio, "MAX_STRING_CHARS", 50)
    p = unchanged / "rankings.jsonl"
    p.write_text(json.dumps({"question_id": "q", "ranked_session_ids": ["s" * 60]}) + "\n")
    err = _one_error(lambda: read_rankings(p), p, "line 1", "a string of 60 characters")
    assert isinstance(err, InputError) and err.field == "ranked_session_ids[0]"


# --------------------------------------------------------------------------- byte order mark
def test_a_bom_before_a_dataset_is_read_as_the_dataset(unchanged: Path) -> None:
    p = unchanged / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + TINY_LME.read_bytes())
    plain = [q.question_id for q in load_longmemeval(TINY_LME).questions]
    assert [q.question_id for q in iter_longmemeval(p)] == plain
    assert [q.question_id for q in load_longmemeval(p).questions] == plain


def test_a_bom_before_json_lines_and_documents_is_accepted(unchanged: Path) -> None:
    p = unchanged / "rankings.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + b'{"question_id": "q", "ranked_session_ids": ["s"]}\n')
    assert read_rankings(p) == {"q": ["s"]}
    doc = unchanged / "doc.json"
    doc.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert _jsonio.read_json_document(doc) == {"a": 1}


def test_a_bom_inside_json_lines_is_an_error_naming_the_line(unchanged: Path) -> None:
    p = unchanged / "rankings.jsonl"
    p.write_bytes(b'{"question_id": "q", "ranked_session_ids": []}\n'
                  b'\xef\xbb\xbf{"question_id": "r", "ranked_session_ids": []}\n')
    _one_error(lambda: read_rankings(p), p, "line 2", "not valid JSON")


# --------------------------------------------------------------------------- special files
FIFO_READERS = {
    "dataset": "from engram_eval.data.longmemeval import load_longmemeval as f",
    "rows": "from engram_eval.runs.rows import scan_rows as f",
    "rankings": "from engram_eval.scoring.score import read_rankings as f",
    "manifest": "from engram_eval.provenance.frozen import load_manifest as f",
    "document": "from engram_eval.data._jsonio import read_json_document as f",
}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("name", sorted(FIFO_READERS))
def test_a_fifo_is_refused_without_blocking(unchanged: Path, name: str) -> None:
    fifo = unchanged / f"{name}.json"
    os.mkfifo(fifo)
    code = (f"{FIFO_READERS[name]}\nimport sys\n"
            "from engram_eval.errors import EngramEvalError\n"
            "try:\n    f(sys.argv[1])\n"
            "except (EngramEvalError, OSError) as e:\n    print(type(e).__name__, e)\n"
            "    sys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True,
                          text=True, timeout=120, env=env, cwd=unchanged)
    assert proc.returncode == 3, proc.stderr
    assert str(fifo) in proc.stdout and "not a regular file" in proc.stdout
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- store values
def test_a_store_meta_value_nested_deep_is_a_data_error(unchanged: Path) -> None:
    from engram_eval.production.store import _meta_value

    p = unchanged / "store.sqlite"
    err = _one_error(lambda: _meta_value(p, "dim", _deep()), p, "meta 'dim'", "nested deeper")
    assert "damaged" in str(err)


# --------------------------------------------------------------------------- tune grid
def test_a_huge_tune_grid_is_one_error_before_enumeration() -> None:
    base = T.Candidate("rrf", "minmax", 60.0, (("dense", 1.0), ("bm25_user", 1.0)), False, 0.0)
    values = [float(i) for i in range(100)]
    grid = {"rrf_k": values, "weights": {"dense": values, "bm25_user": values},
            "temporal": [True], "temporal_boost": values[:100]}
    assert T.candidate_count(grid, base, ["dense", "bm25_user"]) == 10**8
    with pytest.raises(ConfigError, match="100000000 combinations"):
        T.candidates(grid, base, ["dense", "bm25_user"])


def test_a_small_tune_grid_counts_what_it_enumerates() -> None:
    base = T.Candidate("rrf", "minmax", 60.0, (("dense", 1.0), ("bm25_user", 1.0)), False, 0.0)
    grid = {"fusion": ["rrf", "convex"], "rrf_k": [10.0, 60.0],
            "normalisation": ["minmax"], "weights": {"dense": [1.0], "bm25_user": [0.0, 1.0]}}
    n = T.candidate_count(grid, base, ["dense", "bm25_user"])
    assert n == 6 and len(T.candidates(grid, base, ["dense", "bm25_user"])) == n


# --------------------------------------------------------------------------- CLI numbers
@pytest.mark.parametrize("argv,needle", [
    (["answer", "--temperature", "nan"], "argument --temperature: 'nan' is not a finite"),
    (["compare", "a", "b", "--seed", "-3"], "argument --seed: '-3': a seed must be >= 0"),
    (["run", "x.json", "--rrf-k", "inf"], "argument --rrf-k: 'inf' is not a finite"),
    (["run", str(TINY_LME), "--shard", "5/2", "--output", "o.jsonl"], "config field shard"),
])
def test_bad_cli_numbers_are_one_usage_error(unchanged: Path, argv: list[str],
                                             needle: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", *argv],
                          capture_output=True, text=True, timeout=300, env=env,
                          cwd=unchanged)
    assert proc.returncode != 0
    assert needle in proc.stderr, proc.stderr
    assert "people_overrides" not in proc.stderr and "Traceback" not in proc.stderr
    assert list(unchanged.iterdir()) == []
