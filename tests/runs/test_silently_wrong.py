"""Issue 28, "silently wrong": inputs that used to give a plausible result without a word.

* a partial run (interrupted: fewer rows than its selection, no summary, no completed run
  recorded over its rows) is refused by every command that reads a finished run (export,
  ``export --official-log``, trec, export-context, compare, analyze, tune);
* ``export --official-log`` with another dataset holding the same question ids is refused
  (the log carries the dataset's questions and answers beside the run's ranking);
* gold ids absent from the haystack are said (a warning naming a question) by ``run`` and
  ``score``, counted in a run's summary (``gold_absent_from_haystack``, re-counted by
  ``verify --dataset``; merge counts it too) and in ``score``'s counts, and the question is
  scored as missed, as before;
* an impossible date in a production fixture (a memory's ``date``, a question's ``now``)
  or given to the memory store is one error naming it, not a date the temporal step
  silently ignores."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from conftest import TINY_LONGMEMEVAL

from engram_eval.cli import main as cli
from engram_eval.errors import DataError
from engram_eval.provenance.sidecar import sidecar_path, summary_path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KEPT = 7  # rows an interrupted run kept


@pytest.fixture
def partial(pristine: Path, tmp_path: Path) -> Path:
    """The pristine run as an interruption leaves it: its first rows, no summary, and a
    last run entry without ``rows_sha256`` (recorded only by a completed run)."""
    out = tmp_path / "run" / "partial.jsonl"
    out.parent.mkdir()
    lines = pristine.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:KEPT]))
    meta = json.loads(sidecar_path(pristine).read_text(encoding="utf-8"))
    entry = meta["runs"][-1]
    del entry["rows_sha256"]
    entry["questions_written"] = KEPT
    sidecar_path(out).write_text(json.dumps(meta), encoding="utf-8")
    return out


def _commands(run: Path, out: Path) -> dict[str, list[str]]:
    grid = out / "grid.yaml"
    grid.write_text("rrf_k: [10, 60]\n", encoding="utf-8")
    return {
        "export": ["export", str(run), "--public", str(out / "p.jsonl")],
        "official-log": ["export", str(run), "--official-log", str(out / "l.jsonl"),
                         "--dataset", str(TINY_LONGMEMEVAL)],
        "trec": ["trec", str(run), "--trec-run", str(out / "t.run")],
        "export-context": ["export-context", str(run), "--dataset", str(TINY_LONGMEMEVAL),
                           "--output", str(out / "c.jsonl"), "--top-k", "2"],
        "compare": ["compare", str(run), str(run)],
        "analyze": ["analyze", str(run)],
        "tune": ["tune", str(run), "--grid", str(grid), "--output", str(out / "t.yaml")],
    }


@pytest.mark.parametrize("command", ["export", "official-log", "trec", "export-context",
                                     "compare", "analyze", "tune"])
def test_a_partial_run_is_refused_by_every_reader(command: str, partial: Path,
                                                  tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    args = _commands(partial, out)[command]
    before = sorted(p.name for p in out.iterdir())
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{partial}: the run is unfinished: {KEPT} of the 12 selected" in err[0], err[0]
    assert "--resume" in err[0]
    assert sorted(p.name for p in out.iterdir()) == before


def test_the_same_rows_completed_are_read(partial: Path, pristine: Path,
                                          tmp_path: Path) -> None:
    """Not a refusal of every run without a summary: a completed run entry over these very
    rows (the summary lost, say) is a finished run."""
    from engram_eval.runs.reader import read_run

    shutil.copyfile(pristine, partial)
    shutil.copyfile(sidecar_path(pristine), sidecar_path(partial))
    assert not summary_path(partial).exists()
    assert len(read_run(partial).rows) == 12


def test_official_log_refuses_another_dataset_with_the_same_ids(pristine: Path,
                                                                tmp_path: Path) -> None:
    from engram_eval.errors import ProvenanceError
    from engram_eval.runs.export import export_official_log

    data = json.loads(TINY_LONGMEMEVAL.read_text(encoding="utf-8"))
    data[0]["answer"] = "another answer"  # same ids, another dataset
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data), encoding="utf-8")
    log = tmp_path / "log.jsonl"
    with pytest.raises(ProvenanceError, match=r"other\.json: sha256 .* is not the dataset of"):
        export_official_log(pristine, log, other)
    assert not log.exists()
    same = tmp_path / "same.json"
    shutil.copyfile(TINY_LONGMEMEVAL, same)  # the same bytes under another name: fine
    assert export_official_log(pristine, log, same) == 12


def _gold_gone(tmp_path: Path) -> tuple[Path, str]:
    """The tiny dataset with its first question's answer session id out of its haystack."""
    data = json.loads(TINY_LONGMEMEVAL.read_text(encoding="utf-8"))
    data[0]["answer_session_ids"] = ["answer_gone_1"]
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(data), encoding="utf-8")
    return ds, data[0]["question_id"]


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not in their haystack" in r.getMessage()]


