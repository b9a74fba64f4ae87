"""Hostile rows and sidecars (issue 43): every forgery is sealed with the package's own
functions (:func:`run_files.reseal`), so what is caught is the content.

* settings the sidecar records that contradict every row's trace (fusion method, weights,
  temporal boost, retriever name) fail ``verify`` without ``--rerun``;
* unknown keys inside ``trace`` (``trace.question.*``, ``trace.sessions[i].*``,
  ``gate_features.*``) and a key repeated in a row's JSON line are refused by the one row
  reader and checker, naming the row and the key;
* rows and records no reader can use (an extra metric key, a 401-digit score,
  ``ranked_session_ids: null``, ``trace`` a string, NaN in a sidecar, ``unparsable_dates`` a
  list) are one clear error from ``verify``, ``report`` and ``tune``, never a traceback, and
  nothing is written; ``score`` and ``analyze`` refuse an unknown ``--protocol``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_files import copy_run, reseal

from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs import runner
from engram_eval.runs import verify as V
from engram_eval.runs.config import RunConfig
from engram_eval.runs.known_fields import SMALL_TRACE_KEYS, row_unknown_fields, trace_keys
from engram_eval.runs.rows import scan_rows

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"


def cfg(**kw: object) -> RunConfig:
    return RunConfig(progress=False, **{"retriever": "bm25", "rerank": False,  # type: ignore[arg-type]
                                        **kw})


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the hybrid pipeline's lexical signals (full traces, gate features)."""
    out = tmp_path_factory.mktemp("bm25") / "bm25.jsonl"
    runner.run(cfg(), FIXTURE, out, echo=lambda m: None)
    return out


@pytest.fixture
def run(pristine: Path, tmp_path: Path) -> Path:
    return copy_run(pristine, tmp_path / "bm25.jsonl")


def failed(rep: V.VerifyReport) -> dict[str, str]:
    return {name: detail for name, status, detail in rep.checks if status == "FAIL"}


def rows_of(path: Path) -> list[dict]:
    return scan_rows(path).rows


def edit_rows(path: Path, fn, qid: str = "lme_t02") -> Path:
    rows = rows_of(path)
    fn(next(r for r in rows if r["question_id"] == qid))
    return reseal(path, rows)


def break_row(path: Path, fn, qid: str = "lme_t02") -> None:
    """Apply ``fn`` to a row, leaving it one no summary can be built from: the rows are
    written as the runner writes them and their hash recorded (:func:`reseal_hash_only`)."""
    from engram_eval.runs.rows import row_line

    rows = rows_of(path)
    fn(next(r for r in rows if r["question_id"] == qid))
    path.write_bytes(b"".join(row_line(r) for r in rows))
    reseal_hash_only(path)


def files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir()}


# --------------------------------------------------------------------------- settings vs traces
def both(key: str, value: object, group: str):
    """The sidecar's config and its retriever section, edited alike (the forger's best)."""
    def edit(meta: dict) -> None:
        meta["config"][key] = value
        meta["retriever"][group][key] = value
    return edit


@pytest.mark.parametrize(("edit", "named"), [
    (both("fusion", "rrf", "fusion"),
     "field 'trace.question.fusion.method': 'convex'; the sidecar's settings give 'rrf'"),
    (both("weight_bm25_user", 0.9, "fusion"),
     "field 'trace.question.fusion.weights.bm25_user': 0.5; the sidecar's settings give 0.9"),
    (both("temporal_boost", 2.0, "temporal"),
     "field 'trace.question.temporal_boost': 1.25; the sidecar's settings give 2.0"),
    (both("temporal", False, "temporal"), "field 'trace.question.temporal': True"),
    (both("use_bm25_assistant", False, "lexical"), "field 'trace.question.signals'"),
    (lambda m: m["config"].__setitem__("fusion", "rrf"),
     "sidecar field 'retriever.fusion.fusion' is 'convex', but config.fusion is 'rrf'"),
    (lambda m: m["retriever"].__setitem__("retriever", "hybrid"),
     "sidecar field 'retriever.retriever' is 'hybrid', but config.retriever is 'bm25'"),
    (lambda m: m["config"].__setitem__("retriever", "hybrid"),
     "but config.retriever is 'hybrid'"),
    (lambda m: m["retriever"]["fusion"].__setitem__("rrf_k", -1.0),
     "sidecar field 'retriever': config field rrf_k"),
])
def test_recorded_settings_that_contradict_the_traces_fail_without_rerun(
        run: Path, edit, named: str) -> None:
    reseal(run, edit_meta=edit)
    for rep in (V.verify(run, FIXTURE), V.verify(run)):
        bad = failed(rep)
        assert V.SETTINGS in bad and named in bad[V.SETTINGS], rep.format()
        assert rep.exit_code == 1


