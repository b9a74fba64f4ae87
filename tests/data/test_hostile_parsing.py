"""Hostile input (issue 15, items 1 and 6): bounded parsing, and say, don't swallow.

* nested ``[]`` (400 KB, at the top level or inside one record field) fails with one
  DataError naming the file, the record and the field, while streaming, before memory grows
  (run through the CLI in a subprocess under an address-space limit, so a regression fails the
  test instead of taking the machine down);
* nesting depth 2000 inside a record (deeper than Python's JSON parser and jsonschema can
  recurse) is the same clear error on every loader, never a RecursionError traceback;
* a YAML alias bomb (anchors and aliases), a duplicate key and deep YAML nesting are each one
  short ConfigError naming the file, the line and the key; echoed config values are short;
* unparsable question / session dates are counted in the run summary and said once in the log;
  ``verify --dataset`` recounts them;
* an empty dataset is refused before any output exists; a zero-row run is never VERIFIED.

Every test also checks that nothing outside its temporary directory was created or changed.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_eval.cli import main as cli
from engram_eval.data import _jsonio
from engram_eval.data.datasets import open_source
from engram_eval.data.locomo import load_locomo
from engram_eval.data.longmemeval import iter_longmemeval, load_longmemeval
from engram_eval.data.translations import load_question_translations
from engram_eval.errors import ConfigError, DataError
from engram_eval.provenance.sidecar import summary_path
from engram_eval.runs.config import RunConfig, read_yaml_mapping
from engram_eval.runs.runner import run
from engram_eval.runs.shard import apply_shard
from engram_eval.runs.verify import verify

REPO = Path(__file__).resolve().parents[2]
TINY_LME = REPO / "fixtures" / "longmemeval_tiny.json"
TINY_LOCOMO = REPO / "fixtures" / "locomo_tiny.json"
MEMORY_LIMIT = 1536 * 2**20  # bytes of address space for a subprocess that parses a bomb
NEST = 200_000  # 200k "[" + 200k "]" = 400 KB


# --------------------------------------------------------------------------- helpers
def _tree(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    if root.exists():
        for p in sorted(root.rglob("*")):
            if p.is_file():
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def _repo_snapshot() -> dict[str, tuple[int, int]]:
    return {**_tree(REPO / "fixtures"), **_tree(REPO / "results")}


class Guard(type(Path())):  # type: ignore[misc]
    """``tmp_path`` (a Path) that remembers what was there: :meth:`inputs_written` is called
    once a test has written its input files; afterwards only ``self / "out"`` may change."""

    before: dict[str, tuple[int, int]]

    def inputs_written(self) -> None:
        self.before = _tree(self)


@pytest.fixture
def unchanged(tmp_path: Path) -> Iterator[Guard]:
    """``tmp_path``; after the test, nothing in it (once its inputs were written), in
    fixtures/ or in results/ changed except under ``tmp_path / "out"`` (the only place a test
    may write results)."""
    guard = Guard(tmp_path)
    (guard / "out").mkdir()
    repo_before = _repo_snapshot()
    guard.before = _tree(guard)
    yield guard
    assert _repo_snapshot() == repo_before, "fixtures/ or results/ changed"
    after = _tree(guard)
    out_dir = str(guard / "out") + os.sep
    changed = sorted(k for k in set(guard.before) | set(after)
                     if guard.before.get(k) != after.get(k) and not k.startswith(out_dir))
    assert not changed, f"files outside the output dir were created or changed: {changed}"


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _cli_subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    """``engram-eval ARGS`` in a child under :data:`MEMORY_LIMIT` of address space."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "engram_eval.cli.main", *args],
                          capture_output=True, text=True, env=env, cwd=REPO,
                          preexec_fn=_limit_memory, timeout=600, check=False)


def _records() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(TINY_LME.read_text(encoding="utf-8"))
    return data