def test_gold_absent_from_the_haystack_is_said(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig

    ds, qid = _gold_gone(tmp_path)
    out = tmp_path / "r.jsonl"
    with caplog.at_level(logging.WARNING, logger="engram_eval.runs.runner"):
        runner.run(RunConfig(retriever="flat-bm25", progress=False), ds, out,
                   echo=lambda m: None)
    said = _said(caplog)
    assert len(said) == 1 and "1 selected question(s)" in said[0]
    assert f"{qid}: answer_gone_1" in said[0] and "gold_absent_from_haystack" in said[0]
    row = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert row["question_id"] == qid and row["gold"]["answerable"] == ["answer_gone_1"]
    assert row["metrics"]["answerable"]["recall_any@10"] == 0.0  # missed, as before
    summary = json.loads(summary_path(out).read_text(encoding="utf-8"))
    assert summary["gold_absent_from_haystack"] == 1  # recorded, not only logged


def test_the_gold_absent_count_is_verified_and_old_summaries_still_verify(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """verify --dataset re-counts the key from the dataset (a forged count fails, a
    summary written before the key existed, without it, still verifies), and prints it."""
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig
    from engram_eval.runs.verify import verify

    ds, _ = _gold_gone(tmp_path)
    out = tmp_path / "r.jsonl"
    runner.run(RunConfig(retriever="flat-bm25", progress=False), ds, out, echo=lambda m: None)
    assert verify(out, ds).verified
    assert cli.main(["verify", str(out), "--dataset", str(ds)]) == 0
    assert "gold absent from the haystack: 1 question(s)" in capsys.readouterr().out
    spath = summary_path(out)
    good = json.loads(spath.read_text(encoding="utf-8"))
    for forged in (0, 2, True, "1"):
        spath.write_text(json.dumps({**good, "gold_absent_from_haystack": forged}),
                         encoding="utf-8")
        rep = verify(out, ds)
        assert not rep.ok and "gold_absent_from_haystack" in rep.format(), forged
    old = {k: v for k, v in good.items() if k != "gold_absent_from_haystack"}
    spath.write_text(json.dumps(old), encoding="utf-8")  # as a published run's summary
    assert verify(out, ds).verified


def test_score_says_gold_absent_from_the_haystack(tmp_path: Path, pristine: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """engram-eval score: the same warning once, and the count in its printed counts and
    in the summary it writes."""
    from engram_eval.scoring.score import score

    ds, qid = _gold_gone(tmp_path)
    rankings = tmp_path / "rankings.jsonl"
    rankings.write_text("".join(
        json.dumps({"question_id": r["question_id"],
                    "ranked_session_ids": r["ranked_session_ids"]}) + "\n"
        for r in map(json.loads, pristine.read_text(encoding="utf-8").splitlines())),
        encoding="utf-8")
    out = tmp_path / "summary.json"
    with caplog.at_level(logging.WARNING):
        assert cli.main(["score", str(rankings), "--dataset", str(ds), "--output",
                         str(out)]) == 0
    said = _said(caplog)
    assert len(said) == 1 and f"{qid}: answer_gone_1" in said[0] and str(ds) in said[0]
    printed = capsys.readouterr().out
    assert "gold_absent_from_haystack=1" in printed.splitlines()[0]
    assert json.loads(out.read_text(encoding="utf-8"))["counts"][
        "gold_absent_from_haystack"] == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        scored = score({qid: []}, TINY_LONGMEMEVAL)
    assert scored["counts"]["gold_absent_from_haystack"] == 0 and not _said(caplog)


def test_a_merged_run_counts_gold_absent_from_the_haystack(tmp_path: Path) -> None:
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig
    from engram_eval.runs.merge import merge
    from engram_eval.runs.verify import verify

    ds, _ = _gold_gone(tmp_path)
    shards = []
    for i in range(2):
        out = tmp_path / f"s{i}.jsonl"
        runner.run(RunConfig(retriever="flat-bm25", progress=False, shard=f"{i}/2"), ds, out,
                   echo=lambda m: None)
        shards.append(out)
    counts = [json.loads(summary_path(s).read_text())["gold_absent_from_haystack"]
              for s in shards]
    assert sorted(counts) == [0, 1]
    merged = tmp_path / "merged.jsonl"
    summary = merge(shards, merged, dataset=ds)
    assert summary["gold_absent_from_haystack"] == 1
    assert summary["unparsable_dates"] == {"question_date": 0, "session_dates": 0}
    assert verify(merged, ds).verified


def test_no_warning_when_every_gold_id_is_in_the_haystack(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig

    with caplog.at_level(logging.WARNING, logger="engram_eval.runs.runner"):
        runner.run(RunConfig(retriever="flat-bm25", progress=False), TINY_LONGMEMEVAL,
                   tmp_path / "r.jsonl", echo=lambda m: None)
    assert not [r for r in caplog.records if "not in their haystack" in r.getMessage()]


@pytest.mark.parametrize(("where", "value"), [
    ("date", "2024-02-30"), ("date", "2023/02/29 (Wed) 10:00"), ("date", "soon"),
    ("now", "2024-13-01"), ("now", "31 April 2024")])
def test_an_impossible_production_date_is_one_error(where: str, value: str,
                                                    tmp_path: Path) -> None:
    from engram_eval.production_eval.fixture import load_fixture

    doc = json.loads((FIXTURES / "production" / "dev.json").read_text(encoding="utf-8"))
    case = doc["cases"][0]
    if where == "date":
        case["memories"][0]["date"] = value
        field = "memories[0].date"
    else:
        case["questions"][0]["now"] = value
        field = "questions[0].now"
    path = tmp_path / "fixture.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_fixture(path)
    msg = str(e.value)
    assert str(path) in msg and case["case_id"] in msg and field in msg, msg
    assert repr(value) in msg and "not a calendar date" in msg


def test_the_shipped_fixtures_have_only_real_dates() -> None:
    from engram_eval.production_eval.fixture import validate_document

    for name in ("dev", "validation_v2", "validation_v3"):
        path = FIXTURES / "production" / f"{name}.json"
        validate_document(json.loads(path.read_text(encoding="utf-8")), path)


def test_the_store_refuses_an_impossible_date(tmp_path: Path) -> None:
    from engram_eval.production.store import Memory, MemoryStore

    class NoEngine:  # the date is checked before the engine is asked anything
        def pieces(self, memories: object) -> list:
            raise AssertionError("reached the engine")

    store = MemoryStore(tmp_path / "s.sqlite3", NoEngine(), None)  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"memory 'm1'.*date.*'2024-02-30' is not a calendar"):
        store.add([Memory("m1", "text", "2024-02-30")])
    with pytest.raises(DataError, match=r"now.*'2024-13-01' is not a calendar"):
        store.search("q", now="2024-13-01")


def test_one_date_reader_serves_fixtures_the_store_and_locomo(tmp_path: Path) -> None:
    """data.dates.read_date is the one check of a record's date field: the fixture's, the
    store's and LoCoMo's errors have one shape (file, record, field, and the forms read)."""
    from engram_eval.data.dates import FORMS, read_date
    from engram_eval.data.locomo import load_locomo

    p = tmp_path / "x.json"
    for kwargs, value, says in (
            ({"readable": True}, "2024-02-30", f"'2024-02-30' is not a calendar date (an "
                                               f"impossible day, or no date this package "
                                               f"reads: {FORMS}); leave it out for none"),
            ({"required": True, "of": "conversation.session_2"}, None,
             "missing date for conversation.session_2"),
            ({}, 20240302, "a date must be a string, got int")):
        with pytest.raises(DataError) as e:
            read_date(p, "rec", "when", value, **kwargs)  # type: ignore[arg-type]
        assert str(e.value) == f"{p}: record rec: field 'when': {says}"
    assert read_date(p, "rec", "when", None) == ""
    assert read_date(p, "rec", "when", "", readable=True) == ""
    assert read_date(p, "rec", "when", "2024/03/02 (Sat) 10:00", readable=True) != ""
    data = json.loads((FIXTURES / "locomo_tiny.json").read_text(encoding="utf-8"))
    conv = data[0]["conversation"]
    del conv["session_2_date_time"]
    bad = tmp_path / "locomo.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DataError, match=r"field 'conversation\.session_2_date_time': missing "
                                        r"date for conversation\.session_2"):
        load_locomo(bad)