def test_a_contradicted_setting_names_every_row(run: Path) -> None:
    reseal(run, edit_meta=both("fusion", "rrf", "fusion"))
    detail = failed(V.verify(run, FIXTURE))[V.SETTINGS]
    assert detail.startswith("question 'lme_t01': field 'trace.question.fusion.method'")
    assert "(+7 more)" in detail  # 12 rows, 5 shown


def test_people_overrides_are_applied_to_a_haystack_without_chat_roles(tmp_path: Path) -> None:
    """A LoCoMo run traces its people's settings (``people_overrides``): they agree."""
    locomo = ROOT / "fixtures" / "locomo_tiny.json"
    out = tmp_path / "locomo.jsonl"
    runner.run(cfg(), locomo, out, echo=lambda m: None)
    assert any(r["trace"]["question"]["structure"]["kind"] == "people" for r in rows_of(out))
    rep = V.verify(out, locomo)
    assert rep.verified, rep.format()
    reseal(out, edit_meta=lambda m: m["retriever"]["fusion"]["people_overrides"].__setitem__(
        "weight_bm25_user", 0.25))
    bad = failed(V.verify(out, locomo))
    assert V.SETTINGS in bad and "trace.question.fusion.weights.bm25_user" in bad[V.SETTINGS]


# --------------------------------------------------------------------------- unknown trace keys
@pytest.mark.parametrize(("edit", "named"), [
    (lambda r: r["trace"]["question"].__setitem__("verified", True),
     "field 'trace.question.verified': not a field engram-eval writes"),
    (lambda r: r["trace"]["sessions"][1].__setitem__("note", "x"),
     "field 'trace.sessions[1].note': not a field engram-eval writes"),
    (lambda r: r["trace"]["sessions"][0]["gate_features"].__setitem__("confidence", 1.0),
     "field 'trace.sessions[0].gate_features.confidence': not a field engram-eval writes"),
    (lambda r: r["trace"]["sessions"][0].__setitem__("dense", 0.5),
     None),  # a signal the pipeline traces: known (whether it was on is the settings' check)
])
def test_unknown_trace_keys_are_refused(run: Path, edit, named: str | None) -> None:
    edit_rows(run, edit)
    for rep in (V.verify(run, FIXTURE), V.verify(run)):
        bad = failed(rep)
        if named is None:
            assert V.FIELDS not in bad, rep.format()
            continue
        assert V.FIELDS in bad and f"question 'lme_t02': {named}" in bad[V.FIELDS], \
            rep.format()


def test_resume_refuses_a_kept_row_with_an_unknown_trace_key(run: Path) -> None:
    rows = rows_of(run)
    rows[1]["trace"]["sessions"][0]["approved"] = True
    reseal(run, rows[:4])  # an interrupted run, resealed
    before = files(run.parent)
    with pytest.raises(ProvenanceError, match=r"line 2 \(question 'lme_t02'\) fails the check "
                       r"'row fields.*'trace.sessions\[0\].approved'"):
        runner.run(cfg(), FIXTURE, run, resume=True, echo=lambda m: None)
    assert files(run.parent) == before


@pytest.mark.parametrize("retriever", ["dummy", "flat-bm25", "memo-lexical", "bm25"])
def test_the_trace_allow_lists_are_what_each_retriever_writes(tmp_path: Path,
                                                              retriever: str) -> None:
    out = tmp_path / "r.jsonl"
    runner.run(cfg(retriever=retriever), FIXTURE, out, echo=lambda m: None)
    keys = trace_keys(retriever)
    assert keys is not None
    q, s, g = set(), set(), set()
    for r in rows_of(out):
        assert row_unknown_fields(r, retriever) == []
        q |= set(r["trace"]["question"])
        for t in r["trace"]["sessions"]:
            s |= set(t)
            g |= set(t.get("gate_features") or {})
    if retriever in SMALL_TRACE_KEYS:  # listed by hand: nothing stale either
        assert (q, s, g) == (keys.question, keys.session, keys.gate_features)
    else:
        assert g == keys.gate_features and q <= keys.question and s <= keys.session
    assert V.verify(out, FIXTURE).verified


def test_a_repeated_key_in_a_row_line_is_refused_naming_row_and_key(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = run.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2][:-2] + b', "question_type": "multi-session"}\n'
    run.write_bytes(b"".join(lines))
    reseal_hash_only(run)
    named = (f"{run}: record line 3 (question 'lme_t03'): field 'question_type': key "
             "'question_type' appears twice in one object")
    bad = failed(V.verify(run, FIXTURE))
    assert bad["rows: every selected question exactly once"].startswith(named)
    for argv in (["report", str(run), "--output", str(tmp_path / "r.html")],
                 ["tune", str(run), "--grid", str(grid(tmp_path)), "--output",
                  str(tmp_path / "t.yaml")]):
        before = files(tmp_path)
        assert cli.main(argv) == 2
        assert named in capsys.readouterr().err
        assert files(tmp_path) == before


