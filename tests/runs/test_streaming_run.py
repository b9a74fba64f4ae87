"""The runner streams LongMemEval files (engram_eval.data.datasets.open_source, two passes).

* rows are byte-identical (apart from the timing field) to the in-memory reference path,
  with the same sidecar fingerprint, for a whole run, a selection + shard, and a resume;
* a bad record anywhere fails with the in-memory loader's message before any output exists;
* a file changed between the passes is refused;
* peak traced memory of a whole run (dummy retriever) does not grow with the file: a file
  with 4x the questions (same per-question size) needs far less than 4x the memory, and
  stays well under the file's size.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from engram_eval.data import datasets
from engram_eval.data.datasets import open_source
from engram_eval.data.longmemeval import load_longmemeval
from engram_eval.errors import DataError, ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.runs.config import RunConfig
from engram_eval.runs.runner import run

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"
TIMING = re.compile(rb', "timing": \{"seconds": [0-9.eE+-]+\}\}$')


def _quiet(_: str) -> None:
    pass


def _lines(path: Path) -> list[bytes]:
    """Each row's bytes with the timing value removed (the only field allowed to differ)."""
    out = []
    for line in path.read_bytes().splitlines():
        assert TIMING.search(line), line[-80:]
        out.append(TIMING.sub(b"}", line))
    return out


def _run_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: Path, tag: str,
              **cfg: Any) -> tuple[Path, Path]:
    streamed, whole = tmp_path / f"{tag}-streamed.jsonl", tmp_path / f"{tag}-memory.jsonl"
    run(RunConfig(retriever="dummy", progress=False, **cfg), data, streamed, echo=_quiet)
    monkeypatch.setattr(datasets, "STREAM_LONGMEMEVAL", False)
    run(RunConfig(retriever="dummy", progress=False, **cfg), data, whole, echo=_quiet)
    monkeypatch.setattr(datasets, "STREAM_LONGMEMEVAL", True)
    return streamed, whole


def _fingerprint(out: Path) -> str:
    return str(json.loads(sidecar_path(out).read_text())["fingerprint"])


def test_open_source_indexes_without_holding_questions() -> None:
    src = open_source(FIXTURE)
    ref = load_longmemeval(FIXTURE).questions
    assert src.streamed and src._by_id is None
    assert src.ids == tuple(q.question_id for q in ref)
    assert src.types == tuple(q.question_type for q in ref)
    pick = [ref[1].question_id, ref[4].question_id, ref[-1].question_id]
    assert list(src.iter_questions(pick)) == [ref[1], ref[4], ref[-1]]
    with pytest.raises(ValueError, match="file order"):
        list(src.iter_questions(pick[::-1]))


def test_streamed_rows_equal_in_memory_rows(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    streamed, whole = _run_both(tmp_path, monkeypatch, FIXTURE, "all")
    n = len(load_longmemeval(FIXTURE).questions)
    assert len(_lines(streamed)) == n
    assert _lines(streamed) == _lines(whole)
    assert _fingerprint(streamed) == _fingerprint(whole)


def test_streamed_selection_and_shard_equal_in_memory(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [q.question_id for q in load_longmemeval(FIXTURE).questions]
    pick = (ids[7], ids[2], ids[5], ids[9], ids[0])  # given out of order: file order is kept
    streamed, whole = _run_both(tmp_path, monkeypatch, FIXTURE, "sel",
                                question_ids=pick, limit=4, shard="0/2")
    assert _lines(streamed) == _lines(whole)
    assert _fingerprint(streamed) == _fingerprint(whole)
    got = [json.loads(x)["question_id"] for x in _lines(streamed)]
    assert got == [i for i in ids if i in got]  # file order


def test_streamed_resume_continues_in_selection_order(tmp_path: Path) -> None:
    full = tmp_path / "full.jsonl"
    run(RunConfig(retriever="dummy", progress=False), FIXTURE, full, echo=_quiet)
    part = tmp_path / "part.jsonl"
    run(RunConfig(retriever="dummy", progress=False), FIXTURE, part, echo=_quiet)
    lines = part.read_bytes().splitlines(keepends=True)
    part.write_bytes(b"".join(lines[:3]) + lines[3][:25])  # 3 rows and a torn 4th
    out = run(RunConfig(retriever="dummy", progress=False), FIXTURE, part, resume=True,
              echo=_quiet)
    assert out.n_written == len(lines) - 3
    assert _lines(part) == _lines(full)


def test_bad_record_fails_first_with_the_in_memory_message(tmp_path: Path) -> None:
    raw = json.loads(FIXTURE.read_text())
    raw[len(raw) // 2]["haystack_sessions"][0][0]["content"] = 7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(DataError) as whole:
        load_longmemeval(bad)
    out = tmp_path / "out.jsonl"
    with pytest.raises(DataError) as got:
        run(RunConfig(retriever="dummy", progress=False), bad, out, echo=_quiet)
    assert str(got.value) == str(whole.value)
    assert not out.exists() and not sidecar_path(out).exists()


def test_json_syntax_error_gives_the_in_memory_message(tmp_path: Path) -> None:
    text = FIXTURE.read_text()
    bad = tmp_path / "syntax.json"
    cut = text.index('"question_id": "lme_t05"')
    bad.write_text(text[:cut] + "," + text[cut:])  # a stray comma inside record 5
    with pytest.raises(DataError) as whole:
        load_longmemeval(bad)
    with pytest.raises(DataError) as got:
        open_source(bad)
    assert str(got.value) == str(whole.value)


def test_file_changed_between_passes_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "d.json"
    data.write_bytes(FIXTURE.read_bytes())
    src = open_source(data)
    data.write_bytes(FIXTURE.read_bytes() + b"\n\n")
    with pytest.raises(ProvenanceError, match="changed"):
        list(src.iter_questions(src.ids[:1]))


def _big_file(tmp_path: Path, copies: int) -> Path:
    """``copies`` x the fixture's questions (new ids), every assistant turn padded so that
    the file is dominated by haystack text, as LongMemEval_M is."""
    raw = json.loads(FIXTURE.read_text())
    pad = " filler" * 1500
    path = tmp_path / f"big{copies}.json"
    with path.open("w", encoding="utf-8") as f:
        f.write("[")
        for c in range(copies):
            for k, r in enumerate(raw):
                rec = json.loads(json.dumps(r))
                rec["question_id"] = f"{r['question_id']}_c{c}"
                for session in rec["haystack_sessions"]:
                    for turn in session:
                        if turn["role"] == "assistant":
                            turn["content"] += pad
                f.write(("," if c or k else "") + json.dumps(rec))
        f.write("]")
    return path


def test_peak_memory_of_a_run_does_not_grow_with_the_file(tmp_path: Path) -> None:
    run(RunConfig(retriever="dummy", progress=False), FIXTURE, tmp_path / "warm.jsonl",
        echo=_quiet)  # imports and schema caches, outside the measurement

    def peak(copies: int) -> tuple[int, int]:
        data = _big_file(tmp_path, copies)
        tracemalloc.start()
        try:
            run(RunConfig(retriever="dummy", progress=False, trace_sessions=1), data,
                tmp_path / f"out{copies}.jsonl", echo=_quiet)
            _, top = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return top, data.stat().st_size

    small, small_size = peak(2)
    big, big_size = peak(8)
    assert big_size > 3.9 * small_size
    # Whole-file loading would need more than the file (4x the small run's peak).
    assert big < big_size / 4, (big, big_size)
    assert big < 1.5 * small, (small, big)