def _with_field(path: Path, field: str, raw_json: str, index: int = 0) -> Path:
    """The tiny LongMemEval fixture with record ``index``'s ``field`` replaced by raw JSON."""
    recs = _records()
    recs[index][field] = "__HOSTILE__"
    path.write_text(json.dumps(recs).replace('"__HOSTILE__"', raw_json, 1), encoding="utf-8")
    return path


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _no_output(out: Path) -> None:
    assert not list(out.parent.iterdir()), f"output written: {list(out.parent.iterdir())}"


# --------------------------------------------------------------------------- 1a nested []
def test_nested_brackets_at_top_level_fail_clearly_under_a_memory_limit(unchanged: Guard) -> None:
    data = unchanged / "nested.json"
    data.write_text(_nested(NEST), encoding="utf-8")
    unchanged.inputs_written()
    assert data.stat().st_size == 400_000
    out = unchanged / "out" / "run.jsonl"
    proc = _cli_subprocess("run", str(data), "--output", str(out), "--retriever", "bm25",
                           "--no-progress")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert str(data) in proc.stderr
    assert "record index 0" in proc.stderr
    assert f"nested deeper than {_jsonio.MAX_DEPTH} levels" in proc.stderr
    assert "field '[0][0]" in proc.stderr
    assert len(proc.stderr) < 1000
    _no_output(out)


def test_nested_brackets_inside_a_record_field_fail_clearly_under_a_memory_limit(
        unchanged: Guard) -> None:
    qid = _records()[1]["question_id"]
    data = _with_field(unchanged / "nested_field.json", "answer", _nested(NEST), index=1)
    unchanged.inputs_written()
    assert data.stat().st_size > 400_000
    out = unchanged / "out" / "run.jsonl"
    proc = _cli_subprocess("run", str(data), "--output", str(out), "--retriever", "bm25",
                           "--no-progress")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert str(data) in proc.stderr
    assert f"record question_id={qid} (index 1)" in proc.stderr
    assert "field 'answer[0][0]" in proc.stderr
    assert len(proc.stderr) < 1000
    _no_output(out)


def test_streaming_names_the_record_before_reading_it_whole(unchanged: Guard) -> None:
    """The streamed loader yields the good record before the hostile one, then raises the
    located error (the limit holds while streaming, not after a whole-file parse)."""
    data = _with_field(unchanged / "nested_field.json", "answer", _nested(NEST), index=1)
    unchanged.inputs_written()
    stream = iter_longmemeval(data)
    assert next(stream).question_id == _records()[0]["question_id"]
    with pytest.raises(DataError) as e:
        next(stream)
    assert e.value.record.endswith("(index 1)") and e.value.field.startswith("answer[0][0]")


# --------------------------------------------------------------------------- 1b depth 2000
def test_depth_2000_inside_a_record_is_one_clear_error_on_every_path(unchanged: Guard) -> None:
    qid = _records()[0]["question_id"]
    data = _with_field(unchanged / "deep.json", "haystack_session_ids", _nested(2000))
    unchanged.inputs_written()
    want = (f"{data}: record question_id={qid} (index 0): field "
            "'haystack_session_ids[0][0]")
    # streamed (the runner's path), whole-file (json.loads would raise RecursionError), and
    # the runner's in-memory reference path
    for load in (lambda: list(iter_longmemeval(data)), lambda: load_longmemeval(data),
                 lambda: open_source(data, stream=False), lambda: open_source(data)):
        with pytest.raises(DataError) as e:
            load()
        assert str(e.value).startswith(want), str(e.value)
        assert f"nested deeper than {_jsonio.MAX_DEPTH} levels" in str(e.value)
    out = unchanged / "out" / "run.jsonl"
    proc = _cli_subprocess("run", str(data), "--output", str(out), "--retriever", "bm25",
                           "--no-progress")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert want in proc.stderr
    _no_output(out)