def reseal_hash_only(path: Path) -> None:
    """Record the rows' hash in the sidecar and summary (the rows cannot be parsed, so
    :func:`reseal` cannot rebuild them)."""
    from engram_eval.provenance.records import rows_sha256
    from engram_eval.provenance.sidecar import fingerprint_of

    digest = rows_sha256(path)
    meta = json.loads(sidecar_path(path).read_text())
    meta["runs"][-1]["rows_sha256"] = digest
    meta["fingerprint"] = fingerprint_of(meta)
    sidecar_path(path).write_text(json.dumps(meta))
    summary = json.loads(summary_path(path).read_text())
    summary["rows_sha256"] = digest
    summary_path(path).write_text(json.dumps(summary))


def grid(d: Path) -> Path:
    p = d / "grid.yaml"
    p.write_text("fusion: [rrf, convex]\n")
    return p


# --------------------------------------------------------------------------- no tracebacks
def big_score(path: Path) -> None:
    """The first score of row 1 replaced by a 401-digit integer (valid JSON, parses)."""
    lines = path.read_bytes().splitlines(keepends=True)
    row = json.loads(lines[0])
    first = json.dumps(row["scores"][0])
    lines[0] = lines[0].replace(f'"scores": [{first}'.encode(), b'"scores": [' + b"9" * 401, 1)
    path.write_bytes(b"".join(lines))
    reseal_hash_only(path)


def sidecar_nan(path: Path) -> None:
    meta = json.loads(sidecar_path(path).read_text())
    meta["runs"][-1]["wall_seconds"] = float("nan")
    sidecar_path(path).write_text(json.dumps(meta))  # json writes NaN unless told not to


def dates_list(path: Path) -> None:
    summary = json.loads(summary_path(path).read_text())
    summary["unparsable_dates"] = [1, 2]
    summary_path(path).write_text(json.dumps(summary))


CASES = {
    "extra metric key": (lambda p: break_row(p, lambda r: r["metrics"]["answerable"].__setitem__(
        "bogus@1", 1.0)), "question 'lme_t02': field 'metrics.answerable.bogus@1': not a "
        "metric engram-eval computes"),
    "401-digit score": (big_score, "question 'lme_t01': field 'scores': not a list of finite "
                        "numbers (item 0 is 999999999999999999"),
    "null ranking": (lambda p: break_row(p, lambda r: r.__setitem__("ranked_session_ids",
                                                                    None)),
                     "question 'lme_t02': field 'ranked_session_ids': not a list of session "
                     "ids (None)"),
    "trace a string": (lambda p: break_row(p, lambda r: r.__setitem__("trace", "x")),
                       "question 'lme_t02': field 'trace': 'x' is not an object"),
    "NaN in the sidecar": (sidecar_nan, "metadata.json: record (file): field 'wall_seconds': "
                           "NaN is not a JSON number"),
    "unparsable_dates a list": (dates_list, "field 'unparsable_dates' is [1, 2], not what "
                                "engram-eval writes there"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_verify_report_and_tune_give_one_clear_error(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    forge, named = CASES[case]
    forge(run)
    rep = V.verify(run, FIXTURE)
    assert rep.exit_code == 1 and any(named in d for d in failed(rep).values()), rep.format()
    assert cli.main(["verify", str(run), "--dataset", str(FIXTURE)]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.err and out.out.rstrip().endswith("NOT VERIFIED (a check "
                                                                    "failed)")
    for argv in (["report", str(run), "--output", str(tmp_path / "r.html")],
                 ["report", str(run), "--dataset", str(FIXTURE), "--output",
                  str(tmp_path / "r.html")],
                 ["tune", str(run), "--grid", str(grid(tmp_path)), "--output",
                  str(tmp_path / "t.yaml")]):
        before = files(tmp_path)
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert named in err and "Traceback" not in err, (argv, err)
        assert files(tmp_path) == before


def test_score_refuses_an_unknown_protocol(pristine: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    assert cli.main(["score", str(pristine), "--dataset", str(FIXTURE), "--protocol", "bogus",
                     "--output", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "error: unknown protocol 'bogus'; expected one of answerable, official, "
        "official_nonempty_gold, all, locomo, locomo_no_adversarial")
    assert cli.main(["score", str(pristine), "--dataset", str(FIXTURE), "--protocol",
                     "locomo"]) == 2
    assert "apply to LoCoMo datasets only" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("protocol", ["bogus", "locomo"])
def test_analyze_refuses_a_protocol_the_run_is_not_scored_under(
        pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        protocol: str) -> None:
    assert cli.main(["analyze", str(pristine), "--protocol", protocol, "--output",
                     str(tmp_path / "a.json")]) == 2
    assert f"error: --protocol {protocol!r}: {pristine} is not scored under it (its rows " \
           "hold all, answerable, official, official_nonempty_gold)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert cli.main(["analyze", str(pristine), "--protocol", "answerable"]) == 0
