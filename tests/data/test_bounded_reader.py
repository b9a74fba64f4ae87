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
import special_files

from engram_eval.analysis import tune as T
from engram_eval.data import _jsonio
from engram_eval.data.longmemeval import iter_longmemeval, load_longmemeval
from engram_eval.data.translations import load_question_translations
from engram_eval.errors import ConfigError, DataError, InputError, ProvenanceError
from engram_eval.production.confidence import load_calibration
from engram_eval.production_eval.fixture import read_document
from engram_eval.provenance.frozen import load_manifest, read_ledger
from engram_eval.provenance.sidecar import read_sidecar, sidecar_path, summary_path
from engram_eval.retrieval import fusion as F
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


def test_a_last_line_longer_than_any_row_is_not_a_torn_row(
        unchanged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A result or hypotheses file ending in more bytes without a newline than any row
    holds (a gzip bomb of one line, say) is refused as such, not offered a repair
    (``--resume``) as a row cut short by an interruption; a short torn tail still is one."""
    monkeypatch.setattr(_jsonio, "MAX_LINE_BYTES", 100)
    p = unchanged / "rows.jsonl.gz"
    p.write_bytes(gzip.compress(b'{"question_id": "a"}\n' + b" " * 500))
    err = _one_error(lambda: scan_rows(p, required=("question_id",)), p, "line 2",
                     "no row is that long", kind=ProvenanceError)
    assert isinstance(err, InputError)
    p.write_bytes(gzip.compress(b'{"question_id": "a"}\n{"question_id": "b", "tr'))
    assert scan_rows(p, required=("question_id",)).torn_bytes == len(b'{"question_id": "b", "tr')


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


# --------------------------------------------------------------------------- lone surrogates
#: ``\uXXXX`` escapes written into a dataset's turn text (raw JSON), and the escape the one
#: error names (None: the text is valid and reads the same in both loaders).
SURROGATES: dict[str, tuple[bytes, str | None]] = {
    "lone-high": (rb"before \ud800 after", r"\ud800"),
    "lone-low": (rb"before \udc00 after", r"\udc00"),
    "high-then-not-low": (rb"\ud83d\u0041", r"\ud83d"),  # ijson's C backend read it as U+1F441
    "low-then-high": (rb"\ude00\ud83d", r"\ude00"),
    "pair-then-lone-low": (rb"\ud83d\ude00\ude00", r"\ude00"),
    "after-an-escaped-backslash": (rb"\\\ud800", r"\ud800"),  # \\ then \ud800
    "at-the-end": (rb"text\uDBFF", r"\uDBFF"),
    "pair": (rb"party \ud83c\udf89 time", None),
    "upper-case-pair": (rb"\uD83D\uDE00", None),
    "escaped-backslash-then-text": (rb"\\ud800", None),  # a backslash, then 'ud800'
}
TURN = ("lme_t03", 2, "haystack_sessions[1][0].content")  # question id, index, field
PLACE = "@@TEXT@@"


def _lme_with(text: bytes, *, at: int | None = None) -> bytes:
    """The tiny LongMemEval file with ``text`` (raw JSON string content) as the first turn
    of the second session of its third question; ``at``: padding in the first question
    moves that text to start at byte ``at`` of the file."""
    records = json.loads(TINY_LME.read_text(encoding="utf-8"))
    records[TURN[1]]["haystack_sessions"][1][0]["content"] = PLACE
    records[0]["haystack_sessions"][0][0]["content"] += "@@PAD@@"
    raw = json.dumps(records).encode()
    pad = 0 if at is None else at - raw.index(PLACE.encode()) + len(b"@@PAD@@")
    assert pad >= 0
    out = raw.replace(b"@@PAD@@", b" " * pad).replace(PLACE.encode(), text)
    assert at is None or out.index(text) == at
    return out


def _outcome(call: Callable[[], Any]) -> Any:
    """What a loader gives: the error's text, or what it read."""
    try:
        return call()
    except InputError as e:
        return ("error", str(e))


def _both_loaders(p: Path) -> tuple[Any, Any]:
    whole = _outcome(lambda: load_longmemeval(p).questions)
    stream = _outcome(lambda: tuple(iter_longmemeval(p)))
    return whole, stream


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("case", sorted(SURROGATES))
def test_a_lone_surrogate_escape_is_the_same_error_in_both_loaders(
        unchanged: Path, case: str, gz: bool) -> None:
    text, escape = SURROGATES[case]
    raw = _lme_with(text)
    p = unchanged / ("ds.json.gz" if gz else "ds.json")
    p.write_bytes(gzip.compress(raw) if gz else raw)
    whole, stream = _both_loaders(p)
    assert whole == stream  # the json module and ijson, one answer
    if escape is None:
        expected = json.loads(b'"' + text + b'"')
        assert [q.question_id for q in whole] == [q.question_id for q in
                                                  load_longmemeval(TINY_LME).questions]
        assert whole[TURN[1]].sessions[1].turns[0].content == expected
        return
    message = whole[1]
    qid, index, field = TURN
    assert message.startswith(f"{p}: record question_id={qid} (index {index}): "
                              f"field '{field}': a lone surrogate escape {escape} at byte "), \
        message
    assert "not a character" in message and len(message) < 400
    assert _outcome(lambda: _jsonio.read_json(p, "question_id")) == whole
    assert _outcome(lambda: list(_jsonio.iter_list_items(p, "question_id"))) == whole


@pytest.mark.parametrize("edge", [1 << 16, 2 << 16, 1 << 20])
@pytest.mark.parametrize("case", ["pair", "lone-high", "after-an-escaped-backslash",
                                  "escaped-backslash-then-text"])
def test_a_surrogate_escape_across_a_read_block_edge_reads_alike(
        unchanged: Path, case: str, edge: int) -> None:
    """The stream is judged block by block (ijson reads 64 KiB at a time, the capped
    reader 1 MiB): a pair, a lone escape or a run of backslashes cut by an edge, at every
    offset from 13 bytes before it to 2 after, reads the same as the whole file."""
    text, escape = SURROGATES[case]
    p = unchanged / "ds.json"
    for shift in range(-13, 3):
        raw = _lme_with(text, at=edge + shift)
        p.write_bytes(raw)
        whole, stream = _both_loaders(p)
        assert whole == stream, (shift, whole, stream)
        assert (escape is None) == (not isinstance(whole, tuple) or whole[0] != "error")


def test_a_surrogate_encoded_in_utf8_bytes_is_the_same_error_in_both_loaders(
        unchanged: Path) -> None:
    """The bytes of U+D800 written as UTF-8 (which the json module would read), and bytes
    that are no UTF-8 at all: one error, the same in both loaders, naming the field."""
    qid, index, field = TURN
    for name, text, reason in (("encoded", b"a \xed\xa0\x80 b", "invalid continuation byte"),
                               ("ff", b"a \xff b", "invalid start byte"),
                               ("cut", b"a \xe2\x82", "invalid continuation byte")):
        p = unchanged / f"{name}.json"
        p.write_bytes(_lme_with(text))
        whole, stream = _both_loaders(p)
        assert whole == stream, name
        assert whole[1].startswith(f"{p}: record question_id={qid} (index {index}): field "
                                   f"'{field}': not valid UTF-8 at byte "), whole
        assert reason in whole[1]


def test_the_stream_check_holds_a_few_bytes_whatever_the_text(unchanged: Path) -> None:
    """Bounded memory: 8 MiB of backslashes and surrogate pairs, fed in 64 KiB blocks, keep
    at most two escapes' worth of bytes held between blocks and come out whole."""
    watch = _jsonio._SurrogateWatch()
    data = (b"\\" * (4 << 20)) + (rb"\ud83d\ude00" * 350_000)
    out = []
    for i in range(0, len(data), 1 << 16):
        out.append(watch.feed(data[i:i + (1 << 16)]))
        assert len(watch.held) <= watch.KEEP
    out.append(watch.feed(b""))
    assert watch.lone == -1 and b"".join(out) == data


def test_a_lone_surrogate_in_json_lines_and_documents_names_line_and_field(
        unchanged: Path) -> None:
    p = unchanged / "rankings.jsonl"
    p.write_bytes(b'{"question_id": "q", "ranked_session_ids": ["s\\ud83d\\ude00"]}\n'
                  b'{"question_id": "r", "ranked_session_ids": ["t", "\\udfff"]}\n')
    err = _one_error(lambda: read_rankings(p), p, "line 2", r"lone surrogate escape \udfff",
                     "of line 2")
    assert isinstance(err, InputError) and err.field == "ranked_session_ids[1]"
    doc = unchanged / "doc.json"
    doc.write_bytes(b'{"settings": {"\\ud800x": 1}}')
    err = _one_error(lambda: _jsonio.read_json_document(doc), doc, "lone surrogate escape")
    assert isinstance(err, InputError) and err.record == "key 'settings'"
    assert err.field == "(a key)"
    side = unchanged / "run.jsonl"
    side.write_text("")
    sidecar_path(side).write_bytes(b'{"dataset": {"name": "\\ud800"}}')
    _one_error(lambda: read_sidecar(side), sidecar_path(side), "lone surrogate escape",
               kind=ProvenanceError)


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
    fifo = special_files.make("fifo", unchanged / f"{name}.json")
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
    base = F.FusionSetting("rrf", "minmax", 60.0, (("dense", 1.0), ("bm25_user", 1.0)), False, 0.0)
    values = [float(i) for i in range(100)]
    grid = {"rrf_k": values, "weights": {"dense": values, "bm25_user": values},
            "temporal": [True], "temporal_boost": values[:100]}
    assert T.candidate_count(grid, base, ["dense", "bm25_user"]) == 10**8
    with pytest.raises(ConfigError, match="100000000 combinations"):
        T.candidates(grid, base, ["dense", "bm25_user"])


def test_a_small_tune_grid_counts_what_it_enumerates() -> None:
    base = F.FusionSetting("rrf", "minmax", 60.0, (("dense", 1.0), ("bm25_user", 1.0)), False, 0.0)
    grid = {"fusion": ["rrf", "convex"], "rrf_k": [10.0, 60.0],
            "normalisation": ["minmax"], "weights": {"dense": [1.0], "bm25_user": [0.0, 1.0]}}
    n = T.candidate_count(grid, base, ["dense", "bm25_user"])
    assert n == 6 and len(T.candidates(grid, base, ["dense", "bm25_user"])) == n


# --------------------------------------------------------------------------- CLI numbers
@pytest.mark.parametrize("argv,needle", [
    (["answer", "--temperature", "nan"], "argument --temperature: 'nan' is not a finite"),
    (["compare", "a", "b", "--seed", "-3"], "argument --seed: '-3': a seed must be >= 0"),
    (["production", "measure", "x.json", "--source-root", ".", "--seed", "-1"],
     "argument --seed: '-1': a seed must be >= 0"),
    (["production", "measure", "x.json", "--source-root", ".", "--bins", "0"],
     "argument --bins: '0': a count must be >= 1"),
    (["production", "calibrate-sessions", "--part", "a=x", "--output", "c.json", "--folds",
      "two"], "argument --folds: 'two' is not an integer"),
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