def test_depth_just_over_the_limit_gives_the_same_message_streamed_and_whole(
        unchanged: Guard) -> None:
    """Depth 100: Python's parser would accept it and jsonschema would recurse on it; the
    whole-file check runs first and says exactly what the streamed one says."""
    data = _with_field(unchanged / "deep100.json", "question", _nested(100))
    unchanged.inputs_written()
    with pytest.raises(DataError) as streamed:
        list(iter_longmemeval(data))
    with pytest.raises(DataError) as whole:
        load_longmemeval(data)
    assert str(streamed.value) == str(whole.value)
    assert "field 'question[0]" in str(whole.value)


def test_real_nesting_is_within_the_limit(unchanged: Guard) -> None:
    data = _with_field(unchanged / "deep_ok.json", "question", _nested(_jsonio.MAX_DEPTH - 3))
    unchanged.inputs_written()
    # depth 64 exactly (list, record, field + 61) parses; the schema then refuses the type
    with pytest.raises(DataError) as e:
        load_longmemeval(data)
    assert "nested deeper" not in str(e.value) and e.value.field == "question"
    assert len(load_longmemeval(TINY_LME).questions) == len(_records())


def test_locomo_and_translations_refuse_deep_nesting(unchanged: Guard) -> None:
    recs = json.loads(TINY_LOCOMO.read_text(encoding="utf-8"))
    recs[0]["conversation"]["speaker_a"] = "__HOSTILE__"
    data = unchanged / "locomo_deep.json"
    data.write_text(json.dumps(recs).replace('"__HOSTILE__"', _nested(2000)), encoding="utf-8")
    unchanged.inputs_written()
    with pytest.raises(DataError) as e:
        load_locomo(data)
    assert e.value.field.startswith("conversation.speaker_a[0][0]")
    assert "index 0" in e.value.record  # sample_id comes after conversation in the file
    tr = unchanged / "translations.json"
    tr.write_text('{"q1": "fine", "q2": ' + _nested(3000) + "}", encoding="utf-8")
    unchanged.inputs_written()
    with pytest.raises(DataError) as e:
        load_question_translations(tr)
    assert e.value.record == "question_id=q2" and e.value.field.startswith("[0][0]")


def test_an_overlong_string_is_refused_while_streaming(unchanged: Guard,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonio, "MAX_STRING_CHARS", 1000)
    recs = _records()
    recs[2]["question"] = "x" * 1001
    data = unchanged / "long_string.json"
    data.write_text(json.dumps(recs), encoding="utf-8")
    unchanged.inputs_written()
    for load in (lambda: list(iter_longmemeval(data)), lambda: load_longmemeval(data)):
        with pytest.raises(DataError) as e:
            load()
        assert e.value.field == "question" and e.value.record.endswith("(index 2)")
        assert "a string of 1001 characters (limit 1000)" in str(e.value)


def test_an_integer_too_long_to_convert_is_a_data_error(unchanged: Guard) -> None:
    data = _with_field(unchanged / "bigint.json", "answer", "1" * 5000)
    unchanged.inputs_written()
    with pytest.raises(DataError) as e:
        load_longmemeval(data)
    assert "not valid JSON" in str(e.value) and len(str(e.value)) < 400


# --------------------------------------------------------------------------- 1c / 6d YAML
def _alias_bomb(levels: int = 9) -> str:
    names = "abcdefghijklmnopqrstuvwxyz"[:levels]
    lines = ["bm25_k1:", f"  - &{names[0]} [l,o,l,l,o,l,l,o,l]"]
    for prev, name in zip(names, names[1:], strict=False):
        lines.append(f"  - &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_a_short_config_error_under_a_memory_limit(unchanged: Guard) -> None:
    bomb = unchanged / "bomb.yaml"
    bomb.write_text(_alias_bomb(9), encoding="utf-8")
    unchanged.inputs_written()
    assert bomb.stat().st_size < 400
    out = unchanged / "out" / "run.jsonl"
    proc = _cli_subprocess("run", str(TINY_LME), "--output", str(out), "--retriever", "bm25",
                           "--config", str(bomb), "--no-progress")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert len(proc.stderr.encode()) < 1024
    assert "bm25_k1" in proc.stderr and "&a" in proc.stderr and "line 2" in proc.stderr
    _no_output(out)
    # in process too, for the tune grid's reader (the same loader)
    with pytest.raises(ConfigError) as e:
        read_yaml_mapping(bomb, "grid", "a mapping of grid fields")
    assert len(str(e.value)) < 1024 and "anchor" in str(e.value)


def test_yaml_alias_without_anchor_line_is_refused(unchanged: Guard) -> None:
    cfg = unchanged / "alias.yaml"
    cfg.write_text("retriever: bm25\nbm25_k1: *nowhere\n", encoding="utf-8")
    unchanged.inputs_written()
    with pytest.raises(ConfigError) as e:
        RunConfig.from_yaml(cfg)
    assert str(cfg) in str(e.value) and "bm25_k1" in str(e.value)


def test_duplicate_yaml_key_is_an_error(unchanged: Guard) -> None:
    cfg = unchanged / "dup.yaml"
    cfg.write_text("bm25_k1: 1.2\nretriever: bm25\nbm25_k1: 1.5\n", encoding="utf-8")
    unchanged.inputs_written()
    with pytest.raises(ConfigError) as e:
        RunConfig.from_yaml(cfg)
    msg = str(e.value)
    assert str(cfg) in msg and "line 3" in msg and "duplicate key 'bm25_k1'" in msg
    assert "first at line 1" in msg
    out = unchanged / "out" / "run.jsonl"
    assert cli.main(["run", str(TINY_LME), "--output", str(out), "--retriever", "bm25",
                     "--config", str(cfg), "--no-progress"]) == 2
    _no_output(out)


def test_deep_yaml_and_huge_yaml_are_config_errors(unchanged: Guard) -> None:
    deep = unchanged / "deep.yaml"
    deep.write_text("bm25_k1: " + _nested(3000) + "\n", encoding="utf-8")
    unchanged.inputs_written()
    with pytest.raises(ConfigError) as e:
        RunConfig.from_yaml(deep)
    assert "nested deeper" in str(e.value) and "bm25_k1" in str(e.value)
    big = unchanged / "big.yaml"
    big.write_text("bm25_k1: 1.2\n" + "#" * (2 << 20) + "\n", encoding="utf-8")
    unchanged.inputs_written()
    with pytest.raises(ConfigError) as e:
        RunConfig.from_yaml(big)
    assert "bytes" in str(e.value) and len(str(e.value)) < 300


def test_config_errors_echo_a_short_value(unchanged: Guard) -> None:
    cfg = unchanged / "long.yaml"
    cfg.write_text("bm25_k1: '" + "x" * 100_000 + "'\n", encoding="utf-8")
    unchanged.inputs_written()
    with pytest.raises(ConfigError) as e:
        RunConfig.from_yaml(cfg)
    assert "bm25_k1" in str(e.value) and len(str(e.value)) < 300
    shared: Any = ["lol"] * 9
    for _ in range(9):
        shared = [shared] * 9  # 9**10 strings if expanded
    with pytest.raises(ConfigError) as e:
        RunConfig(bm25_k1=shared)
    assert "bm25_k1" in str(e.value) and len(str(e.value)) < 300
    with pytest.raises(ConfigError) as e:
        RunConfig.from_mapping({"limit": shared})
    assert "limit" in str(e.value) and len(str(e.value)) < 300


# --------------------------------------------------------------------------- 6a dates
def test_unparsable_dates_are_counted_in_the_summary_and_logged_once(
        unchanged: Guard, caplog: pytest.LogCaptureFixture) -> None:
    recs = _records()
    recs[0]["question_date"] = "sometime soonish"
    recs[1]["haystack_dates"][0] = "not a date"
    recs[2]["haystack_dates"][0] = "the day after"
    recs[3]["question_date"] = ""  # absent, not unparsable
    data = unchanged / "dates.json"
    data.write_text(json.dumps(recs), encoding="utf-8")
    unchanged.inputs_written()
    out = unchanged / "out" / "run.jsonl"
    with caplog.at_level(logging.WARNING, logger="engram_eval"):
        outcome = run(RunConfig(retriever="bm25", progress=False), data, out,
                      echo=lambda _: None)
    want = {"question_date": 1, "session_dates": 2}
    assert outcome.summary["unparsable_dates"] == want
    assert json.loads(summary_path(out).read_text())["unparsable_dates"] == want
    lines = [r.getMessage() for r in caplog.records if "cannot be parsed" in r.getMessage()]
    assert len(lines) == 1
    assert "1 question date(s) and 2 session date(s)" in lines[0]
    rep = verify(out, data)
    assert rep.verified, rep.format()
    # a summary that hides them does not verify against the dataset
    s = json.loads(summary_path(out).read_text())
    s["unparsable_dates"] = {"question_date": 0, "session_dates": 0}
    summary_path(out).write_text(json.dumps(s))
    rep = verify(out, data)
    assert not rep.ok and "unparsable_dates" in rep.format()


def test_a_clean_dataset_counts_zero_unparsable_dates(unchanged: Guard,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    out = unchanged / "out" / "run.jsonl"
    with caplog.at_level(logging.WARNING, logger="engram_eval"):
        outcome = run(RunConfig(retriever="bm25", progress=False), TINY_LME, out,
                      echo=lambda _: None)
    assert outcome.summary["unparsable_dates"] == {"question_date": 0, "session_dates": 0}
    assert not [r for r in caplog.records if "cannot be parsed" in r.getMessage()]


# --------------------------------------------------------------------------- 6b empty
@pytest.mark.parametrize("fmt", ["longmemeval", "locomo", "auto"])
def test_an_empty_dataset_is_refused_before_any_output(unchanged: Guard, fmt: str,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    data = unchanged / "empty.json"
    data.write_text("[]\n", encoding="utf-8")
    unchanged.inputs_written()
    out = unchanged / "out" / "run.jsonl"
    rc = cli.main(["run", str(data), "--output", str(out), "--retriever", "bm25",
                   "--dataset-format", fmt, "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{data}: record (file)" in err and "holds no questions" in err
    _no_output(out)
    with pytest.raises(DataError):
        run(RunConfig(retriever="bm25", progress=False, dataset_format=fmt), data, out,
            echo=lambda _: None)
    _no_output(out)


def test_a_locomo_file_without_questions_is_refused(unchanged: Guard) -> None:
    recs = json.loads(TINY_LOCOMO.read_text(encoding="utf-8"))
    for r in recs:
        r["qa"] = []
    data = unchanged / "noqa.json"
    data.write_text(json.dumps(recs), encoding="utf-8")
    unchanged.inputs_written()
    out = unchanged / "out" / "run.jsonl"
    with pytest.raises(DataError) as e:
        run(RunConfig(retriever="bm25", progress=False, dataset_format="locomo"), data, out,
            echo=lambda _: None)
    assert "holds no questions" in str(e.value)
    _no_output(out)


# --------------------------------------------------------------------------- 6c zero rows
def test_a_zero_row_run_is_never_verified(unchanged: Guard,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    ids = [r["question_id"] for r in _records()]
    n = 64
    empty = next(i for i in range(n) if not apply_shard(ids, ids, (i, n)))
    out = unchanged / "out" / "shard.jsonl"
    outcome = run(RunConfig(retriever="bm25", progress=False, shard=f"{empty}/{n}"), TINY_LME,
                  out, echo=lambda _: None)
    assert outcome.n_total == 0 and out.read_bytes() == b""
    rep = verify(out, TINY_LME)
    assert not rep.verified and not rep.ok
    assert "zero rows" in rep.format()
    capsys.readouterr()
    rc = cli.main(["verify", str(out), "--dataset", str(TINY_LME)])
    printed = capsys.readouterr().out
    assert rc != 0
    assert "NOT VERIFIED" in printed and "\nVERIFIED" not in printed
